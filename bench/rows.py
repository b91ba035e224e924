"""Which benchmark rows an --only pattern selects (shared by the benchmark scripts).

A comma-separated list of patterns, case-insensitive: a plain pattern selects every row whose
name contains it; a pattern starting with '=' selects the row with exactly that name, so one
row can be run without its variants ('=consume: amqwire blocking' leaves out '... +metrics').
"""


def select_rows(rows, only, name=lambda row: row.key):
    if not only:
        return list(rows)
    patterns = [p.strip().lower() for p in only.split(",") if p.strip()]
    exact = {p[1:].strip() for p in patterns if p.startswith("=")}
    substrings = [p for p in patterns if not p.startswith("=")]

    def wanted(row):
        n = name(row).lower()
        return n in exact or any(s in n for s in substrings)

    return [row for row in rows if wanted(row)]
