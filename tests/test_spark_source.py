"""The "amqp" source: ``spark.read`` / ``spark.readStream.format("amqp")`` on RabbitMQ
streams, with a real RabbitMQ (a stream queue per test, deleted after it) and the session's
real Spark (local[2,3]).

- the schema (Spark's view of the DDL is the pyarrow schema the rows are built in);
- a batch read of a known offset range: every offset once, each row equal to what was
  published (13 properties, every header type the client writes, exchange, routing key);
- streaming with maxOffsetsPerTrigger over two streams a thread keeps filling, and
  Trigger.AvailableNow, run twice on one checkpoint;
- exactly-once replay: a driver process SIGKILLed inside a micro-batch, restarted from its
  checkpoint: the Parquet output holds every offset exactly once;
- retention: offsets removed before they are read fail the read (failOnDataLoss true) or
  are skipped and counted in the log (false); the same under a running query (its sink
  holds micro-batch 0 while retention passes its next offset);
- bad options, a missing stream, a classic queue: one clear error each, on the driver.

AMQWIRE_FAULT_SCALE=full makes the replay test kill the driver three times over a longer stream.
"""
from __future__ import annotations

import datetime
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import Deadline, url_credentials

UTC = datetime.timezone.utc
STREAM = {"x-queue-type": "stream"}
EPOCH = 1_700_000_000
USER = url_credentials(os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))[0]
FULL = os.environ.get("AMQWIRE_FAULT_SCALE", "ci") == "full"
HERE = Path(__file__).resolve().parent

# a shared, loaded machine: the first test also starts the session's JVM
pytestmark = pytest.mark.timeout(300)

# One value of every type the client writes into a table, with how the headers column shows
# it.  What a RabbitMQ 3.10 stream does with the others (measured): it drops table and array
# header values (BROKER_DROPS, published too: the column must match what the stream holds) and
# closes the connection (541 INTERNAL_ERROR) for a decimal one, so no stream holds a decimal.
HEADER_VALUES = [
    ("text", "plain text", "plain text"),
    ("bool", True, "true"),
    ("int32", -7, "-7"),
    ("int64", 2**40, "1099511627776"),
    ("float", 1.5, "1.5"),
    ("bytes", b"\x00\x01\xff", '"AAH/"'),
    ("time", datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=UTC), '"2024-02-03T04:05:06Z"'),
    ("void", None, None),
]
BROKER_DROPS = {"table": {"a": 1, "b": "x"}, "array": [1, "two", False]}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def amqp(spark):
    import amqwire.spark

    amqwire.spark.register(spark)
    return amqwire.spark


def connect(url):
    from amqwire.client import connect as _connect

    return _connect(url)


def declare_stream(url, names, **arguments):
    queue = names.queue()
    with connect(url) as conn:
        conn.channel().queue_declare(queue, durable=True, arguments={**STREAM, **arguments})
    return queue


def properties(i):
    from amqwire.codec import BasicProperties

    return BasicProperties(
        content_type=f"type/{i % 3}",
        content_encoding=None if i % 7 == 0 else "enc",
        headers={"seq": i, **{name: value for name, value, _ in HEADER_VALUES}, **BROKER_DROPS} if i % 4 else None,
        delivery_mode=1 + i % 2,
        priority=i % 10,
        correlation_id=f"corr-{i}",
        reply_to=f"reply.{i % 11}",
        expiration=str(3600000 + i),
        message_id=f"msg-{i}",
        timestamp=None if i % 5 == 0 else datetime.datetime.fromtimestamp(EPOCH + i, UTC),
        type=f"t{i % 4}",
        user_id=USER if i % 2 == 0 else None,
        app_id="amqwire-tests",
        cluster_id=f"c{i % 3}",
    )


def publish(url, queue, start, count, *, rich=False, size=0):
    """Publish bodies ``m<i>`` (padded to ``size``) for i in start..start+count-1 and wait
    for the confirms; with ``rich``, every property and header type too."""
    with connect(url) as conn:
        ch = conn.channel()
        ch.confirm_select()
        for i in range(start, start + count):
            body = b"m%d" % i
            ch.publish_async("", queue, body.ljust(size, b".") if size else body,
                             properties(i) if rich else None)
        ch.wait_for_confirms(timeout=60)


def offsets_of(url, queue):
    """Every offset the stream holds, read with the client: what a full read must give."""
    return [message.stream_offset for message in messages_of(url, queue)]


def messages_of(url, queue):
    """Every message the stream holds, read with the client."""
    with connect(url) as conn:
        ch = conn.channel()
        first, last = ch.stream_offsets(queue)
        if last is None:
            return []
        consumer = ch.consume_stream(queue, offset="first", end=last, prefetch=2000)
        got = []
        while True:
            message = consumer.get(timeout=30)
            if message is None:
                assert not consumer.active, f"{queue}: no message for 30 s after {len(got)}"
                return got
            got.append(message)


def read(spark, url, streams, **options):
    reader = spark.read.format("amqp").option("url", url).option("streams", streams)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows(df):
    """The DataFrame's rows as dicts (through Arrow: timestamps stay aware, in UTC)."""
    return df.toArrow().to_pylist()


def failure_text(excinfo) -> str:
    exc = excinfo.value
    parts = []
    while exc is not None and len(parts) < 10:
        parts.append(f"{type(exc).__name__}: {exc}")
        java = getattr(exc, "java_exception", None)
        if java is not None:
            parts.append(str(java))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def as_utc(value):
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


# --------------------------------------------------------------------------- schema


def test_the_schema_is_what_spark_makes_of_the_ddl(spark):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from amqwire.spark.decode import PROPERTY_FIELDS
    from amqwire.spark.stream_rows import STREAM_DDL, stream_schema

    schema = stream_schema()
    assert to_arrow_schema(StructType.fromDDL(STREAM_DDL), timezone="UTC").equals(schema)
    assert schema.names == ["body", "stream", "offset", "timestamp", "exchange", "routing_key", "properties",
                            "headers"]
    assert [field.name for field in schema.field("properties").type] == [name for name, _ in PROPERTY_FIELDS]


# --------------------------------------------------------------------------- batch


def test_batch_read_of_a_known_range_every_field(spark, amqp, amqp_url, names):
    from amqwire.spark.decode import PROPERTY_FIELDS

    queue = declare_stream(amqp_url, names)
    from amqwire.spark.decode import header_text

    publish(amqp_url, queue, 0, 400, rich=True)
    held = messages_of(amqp_url, queue)
    assert [m.stream_offset for m in held] == list(range(400))  # a new stream, no segment rolled: dense
    df = read(spark, amqp_url, queue, startingOffsets=f'{{"{queue}": 50}}', endingOffsets=f'{{"{queue}": 350}}',
              minPartitions=3)
    got = rows(df)
    assert sorted(row["offset"] for row in got) == list(range(50, 350))  # [start, end): each offset once
    for row in got:
        i = row["offset"]
        props = properties(i)
        assert (row["body"], row["stream"], row["exchange"], row["routing_key"]) == (b"m%d" % i, queue, "", queue)
        want = {name: getattr(props, name) for name, _ in PROPERTY_FIELDS}
        want["cluster_id"] = None  # a stream does not keep cluster_id (RabbitMQ 3.10, measured with the client)
        assert {name: as_utc(value) for name, value in row["properties"].items()} == want, i
        assert as_utc(row["timestamp"]) == props.timestamp, i
        if props.headers is None:
            assert row["headers"] is None, i
        else:
            assert dict(row["headers"]) == {"seq": str(i), **{name: text for name, _, text in HEADER_VALUES}}, i
            in_stream = {key: header_text(value) for key, value in held[i].properties.headers.items()}
            assert dict(row["headers"], **{"x-stream-offset": str(i)}) == in_stream, i
    # earliest .. latest (the defaults) is the whole stream, split into 4 tasks
    whole = read(spark, amqp_url, queue, minPartitions=4)
    assert whole.rdd.getNumPartitions() == 4
    assert sorted(whole.select("offset").toPandas()["offset"]) == list(range(400))


def test_batch_read_of_an_empty_range_and_an_empty_stream(spark, amqp, amqp_url, names):
    empty = declare_stream(amqp_url, names)
    assert rows(read(spark, amqp_url, empty)) == []
    queue = declare_stream(amqp_url, names)
    publish(amqp_url, queue, 0, 10)
    assert rows(read(spark, amqp_url, queue, startingOffsets=f'{{"{queue}": 4}}',
                     endingOffsets=f'{{"{queue}": 4}}')) == []
    # an end past the tail reads up to the tail: no task waits for offsets not written yet
    got = rows(read(spark, amqp_url, f"{queue},{empty}", endingOffsets=f'{{"{queue}": 1000}}'))
    assert [row["offset"] for row in got] == list(range(10))


def test_batch_read_from_a_timestamp(spark, amqp, amqp_url, names, broker_clock):
    queue = declare_stream(amqp_url, names)
    publish(amqp_url, queue, 0, 5)
    # chunk timestamps are whole seconds of the broker's clock: its next second is a later
    # chunk for certain
    skew = broker_clock() - time.time()
    boundary = (int(time.time() + skew) + 1) * 1000
    while (time.time() + skew) * 1000 < boundary + 50:
        time.sleep(0.05)
    publish(amqp_url, queue, 5, 5)
    got = sorted(row["offset"] for row in rows(read(spark, amqp_url, queue, startingTimestamp=boundary)))
    assert got == list(range(5, 10))
    got = sorted(row["offset"] for row in rows(read(spark, amqp_url, queue,
                                                    endingOffsetsByTimestamp=f'{{"{queue}": {boundary}}}')))
    assert got == list(range(5))


# --------------------------------------------------------------------------- streaming


# Spark gives a Python worker 10 s to start and connect back (not configurable); on a loaded
# machine the streaming source's runner sometimes misses that and the query fails before
# reading anything of ours.  Such a query is started again from its checkpoint (which is
# the source's own recovery path), at most twice; any other failure fails the test.
SPARK_WORKER_SLOW = "Python worker failed to connect back"


def run_stream(start_query, finished, deadline):
    """Start the query and poll ``finished(rows)`` (rows: how many it read so far) until it
    says True or the query ends; returns the progress reports of every attempt."""
    progress = []
    for attempt in range(3):
        query = start_query()
        try:
            while query.isActive and not finished(sum(p["numInputRows"] for p in progress + query.recentProgress)):
                if deadline.expired():
                    raise deadline.fail()
                time.sleep(0.5)
            if query.exception() is None and query.isActive:
                query.processAllAvailable()
            error = query.exception()
            progress += query.recentProgress
        finally:
            query.stop()
        if error is None:
            return progress
        if SPARK_WORKER_SLOW not in str(error) or attempt == 2:
            raise AssertionError(f"the query failed: {error}")
        print(f"attempt {attempt + 1}: {SPARK_WORKER_SLOW}; starting again from the checkpoint")
    return progress


def test_streaming_max_offsets_per_trigger_while_a_producer_fills_two_streams(spark, amqp, amqp_url, names,
                                                                              tmp_path):
    import json

    orders, payments = declare_stream(amqp_url, names), declare_stream(amqp_url, names)
    total, chunk, limit = 1200, 100, 150
    publish(amqp_url, orders, 0, chunk)
    failures = []

    def producer():
        try:
            for start in range(chunk, total, chunk):
                publish(amqp_url, orders, start, chunk)
                publish(amqp_url, payments, start - chunk, chunk)
            publish(amqp_url, payments, total - chunk, chunk)
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            failures.append(exc)

    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start_query():
        return (spark.readStream.format("amqp").option("url", amqp_url).option("streams", f"{orders},{payments}")
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", limit).load()
                .select("stream", "offset").writeStream.format("parquet").option("path", str(output))
                .option("checkpointLocation", str(checkpoint)).start())

    def read_everything(rows):
        return rows >= 2 * total and not thread.is_alive()

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    progress = run_stream(start_query, read_everything, Deadline(240, "the query to read both streams"))
    thread.join(10)
    assert not failures, failures
    got = spark.read.parquet(str(output)).collect()
    for stream in (orders, payments):
        offsets = sorted(row["offset"] for row in got if row["stream"] == stream)
        assert offsets == list(range(total)), stream
    batches = [p for p in progress if p["numInputRows"]]
    assert len(batches) >= 2 * total // limit, [p["numInputRows"] for p in batches]
    for p in batches:
        assert p["numInputRows"] <= limit
        start, end = p["sources"][0]["startOffset"], p["sources"][0]["endOffset"]
        begin = (json.loads(start) if isinstance(start, str) else start) or {}  # null: the first batch, from 0
        end = json.loads(end) if isinstance(end, str) else end
        assert sum(end[s] - begin.get(s, 0) for s in end) <= limit, (begin, end)


def test_trigger_available_now_twice_on_one_checkpoint(spark, amqp, amqp_url, names, tmp_path):
    queue = declare_stream(amqp_url, names)
    publish(amqp_url, queue, 0, 1000)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

    def start_query():
        return (spark.readStream.format("amqp").option("url", amqp_url).option("streams", queue)
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 300).load()
                .select("offset", "body").writeStream.format("parquet").option("path", str(output))
                .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())

    def run():
        progress = run_stream(start_query, lambda rows: False, Deadline(240, "Trigger.AvailableNow to end"))
        return [p["numInputRows"] for p in progress if p["numInputRows"]]

    assert run() == [300, 300, 300, 100]
    publish(amqp_url, queue, 1000, 50)
    assert run() == [50]  # from the checkpoint: only what was added
    got = spark.read.parquet(str(output)).collect()
    assert sorted(row["offset"] for row in got) == list(range(1050))
    assert all(row["body"] == b"m%d" % row["offset"] for row in got)


# --------------------------------------------------------------------------- exactly-once replay


def _job(amqp_url, queue, tmp_path, *, available_now=False, pause=1.0):
    command = [sys.executable, str(HERE / "stream_replay_job.py"), "--amqp-url", amqp_url, "--stream", queue,
               "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "checkpoint"),
               "--marks", str(tmp_path / "marks"), "--max-offsets", "400", "--pause", str(pause)]
    if available_now:
        command.append("--available-now")
    log = open(tmp_path / f"job-{time.time_ns()}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=HERE), log


def _commits(tmp_path) -> int:
    commits = tmp_path / "checkpoint" / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


@pytest.mark.timeout(1200 if FULL else 600)  # two driver JVMs of their own
def test_driver_killed_mid_batch_replays_exactly_once(spark, amqp, amqp_url, names, tmp_path):
    queue = declare_stream(amqp_url, names)
    count = 12_000 if FULL else 1_200
    publish(amqp_url, queue, 0, count)
    (tmp_path / "marks").mkdir()
    kills = 3 if FULL else 1
    for kill in range(kills):
        job, log = _job(amqp_url, queue, tmp_path)
        try:
            done_before = _commits(tmp_path)
            deadline = Deadline(180, "a micro-batch to commit and the next one to start")
            # wait for a batch to be committed and the next one to be inside its slow step
            while True:
                assert job.poll() is None, (tmp_path / log.name).read_text()[-3000:]
                marks = sorted((tmp_path / "marks").iterdir(), key=lambda p: p.stat().st_mtime)
                if _commits(tmp_path) > done_before and marks and marks[-1].stat().st_mtime > time.time() - 0.5:
                    break
                if deadline.expired():
                    raise deadline.fail(Path(log.name).read_text()[-3000:])
                time.sleep(0.05)
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
            log.close()
        print(f"kill {kill + 1}: driver SIGKILLed after {_commits(tmp_path)} committed micro-batches")
    job, log = _job(amqp_url, queue, tmp_path, available_now=True, pause=0.0)
    try:
        assert job.wait(300) == 0, Path(log.name).read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        log.close()
    got = spark.read.parquet(str(tmp_path / "out")).select("offset", "body").collect()
    offsets = [row["offset"] for row in got]
    duplicates = len(offsets) - len(set(offsets))
    print(f"replay: {len(offsets)} rows, {len(set(offsets))} distinct offsets, {duplicates} duplicates, "
          f"expected {count}")
    assert duplicates == 0
    assert sorted(offsets) == list(range(count))
    assert all(row["body"] == b"m%d" % row["offset"] for row in got)


# --------------------------------------------------------------------------- retention


def truncated_stream(url, names):
    """A stream whose retention removed its first segments (1 kB segments, 4 kB kept)."""
    queue = declare_stream(url, names, **{"x-max-length-bytes": 4000, "x-stream-max-segment-size-bytes": 1000})
    deadline = Deadline(60, "retention to remove the stream's first offsets")
    published = 0
    with connect(url) as conn:
        ch = conn.channel()
        while True:
            publish(url, queue, published, 100, size=100)
            published += 100
            first, last = ch.stream_offsets(queue, wait=2)
            if first is not None and first > 0:
                return queue, first, last
            if deadline.expired():
                raise deadline.fail(f"first offset still {first} after {published} messages")


def test_offsets_removed_by_retention_fail_the_read_or_are_skipped(spark, amqp, amqp_url, names):
    queue, first, last = truncated_stream(amqp_url, names)
    start = f'{{"{queue}": 0}}'
    with pytest.raises(Exception) as excinfo:
        rows(read(spark, amqp_url, queue, startingOffsets=start))
    text = failure_text(excinfo)
    assert "DataLoss" in text and f"stream '{queue}': offsets 0.." in text and "failOnDataLoss" in text, text[:3000]
    got = rows(read(spark, amqp_url, queue, startingOffsets=start, failOnDataLoss="false"))
    offsets = [row["offset"] for row in got]
    assert offsets == sorted(set(offsets)) and offsets[0] >= first and offsets[-1] == last
    # earliest is whatever the stream still has: nothing is lost
    assert sorted(row["offset"] for row in rows(read(spark, amqp_url, queue))) == offsets_of(amqp_url, queue)


def test_skipped_offsets_are_counted_in_the_log(amqp_url, names, caplog):
    """The task's side of failOnDataLoss=false (run here, where its log can be read)."""
    from amqwire.spark.errors import DataLoss
    from amqwire.spark.source import SourceSettings, StreamRange, read_range

    queue, first, last = truncated_stream(amqp_url, names)
    settings = SourceSettings.from_options({"url": amqp_url, "streams": queue, "failOnDataLoss": "false"},
                                           streaming=False)
    with caplog.at_level(logging.DEBUG, logger="amqwire.spark"):
        batches = list(read_range(settings, StreamRange(queue, 0, last + 1)))
    offsets = [o for batch in batches for o in batch.column("offset").to_pylist()]
    assert offsets[0] >= first and offsets[-1] == last
    assert f"stream {queue!r}: {first} offsets (0..{first - 1}) were removed by retention" in caplog.text
    # where the task's time went, at DEBUG: what it read, the loop, the batches, Spark's share
    timing = re.search(rf"amqp source: {len(offsets)} messages of stream {re.escape(repr(queue))} offsets "
                       rf"\[0, {last + 1}\) in [0-9.]+ s: [0-9.]+ s in the consume loop \(waiting for the broker "
                       rf"included\), [0-9.]+ s building {len(batches)} Arrow batches, [0-9.]+ s in Spark", caplog.text)
    assert timing, caplog.text[-2000:]
    strict = SourceSettings.from_options({"url": amqp_url, "streams": queue}, streaming=False)
    with pytest.raises(DataLoss) as info:
        list(read_range(strict, StreamRange(queue, 0, last + 1)))
    assert (info.value.stream, info.value.requested) == (queue, 0) and info.value.first_offset >= first


def retention_passes(url, queue, beyond, deadline):
    """Publish 100-byte messages until retention has removed every offset up to ``beyond``
    (the stream's first offset is past it); returns (first, last) offsets then."""
    published = 0
    with connect(url) as conn:
        ch = conn.channel()
        while True:
            publish(url, queue, 10_000 + published, 100, size=100)
            published += 100
            first, last = ch.stream_offsets(queue, wait=2)
            if first is not None and first > beyond:
                return first, last
            if deadline.expired():
                raise deadline.fail(f"first offset still {first} after {published} messages (waiting for > {beyond})")


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["failOnDataLoss=true", "failOnDataLoss=false"])
def test_retention_ahead_of_a_running_query(spark, amqp, amqp_url, names, tmp_path, fail_on_data_loss):
    """A query is running (its sink is inside micro-batch 0) when retention removes the
    offsets its next micro-batch starts at: with failOnDataLoss the query fails with DataLoss
    naming the stream, the offset it needed and the first one left; without, micro-batch 1
    starts at the first offset left, and every offset from there on lands exactly once.

    The sink is foreachBatch into a dict keyed by batch id (idempotent, as a replay-safe
    sink is): micro-batch 0 holds the query there until the test has published enough to
    roll segments past retention, so the loss happens under the running query, every time."""
    queue = declare_stream(amqp_url, names, **{"x-max-length-bytes": 4000, "x-stream-max-segment-size-bytes": 1000})
    publish(amqp_url, queue, 0, 10, size=100)
    deadline = Deadline(240, "the query to read past the removed offsets")
    in_batch_0 = threading.Event()  # micro-batch 0's rows are in the sink
    go_on = threading.Event()  # retention has passed the query's next offset
    sink: dict[int, list] = {}

    def write(df, batch_id):
        sink[batch_id] = [(row["offset"], row["body"]) for row in df.select("offset", "body").collect()]
        if batch_id == 0:
            in_batch_0.set()
            if not go_on.wait(deadline.left()):
                raise RuntimeError("the test never let micro-batch 0 end")

    def start_query():
        return (spark.readStream.format("amqp").option("url", amqp_url).option("streams", queue)
                .option("startingOffsets", "earliest").option("failOnDataLoss", str(fail_on_data_loss).lower())
                .load().writeStream.foreachBatch(write).option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="500 milliseconds").start())

    query = start_query()
    try:
        while not in_batch_0.wait(0.5):
            if not query.isActive or deadline.expired():
                raise deadline.fail(f"micro-batch 0 (query error: {query.exception()})")
        read_first = sorted(offset for offset, _ in sink[0])
        assert read_first, "micro-batch 0 read nothing"
        next_offset = read_first[-1] + 1  # where micro-batch 0 ends: the tail when it was planned
        first, last = retention_passes(amqp_url, queue, next_offset, deadline)
        go_on.set()
        if fail_on_data_loss:
            while query.isActive:
                if deadline.expired():
                    raise deadline.fail(f"the query to fail (sink holds batches {sorted(sink)})")
                time.sleep(0.5)
            text = str(query.exception())
            assert "DataLoss" in text, text[:3000]
            found = re.search(rf"stream '{re.escape(queue)}': offsets {next_offset}\.\.([0-9]+) were removed by retention",
                              text)
            assert found and int(found.group(1)) >= first - 1, text[:3000]  # retention may have gone on since
            assert "failOnDataLoss=false" in text, text[:3000]
            assert sorted(sink) == [0], "no micro-batch after the loss reached the sink"
            return
        while max((offset for rows in sink.values() for offset, _ in rows), default=-1) < last:
            if not query.isActive or deadline.expired():
                raise deadline.fail(f"offset {last} in the sink (query error: {query.exception()})")
            time.sleep(0.5)
        error = query.exception()
    finally:
        go_on.set()
        query.stop()
    assert error is None, error
    got = [row for batch_id in sorted(sink) for row in sink[batch_id]]
    offsets = [offset for offset, _ in got]
    assert len(offsets) == len(set(offsets)), "an offset landed twice"
    after = sorted(offset for batch_id in sorted(sink) if batch_id > 0 for offset, _ in sink[batch_id])
    held = offsets_of(amqp_url, queue)
    assert held[0] >= first > next_offset
    assert after == held  # from the first offset left on, every offset once
    numbers = [int(body.split(b".")[0][1:]) for _, body in sorted(got)]
    assert numbers == sorted(numbers) and numbers[:len(read_first)] == list(range(len(read_first)))
    assert numbers[len(read_first)] > 10_000, "m10000, published after micro-batch 0, was not skipped"


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("options, option", [
    ({"streams": None}, "streams"),
    ({"streams": "a,,b"}, "streams"),
    ({"startingOffsets": "first"}, "starting_offsets"),
    ({"startingOffsets": '{"other": 1}'}, "starting_offsets"),
    ({"startingOffsets": '{"S": -3}'}, "starting_offsets"),
    ({"startingOffsets": "latest"}, "starting_offsets"),  # a batch read that would read nothing
    ({"endingOffsets": "earliest"}, "ending_offsets"),
    ({"startingTimestamp": "yesterday"}, "starting_timestamp"),
    ({"startingTimestamp": "1", "startingOffsets": "earliest"}, "starting_timestamp"),
    ({"maxOffsetsPerTrigger": "100"}, "max_offsets_per_trigger"),  # streaming only
    ({"failOnDataLoss": "maybe"}, "fail_on_data_loss"),
    ({"minPartitions": "0"}, "min_partitions"),
    ({"prefetch": "70000"}, "prefetch"),
    ({"readTimeout": "-1"}, "read_timeout"),
    ({"routingKey": "q"}, "routingkey"),
    ({"amqp.heartbeat": "often"}, "url"),
])
def test_bad_options_fail_on_the_driver_naming_the_option(options, option):
    from amqwire.spark.errors import SourceOptionError
    from amqwire.spark.source import SourceSettings

    given = {"url": "amqp://guest:guest@127.0.0.1:5672/", "streams": "S",
             **{key: value for key, value in options.items() if value is not None}}
    if options.get("streams", "") is None:
        del given["streams"]
    with pytest.raises(SourceOptionError) as info:
        SourceSettings.from_options(given, streaming=False)
    assert info.value.option == option and str(info.value).startswith(f"amqp source option {option}: ")
    assert isinstance(info.value, ValueError)


def test_streaming_refuses_an_end(spark, amqp):
    from amqwire.spark.errors import SourceOptionError
    from amqwire.spark.source import SourceSettings

    with pytest.raises(SourceOptionError, match="option ending_offsets: only a batch read"):
        SourceSettings.from_options({"streams": "S", "endingOffsets": "latest"}, streaming=True)


@pytest.mark.parametrize("streaming", [False, True], ids=["read", "readStream"])
def test_one_clear_error_each_at_load(spark, amqp, amqp_url, names, streaming):
    """Where the read is defined, as Spark's Kafka source does (load(), before start() or an
    action): a bad option, a missing stream, a classic queue; no error of Spark's own in
    front of the source's (the runner's UnboundLocalError), and source_error() gives the
    source's error back, typed, with its one-line message."""
    from pyspark.errors import AnalysisException

    from amqwire.spark.errors import SourceOptionError, StreamUnavailable, source_error

    queue = declare_stream(amqp_url, names)
    classic = names.queue()
    with connect(amqp_url) as conn:
        conn.channel().queue_declare(classic)
    missing = names.unique("q")
    cases = [
        ({"streams": queue, "minPartitions": "lots"}, SourceOptionError,
         "amqp source option min_partitions: expected an integer, got 'lots'"),
        ({"streams": queue, "startingOffsets": '{"elsewhere": 3}'}, SourceOptionError,
         "amqp source option starting_offsets: names stream(s) not in the streams option: 'elsewhere'"),
        ({"streams": f"{queue},{missing}"}, StreamUnavailable, f"amqp source: stream '{missing}' does not exist on "),
        ({"streams": classic}, StreamUnavailable, f"amqp source: '{classic}' is not a stream queue"),
    ]
    for options, kind, message in cases:
        reader = (spark.readStream if streaming else spark.read).format("amqp").option("url", amqp_url).options(**options)
        for _ in range(3):  # again only when Spark's Python worker missed its connect-back (see run_stream)
            with pytest.raises(AnalysisException) as excinfo:
                reader.load()
            text = failure_text(excinfo)
            if SPARK_WORKER_SLOW not in text:
                break
        assert "UnboundLocalError" not in text and "During handling" not in text, text[:3000]
        error = source_error(excinfo.value)
        assert type(error) is kind, (error, text[:3000])
        assert str(error).startswith(message) and "\n" not in str(error), (str(error), message)
        if kind is SourceOptionError:
            assert error.option == message.split()[3].rstrip(":")
    assert source_error(RuntimeError("a failure of something else")) is None


def test_what_only_a_stream_query_refuses_fails_it_with_the_sources_error(spark, amqp, amqp_url, names, tmp_path):
    """An end is a batch read's: load() cannot know that the read is a stream query, so the
    query fails, with the source's error as it is (making the reader raise would put Spark's
    UnboundLocalError in front of it)."""
    from amqwire.spark.errors import SourceOptionError, source_error

    queue = declare_stream(amqp_url, names)
    options = {"streams": queue, "endingOffsets": "latest"}
    for _ in range(3):
        with pytest.raises(Exception) as excinfo:
            start_bad_read(spark, amqp_url, options, True, tmp_path)
        text = failure_text(excinfo)
        if SPARK_WORKER_SLOW not in text:
            break
    assert "UnboundLocalError" not in text and "During handling" not in text, text[:3000]
    error = source_error(excinfo.value)
    assert isinstance(error, SourceOptionError) and error.option == "ending_offsets", text[:3000]
    assert str(error).startswith("amqp source option ending_offsets: only a batch read (spark.read) has an end")


def start_bad_read(spark, amqp_url, options, streaming, tmp_path):
    if streaming:
        df = spark.readStream.format("amqp").option("url", amqp_url).options(**options).load()
        query = (df.writeStream.format("memory").queryName("bad_" + os.urandom(4).hex())
                 .option("checkpointLocation", str(tmp_path / os.urandom(4).hex())).start())
        try:
            query.awaitTermination(60)
        finally:
            query.stop()
    else:
        spark.read.format("amqp").option("url", amqp_url).options(**options).load().collect()
