"""The "amqp" Spark source's read rate against the client's own stream consume rate, and
the source and the sink over both protocols: AMQP 0-9-1 and RabbitMQ's stream protocol.

One stream is filled once with ``--count`` messages of 100 bytes with 3 headers (as
bench/stream_bench.py fills it); then each row reads all of it, ``--repeats`` times, and
reports the best and the median rate and the load average around the run:

- amqwire blocking: the client's stream consumer over 0-9-1 (bench/stream_bench.py's row)
- pika: BlockingConnection on the same stream (bench/stream_bench.py's row)
- spark amqp, 1 task: ``spark.read.format("amqp")`` over 0-9-1 into ``format("noop")`` on
  ``local[1]``: one task reads the stream and builds the Arrow rows (the same cores as
  the client rows, plus Spark's JVM)
- spark amqp, 2 tasks: the same with ``minPartitions=2`` on ``local[2]``
- spark stream, 1 task / 2 tasks: the same over the stream protocol (``--stream-url``):
  chunks straight into Arrow
- sink amqp / sink stream: ``--sink-count`` rows of the same shape (100-byte body, 3
  headers; a DataFrame cached before the timing) written by ``df.write.format("amqp")`` in
  2 tasks on ``local[2]`` into a new stream each time: over 0-9-1 through the default
  exchange with confirms (at-least-once), over the stream protocol with confirms and
  deduplication (exactly once)
- spark range: ``spark.range(n)`` into ``noop``, the engine's floor

Targets, informational: the 0-9-1 source at >= 80% of the client's consume rate with the
same number of cores (``spark amqp, 1 task`` against ``amqwire blocking``); one task over
the stream protocol >= 2.5x one task over 0-9-1; the stream sink >= 2.5x the 0-9-1 sink.

Each Spark row makes its session once (``local[n]``), reads the stream once to warm the JVM
and the Python workers, then times ``--repeats`` reads in that same session, as a job that
reads repeatedly would; the time includes planning (the driver asks the broker for the
tails) and the task's start.  Besides the rates, two CPU columns per message (medians):
this side (the client process; for Spark the driver, its JVM and its Python workers) and
the broker (the beam process listening on the URL's port, when this machine has it): on a
machine where the broker shares the cores, CPU this side takes is CPU the broker lacks.

The shared broker of the tests has no stream plugin: ``--start-node`` starts a private
node with it (tests/broker_node.py) and runs every row against that node, over both of its
listeners; or give ``--url`` and ``--stream-url`` of one broker.

    python -m bench.stream_source_bench --start-node --count 1000000 --repeats 3
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
import urllib.parse
import uuid
from typing import Any, Callable

from amqwire.client import blocking as aw_blocking
from bench.stream_bench import BODY, DEFAULT_URL, HEADERS, amqwire_blocking, fill, pika_blocking


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


def spark_source(cores: int, protocol: str = "amqp") -> Callable[[Target], tuple[float, float]]:
    def run(target: Target) -> tuple[float, float]:
        spark = spark_session(cores)
        url = target.stream_url if protocol == "stream" else target.url
        df = (spark.read.format("amqp").option("url", url).option("streams", target.queue)
              .option("minPartitions", cores).load())
        tree = process_tree(os.getpid())
        c0, t0 = cpu_seconds(tree), time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        t1 = time.perf_counter()
        return t1 - t0, cpu_seconds(process_tree(os.getpid())) - c0

    return run


def spark_range(target: Target) -> tuple[float, float]:
    spark = spark_session(1)
    tree = process_tree(os.getpid())
    c0, t0 = cpu_seconds(tree), time.perf_counter()
    spark.range(target.last + 1).write.format("noop").mode("overwrite").save()
    t1 = time.perf_counter()
    return t1 - t0, cpu_seconds(process_tree(os.getpid())) - c0


_SINK_FRAMES: dict[int, Any] = {}


def sink_frame(count: int) -> Any:
    """``count`` rows as the fill's messages (100-byte body, 3 headers) in 2 partitions,
    cached and counted before any timing."""
    frame = _SINK_FRAMES.get(count)
    if frame is None:
        from pyspark.sql import functions as F

        spark = spark_session(2)
        frame = spark.range(count, numPartitions=2).select(
            F.lit(BODY).alias("body"),
            F.create_map(*[item for key, value in HEADERS.items() for item in (F.lit(key), F.lit(str(value)))])
            .alias("headers")).cache()
        frame.count()
        _SINK_FRAMES[count] = frame
    return frame


def spark_sink(protocol: str) -> Callable[[Target], tuple[float, float]]:
    def run(target: Target) -> tuple[float, float]:
        frame = sink_frame(target.sink_count)
        name = f"amqwire-bench-sink-{uuid.uuid4().hex[:8]}"
        if protocol == "stream":
            from amqwire.client import stream

            with stream.connect(target.stream_url) as conn:
                conn.create_stream(name)
            writer = frame.write.format("amqp").mode("append").option("url", target.stream_url).option("stream", name)
        else:
            with aw_blocking.connect(target.url) as conn, conn.channel() as ch:
                ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
            writer = frame.write.format("amqp").mode("append").option("url", target.url).option("routingKey", name)
        try:
            tree = process_tree(os.getpid())
            c0, t0 = cpu_seconds(tree), time.perf_counter()
            writer.save()
            t1 = time.perf_counter()
            cpu = cpu_seconds(process_tree(os.getpid())) - c0
            with aw_blocking.connect(target.url) as conn, conn.channel() as ch:
                _, last = ch.stream_offsets(name, wait=2)
            if last is None or last + 1 < target.sink_count:
                raise SystemExit(f"{protocol} sink: {name} holds {0 if last is None else last + 1} messages, "
                                 f"expected {target.sink_count}")
        finally:
            with aw_blocking.connect(target.url) as conn, conn.channel() as ch:
                ch.queue_delete(name)
        return t1 - t0, cpu

    return run


def client_row(fn: Callable[[str, str, int], tuple[float, float]]) -> Callable[[Target], tuple[float, float]]:
    return lambda target: fn(target.url, target.queue, target.last)


@dataclasses.dataclass
class Target:
    url: str  # AMQP 0-9-1
    stream_url: Any  # the stream protocol, same broker (None: the stream rows are skipped)
    queue: str
    last: int
    count: int
    sink_count: int


ROWS: dict[str, tuple[Callable[[Target], tuple[float, float]], str]] = {
    "amqwire blocking": (client_row(amqwire_blocking), "count"),
    "pika": (client_row(pika_blocking), "count"),
    "spark amqp, 1 task": (spark_source(1), "count"),
    "spark amqp, 2 tasks": (spark_source(2), "count"),
    "spark stream, 1 task": (spark_source(1, "stream"), "count"),
    "spark stream, 2 tasks": (spark_source(2, "stream"), "count"),
    "sink amqp, 2 tasks": (spark_sink("amqp"), "sink_count"),
    "sink stream, 2 tasks": (spark_sink("stream"), "sink_count"),
    "spark range (floor)": (spark_range, "count"),
}


def start_node() -> tuple[Any, str, str]:
    """A private node with the stream plugin (tests/broker_node.py): (node, amqp url, stream url)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from conftest import start_stream_node

    node = start_stream_node()
    return node, node.url, node.stream_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument("--stream-url", default=None, help="the same broker's rabbitmq-stream:// url")
    parser.add_argument("--start-node", action="store_true", help="start a private node with the stream plugin")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--sink-count", type=int, default=None, help="rows a sink row writes (default: --count)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    args = parser.parse_args()
    node = None
    if args.start_node:
        node, args.url, args.stream_url = start_node()
    queue = f"amqwire-bench-source-{uuid.uuid4().hex[:8]}"
    try:
        print(f"filling {queue} with {args.count} messages (100 B, 3 headers) ...", file=sys.stderr)
        last = fill(args.url, queue, args.count)
        target = Target(args.url, args.stream_url, queue, last, args.count, args.sink_count or args.count)
        broker = listener_pid(urllib.parse.urlsplit(args.url).port or 5672)
        try:
            run_rows(args, target, broker)
        finally:
            with aw_blocking.connect(args.url) as conn, conn.channel() as ch:
                ch.queue_delete(queue)
    finally:
        if node is not None:
            node.cleanup(graceful=False)


def run_rows(args: Any, target: Target, broker: Any) -> None:
    load_before = os.getloadavg()
    print(f"{'row':<22} {'best msg/s':>12} {'median msg/s':>13} {'this side CPU us/msg':>21} "
          f"{'broker CPU us/msg':>18}")
    rates_of: dict[str, list[float]] = {}
    for name, (fn, size) in ROWS.items():
        if args.only not in name or (target.stream_url is None and "stream" in name):
            continue
        count = getattr(target, size)
        if name.startswith(("spark", "sink")):
            fn(target)  # a first run warms the JVM and the Python workers: not counted
        runs, broker_cpu = [], []
        for _ in range(args.repeats):
            b0 = cpu_seconds([broker]) if broker else 0.0
            runs.append(fn(target))
            broker_cpu.append(cpu_seconds([broker]) - b0 if broker else float("nan"))
        rates = rates_of[name] = [count / wall for wall, _ in runs]
        ours = statistics.median(cpu for _, cpu in runs) / count * 1e6
        theirs = statistics.median(broker_cpu) / count * 1e6
        print(f"{name:<22} {max(rates):>12,.0f} {statistics.median(rates):>13,.0f} {ours:>21.1f} {theirs:>18.1f}",
              flush=True)
    load_after = os.getloadavg()
    ratios = [("spark amqp, 1 task", "amqwire blocking", "target >= 80%"),
              ("spark stream, 1 task", "spark amqp, 1 task", "target >= 250%"),
              ("sink stream, 2 tasks", "sink amqp, 2 tasks", "target >= 250%")]
    for mine, theirs, goal in ratios:
        if mine in rates_of and theirs in rates_of:
            ratio = statistics.median(rates_of[mine]) / statistics.median(rates_of[theirs])
            best = max(rates_of[mine]) / max(rates_of[theirs])
            print(f"{mine} / {theirs}: medians {ratio:.0%}, bests {best:.0%} ({goal})")
    print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
