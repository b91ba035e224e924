"""Client instructions per message, counted with callgrind: the deterministic twin of the
client benchmark's CPU column.

On a shared two-core machine the client benchmark's rates and CPU times move by about 10%
from run to run, in either direction, so a cost of a few percent (the metrics collector,
a change to a hot path) is below what a timed run can show.  This runs the same workloads
as ``client_bench`` (its row functions, on the same broker) inside ``valgrind
--tool=callgrind`` and counts every instruction the client process executes: the row with
``--count`` messages and with a quarter of them, so that start-up, imports and set-up
cancel out.  Instructions per message = (I(count) - I(count/4)) / (count - count/4).

What it counts: every thread of the client process (callgrind runs them one at a time), the
interpreter and the codec.  What it cannot count: the broker, waiting, lock hand-offs in the
kernel, cache misses.  What still varies: how the broker's acks and deliveries fall into
socket reads (a read carrying more frames costs less per frame), so repeats differ by ~1%.

    python -m bench.instructions                       # the amqwire rows, with and without metrics, tracing
    python -m bench.instructions --only "consume" --count 30000 --repeats 3 --json /tmp/i.json
    python -m bench.instructions --only "rabbitmq-c"  # the C client's rows, for comparison

The rabbitmq-c rows (see compiled_anchors) run the C program directly under callgrind when
--only names them; its connection set-up cancels out in the difference just the same.
amqp091-go's rows cannot be counted: valgrind 3.19 crashes on the Go runtime.

Needs valgrind (``apt-get install valgrind``).  Each row takes 20-60 s under callgrind.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from bench import client_bench as cb
    from bench.rows import select_rows
except ImportError:  # run as a script: bench/ is on sys.path
    import client_bench as cb  # type: ignore[no-redef]
    from rows import select_rows  # type: ignore[no-redef]

DEFAULT_ROWS = ("amqwire blocking", "amqwire asyncio")  # each case, with and without +metrics, +tracing
_VARIANTS = (" +metrics", " +tracing")  # rows measured beside the row without them
UNDER_CALLGRIND = ("rabbitmq-c",)  # compiled anchors valgrind can run (not the Go runtime)
_TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.M)


def amqwire_rows(only):
    """The amqwire rows --only selects (all of them without it), and the compiled anchors'
    rows it names."""
    rows = [r for r in cb.build_rows() if r.lib == "amqwire" and ", no batch" not in r.label]
    chosen = select_rows(rows, only)  # '=case: label' selects that row alone, as in client_bench
    if only:
        chosen += select_rows([r for r in cb.build_rows() if r.lib in UNDER_CALLGRIND], only)
    return chosen


def child(key, n, queue, url):
    """Run one row's workload (inside callgrind)."""
    row = next(r for r in cb.build_rows() if r.key == key)
    row.fn(cb.Ctx(url), queue, n)


def child_command(row, n, queue, url):
    """The program callgrind runs: this module's --child for an amqwire row, the compiled
    anchor itself for a compiled row."""
    if row.lib in UNDER_CALLGRIND:
        built = cb.compiled_anchors.built(row.lib)
        if built.binary is None:
            raise RuntimeError("%s: %s" % (row.key, built.version))
        ctx = cb.Ctx(url)
        phase, ack_every = cb.ANCHOR_PHASES[row.case]
        return [str(built.binary), phase, ctx.host, str(ctx.port), ctx.username, ctx.password,
                ctx.vhost, queue, str(n), str(cb.PREFETCH), str(ack_every), str(cb.CONFIRM_WINDOW)]
    return [sys.executable, "-m", "bench.instructions", "--child", row.key, str(n), queue, "--url", url]


def count_instructions(valgrind, row, n, url, admin):
    """Total instructions of one child process running ``row`` with ``n`` messages."""
    key, case = row.key, row.case
    queue = cb.fresh_queue(case)
    admin.declare(queue)
    try:
        if case.startswith("consume"):
            admin.prefill(queue, n)
        with tempfile.TemporaryDirectory(prefix="amqwire-instr-") as tmp:
            out = os.path.join(tmp, "callgrind.out")
            env = dict(os.environ, PYTHONHASHSEED="0")
            cmd = [valgrind, "--tool=callgrind", "--callgrind-out-file=" + out] + child_command(row, n, queue, url)
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            if proc.returncode != 0:
                raise RuntimeError("%s with %d messages failed under callgrind (exit %d):\n%s"
                                   % (key, n, proc.returncode, proc.stderr.decode(errors="replace")[-3000:]))
            with open(out, "rb") as f:
                match = _TOTALS.search(f.read())
            if match is None:
                raise RuntimeError("no instruction total in callgrind's output for %s" % key)
            return int(match.group(1))
    finally:
        try:
            admin.delete(queue)
        except Exception:
            pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=60000, help="messages of the long run (default 60000)")
    ap.add_argument("--repeats", type=int, default=1, help="measurements per row (median; default 1)")
    ap.add_argument("--only", metavar="SUBSTR", help="rows whose 'case: label' contains one of these "
                    "comma-separated substrings; '=case: label' selects that row alone (default: the amqwire "
                    "rows, with and without +metrics and +tracing)")
    ap.add_argument("--url", default=os.environ.get("AMQP_URL") or cb.DEFAULT_URL)
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    ap.add_argument("--child", nargs=3, metavar=("KEY", "N", "QUEUE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        key, n, queue = args.child
        child(key, int(n), queue, args.url)
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.count < 4000:
        raise SystemExit("--count must be at least 4000: the difference of two runs must dwarf their noise")
    rows = amqwire_rows(args.only)
    if not rows:
        raise SystemExit("--only %r matches no amqwire row" % args.only)
    big, small = args.count, args.count // 4
    ctx = cb.Ctx(args.url)
    admin = cb.RawConnection(ctx, product="amqwire instructions (set-up)")
    print("amqwire client instructions per message (callgrind)  %s" % time.strftime("%Y-%m-%d %H:%M:%S"))
    print("  each row: (I(%s msgs) - I(%s msgs)) / %s, %d measurement(s), median"
          % (format(big, ","), format(small, ","), format(big - small, ","), args.repeats))
    print("  uptime  : %s" % cb.uptime())
    results = {}
    started = time.monotonic()
    try:
        for row in rows:
            values = []
            for rep in range(args.repeats):
                sys.stderr.write("  -- %s (%d/%d)\n" % (row.key, rep + 1, args.repeats))
                high = count_instructions(valgrind, row, big, args.url, admin)
                low = count_instructions(valgrind, row, small, args.url, admin)
                values.append((high - low) / (big - small))
                sys.stderr.write("     %s: %s instructions/msg\n" % (row.key, format(round(values[-1]), ",")))
            results[row.key] = values
    finally:
        admin.close()
    print()
    print("  %-38s %14s  %s" % ("row", "instr/msg", "with metrics or tracing / without"))
    for row in rows:
        value = statistics.median(results[row.key])
        base_key = next((row.key[:-len(s)] for s in _VARIANTS if row.key.endswith(s)), None)
        ratio = ""
        if base_key in results:
            ratio = "%+.1f%%" % (100 * (value / statistics.median(results[base_key]) - 1))
        print("  %-38s %14s  %s" % (row.key, format(round(value), ","), ratio))
    print("\n%.0f s in all" % (time.monotonic() - started))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"timestamp": time.strftime("%Y-%m-%d %H:%M:%S"), "count": big, "baseline": small,
                       "repeats": args.repeats, "uptime": cb.uptime(),
                       "instructions_per_message": {k: statistics.median(v) for k, v in results.items()},
                       "all": results}, f, indent=2)
        print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
