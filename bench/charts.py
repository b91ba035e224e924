"""Benchmark results as SVG charts, from the JSON document each bench script writes.

    python bench/codec_bench.py --chart docs/charts/codec          # run, then write docs/charts/codec.svg
    python -m bench.charts codec results.json docs/charts/codec    # from a saved results file

The charts the docs show live in ``docs/charts/``; the raw results never go into the
repository: a run given ``--chart`` or ``--results DIR`` keeps its JSON in DIR, by default
``$XDG_CACHE_HOME/amqwire/bench`` (``~/.cache/amqwire/bench``), and ``--json PATH`` writes
it to PATH.

One panel per case, one horizontal bar per library: the bar is the best run, the black tick
the median; amqwire's bars are coloured, the raw-socket and bare-protocol limits grey, the compiled clients
(rabbitmq-c, amqp091-go) green, the other libraries neutral.  The subtitle carries what makes the numbers comparable: the date, the load
average at the start and at the end, the repeats.  Needs matplotlib (the bench extra).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

AMQWIRE = "#c2410c"
LIMIT = "#9ca3af"
OTHER = "#4b6584"
COMPILED = "#15803d"
COMPILED_LIBS = ("rabbitmq-c", "amqp091-go")


class Bar(NamedTuple):
    label: str
    best: float
    median: float
    kind: str  # "amqwire", "limit", "compiled" or "other"


def _kind(lib: str | None, label: str) -> str:
    if lib == "amqwire" or label.startswith("amqwire"):
        return "amqwire"
    if lib in ("raw", "bare") or "raw socket" in label or label.startswith("raw"):
        return "limit"
    if lib in COMPILED_LIBS:
        return "compiled"
    return "other"


def codec_panels(doc: dict[str, Any]) -> list[tuple[str, list[Bar]]]:
    panels: dict[str, list[Bar]] = {}
    for r in doc["results"]:
        if not r.get("available", True) or r.get("ns_best") is None:
            continue
        title = r.get("title") or r["case"]
        panels.setdefault(title, []).append(Bar(r["row"], r["ns_best"], r["ns_median"], _kind(r.get("lib"), r["row"])))
    return list(panels.items())


def rate_panels(doc: dict[str, Any], group: str, best: str, median: str) -> list[tuple[str, list[Bar]]]:
    panels: dict[str, list[Bar]] = {}
    for r in doc["results"]:
        if r.get("na") or r.get("error") or r.get(best) is None:
            continue
        panels.setdefault(r[group], []).append(
            Bar(r["row"], r[best], r[median], _kind(r.get("lib") or r.get("anchor"), r["row"])))
    return list(panels.items())


def _load(doc: dict[str, Any]) -> str:
    start, end = doc.get("loadavg_start"), doc.get("loadavg_end")
    if not start:
        return ""
    text = f"load average {start[0]:.2f} at the start"
    if end:
        text += f", {end[0]:.2f} at the end"
    return f"{text} ({doc.get('cpus', '?')} CPUs)"


def subtitle(doc: dict[str, Any], what: str) -> str:
    versions = doc.get("versions") or {}
    finished = doc.get("timestamp", "").replace("T", " ")
    parts = [f"run finished {finished}" if finished else "", _load(doc), what]
    if versions.get("python"):
        parts.append(f"Python {str(versions['python']).split()[0]}")
    return "; ".join(p for p in parts if p)


def write(panels: list[tuple[str, list[Bar]]], prefix: str | Path, *, title: str, subtitle: str,
          unit: str, log: bool) -> list[Path]:
    """Draw the panels and write ``prefix.svg``; return its path in a list."""
    import matplotlib

    matplotlib.use("Agg")
    # text as text, not glyph outlines: a third of the size, and searchable
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    if not panels:
        raise ValueError("no results to chart")
    heights = [max(1.0, 0.38 * len(bars) + 0.7) for _, bars in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, sum(heights) + 1.2),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, bars) in zip(axes[:, 0], panels):
        ys = range(len(bars))
        colours = [{"amqwire": AMQWIRE, "limit": LIMIT, "compiled": COMPILED}.get(b.kind, OTHER) for b in bars]
        ax.barh(list(ys), [b.best for b in bars], color=colours, height=0.6)
        ax.scatter([b.median for b in bars], list(ys), marker="|", s=160, color="black", zorder=3,
                   label="median")
        ax.set_yticks(list(ys), [b.label for b in bars], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(name, fontsize=9, loc="left")
        if log:
            ax.set_xscale("log")
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        if not log:
            ax.xaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
        top = max(max(b.best, b.median) for b in bars)
        for y, b in zip(ys, bars):
            ax.text(b.best, y, f" {b.best:,.0f}" if b.best >= 100 else f" {b.best:,.2f}", va="center", fontsize=7)
        ax.set_xlim(right=top * (3 if log else 1.18))
    axes[-1, 0].set_xlabel(unit + "  (bar: best run, tick: median)", fontsize=8)
    inches = sum(heights) + 1.2
    fig.suptitle(title, fontsize=11, x=0.01, y=1 - 0.1 / inches, ha="left", va="top")
    fig.text(0.01, 1 - 0.42 / inches, subtitle, fontsize=7.5, ha="left", va="top", color="#374151")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / inches))
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    path = prefix.with_name(prefix.name + ".svg")
    fig.savefig(path, metadata={"Date": None})  # no timestamp: a re-render is byte-identical
    plt.close(fig)
    return [path]


def chart(kind: str, doc: dict[str, Any], prefix: str | Path) -> list[Path]:
    """The charts of one bench script's JSON document (``kind``: codec, client, spark or stream)."""
    if kind == "codec":
        return write(codec_panels(doc), prefix, title="amqwire codec: ns per operation (lower is faster)",
                     subtitle=subtitle(doc, f"{doc.get('repeats')} repeats per row"), unit="ns per operation",
                     log=True)
    if kind == "client":
        return write(rate_panels(doc, "case", "best_msg_s", "median_msg_s"), prefix,
                     title="amqwire client against a local RabbitMQ: messages per second (higher is faster)",
                     subtitle=subtitle(doc, f"{doc.get('count'):,} messages x {doc.get('repeats')} runs per row"),
                     unit="messages per second", log=False)
    if kind == "spark":
        return write(rate_panels(doc, "section", "best_rows_s", "median_rows_s"), prefix,
                     title="amqwire.spark: rows per second (higher is faster)",
                     subtitle=subtitle(doc, f"{doc.get('rows'):,} rows x {doc.get('repeats')} runs per row"),
                     unit="rows per second", log=False)
    if kind == "stream":
        return write(rate_panels(doc, "case", "best_msg_s", "median_msg_s"), prefix,
                     title="amqwire's stream client against the stream protocol's limits, rstream and rbfly: "
                     "messages per second (higher is faster)",
                     subtitle=subtitle(doc, f"{doc.get('count'):,} messages x {doc.get('repeats')} runs per row"),
                     unit="messages per second, log scale (the bare reader decodes nothing)", log=True)
    raise ValueError(f"unknown benchmark kind {kind!r}: codec, client, spark or stream")


def results_dir(explicit: str | Path | None = None) -> Path:
    """Where raw results go: ``explicit``, else ``$XDG_CACHE_HOME/amqwire/bench``, else
    ``~/.cache/amqwire/bench`` (outside the repository, as the XDG spec has it)."""
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "amqwire" / "bench"


def save_results(kind: str, doc: dict[str, Any], json_path: str | Path | None = None,
                 results: str | Path | None = None) -> Path:
    """Write a run's JSON document to ``json_path``, else to a new ``kind-<time>.json`` in
    :func:`results_dir`; return the path."""
    if json_path:
        path = Path(json_path)
    else:
        path = results_dir(results) / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def add_output_options(ap: argparse.ArgumentParser) -> None:
    """The output options every charted bench script takes."""
    ap.add_argument("--json", metavar="PATH", help="write the raw results as JSON to PATH")
    ap.add_argument("--results", metavar="DIR",
                    help="keep the raw results as JSON in DIR (default with --chart: $XDG_CACHE_HOME/amqwire/bench)")
    ap.add_argument("--chart", metavar="PREFIX", help="draw the results as PREFIX.svg (docs/charts/<kind> for the docs)")


def write_outputs(kind: str, doc: dict[str, Any], args: argparse.Namespace) -> None:
    """What ``--json``, ``--results`` and ``--chart`` ask for: the raw results first (so a
    chart that fails to draw loses nothing), then the chart."""
    if args.json or args.results or args.chart:
        print("wrote %s" % save_results(kind, doc, args.json, args.results))
    if args.chart:
        report(chart(kind, doc, args.chart))


def report(paths: list[Path]) -> None:
    print("wrote %s" % ", ".join(str(p) for p in paths))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.charts", description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["codec", "client", "spark", "stream"])
    ap.add_argument("json", help="a results file a bench script wrote (--json, --results)")
    ap.add_argument("prefix", help="write PREFIX.svg")
    args = ap.parse_args(argv)
    report(chart(args.kind, json.loads(Path(args.json).read_text()), args.prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
