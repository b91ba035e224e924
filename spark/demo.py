"""The main job: a DataFrame published to RabbitMQ through the "amqp" data source.

    bash spark/run                                 # 1,000,000 generated rows into amqwire-demo
    bash spark/run --rows 50000
    bash spark/run --input orders.parquet --queue orders
    bash spark/run --purge                         # empty the queue first (says how many went)
    bash spark/run --url rabbitmq-stream://guest:guest@127.0.0.1:5552/ --producer-name demo-1
                                                   # into a stream, over the stream protocol

(``bash spark/run`` sets up the venv, Java and a local broker, then runs
``python -m amqwire.spark.demo`` with the same arguments.)

Starts a local Spark, generates a dataset (JSON bodies, a headers map and basic
properties) or reads a Parquet/CSV path, declares the queue, publishes every row to
``--url`` (default $AMQP_URL or amqp://guest:guest@127.0.0.1:5672/) with publisher
confirms, shows progress from the broker's own count, and prints rows/s and what the
queue holds.  What the queue held before is kept unless ``--purge`` is given.
A file with a ``body`` column is published as is (other sink columns too: routing_key,
exchange, headers, properties); any other file has each row sent as a JSON body.

With a ``rabbitmq-stream://`` url the rows go over RabbitMQ's stream protocol into the
stream ``--queue`` (default amqwire-demo-stream; created when missing, ``--purge``
deletes and creates it again), each stored once: run the job again with the same
``--producer-name`` and nothing is stored twice.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import Any, NoReturn, Optional

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_QUEUE = "amqwire-demo"
DEFAULT_STREAM = "amqwire-demo-stream"
STREAM_SCHEMES = ("rabbitmq-stream://", "rabbitmq-stream+tls://")
TTY_EVERY = 0.5  # seconds between redraws of the progress line on a terminal
LOG_EVERY = 5.0  # seconds between progress lines otherwise (a log file, a pipe)
SINK_COLUMNS = ("body", "routing_key", "exchange", "headers", "properties")

log = logging.getLogger("amqwire.spark.demo")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> "NoReturn":  # one line, not a usage block
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = _Parser(
        prog="bash spark/run",
        description="Publish a DataFrame to RabbitMQ with amqwire's Spark data source "
                    "(bash spark/run sets up .venv, Java and a local RabbitMQ, then runs "
                    "python -m amqwire.spark.demo with these arguments).",
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to generate (default 1,000,000)")
    parser.add_argument("--input", help="a Parquet or CSV file/folder to publish instead of generated rows")
    parser.add_argument("--format", choices=("parquet", "csv"), help="the input's format (default: from the name)")
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL),
                        help="broker URL (default: $AMQP_URL or %(default)s)")
    parser.add_argument("--queue", default=None,
                        help=f"queue to declare and fill (default {DEFAULT_QUEUE}; with a rabbitmq-stream:// url "
                             f"the stream, default {DEFAULT_STREAM})")
    parser.add_argument("--producer-name", default=None,
                        help="rabbitmq-stream:// urls: the write's producer name (the same name again stores "
                             "nothing twice; default: a new one each run)")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--keep", action="store_true",
                      help="keep what the queue already holds (the default)")
    keep.add_argument("--purge", action="store_true",
                      help="empty the queue first, and print how many messages that removed")
    parser.add_argument("--durable", action="store_true",
                        help="a durable queue: persistent messages then go to disk (slower)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    parser.add_argument("--partitions", type=int, default=2, help="write tasks (default %(default)s)")
    parser.add_argument("--confirm-window", type=int, default=20000,
                        help="unconfirmed rows per task (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.rows < 0:
        parser.error("--rows must be >= 0")
    if args.partitions < 1:
        parser.error("--partitions must be >= 1")
    if args.confirm_window < 1:
        parser.error("--confirm-window must be >= 1")
    if args.input is not None and not os.path.exists(args.input):
        parser.error(f"--input {args.input}: no such file or directory")
    args.stream = args.url.lower().startswith(STREAM_SCHEMES)
    if args.queue is None:
        args.queue = DEFAULT_STREAM if args.stream else DEFAULT_QUEUE
    if args.producer_name is not None and not args.stream:
        parser.error("--producer-name needs a rabbitmq-stream:// url (over AMQP 0-9-1 delivery is at-least-once)")
    if args.durable and args.stream:
        parser.error("--durable: a stream is always durable")
    return args


def start_spark(master: str) -> Any:
    # Executors run Python workers: make them this interpreter (and its amqwire).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback" warning
    # Spark's start-up warnings print while its JVM starts, before any setting made through
    # the builder reaches it: the log configuration goes on the JVM's command line.
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", f"--driver-java-options -Dlog4j2.configurationFile={_quiet_log4j()} pyspark-shell")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("amqwire demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _quiet_log4j() -> str:
    """A log4j2 configuration that lets only errors through.  Spark compares the level of
    the logger that starts logging (an org.apache one) with the root's and prints "Setting
    default log level..." when they differ: both are set."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), "amqwire-demo-log4j2.properties")
    quiet = ("org.apache", "org.sparkproject", "io.netty", "org.eclipse")
    with open(path, "w") as f:
        f.write("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
                "appender.console.type = Console\nappender.console.name = console\n"
                "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n\n")
        for i, name in enumerate(quiet):
            f.write(f"logger.q{i}.name = {name}\nlogger.q{i}.level = error\n")
    return path


def generated(spark: Any, rows: int, partitions: int) -> Any:
    """Orders as JSON bodies, with headers and properties that vary per row."""
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, 1, partitions)
    region = F.element_at(F.array(*(F.lit(r) for r in ("eu", "us", "apac", "latam"))), (F.col("id") % 4 + 1).cast("int"))
    body = F.to_json(
        F.struct(
            F.col("id").alias("order_id"),
            F.concat(F.lit("c-"), (F.col("id") % 1000).cast("string")).alias("customer"),
            ((F.col("id") % 10000) / 100).alias("amount"),
            region.alias("region"),
        )
    ).cast("binary")
    headers = F.create_map(
        F.lit("source"), F.lit("amqwire-demo"),
        F.lit("seq"), F.col("id").cast("string"),
        F.lit("region"), region,
    )
    properties = F.struct(
        F.lit("application/json").alias("content_type"),
        F.lit(2).alias("delivery_mode"),
        F.concat(F.lit("order-"), F.col("id").cast("string")).alias("message_id"),
        F.current_timestamp().alias("timestamp"),
        F.lit("amqwire-demo").alias("app_id"),
    )
    return ids.select(body.alias("body"), headers.alias("headers"), properties.alias("properties"))


def from_file(spark: Any, path: str, fmt: Optional[str], partitions: int) -> Any:
    from pyspark.sql import functions as F

    fmt = fmt or ("csv" if path.lower().rstrip("/").endswith(".csv") else "parquet")
    reader = spark.read.option("header", "true").option("inferSchema", "true") if fmt == "csv" else spark.read
    df = reader.format(fmt).load(path)
    if "body" not in df.columns:
        df = df.select(F.to_json(F.struct(*df.columns)).cast("binary").alias("body"))
    else:
        df = df.select(*(c for c in df.columns if c in SINK_COLUMNS))
    return df.repartition(partitions)


class Progress:
    """Polls the queue's message count and shows it on stderr: one line redrawn in place on
    a terminal, a new line every LOG_EVERY seconds otherwise; nothing before the first
    rows arrive."""

    def __init__(self, url: str, queue: str, total: Optional[int], start_count: int, enabled: bool,
                 tty: Optional[bool] = None) -> None:
        self.url, self.queue, self.total, self.start_count = url, queue, total, start_count
        self.enabled = enabled and total != 0
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.every = TTY_EVERY if self.tty else LOG_EVERY
        self._drawn = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="amqwire-demo-progress", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._drawn and self.tty:
            sys.stderr.write("\n")

    def _run(self) -> None:
        from amqwire.client import AMQPError

        try:
            with Target(self.url, self.queue) as target:
                while not self._stop.wait(self.every):
                    count = target.count() - self.start_count
                    if count > 0:
                        self._draw(count)
        except (AMQPError, OSError) as exc:  # progress is cosmetic; the job goes on
            log.debug("progress display stopped: %s", exc)

    def line(self, count: int) -> str:
        elapsed = time.monotonic() - self.started
        rate = count / elapsed if elapsed > 0 else 0.0
        if self.total:
            done = min(count / self.total, 1.0)
            bar = "#" * int(done * 30)
            return f"  [{bar:<30}] {count:>12,} / {self.total:,} rows  {rate:>9,.0f} rows/s"
        return f"  {count:>12,} rows  {rate:>9,.0f} rows/s"

    def _draw(self, count: int) -> None:
        sys.stderr.write(f"\r{self.line(count)}" if self.tty else f"{self.line(count)}\n")
        sys.stderr.flush()
        self._drawn = True


class Target:
    """Where the job writes: a queue over AMQP 0-9-1, or a stream over the stream protocol;
    ``count()`` is what it holds (a stream: how many offsets it has, which its own tracking
    entries add a few to)."""

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        self.stream = url.lower().startswith(STREAM_SCHEMES)
        self._conn: Any = None
        self._channel: Any = None

    def __enter__(self) -> "Target":
        if self.stream:
            from amqwire.client import stream

            self._conn = stream.connect(self.url)
        else:
            from amqwire.client import connect

            self._conn = connect(self.url)
            self._channel = self._conn.channel()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._conn.close()

    def declare(self, durable: bool) -> None:
        if self.stream:
            self._conn.create_stream(self.name, exist_ok=True)
        else:
            self._channel.queue_declare(self.name, durable=durable)

    def purge(self) -> int:
        """Empty it: a queue is purged; a stream (which cannot be) deleted and created again."""
        if not self.stream:
            return int(self._channel.queue_purge(self.name))
        held = self.count()
        self._conn.delete_stream(self.name)
        self._conn.create_stream(self.name)
        return held

    def count(self) -> int:
        if not self.stream:
            return int(self._channel.queue_declare(self.name, passive=True).message_count)
        found = self._conn.stream_stats(self.name, quiet=0.2)
        return 0 if found.last_offset is None else found.last_offset - found.first_offset + 1

    def describe(self) -> str:
        if self.stream:
            from amqwire.client.stream import parse_stream_url

            return f"broker {parse_stream_url(self.url)} (stream protocol), stream {self.name!r}"
        from amqwire.client.url import parse_url

        return f"broker {parse_url(self.url)}, queue {self.name!r}"


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import amqwire.spark

    from amqwire.client import AMQPError

    kind = "stream" if args.stream else "queue"
    try:  # a bad URL or an unreachable broker fails before Spark starts
        with Target(args.url, args.queue) as target:
            print(f"amqwire demo: {target.describe()}")
            target.declare(args.durable)
            if args.purge:
                purged = target.purge()
                print(f"purged {purged:,} messages from {kind} {args.queue!r} (--purge)")
            start_count = target.count()
            if start_count:
                print(f"{kind} {args.queue!r} already holds {start_count:,} messages: kept "
                      f"(--purge empties it first)")
    except (ValueError, AMQPError, OSError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    t0 = time.monotonic()
    spark = start_spark(args.master)
    print(f"spark {spark.version} ({args.master}) started in {time.monotonic() - t0:.1f} s")
    try:
        amqwire.spark.register(spark)
        if args.input:
            df = from_file(spark, args.input, args.format, args.partitions)
            total = None
            print(f"publishing {args.input} ({args.partitions} tasks)")
        else:
            # Generated and cached first, so that the publishing below is timed on its own.
            began = time.monotonic()
            df = generated(spark, args.rows, args.partitions).cache()
            df.count()
            total = args.rows
            print(f"generated {args.rows:,} rows in {time.monotonic() - began:.1f} s; "
                  f"publishing them ({args.partitions} tasks)")
        started = time.monotonic()
        with Progress(args.url, args.queue, total, start_count, not args.quiet):
            writer = df.write.format("amqp").mode("append").option("url", args.url)
            if args.stream:
                writer = writer.option("stream", args.queue)
                if args.producer_name is not None:
                    writer = writer.option("producerName", args.producer_name)
            else:
                writer = writer.option("routing_key", args.queue)
            writer.option("confirm_window", args.confirm_window).save()
        seconds = time.monotonic() - started
    finally:
        spark.stop()
    with Target(args.url, args.queue) as target:
        held = target.count()
    published = held - start_count
    rows = total if total is not None else published
    how = "each stored once, by deduplication" if args.stream else "at-least-once"
    print(f"published {rows:,} rows in {seconds:.2f} s: {rows / seconds if seconds else 0:,.0f} rows/s "
          f"(confirmed by the broker, {how})")
    if args.stream:
        print(f"stream {args.queue!r} holds {held:,} messages; to remove them: rabbitmqctl delete_queue "
              f"{args.queue}, or run again with --purge")
    else:
        print(f"queue {args.queue!r} holds {held:,} messages; to remove them: "
              f"rabbitmqctl purge_queue {args.queue} (or delete_queue), or run again with --purge")
    if total is not None and published < total and not (args.stream and args.producer_name):
        print(f"error: the {kind} gained {published:,} messages, expected {total:,}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
