"""The "amqp" Spark source's read rate against the client's own stream consume rate.

One stream is filled once with ``--count`` messages of 100 bytes with 3 headers (as
bench/stream_bench.py fills it); then each row reads all of it, ``--repeats`` times, and
reports the best and the median rate and the load average around the run:

- amqwire blocking: the client's stream consumer (bench/stream_bench.py's row), one thread
- pika: BlockingConnection on the same stream (bench/stream_bench.py's row)
- spark amqp, 1 task: ``spark.read.format("amqp")`` into ``format("noop")`` on
  ``local[1]``: one task reads the stream and builds the Arrow rows (the same cores as
  the client rows, plus Spark's JVM)
- spark amqp, 2 tasks: the same with ``minPartitions=2`` on ``local[2]``
- spark range: ``spark.range(n)`` into ``noop``, the engine's floor

The issue's target, informational: the source at >= 80% of the client's consume rate with
the same number of cores (the ``1 task`` row against ``amqwire blocking``).

Each Spark row makes its session once (``local[n]``), reads the stream once to warm the JVM
and the Python workers, then times ``--repeats`` reads in that same session, as a job that
reads repeatedly would; the time includes planning (the driver asks the broker for the
tails) and the task's start.  Besides the rates, two CPU columns per message (medians):
this side (the client process; for Spark the driver, its JVM and its Python workers) and
the broker (the beam process listening on the URL's port, when this machine has it): on a
machine where the broker shares the cores, CPU this side takes is CPU the broker lacks.

    python -m bench.stream_source_bench --count 1000000 --repeats 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.parse
import uuid
from typing import Any, Callable

from amqwire.client import blocking as aw_blocking
from bench.stream_bench import DEFAULT_URL, amqwire_blocking, fill, pika_blocking


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of live processes so far (/proc/<pid>/stat fields 14 and 15); one that
    is gone counts 0."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return total


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (the JVM and Spark's Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def listener_pid(port: int) -> Any:
    """The pid of the process listening on TCP ``port`` on this machine, or None."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    for entry in os.listdir("/proc") if inodes else ():
        if entry.isdigit():
            try:
                for fd in os.listdir(f"/proc/{entry}/fd"):
                    if os.readlink(f"/proc/{entry}/fd/{fd}") in inodes:
                        return int(entry)
            except OSError:
                continue
    return None


def spark_session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        if active.sparkContext.master == f"local[{cores}]":
            return active
        active.stop()
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("amqwire stream source bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(cores))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import amqwire.spark

    amqwire.spark.register(spark)
    return spark


def spark_source(cores: int) -> Callable[[str, str, int], tuple[float, float]]:
    def run(url: str, queue: str, last: int) -> tuple[float, float]:
        spark = spark_session(cores)
        df = (spark.read.format("amqp").option("url", url).option("streams", queue)
              .option("minPartitions", cores).load())
        tree = process_tree(os.getpid())
        c0, t0 = cpu_seconds(tree), time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        t1 = time.perf_counter()
        return t1 - t0, cpu_seconds(process_tree(os.getpid())) - c0

    return run


def spark_range(url: str, queue: str, last: int) -> tuple[float, float]:
    spark = spark_session(1)
    tree = process_tree(os.getpid())
    c0, t0 = cpu_seconds(tree), time.perf_counter()
    spark.range(last + 1).write.format("noop").mode("overwrite").save()
    t1 = time.perf_counter()
    return t1 - t0, cpu_seconds(process_tree(os.getpid())) - c0


ROWS = {
    "amqwire blocking": amqwire_blocking,
    "pika": pika_blocking,
    "spark amqp, 1 task": spark_source(1),
    "spark amqp, 2 tasks": spark_source(2),
    "spark range (floor)": spark_range,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    args = parser.parse_args()
    queue = f"amqwire-bench-source-{uuid.uuid4().hex[:8]}"
    print(f"filling {queue} with {args.count} messages (100 B, 3 headers) ...", file=sys.stderr)
    last = fill(args.url, queue, args.count)
    broker = listener_pid(urllib.parse.urlsplit(args.url).port or 5672)
    try:
        load_before = os.getloadavg()
        print(f"{'row':<22} {'best msg/s':>12} {'median msg/s':>13} {'this side CPU us/msg':>21} "
              f"{'broker CPU us/msg':>18}")
        rates_of: dict[str, list[float]] = {}
        for name, fn in ROWS.items():
            if args.only not in name:
                continue
            if name.startswith("spark"):
                fn(args.url, queue, last)  # a first run warms the JVM and the Python workers: not counted
            runs, broker_cpu = [], []
            for _ in range(args.repeats):
                b0 = cpu_seconds([broker]) if broker else 0.0
                runs.append(fn(args.url, queue, last))
                broker_cpu.append(cpu_seconds([broker]) - b0 if broker else float("nan"))
            rates = rates_of[name] = [args.count / wall for wall, _ in runs]
            ours = statistics.median(cpu for _, cpu in runs) / args.count * 1e6
            theirs = statistics.median(broker_cpu) / args.count * 1e6
            print(f"{name:<22} {max(rates):>12,.0f} {statistics.median(rates):>13,.0f} {ours:>21.1f} {theirs:>18.1f}",
                  flush=True)
        load_after = os.getloadavg()
        if "amqwire blocking" in rates_of and "spark amqp, 1 task" in rates_of:
            ratio = statistics.median(rates_of["spark amqp, 1 task"]) / statistics.median(rates_of["amqwire blocking"])
            best = max(rates_of["spark amqp, 1 task"]) / max(rates_of["amqwire blocking"])
            print(f"spark amqp, 1 task / amqwire blocking: medians {ratio:.0%}, bests {best:.0%} (target >= 80%)")
        print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
              f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} CPUs")
    finally:
        with aw_blocking.connect(args.url) as conn, conn.channel() as ch:
            ch.queue_delete(queue)


if __name__ == "__main__":
    main()
