"""The "amqp" source and sink over RabbitMQ's stream protocol (``rabbitmq-stream://`` urls),
against a private node with the stream plugin (``stream_node``: never the shared broker)
and the session's local Spark (``local[2,3]``: a failed task is tried again).

- the source reads every offset once, each row equal to what was published, whether it
  was published over AMQP 0-9-1 or the stream protocol, and equal to what the 0-9-1
  source reads of the same stream (but the ``timestamp`` column: the chunk's here);
- the sink stores each row once: the same write twice with one producerName; a task
  that fails after some of its rows were stored, tried again; a driver SIGKILLed in the
  middle of a batch write, the job run again; a streaming query's driver SIGKILLed inside
  a micro-batch and restarted from its checkpoint;
- the source's driver SIGKILLed inside a micro-batch: every offset once in a file sink;
- consumerName stores the committed offsets; times to the millisecond; retention ahead
  of a read; options of the other protocol and other mistakes refused on the driver.
"""
from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import Deadline

UTC = datetime.timezone.utc
HERE = Path(__file__).resolve().parent
EPOCH = 1_700_000_000

pytestmark = pytest.mark.timeout(600)


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def amqp(spark):
    import amqwire.spark

    amqwire.spark.register(spark)
    return amqwire.spark


@pytest.fixture
def node(stream_node, stream_url):
    """The module's stream node, running: ``node.stream_url`` and its AMQP 0-9-1 ``node.url``."""
    return stream_node


def stream_client(url):
    from amqwire.client import stream

    return stream.connect(url)


def new_stream(node, **retention) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    with stream_client(node.stream_url) as conn:
        conn.create_stream(name, **retention)
    return name


def stats(node, name):
    with stream_client(node.stream_url) as conn:
        return conn.stream_stats(name)


def publish_091(node, queue, start, count):
    """Rich messages over AMQP 0-9-1 (test_spark_source's: 13 properties, every header type)."""
    from test_spark_source import publish

    publish(node.url, queue, start, count, rich=True)


def stream_properties(i):
    """What the stream-protocol publisher sends with message i: every property the source
    maps (creation times in whole seconds, so 0-9-1 readers see the same instant)."""
    from amqwire.codec.stream import amqp10 as A

    properties = {"message_id": f"msg-{i}", "correlation_id": f"corr-{i}", "reply_to": f"reply.{i % 11}",
                  "content_type": f"type/{i % 3}", "content_encoding": "enc", "user_id": b"guest",
                  "creation_time": datetime.datetime.fromtimestamp(EPOCH + i, UTC)}
    application = {"seq": i, "text": "plain text", "bool": True, "float": 1.5, "bytes": b"\x00\x01\xff",
                   "time": datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=UTC), "void": None,
                   "x-basic-type": f"t{i % 4}", "x-basic-app-id": "amqwire-tests", "short": A.Short(-3)}
    return properties, application


def publish_stream(node, name, start, count):
    with stream_client(node.stream_url) as conn, conn.producer(name) as producer:
        for i in range(start, start + count):
            properties, application = stream_properties(i)
            producer.send(b"s%d" % i, properties=properties, application_properties=application)
        producer.flush(60)


def publish_plain(node, name, count, start=0):
    with stream_client(node.stream_url) as conn, conn.producer(name) as producer:
        for i in range(start, start + count):
            producer.send(b"m%d" % i)
        producer.flush(60)


def read(spark, url, streams, **options):
    reader = spark.read.format("amqp").option("url", url).option("streams", streams)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows(df):
    return df.toArrow().to_pylist()


def utc(value):
    if isinstance(value, datetime.datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return value


def without_timestamp(row):
    row = dict(row)
    row.pop("timestamp")
    row["properties"] = {key: utc(value) for key, value in row["properties"].items()}
    row["headers"] = None if row["headers"] is None else sorted(row["headers"])
    return row


def message_ids(spark, node, name):
    got = read(spark, node.stream_url, name).select("offset", "body", "properties.message_id").collect()
    return [row["message_id"] for row in got], got


# --------------------------------------------------------------------------- the source


def test_every_offset_once_equal_to_what_was_published_over_both_protocols(spark, amqp, node):
    name = new_stream(node)
    publish_091(node, name, 0, 150)
    publish_stream(node, name, 150, 150)
    publish_091(node, name, 300, 50)
    started = datetime.datetime.now(UTC) - datetime.timedelta(minutes=5)
    got = rows(read(spark, node.stream_url, name, minPartitions=3))
    assert sorted(row["offset"] for row in got) == list(range(350))  # a new stream: dense offsets
    by_offset = {row["offset"]: row for row in got}
    from test_spark_source import HEADER_VALUES, properties as props_091

    for i in range(350):
        row = by_offset[i]
        assert row["stream"] == name
        assert started <= utc(row["timestamp"]) <= datetime.datetime.now(UTC)  # the chunk's timestamp
        if 150 <= i < 300:
            properties, application = stream_properties(i)
            assert (row["body"], row["exchange"], row["routing_key"]) == (b"s%d" % i, "", name)
            assert {k: utc(v) for k, v in row["properties"].items()} == {
                "content_type": f"type/{i % 3}", "content_encoding": "enc", "delivery_mode": None, "priority": None,
                "correlation_id": f"corr-{i}", "reply_to": f"reply.{i % 11}", "expiration": None,
                "message_id": f"msg-{i}", "timestamp": datetime.datetime.fromtimestamp(EPOCH + i, UTC),
                "type": f"t{i % 4}", "user_id": "guest", "app_id": "amqwire-tests", "cluster_id": None}
            assert dict(row["headers"]) == {"seq": str(i), "text": "plain text", "bool": "true", "float": "1.5",
                                            "bytes": '"AAH/"', "time": '"2024-02-03T04:05:06Z"', "void": None,
                                            "short": "-3"}
            continue
        p = props_091(i)
        assert (row["body"], row["exchange"], row["routing_key"]) == (b"m%d" % i, "", name)
        want = {name_: getattr(p, name_) for name_ in row["properties"]}
        want["cluster_id"] = None  # a stream does not keep it
        assert {k: utc(v) for k, v in row["properties"].items()} == want, i
        if p.headers is None:
            assert row["headers"] is None
        else:
            assert dict(row["headers"]) == {"seq": str(i), **{key: text for key, _, text in HEADER_VALUES}}, i
    # the 0-9-1 source reads the same rows (its timestamp column is the timestamp property)
    over_091 = rows(read(spark, node.url, name))
    assert sorted(map(without_timestamp, over_091), key=lambda r: r["offset"]) == \
        sorted(map(without_timestamp, got), key=lambda r: r["offset"])


def test_starting_timestamp_to_the_millisecond_and_an_empty_range(spark, amqp, node):
    name = new_stream(node)
    publish_plain(node, name, 5)
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    publish_plain(node, name, 5, start=5)
    got = sorted(row["offset"] for row in rows(read(spark, node.stream_url, name, startingTimestamp=boundary)))
    assert got == list(range(5, 10))
    got = sorted(row["offset"] for row in rows(read(spark, node.stream_url, name,
                                                    endingOffsetsByTimestamp=f'{{"{name}": {boundary}}}')))
    assert got == list(range(5))
    # after the last chunk's timestamp: from the tail, nothing (the last chunk tells, no wait)
    an_hour_on = int(time.time() * 1000) + 3_600_000
    assert rows(read(spark, node.stream_url, name, startingTimestamp=an_hour_on)) == []
    assert rows(read(spark, node.stream_url, name, startingOffsets=f'{{"{name}": 3}}',
                     endingOffsets=f'{{"{name}": 3}}')) == []


def test_streaming_with_a_consumer_name_stores_the_committed_offsets(spark, amqp, node, tmp_path):
    """Spark tells a source that a micro-batch is done (commit) when it plans the next
    one with data: the offset stored is one micro-batch behind the sink's."""
    name = new_stream(node)
    publish_plain(node, name, 1000)

    def run():
        query = (spark.readStream.format("amqp").option("url", node.stream_url).option("streams", name)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 400)
                 .option("consumerName", "spark-orders").load().select("offset", "body")
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(240)
        assert query.exception() is None, query.exception()
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run() == [400, 400, 200]
    with stream_client(node.stream_url) as conn:
        assert conn.query_offset(name, "spark-orders") == 799  # batches 0 and 1 told done; batch 2 not yet
    publish_plain(node, name, 100, start=1000)
    assert run() == [100]
    with stream_client(node.stream_url) as conn:
        assert conn.query_offset(name, "spark-orders") == 999
    got = sorted((row["offset"], row["body"]) for row in spark.read.parquet(str(tmp_path / "out")).collect())
    # storing offsets writes tracking entries into the stream, which take offsets of their own
    assert [offset for offset, _ in got[:1000]] == list(range(1000))
    assert [body for _, body in got] == [b"m%d" % i for i in range(1100)]


def test_offsets_removed_by_retention_fail_the_read_or_are_skipped(spark, amqp, node):
    name = new_stream(node, max_length_bytes=4000, max_segment_size_bytes=1000)
    deadline = Deadline(60, "retention to remove the stream's first offsets")
    published = 0
    while True:
        with stream_client(node.stream_url) as conn, conn.producer(name) as producer:
            for _ in range(100):
                producer.send(b"x" * 100)
            producer.flush(30)
        published += 100
        found = stats(node, name)
        if found.first_offset:
            break
        if deadline.expired():
            raise deadline.fail(f"first offset still {found.first_offset} after {published}")
    start = f'{{"{name}": 0}}'
    with pytest.raises(Exception) as excinfo:
        rows(read(spark, node.stream_url, name, startingOffsets=start))
    assert "DataLoss" in str(excinfo.value) and f"stream '{name}': offsets 0.." in str(excinfo.value)
    got = [row["offset"] for row in rows(read(spark, node.stream_url, name, startingOffsets=start,
                                              failOnDataLoss="false"))]
    assert got == sorted(set(got)) and got[0] >= found.first_offset and got[-1] >= found.last_offset


# --------------------------------------------------------------------------- the sink


def frame(spark, count, partitions=3):
    from pyspark.sql import functions as F

    return spark.range(count, numPartitions=partitions).select(
        F.col("id").cast("string").alias("body"),
        F.create_map(F.lit("seq"), F.col("id")).alias("headers"),
        F.struct(F.col("id").cast("string").alias("message_id"), F.lit(2).alias("delivery_mode"),
                 F.lit("spark").alias("app_id")).alias("properties"))


def write(df, node, name, **options):
    writer = df.write.format("amqp").mode("append").option("url", node.stream_url).option("stream", name)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_the_same_write_twice_with_one_producer_name_stores_each_row_once(spark, amqp, node):
    name = new_stream(node)
    df = frame(spark, 20_000)
    write(df, node, name, producerName="import-1")
    write(df, node, name, producerName="import-1")
    ids, got = message_ids(spark, node, name)
    assert len(ids) == 20_000 and len(set(ids)) == 20_000
    assert sorted(map(int, ids)) == list(range(20_000))
    assert all(row["body"] == row["message_id"].encode() for row in got)
    # what 0-9-1 readers of the stream see of a row
    first = rows(read(spark, node.url, name, endingOffsets=f'{{"{name}": 1}}'))[0]
    assert first["properties"]["delivery_mode"] == 2 and first["properties"]["app_id"] == "spark"
    assert dict(first["headers"]) == {"seq": first["body"].decode()}
    # another producerName is another write: stored again
    write(frame(spark, 1000), node, name, producerName="import-2")
    assert stats(node, name).last_offset == 21_000 - 1


def test_a_task_that_fails_after_storing_rows_is_retried_without_duplicates(spark, amqp, node, tmp_path):
    """Partition 1's first attempt fails once the broker has stored some of its rows (the
    UDF before the writer waits until it has, then raises); Spark's second attempt skips
    what is stored."""
    from pyspark.sql import functions as F

    name = new_stream(node)
    url = node.stream_url
    marks = str(tmp_path)
    reference = "retry-1"

    def fail_once(batches):
        from pyspark import TaskContext

        from amqwire.client import stream

        context = TaskContext.get()
        seen = 0
        for batch in batches:
            yield batch
            seen += batch.num_rows
            if context.partitionId() == 1 and context.attemptNumber() == 0 and seen >= 5000:
                with stream.connect(url) as conn:
                    deadline = time.monotonic() + 60
                    stored = 0
                    while stored < 1000 and time.monotonic() < deadline:
                        stored = conn.query_publisher_sequence(name, f"{reference}-1")
                        time.sleep(0.1)
                with open(os.path.join(marks, "failed"), "w") as mark:
                    mark.write(str(stored))
                raise RuntimeError(f"the test fails attempt 0 of partition 1 after {stored} rows were stored")

    df = frame(spark, 30_000, partitions=2)
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        write(df.mapInArrow(fail_once, df.schema).select(F.col("*")), node, name, producerName=reference)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    stored_before = int((tmp_path / "failed").read_text())
    print(f"attempt 0 of partition 1 failed after the broker stored {stored_before} of its rows")
    assert stored_before >= 1000
    ids, _ = message_ids(spark, node, name)
    assert len(ids) == 30_000 and len(set(ids)) == 30_000


# --------------------------------------------------------------------------- kill tests


def _run(command, tmp_path, tag):
    log = open(tmp_path / f"{tag}-{time.time_ns()}.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=HERE), log


def _kill(job):
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)


def test_source_driver_killed_mid_batch_replays_exactly_once(spark, amqp, node, tmp_path):
    from test_spark_source import _commits, _job

    name = new_stream(node)
    count = 1200
    publish_plain(node, name, count)
    (tmp_path / "marks").mkdir()
    job, log = _job(node.stream_url, name, tmp_path)
    try:
        done_before = _commits(tmp_path)
        deadline = Deadline(240, "a micro-batch to commit and the next one to start")
        while True:
            assert job.poll() is None, Path(log.name).read_text()[-3000:]
            marks = sorted((tmp_path / "marks").iterdir(), key=lambda p: p.stat().st_mtime)
            if _commits(tmp_path) > done_before and marks and marks[-1].stat().st_mtime > time.time() - 0.5:
                break
            if deadline.expired():
                raise deadline.fail(Path(log.name).read_text()[-3000:])
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    finally:
        _kill(job)
        log.close()
    print(f"source: driver SIGKILLed after {_commits(tmp_path)} committed micro-batches")
    job, log = _job(node.stream_url, name, tmp_path, available_now=True, pause=0.0)
    try:
        assert job.wait(400) == 0, Path(log.name).read_text()[-3000:]
    finally:
        _kill(job)
        log.close()
    got = spark.read.parquet(str(tmp_path / "out")).select("offset", "body").collect()
    offsets = [row["offset"] for row in got]
    print(f"source replay: {len(offsets)} rows, {len(set(offsets))} distinct offsets, "
          f"{len(offsets) - len(set(offsets))} duplicates, expected {count}")
    assert sorted(offsets) == list(range(count))
    assert all(row["body"] == b"m%d" % row["offset"] for row in got)


def test_sink_driver_killed_mid_write_and_run_again_stores_each_row_once(spark, amqp, node, tmp_path):
    name = new_stream(node)
    count = 20_000
    marks = tmp_path / "marks"
    marks.mkdir()

    def job(pause):
        return _run([sys.executable, str(HERE / "stream_sink_job.py"), "--url", node.stream_url, "--stream", name,
                     "--marks", str(marks), "--pause", str(pause), "batch", "--rows", str(count),
                     "--partitions", "2", "--producer-name", "killed-job"], tmp_path, "sink")

    process, log = job(0.5)  # 500 rows a batch: a partition takes 10 s
    try:
        deadline = Deadline(300, "the job to store some rows")
        while True:
            assert process.poll() is None, Path(log.name).read_text()[-3000:]
            found = stats(node, name)
            if found.last_offset is not None and found.last_offset >= 2000:
                break
            if deadline.expired():
                raise deadline.fail(Path(log.name).read_text()[-3000:])
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        _kill(process)
        log.close()
    time.sleep(1)
    partial = stats(node, name).last_offset + 1
    print(f"sink: driver SIGKILLed with {partial} of {count} rows stored")
    assert partial < count and partial % (count // 2) != 0, "the kill did not land inside a partition"
    process, log = job(0.0)
    try:
        assert process.wait(400) == 0, Path(log.name).read_text()[-3000:]
    finally:
        _kill(process)
        log.close()
    ids, _ = message_ids(spark, node, name)
    print(f"sink rerun: {len(ids)} rows, {len(set(ids))} distinct, {len(ids) - len(set(ids))} duplicates, "
          f"expected {count}")
    assert len(ids) == count and sorted(map(int, ids)) == list(range(count))


def test_streaming_sink_driver_killed_mid_batch_replays_exactly_once(spark, amqp, node, tmp_path):
    source, target = new_stream(node), new_stream(node)
    count = 3000
    publish_plain(node, source, count)
    marks = tmp_path / "marks"
    marks.mkdir()
    checkpoint = tmp_path / "checkpoint"

    def job(pause, available_now=False):
        command = [sys.executable, str(HERE / "stream_sink_job.py"), "--url", node.stream_url, "--stream", target,
                   "--marks", str(marks), "--pause", str(pause), "streaming", "--source", source,
                   "--checkpoint", str(checkpoint), "--max-offsets", "1000"]
        return _run(command + (["--available-now"] if available_now else []), tmp_path, "streaming-sink")

    def commits():
        folder = checkpoint / "commits"
        return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0

    process, log = job(0.3)
    try:
        deadline = Deadline(300, "micro-batch 1 to be half written")
        while True:
            assert process.poll() is None, Path(log.name).read_text()[-3000:]
            found = stats(node, target)
            if commits() >= 1 and found.last_offset is not None and found.last_offset >= 1200:
                break
            if deadline.expired():
                raise deadline.fail(Path(log.name).read_text()[-3000:])
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        _kill(process)
        log.close()
    time.sleep(1)
    partial = stats(node, target).last_offset + 1
    print(f"streaming sink: driver SIGKILLed after {commits()} committed micro-batches, {partial} rows stored")
    process, log = job(0.0, available_now=True)
    try:
        assert process.wait(400) == 0, Path(log.name).read_text()[-3000:]
    finally:
        _kill(process)
        log.close()
    ids, _ = message_ids(spark, node, target)
    print(f"streaming sink replay: {len(ids)} rows, {len(set(ids))} distinct, {len(ids) - len(set(ids))} "
          f"duplicates, expected {count}")
    assert len(ids) == count and sorted(map(int, ids)) == list(range(count))


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("options, option", [
    ({"prefetch": "100"}, "prefetch"),
    ({"streams": "S", "consumerName": "c"}, "consumer_name"),  # a batch read
    ({"url": "amqp://guest:guest@127.0.0.1:5672/", "credit": "5"}, "credit"),
    ({"url": "rabbitmq-stream://127.0.0.1:5552/,amqp://127.0.0.1/"}, "url"),
    ({"amqp.channel_max": "5"}, "url"),
    ({"credit": "0"}, "credit"),
])
def test_source_options_of_the_other_protocol_are_refused(options, option):
    from amqwire.spark.errors import SourceOptionError
    from amqwire.spark.source import SourceSettings

    given = {"url": "rabbitmq-stream://guest:guest@127.0.0.1:5552/", "streams": "S", **options}
    with pytest.raises(SourceOptionError) as info:
        SourceSettings.from_options(given, streaming=False)
    assert info.value.option == option


@pytest.mark.parametrize("options, problem", [
    ({}, "option stream: missing"),
    ({"stream": "s", "routingKey": "q"}, "option routing_key: an AMQP 0-9-1 option"),
    ({"stream": "s", "bodyFormat": "xml"}, "body_format must be one of"),
    ({"stream": "s", "producerName": "x" * 300}, "option producer_name: expected 1 .. 244 bytes"),
    ({"stream": "s", "whatever": "1"}, "unknown option 'whatever'"),
])
def test_sink_options_are_checked_on_the_driver(options, problem):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from amqwire.spark.stream_sink import StreamSinkSettings

    schema = StructType([StructField("body", BinaryType())])
    with pytest.raises(ValueError, match=problem):
        StreamSinkSettings.from_options({"url": "rabbitmq-stream://127.0.0.1:5552/", **options}, schema)


def test_the_stream_sink_is_refused_where_speculation_is_on():
    from pyspark.sql.types import BinaryType, StructField, StructType

    from amqwire.spark.datasource import AMQPDataSource, AMQPDataSourceWithSpeculation

    schema = StructType([StructField("body", BinaryType())])
    options = {"url": "rabbitmq-stream://127.0.0.1:5552/", "stream": "s"}
    with pytest.raises(ValueError, match="spark.speculation is on"):
        AMQPDataSourceWithSpeculation(options).writer(schema, False)
    assert AMQPDataSource(options).writer(schema, False).settings.stream == "s"
    # over 0-9-1 (at-least-once) speculation changes nothing
    assert AMQPDataSourceWithSpeculation({"routingKey": "q"}).writer(schema, False).settings.routing_key == "q"


def test_a_missing_stream_fails_on_the_driver(spark, amqp, node):
    with pytest.raises(Exception, match="does not exist"):
        rows(read(spark, node.stream_url, f"missing-{uuid.uuid4().hex[:6]}"))


def test_the_rabbitmq_stream_url_reaches_the_node_in_a_thread(spark, amqp, node):
    """Writing from a thread of one's own (the data source needs the JVM thread's active
    session, as docs/spark.md says): a smoke test that the sink works there too."""
    name = new_stream(node)
    errors = []

    def run():
        try:
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            write(frame(spark, 100, partitions=1), node, name)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    assert not errors, errors
    assert stats(node, name).last_offset == 99
