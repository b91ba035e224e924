"""amqwire.spark with a real Spark (local[2,3], the session-wide ``spark`` fixture) and the
real RabbitMQ at AMQP_URL.

Every test publishes into its own queue (``names``), reads everything back with the
blocking client and compares each message field by field with what the row said: body,
exchange, routing key, the 13 basic properties and the headers.  The expected values are
computed in Python from the row's id; the DataFrames are built with Spark expressions.

- the "amqp" data source, batch: 100,000 rows with every property and a headers map;
- the encode-only column function ``to_amqp_frames``, its frames sent on a bare socket
  after a handshake done by hand with amqwire.codec, and ``from_amqp_frames`` back;
- a streaming query over three micro-batches (each row exactly once);
- connections closed by the broker in the middle of a write (at-least-once);
- edge cases: null bodies / routing keys, empty frames and partitions, bodies split by
  frame_max, mandatory returns, options over columns, URL lists, JSON/table bodies, bad
  options, columns and modes;
- the Row-based stream writer (the Spark 4.0 fallback) called directly.
"""
from __future__ import annotations

import collections
import datetime
import os
import socket
import threading
import time
import uuid

import pytest

from conftest import closed_port, url_credentials, url_host_port, with_netloc
from delay_proxy import DelayProxy

UTC = datetime.timezone.utc
EPOCH = 1_700_000_000  # timestamps of the generated rows: EPOCH + id seconds
# user_id must be the connection's own user or the broker refuses the publish
USER = url_credentials(os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))[0]


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def amqp(spark):
    """``amqwire.spark`` with the "amqp" source registered in the test session."""
    import amqwire.spark

    amqwire.spark.register(spark)
    return amqwire.spark


def connect(url):
    from amqwire.client import connect as _connect

    return _connect(url)


def declare(url, *queues, exchange=None, routing_keys=()):
    """Declare ``queues`` (and a direct ``exchange`` bound to each of them by every key in
    ``routing_keys``)."""
    with connect(url) as conn:
        ch = conn.channel()
        if exchange is not None:
            ch.exchange_declare(exchange, "direct")
        for queue in queues:
            ch.queue_declare(queue)
            for key in routing_keys:
                ch.queue_bind(queue, exchange, key)


def queue_count(url, queue) -> int:
    with connect(url) as conn:
        return conn.channel().queue_declare(queue, passive=True).message_count


def drain(url, queue, expect=None, *, idle=1.0, timeout=90.0):
    """Every message in ``queue`` (consumed with no_ack).  With ``expect``, reads until that
    many arrived and then ``idle`` seconds more, so extra messages show up too; without it,
    until nothing came for ``idle`` seconds."""
    messages = []
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=2000)
        consumer = ch.consume(queue, no_ack=True)
        get = consumer.get
        while True:
            if expect is not None and len(messages) < expect:
                wait = max(deadline - time.monotonic(), 0.0)
                if wait == 0.0:
                    break
                message = get(timeout=min(wait, 10.0))
                if message is None:
                    continue
            else:
                message = get(timeout=idle)
                if message is None:
                    break
            messages.append(message)
        consumer.cancel()
    if expect is not None:
        assert len(messages) >= expect, f"{queue}: {len(messages)} of {expect} messages arrived"
    return messages


def failure_text(excinfo) -> str:
    """Everything Spark says about a failed job: the exception, its causes and Java text."""
    exc = excinfo.value
    parts = []
    while exc is not None and len(parts) < 10:
        parts.append(f"{type(exc).__name__}: {exc}")
        java = getattr(exc, "java_exception", None)
        if java is not None:
            parts.append(str(java))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def writer(df, url, **options):
    w = df.write.format("amqp").mode("append").option("url", url)
    for key, value in options.items():
        w = w.option(key, str(value))
    return w


# --------------------------------------------------------------------------- the rich rows
# 100,000 rows built from spark.range with Spark expressions; expected_row() is the same
# row computed in Python from the id.

CONTENT_TYPES = ("application/json", "text/plain", "application/octet-stream")


def rich_columns(F, exchange_col=True):
    """body, routing_key, [exchange], headers, properties columns from an ``id`` column."""
    body = F.expr("cast(concat('row-', id, '-', repeat('x', cast(id % 50 as int))) as binary)")
    routing_key = F.expr("concat('rk.', id % 3)")
    properties = F.struct(
        F.expr("element_at(array('application/json', 'text/plain', 'application/octet-stream'), "
               "cast(id % 3 as int) + 1)").alias("content_type"),
        F.expr("if(id % 7 = 0, null, concat('enc-', id % 5))").alias("content_encoding"),
        F.expr("cast(1 + id % 2 as int)").alias("delivery_mode"),
        F.expr("cast(id % 10 as int)").alias("priority"),
        F.expr("concat('corr-', id)").alias("correlation_id"),
        F.expr("concat('reply.', id % 11)").alias("reply_to"),
        F.expr("cast(3600000 + id % 1000 as string)").alias("expiration"),
        F.expr("concat('msg-', lower(hex(id)))").alias("message_id"),
        F.expr(f"timestamp_seconds({EPOCH} + id)").alias("timestamp"),
        F.expr("concat('type-', id % 4)").alias("type"),
        F.when(F.expr("id % 2 = 0"), F.lit(USER)).alias("user_id"),
        F.lit("amqwire-tests").alias("app_id"),
        F.expr("concat('c', id % 3)").alias("cluster_id"),
    )
    headers = F.expr("map('seq', id, 'group', id % 10, 'neg', -id)")
    return body, routing_key, headers, properties


def rich_frame(spark, n, exchange, partitions=2):
    from pyspark.sql import functions as F

    body, routing_key, headers, properties = rich_columns(F)
    return spark.range(0, n, 1, partitions).select(
        body.alias("body"),
        routing_key.alias("routing_key"),
        F.lit(exchange).alias("exchange"),
        headers.alias("headers"),
        properties.alias("properties"),
    )


def expected_properties(i: int) -> dict:
    """The 13 non-header properties of row ``i`` (None where the row has a null)."""
    return {
        "content_type": CONTENT_TYPES[i % 3],
        "content_encoding": None if i % 7 == 0 else f"enc-{i % 5}",
        "delivery_mode": 1 + i % 2,
        "priority": i % 10,
        "correlation_id": f"corr-{i}",
        "reply_to": f"reply.{i % 11}",
        "expiration": str(3600000 + i % 1000),
        "message_id": f"msg-{i:x}",
        "timestamp": datetime.datetime.fromtimestamp(EPOCH + i, UTC),
        "type": f"type-{i % 4}",
        "user_id": USER if i % 2 == 0 else None,
        "app_id": "amqwire-tests",
        "cluster_id": f"c{i % 3}",
    }


def expected_row(i: int) -> dict:
    return {
        "body": f"row-{i}-{'x' * (i % 50)}".encode(),
        "routing_key": f"rk.{i % 3}",
        "headers": {"seq": i, "group": i % 10, "neg": -i},
        "properties": expected_properties(i),
    }


def check_rich_messages(messages, n, exchange):
    """Every id 0..n-1 exactly once, each message equal to its row, field by field."""
    from amqwire.codec import PROPERTY_NAMES

    seen = collections.Counter()
    for message in messages:
        props = message.properties
        headers = props.headers
        assert headers is not None and "seq" in headers, f"message without a seq header: {message!r}"
        i = headers["seq"]
        seen[i] += 1
        want = expected_row(i)
        assert message.exchange == exchange, i
        assert message.routing_key == want["routing_key"], i
        assert message.body == want["body"], i
        assert headers == want["headers"], i
        got = {name: getattr(props, name) for name in PROPERTY_NAMES if name != "headers"}
        assert got == want["properties"], (i, got, want["properties"])
    duplicates = {i: c for i, c in seen.items() if c > 1}
    assert not duplicates, f"{len(duplicates)} rows arrived more than once, e.g. {list(duplicates.items())[:5]}"
    assert set(seen) == set(range(n)), f"missing rows, e.g. {sorted(set(range(n)) - set(seen))[:10]}"
    assert len(messages) == n


# --------------------------------------------------------------------------- 1. data source, 100k rows


def test_datasource_100k_rows_every_field(spark, amqp, amqp_url, names):
    n = 100_000
    queue, exchange = names.queue(), names.exchange()
    declare(amqp_url, queue, exchange=exchange, routing_keys=("rk.0", "rk.1", "rk.2"))

    df = rich_frame(spark, n, exchange)
    writer(df, amqp_url, confirm_window=5000).save()

    assert queue_count(amqp_url, queue) == n
    check_rich_messages(drain(amqp_url, queue, n, idle=0.5), n, exchange)


# --------------------------------------------------------------------------- 2. to_amqp_frames + raw socket


class RawAMQP:
    """An AMQP connection on a bare socket, driven by hand with amqwire.codec only:
    protocol header, start-ok (PLAIN), tune-ok, open, channel 1 open, confirm.select."""

    def __init__(self, url, frame_max=131072):
        import amqwire.codec as aw

        self.aw = aw
        host, port = url_host_port(url)
        user, password = url_credentials(url)
        self.sock = socket.create_connection((host, port), timeout=30)
        self.parser = aw.CommandParser()
        self.pending = []
        self.sock.sendall(aw.PROTOCOL_HEADER)
        self.expect(aw.ConnectionStart, channel=0)
        self.send(0, aw.ConnectionStartOk(
            {"product": "amqwire test_spark (raw socket)",
             "capabilities": {"publisher_confirms": True, "basic.nack": True}},
            "PLAIN", f"\0{user}\0{password}".encode(), "en_US"))
        tune = self.expect(aw.ConnectionTune, channel=0)
        self.frame_max = min(frame_max, tune.frame_max or frame_max)
        self.send(0, aw.ConnectionTuneOk(channel_max=tune.channel_max or 2047,
                                         frame_max=self.frame_max, heartbeat=0))
        self.parser.frame_max = self.frame_max
        self.send(0, aw.ConnectionOpen(virtual_host="/"))
        self.expect(aw.ConnectionOpenOk, channel=0)
        self.send(1, aw.ChannelOpen())
        self.expect(aw.ChannelOpenOk)
        self.send(1, aw.ConfirmSelect())
        self.expect(aw.ConfirmSelectOk)

    def send(self, channel, method):
        self.sock.sendall(method.encode(channel))

    def read(self):
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the broker closed the raw connection")
        self.pending.extend(self.parser.feed(data))

    def expect(self, cls, channel=1):
        aw = self.aw
        while True:
            while self.pending:
                command = self.pending.pop(0)
                if not isinstance(command, aw.Command):
                    continue
                method = command.method
                if isinstance(method, cls) and command.channel == channel:
                    return method
                if isinstance(method, (aw.ConnectionClose, aw.ChannelClose)):
                    raise ConnectionError(f"broker closed: {method.reply_code} {method.reply_text}")
            self.read()

    def publish_confirmed(self, frames: bytes, count: int) -> None:
        """Send ``frames`` (``count`` publishes) from a thread while reading the acks here;
        returns once the broker acked all of them, fails on a nack or a close."""
        aw = self.aw
        errors = []

        def sender():
            try:
                self.sock.sendall(frames)
            except OSError as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=sender, daemon=True)
        thread.start()
        acked = 0
        while acked < count:
            while self.pending and acked < count:
                method = self.pending.pop(0).method
                if isinstance(method, aw.BasicAck):
                    acked = max(acked, method.delivery_tag)
                elif isinstance(method, (aw.BasicNack, aw.BasicReturn, aw.ChannelClose, aw.ConnectionClose)):
                    raise AssertionError(f"raw publish: the broker sent {method!r}")
            if acked < count:
                self.read()
        thread.join(30)
        assert not thread.is_alive(), "timed out after 30 s waiting for the raw publish's sender thread"
        assert not errors, errors

    def close(self):
        try:
            self.send(0, self.aw.ConnectionClose(200, "bye", 0, 0))
            self.expect(self.aw.ConnectionCloseOk, channel=0)
        finally:
            self.sock.close()


def test_to_amqp_frames_raw_socket_and_from_amqp_frames(spark, amqp, amqp_url, names):
    """The encode-only path: frames from ``to_amqp_frames`` (exchange as a str literal, the
    rest columns) sent as they are on a socket after a hand-made handshake, read back with
    the client; ``from_amqp_frames`` of the same frames gives back every input field."""
    from pyspark.sql import functions as F

    n = 100_000
    queue, exchange = names.queue(), names.exchange()
    declare(amqp_url, queue, exchange=exchange, routing_keys=("rk.0", "rk.1", "rk.2"))

    body, routing_key, headers, properties = rich_columns(F)
    frames = amqp.to_amqp_frames(body, routing_key, exchange, headers=headers, properties=properties)
    table = (
        spark.range(0, n, 1, 2)
        .select("id", frames.alias("frames"))
        .select("id", "frames", amqp.from_amqp_frames("frames").alias("publish"))
        .toArrow()
    )
    assert table.num_rows == n
    assert str(table.schema.field("frames").type) == "binary"

    # from_amqp_frames: every decoded field equals the row's input
    ids = table.column("id").to_pylist()
    assert sorted(ids) == list(range(n))
    for i, publish in zip(ids, table.column("publish").to_pylist()):
        want = expected_row(i)
        assert publish["exchange"] == exchange, i
        assert publish["routing_key"] == want["routing_key"], i
        assert publish["mandatory"] is False, i
        assert publish["body"] == want["body"], i
        # map<string, string>: non-string header values as JSON text
        assert dict(publish["headers"]) == {k: str(v) for k, v in want["headers"].items()}, i
        got = dict(publish["properties"])
        got["timestamp"] = got["timestamp"].astimezone(UTC) if got["timestamp"] else None
        assert got == want["properties"], (i, got)

    # the frames on a bare socket
    data = b"".join(table.column("frames").to_pylist())
    raw = RawAMQP(amqp_url)
    try:
        raw.publish_confirmed(data, n)
    finally:
        raw.close()
    check_rich_messages(drain(amqp_url, queue, n, idle=0.5), n, exchange)


# --------------------------------------------------------------------------- 3. streaming


@pytest.mark.parametrize("checkpoint_via", ["option", "session_conf"])
def test_streaming_three_micro_batches_exactly_once(spark, amqp, amqp_url, names, tmp_path, checkpoint_via):
    """A file stream fed three files, one micro-batch each, into writeStream.format("amqp").

    ``option``: the checkpoint location given as ``.option("checkpointLocation", ...)``, the
    usual way, which Spark hands to the data source too: the sink must accept it.
    ``session_conf``: the location from spark.sql.streaming.checkpointLocation, which Spark
    does not pass on."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    per_drop, drops = 7_000, 3

    def drop(step):
        ids = pa.array(range(step * per_drop, (step + 1) * per_drop), pa.int64())
        pq.write_table(pa.table({"id": ids}), source / f".part-{step}.tmp")
        os.rename(source / f".part-{step}.tmp", source / f"part-{step}.parquet")

    drop(0)
    stream = (
        spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).parquet(str(source))
        .select(
            F.expr("cast(concat('stream-', id) as binary)").alias("body"),
            F.expr("map('seq', id, 'batch', cast(id div %d as int))" % per_drop).alias("headers"),
            F.struct(F.expr("concat('m-', id)").alias("message_id"),
                     F.lit(2).alias("delivery_mode")).alias("properties"),
        )
    )
    sink = (
        stream.writeStream.format("amqp")
        .option("url", amqp_url)
        .option("routing_key", queue)
        .option("confirm_window", "1000")
    )
    if checkpoint_via == "option":
        query = sink.option("checkpointLocation", str(checkpoint)).start()
    else:
        # the session conf is a base directory: the query's checkpoint goes below it
        spark.conf.set("spark.sql.streaming.checkpointLocation", str(checkpoint))
        try:
            query = sink.start()
        finally:
            spark.conf.unset("spark.sql.streaming.checkpointLocation")
    try:
        query.processAllAvailable()
        for step in range(1, drops):
            drop(step)
            query.processAllAvailable()
        assert query.exception() is None
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert len(batches) >= drops, [p["numInputRows"] for p in query.recentProgress]

    n = per_drop * drops
    messages = drain(amqp_url, queue, n, idle=1.0)
    seen = collections.Counter()
    for m in messages:
        i = m.properties.headers["seq"]
        seen[i] += 1
        assert m.body == f"stream-{i}".encode()
        assert m.routing_key == queue and m.exchange == ""
        assert m.properties.headers == {"seq": i, "batch": i // per_drop}
        assert m.properties.message_id == f"m-{i}" and m.properties.delivery_mode == 2
    assert set(seen) == set(range(n))
    assert max(seen.values()) == 1, "a row arrived twice"
    assert len(messages) == n


# --------------------------------------------------------------------------- 4. connections closed mid-write


@pytest.fixture
def vhost(broker_node):
    """A private RabbitMQ node (its vhost "/"), so closing all its connections touches
    nobody else's: ``(rabbitmqctl, vhost, url)``."""
    node = broker_node()
    yield node.rabbitmqctl, "/", node.url


@pytest.mark.timeout(400)  # 150,000 rows written up to three times: minutes on a loaded machine
def test_connections_closed_mid_write_at_least_once(spark, amqp, vhost, record_property):
    """The broker closes the sink's connections twice while 150,000 rows are being written.
    Each close fails the attempts running then; with 3 attempts per task (local[2,3]) a task
    fails twice at most, so the job must succeed through Spark's retries alone -- a failed
    job is a failure of this test, with no second write to hide lost rows -- and every row
    is then in the queue at least once; rows a failed attempt got in come twice."""
    from pyspark.sql import functions as F

    rabbitmqctl, name, url = vhost
    queue = "closed-mid-write"
    declare(url, queue)
    n = 150_000
    df = spark.range(0, n, 1, 4).select(
        F.expr("cast(concat('r', id) as binary)").alias("body"),
        F.expr("map('seq', id)").alias("headers"),
    )

    # The write runs in this thread (a Python data source is looked up through the JVM
    # thread's active session, which a fresh Python thread does not have); a helper thread
    # watches the queue fill and closes every connection of the vhost (the sink's) twice.
    # The sink reaches the broker through a proxy that holds the broker's replies 20 ms:
    # with 200 unconfirmed rows at most, a task writes 10,000 rows/s at most, so the write
    # lasts seconds however warm Spark's JVM is, and the close (rabbitmqctl needs most of a
    # second to start) lands while it runs.  A warm JVM on an idle machine wrote all
    # 150,000 rows in 1.4 s, before rabbitmqctl had closed anything.
    proxy = DelayProxy(*url_host_port(url), delay=0.02)
    sink_url = with_netloc(url, "127.0.0.1", proxy.port)
    closes, attempts, outcome = [], 0, {}

    def closer(done: threading.Event):
        while not done.is_set() and len(closes) < 2:
            try:
                published = queue_count(url, queue)
            except Exception:  # noqa: BLE001 - a close may hit this probe too
                continue
            if published > 500 + 40_000 * len(closes):
                out = rabbitmqctl("close_all_connections", "-p", name, "amqwire test: closed mid-write")
                if "Closed 0 connections" not in out:
                    closes.append(published)
            else:
                time.sleep(0.02)

    try:
        while not closes and attempts < 3:
            attempts += 1
            with connect(url) as conn:
                conn.channel().queue_purge(queue)
            outcome.clear()
            done = threading.Event()
            thread = threading.Thread(target=closer, args=(done,), daemon=True)
            thread.start()
            try:
                writer(df, sink_url, routing_key=queue, confirm_window=200).save()
                outcome["ok"] = True
            except Exception as exc:  # noqa: BLE001 - inspected below
                outcome["error"] = exc
            finally:
                done.set()
                thread.join(60)
    finally:
        proxy.close()
    assert closes, (f"no write was still running when its connections were closed ({attempts} attempts; "
                    f"the last {'succeeded' if 'ok' in outcome else 'failed: %.2000s' % outcome.get('error')})")

    assert "ok" in outcome, (
        f"the write failed although no task could fail more than twice: {outcome['error']!s:.3000}")
    record_property("write", "succeeded (failed tasks retried)")

    messages = drain(url, queue, n, idle=2.0, timeout=100)
    counts = collections.Counter(m.properties.headers["seq"] for m in messages)
    missing = set(range(n)) - set(counts)
    assert not missing, f"{len(missing)} rows never arrived, e.g. {sorted(missing)[:10]}"
    duplicates = sum(c - 1 for c in counts.values())
    record_property("closes", len(closes))
    record_property("messages", len(messages))
    record_property("duplicates", duplicates)
    print(f"\nconnections closed at {closes} messages in the queue; "
          f"write ok after {attempts} attempt(s); {len(messages)} messages for {n} rows, "
          f"{duplicates} duplicates")
    assert len(messages) >= n
    for m in messages:
        assert m.body == b"r%d" % m.properties.headers["seq"]


def test_publish_batches_connection_closed_says_why(vhost):
    """publish_batches (one task's work, here on the driver) while the broker closes its
    connection: a SinkError that names the sink and carries the broker's reason (320
    CONNECTION_FORCED), with rows_confirmed at most what was sent -- also when the close
    lands while Channel.publish_encoded waits for room in the confirm window."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from amqwire.spark.datasource import SinkSettings, publish_batches
    from amqwire.spark.errors import SinkError

    rabbitmqctl, name, url = vhost
    declare(url, "q")
    schema = StructType([StructField("body", BinaryType())])
    settings = SinkSettings.from_options({"url": url, "routing_key": "q", "confirm_window": "200"}, schema)
    rows_per_batch = 10_000
    batch = pa.record_batch([pa.array([b"x" * 20] * rows_per_batch)], names=["body"])
    closer = threading.Thread(
        target=rabbitmqctl, args=("close_all_connections", "-p", name, "amqwire test: closed under the sink"),
        daemon=True,
    )
    sent = 0

    def batches():
        nonlocal sent
        for k in range(500):  # 5M rows: far more than can be sent before the close
            if k == 2:
                closer.start()
            sent += rows_per_batch
            yield batch

    with pytest.raises(SinkError) as excinfo:
        publish_batches(settings, batches())
    closer.join(60)
    assert not closer.is_alive(), "timed out after 60 s waiting for the thread closing the connections"
    error = excinfo.value
    text = str(error)
    assert text.startswith("amqp sink:"), text
    assert 0 <= error.rows_confirmed <= sent
    assert "CONNECTION_FORCED" in text and error.reply_code == 320, text


# --------------------------------------------------------------------------- 5. edge cases


def body_frame(spark, n, partitions=1):
    from pyspark.sql import functions as F

    return spark.range(0, n, 1, partitions).select(F.expr("cast(concat('b', id) as binary)").alias("body"))


def test_null_body_is_an_empty_message(spark, amqp, amqp_url, names):
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    df = spark.range(0, 10, 1, 2).select(
        F.expr("if(id % 2 = 0, null, cast(concat('b', id) as binary))").alias("body"),
        F.lit(queue).alias("routing_key"),
        F.expr("map('seq', id)").alias("headers"),
    )
    writer(df, amqp_url).save()
    messages = drain(amqp_url, queue, 10, idle=0.3)
    assert sorted(m.properties.headers["seq"] for m in messages) == list(range(10))
    for m in messages:
        i = m.properties.headers["seq"]
        assert m.body == (b"" if i % 2 == 0 else b"b%d" % i)


def test_null_routing_key_fails_naming_the_row(spark, amqp, amqp_url, names):
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    df = spark.range(0, 5, 1, 1).select(
        F.expr("cast(id as string)").alias("body"),
        F.expr(f"if(id = 3, null, '{queue}')").alias("routing_key"),
    )
    with pytest.raises(Exception) as excinfo:
        writer(df, amqp_url).save()
    text = failure_text(excinfo)
    assert "routing_key" in text and "row 3" in text, text[:3000]
    # the batch fails as a whole: nothing of it was published
    assert queue_count(amqp_url, queue) == 0


def test_empty_dataframe_publishes_nothing_and_connects_nowhere(spark, amqp):
    # nothing listens on this port: a connection attempt would fail the write
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    writer(body_frame(spark, 0), url, routing_key="nowhere").save()
    writer(body_frame(spark, 10).where("body is null"), url, routing_key="nowhere").save()


def test_empty_partitions(spark, amqp, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    df = body_frame(spark, 2).repartition(4)
    assert df.rdd.getNumPartitions() == 4
    writer(df, amqp_url, routing_key=queue).save()
    assert sorted(m.body for m in drain(amqp_url, queue, 2, idle=0.5)) == [b"b0", b"b1"]


def test_frame_max_splits_bodies(spark, amqp, amqp_url, names):
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    n, size = 50, 20_000
    # 20 KB of varied bytes per row: sha2 blocks of the id, cut to size
    df = spark.range(0, n, 1, 2).select(
        F.expr(f"substr(cast(concat_ws('', transform(sequence(0, {size // 64}), "
               f"k -> sha2(concat(id, ':', k), 256))) as binary), 1, {size - 1} + cast(id as int))").alias("body"),
        F.expr("map('seq', id)").alias("headers"),
    )
    rows = {r["headers"]["seq"]: bytes(r["body"]) for r in df.collect()}
    assert all(len(b) > 4096 * 4 for b in rows.values())
    writer(df, amqp_url, routing_key=queue, frame_max=4096).save()

    # the same frames through to_amqp_frames: no frame over 4096 bytes
    frames = df.select(amqp.to_amqp_frames("body", queue, frame_max=4096).alias("f")).toArrow()
    for value in frames.column("f").to_pylist():
        offset, count = 0, 0
        while offset < len(value):
            size_ = int.from_bytes(value[offset + 3:offset + 7], "big")
            assert size_ + 8 <= 4096
            assert value[offset + 7 + size_] == 0xCE
            offset += size_ + 8
            count += 1
        assert count >= 2 + 5  # method, header and at least 5 body frames
    messages = drain(amqp_url, queue, n, idle=0.5)
    got = {m.properties.headers["seq"]: m.body for m in messages}
    assert got == rows


def test_mandatory_unroutable_fails_with_no_route(spark, amqp, amqp_url, names):
    exchange = names.exchange()
    declare(amqp_url, exchange=exchange)  # no queue bound
    with pytest.raises(Exception) as excinfo:
        writer(body_frame(spark, 3), amqp_url, exchange=exchange, routing_key="unbound", mandatory="true").save()
    text = failure_text(excinfo)
    assert "MessageReturned" in text or "NO_ROUTE" in text, text[:3000]
    assert "amqp sink" in text, text[:3000]


def test_mandatory_routed_succeeds(spark, amqp, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    writer(body_frame(spark, 5), amqp_url, routing_key=queue, mandatory="true").save()
    assert sorted(m.body for m in drain(amqp_url, queue, 5, idle=0.3)) == [b"b%d" % i for i in range(5)]


def test_unknown_option_is_an_error(spark, amqp, amqp_url):
    with pytest.raises(Exception) as excinfo:
        writer(body_frame(spark, 1), amqp_url, routing_key="x", routingKeys="x").save()
    text = failure_text(excinfo)
    assert "unknown option" in text and "routingkeys" in text, text[:3000]


def test_camel_case_option_names(spark, amqp, amqp_url, names):
    """routingKey, confirmWindow, confirmTimeout, bodyFormat, frameMax (any case, as Spark's
    options are case-insensitive) mean the snake_case options."""
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    df = spark.range(0, 40, 1, 2).select(
        F.struct(F.col("id"), F.expr("repeat('x', 6000)").alias("pad")).alias("body"))
    writer(df, amqp_url, routingKey=queue, confirmWindow=3, confirmTimeout=30, bodyFormat="json",
           FRAMEMAX=4096).save()
    import json

    messages = drain(amqp_url, queue, 40, idle=0.3)
    assert sorted(json.loads(m.body)["id"] for m in messages) == list(range(40))
    assert all(json.loads(m.body)["pad"] == "x" * 6000 for m in messages)


def test_camel_case_options_are_read_as_snake_case():
    from pyspark.sql.types import BinaryType, StructField, StructType

    from amqwire.spark.datasource import SinkSettings

    schema = StructType([StructField("body", BinaryType())])
    settings = SinkSettings.from_options(
        {"routingKey": "q", "confirmWindow": "7", "confirmTimeout": "2.5", "bodyFormat": "raw", "frameMax": "8192"},
        schema)
    assert (settings.routing_key, settings.confirm_window, settings.confirm_timeout, settings.body_format,
            settings.frame_max) == ("q", 7, 2.5, "raw", 8192)
    with pytest.raises(ValueError, match="option confirm_window must be in 1..10000000, not 0"):
        SinkSettings.from_options({"routingKey": "q", "confirmwindow": "0"}, schema)
    with pytest.raises(ValueError, match="routing_key is given twice"):
        SinkSettings.from_options({"routingKey": "q", "routing_key": "r"}, schema)


def test_overwrite_mode_is_an_error(spark, amqp, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    with pytest.raises(Exception) as excinfo:
        (body_frame(spark, 1).write.format("amqp").mode("overwrite")
         .option("url", amqp_url).option("routing_key", queue).save())
    assert "append" in failure_text(excinfo)
    assert queue_count(amqp_url, queue) == 0


def test_unknown_column_is_an_error(spark, amqp, amqp_url, names):
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    df = body_frame(spark, 3).withColumn("key", F.lit("k"))
    with pytest.raises(Exception) as excinfo:
        writer(df, amqp_url, routing_key=queue).save()
    text = failure_text(excinfo)
    assert "'key'" in text and "does not know the column" in text, text[:3000]
    assert queue_count(amqp_url, queue) == 0


def test_missing_body_or_routing_key_is_an_error(spark, amqp, amqp_url):
    from pyspark.sql import functions as F

    with pytest.raises(Exception) as excinfo:
        writer(spark.range(1).select(F.lit("k").alias("routing_key")), amqp_url).save()
    assert "'body' column" in failure_text(excinfo)
    with pytest.raises(Exception) as excinfo:
        writer(body_frame(spark, 1), amqp_url).save()
    assert "no routing key" in failure_text(excinfo)


def test_register_twice_is_harmless(spark, amqp, amqp_url, names):
    amqp.register(spark)
    amqp.register(spark)
    amqp.register()  # the active session
    queue = names.queue()
    declare(amqp_url, queue)
    writer(body_frame(spark, 3), amqp_url, routing_key=queue).save()
    assert len(drain(amqp_url, queue, 3, idle=0.3)) == 3


def test_options_override_columns_and_url_list_fails_over(spark, amqp, amqp_url, names):
    """The routing_key/exchange options win over the columns; the url option takes a list
    tried in order (a closed port first); amqp.* options reach the connection."""
    from pyspark.sql import functions as F

    queue = names.queue()
    declare(amqp_url, queue)
    df = body_frame(spark, 20, partitions=2).select(
        "body", F.lit("not-a-queue").alias("routing_key"), F.lit("amq.nonexistent").alias("exchange"))
    urls = f"amqp://guest:guest@127.0.0.1:{closed_port()}/, {amqp_url}"
    writer(df, urls, routing_key=queue, exchange="", **{"amqp.heartbeat": "7", "amqp.connection_timeout": "5"}).save()
    messages = drain(amqp_url, queue, 20, idle=0.3)
    assert sorted(m.body for m in messages) == sorted(b"b%d" % i for i in range(20))
    assert {(m.exchange, m.routing_key) for m in messages} == {("", queue)}


def test_bad_amqp_option_is_an_error(spark, amqp, amqp_url):
    with pytest.raises(Exception) as excinfo:
        writer(body_frame(spark, 1), amqp_url, routing_key="x", **{"amqp.heartbeat": "often"}).save()
    assert "amqp.heartbeat" in failure_text(excinfo)


@pytest.mark.parametrize("body_format", ["json", "table"])
def test_struct_bodies(spark, amqp, amqp_url, names, body_format):
    import json

    from pyspark.sql import functions as F

    from amqwire.codec import decode_table

    queue = names.queue()
    declare(amqp_url, queue)
    df = spark.range(0, 100, 1, 2).select(
        F.struct(
            F.col("id"),
            F.expr("concat('name-', id)").alias("name"),
            F.expr("if(id % 3 = 0, null, id * 0.5)").alias("half"),
            F.expr("array(id, id + 1)").alias("pair"),
        ).alias("body"),
    )
    writer(df, amqp_url, routing_key=queue, body_format=body_format).save()
    seen = set()
    for m in drain(amqp_url, queue, 100, idle=0.3):
        if body_format == "json":
            value = json.loads(m.body)
        else:
            value = decode_table(m.body)
        i = value["id"]
        seen.add(i)
        want = {"id": i, "name": f"name-{i}", "pair": [i, i + 1]}
        if i % 3:
            want["half"] = i * 0.5
        elif body_format == "table":
            want["half"] = None  # a null field is void in a table; JSON leaves it out like to_json
        assert value == want, (i, value)
    assert seen == set(range(100))


# --------------------------------------------------------------------------- 6. the Row stream writer


def row_writer_schema(with_timestamp):
    from pyspark.sql.types import (BinaryType, IntegerType, LongType, MapType, StringType, StructField,
                                   StructType, TimestampType)

    props = [
        StructField("content_type", StringType()),
        StructField("priority", IntegerType()),
        StructField("message_id", StringType()),
    ]
    if with_timestamp:
        props.append(StructField("timestamp", TimestampType()))
    return StructType([
        StructField("body", BinaryType()),
        StructField("routing_key", StringType()),
        StructField("headers", MapType(StringType(), LongType())),
        StructField("properties", StructType(props)),
    ])


def run_row_writer(amqp_url, queue, n, with_timestamp):
    """AMQPStreamRowWriter fed ``n`` Row objects on the driver; checks every message."""
    from pyspark.sql import Row

    from amqwire.spark.datasource import AMQPCommitMessage, AMQPStreamRowWriter, SinkSettings

    schema = row_writer_schema(with_timestamp)

    def row(i):
        props = None
        if i % 3:
            fields = dict(content_type="text/plain", priority=i % 10, message_id=None)
            if with_timestamp:
                fields["timestamp"] = datetime.datetime.fromtimestamp(EPOCH + i, UTC)
            props = Row(**fields)
        return Row(
            body=None if i % 1000 == 0 else b"row %d" % i,
            routing_key=queue,
            headers={"seq": i, "sq": i * i},
            properties=props,
        )

    settings = SinkSettings.from_options({"url": amqp_url, "confirm_window": "3000"}, schema)
    w = AMQPStreamRowWriter(settings, schema)
    commit = w.write(row(i) for i in range(n))
    assert isinstance(commit, AMQPCommitMessage)
    assert commit.rows == n and commit.bytes > 0
    w.commit([commit], 0)

    messages = drain(amqp_url, queue, n, idle=0.5)
    assert len(messages) == n
    seen = set()
    for m in messages:
        i = m.properties.headers["seq"]
        seen.add(i)
        assert m.body == (b"" if i % 1000 == 0 else b"row %d" % i)
        assert m.routing_key == queue
        props = m.properties.as_dict()
        assert props.pop("headers") == {"seq": i, "sq": i * i}
        if i % 3 == 0:
            assert props == {}, i
        else:
            want = {"content_type": "text/plain", "priority": i % 10}
            if with_timestamp:
                want["timestamp"] = datetime.datetime.fromtimestamp(EPOCH + i, UTC)
            assert props == want, i
    assert seen == set(range(n))


def test_stream_row_writer_on_the_driver(spark, amqp_url, names):
    """AMQPStreamRowWriter (the Spark 4.0 fallback) fed Row objects directly: 25,000 rows
    (three Arrow batches of at most 10,000) with headers and properties."""
    queue = names.queue()
    declare(amqp_url, queue)
    run_row_writer(amqp_url, queue, 25_000, with_timestamp=False)


def test_stream_row_writer_timestamp_property(spark, amqp_url, names):
    """The same with a TimestampType property (Rows carry naive local times)."""
    queue = names.queue()
    declare(amqp_url, queue)
    run_row_writer(amqp_url, queue, 2_000, with_timestamp=True)


def test_publish_batches_broker_refusal_names_the_reason(amqp_url):
    """A refusal by the broker (publishing to an exchange that does not exist closes the
    channel with 404) fails the task with a SinkError carrying the reply code and text."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from amqwire.spark.datasource import SinkSettings, publish_batches
    from amqwire.spark.errors import SinkError

    schema = StructType([StructField("body", BinaryType())])
    exchange = f"amqwire-test-missing-{uuid.uuid4().hex[:8]}"
    settings = SinkSettings.from_options({"url": amqp_url, "exchange": exchange, "routing_key": "k"}, schema)
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"x"] * 5000)})
    with pytest.raises(SinkError) as info:
        publish_batches(settings, iter([batch, batch, batch]))
    assert info.value.reply_code == 404
    assert "NOT_FOUND" in str(info.value) and exchange in str(info.value)
    assert info.value.rows_confirmed == 0


def test_publish_batches_under_a_memory_alarm_fails_instead_of_hanging(broker_node):
    """A broker that blocks publishers (memory alarm) fails the task with a SinkError once
    confirm_timeout has passed, rather than hanging it.  Once the alarm is cleared, the
    task's retry (the same rows again, as Spark retries it) goes through, and the queue --
    read back, every body distinct -- holds every row: at least once, a row twice at most
    (once per attempt), nothing else."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from amqwire.spark.datasource import SinkSettings, publish_batches
    from amqwire.spark.errors import SinkError

    node = broker_node()  # a private node: the alarm must not block the shared broker
    amqp_url = node.url
    queue = "amqwire-test-alarm"
    declare(amqp_url, queue)
    schema = StructType([StructField("body", BinaryType())])
    settings = SinkSettings.from_options(
        {"url": amqp_url, "routing_key": queue, "confirm_timeout": "2", "confirm_window": "1000"}, schema)
    bodies = [[b"a%d-%d-" % (k, i) + b"x" * 90 for i in range(800)] for k in range(5)]
    batches = [pa.RecordBatch.from_pydict({"body": pa.array(chunk)}) for chunk in bodies]
    node.set_memory_alarm()
    try:
        with pytest.raises(SinkError) as info:
            publish_batches(settings, iter(batches))
    finally:
        node.clear_memory_alarm()
    text = str(info.value)
    assert "blocked" in text or "not confirmed within confirm_timeout 2.0 s" in text, text
    assert info.value.rows_confirmed < 4000
    # after the alarm, the retry of the same rows goes through ...
    assert publish_batches(settings, iter(batches)).rows == 4000
    # ... and the queue holds every row; rows of the failed attempt that reached the broker
    # anyway (sent, never confirmed) are the only duplicates
    counts = collections.Counter(m.body for m in drain(amqp_url, queue, 4000, idle=1.0))
    want = {body for chunk in bodies for body in chunk}
    assert set(counts) == want, f"missing {len(want - set(counts))}, unknown {len(set(counts) - want)}"
    assert max(counts.values()) <= 2, counts.most_common(3)


def test_workers_python_on_a_cluster_is_left_to_the_user_with_one_warning(monkeypatch, caplog):
    """On a non-local master with PYSPARK_PYTHON unset, the executors' python3 is not this
    process's to choose: the session is left alone and one warning says what is needed."""
    import types

    from amqwire.spark import workers

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(workers, "_warned", set())
    sc = types.SimpleNamespace(master="spark://nodes.example:7077", pythonExec="python3")
    session = types.SimpleNamespace(sparkContext=sc)
    with caplog.at_level("WARNING", logger="amqwire.spark"):
        workers.workers_run_this_python(session)
        workers.workers_run_this_python(session)
    assert sc.pythonExec == "python3"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "spark://nodes.example:7077" in warnings[0] and "amqwire" in warnings[0]
    # a local master: the workers run this interpreter
    import sys

    sc_local = types.SimpleNamespace(master="local[2]", pythonExec="python3")
    workers.workers_run_this_python(types.SimpleNamespace(sparkContext=sc_local))
    assert sc_local.pythonExec == sys.executable
