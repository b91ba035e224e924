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

    python -m bench.stream_source_bench --count 1000000 --repeats 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any, Callable

from amqwire.client import blocking as aw_blocking
from bench.stream_bench import DEFAULT_URL, amqwire_blocking, fill, pika_blocking


def spark_session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
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
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0, float("nan")

    return run


def spark_range(url: str, queue: str, last: int) -> tuple[float, float]:
    spark = spark_session(1)
    t0 = time.perf_counter()
    spark.range(last + 1).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0, float("nan")


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
    try:
        load_before = os.getloadavg()
        print(f"{'row':<22} {'best msg/s':>12} {'median msg/s':>13}")
        rates_of: dict[str, list[float]] = {}
        for name, fn in ROWS.items():
            if args.only not in name:
                continue
            if name.startswith("spark"):
                fn(args.url, queue, last)  # a first run warms the JVM and the Python workers: not counted
            runs = [fn(args.url, queue, last) for _ in range(args.repeats)]
            rates = rates_of[name] = [args.count / wall for wall, _ in runs]
            print(f"{name:<22} {max(rates):>12,.0f} {statistics.median(rates):>13,.0f}", flush=True)
        load_after = os.getloadavg()
        if "amqwire blocking" in rates_of and "spark amqp, 1 task" in rates_of:
            ratio = statistics.median(rates_of["spark amqp, 1 task"]) / statistics.median(rates_of["amqwire blocking"])
            print(f"spark amqp, 1 task / amqwire blocking (medians): {ratio:.0%} (target >= 80%)")
        print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
              f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} CPUs")
    finally:
        with aw_blocking.connect(args.url) as conn, conn.channel() as ch:
            ch.queue_delete(queue)


if __name__ == "__main__":
    main()
