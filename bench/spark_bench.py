"""Spark benchmark: amqwire.spark's to_amqp_frames and "amqp" data source against what a
PySpark user has today, measured in one run on Spark local[2] against a real RabbitMQ.

Run from the repository root (a broker at AMQP_URL or --url)::

    python bench/spark_bench.py                # full run: 1,000,000 rows x 3 repeats per row
    python bench/spark_bench.py --quick        # CI smoke: 50,000 rows, 1 repeat (< 1 min)
    python -m bench.spark_bench --only "encode: amqwire,to_json" --rows 200000 --json /tmp/s.json

Dataset (generated with Spark expressions from spark.range(N), repartitioned to 2,
cached and counted before anything is timed, so generating it is never measured):

  body         binary, a JSON-looking order of ~100 bytes (format_string cast to binary)
  routing_key  string, "orders.eu.NN" (16 values)
  headers      map<string,string>, 3 keys (x-source, x-tenant, x-trace-id)
  properties   struct<content_type, delivery_mode int, message_id, timestamp>

Two sections:

  encode  rows/s turning every row into AMQP publish frames, with a sink that evaluates
          everything and writes nothing (``.write.format("noop").mode("overwrite").save()``):
          amqwire ``to_amqp_frames("body", F.col("routing_key"), headers=, properties=)``
          (an Arrow UDF over whole batches); the anchors: what a user writes today, a
          Python UDF building the frames with pika's encoder row by row (``@F.udf("binary")``,
          which Spark 4.x runs Arrow-optimized by default, is THE anchor; the pickled-row
          ``useArrow=False`` UDF and an ``arrow_udf`` iterator with to_pylist are info rows),
          and Spark's own JVM ``to_json(struct(body, routing_key, headers, properties))``
          over the same columns (info: the cached scan alone into noop)
  sink    rows/s published with confirms into a queue declared by the benchmark, every row
          checked to have landed (message_count == N, one message fetched and checked):
          the amqwire data source ``df.drop("routing_key").write.format("amqp")`` (option
          routing_key = the queue; 2 tasks, a connection each) against the amqwire blocking
          client's confirmed publish of the same messages on one connection
          (``confirm_select(max_in_flight=10000)``, ``with ch.batch(): ch.publish_async(...)``,
          ``ch.wait_for_confirms()``, as in client_bench.py, here with the same headers and
          properties), plus (info) the client pushing frames pre-encoded by PublishEncoder
          with ``ch.publish_encoded`` (the sink's own path, without Spark)

Targets, judged on best (the line says when the median would disagree): encode
to_amqp_frames >= Spark's to_json and >= 10x the pika @udf; sink >= 80% of the client's
confirmed publish rate.

Timing: time.perf_counter around the ``save()`` (Spark rows: the whole job, scheduling
included, as a user sees it) or around the client calls (client rows; connecting, declaring,
building/encoding the messages and closing are outside the clock).  Every row first runs once
untimed (warm-up: Python workers, codegen, connections; on a 50,000-row copy of the data when
N is larger, 10,000 with --quick).  Repeats go round-robin across the rows of a section so a transient slowdown
of the shared VM hits all rows alike.  Before any timing the encoders' outputs are compared
on a sample: pika's frames must equal amqwire's byte for byte (or decode to the same
message), and amqwire's must decode to the row they came from.  A broker resource alarm
(memory/disk) during a sink run discards the run and does it again (client_bench's
AlarmWatch).  A row that fails is reported FAILED and the benchmark goes on (exit status 1).
"""

from __future__ import annotations

import argparse
import array
import base64
import calendar
import gc
import itertools
import json
import os
import platform
import statistics
import sys
import time
import traceback
import uuid
from typing import Iterator, Tuple

# client_bench: the AlarmWatch, URL parsing, uptime and the table/verdict formatting
try:
    from bench import client_bench as cb
except ImportError:  # run as a script: bench/ is sys.path[0]
    import client_bench as cb
try:
    from bench.rows import select_rows
except ImportError:  # run as a script: bench/ is sys.path[0]
    from rows import select_rows  # type: ignore[no-redef]

import pika
import pika.frame
import pika.spec
import pyarrow as pa

try:  # importlib.metadata gives the installed distribution versions
    from importlib.metadata import version as _dist_version
except ImportError:  # pragma: no cover
    _dist_version = None

import amqwire.codec as aw
from amqwire.client import blocking as aw_blocking
from amqwire.spark.encode import PublishEncoder

# --------------------------------------------------------------------------- workload
DEFAULT_URL = cb.DEFAULT_URL
CHANNEL = 1
FRAME_MAX = 131072
BODY_MAX = FRAME_MAX - 8          # payload of one body frame (pika splits the same way)
WARM_ROWS = 50_000                # the warm-up copy of the data (and the sanity sample's source)
WARM_ROWS_QUICK = 10_000          # the same with --quick
SAMPLE_ROWS = 200                 # rows compared encoder against encoder before timing
POOL_ROWS = 100_000               # client rows: distinct messages prepared, then cycled
ARROW_BATCH = 10_000              # = spark.sql.execution.arrow.maxRecordsPerBatch (default)
CLIENT_MAX_IN_FLIGHT = 10_000     # client confirmed row (as client_bench)
ENCODED_MAX_IN_FLIGHT = 20_000    # publish_encoded row: the sink's default confirm_window
TS0 = 1_700_000_000               # properties.timestamp = TS0 + id (epoch seconds)
BODY_FORMAT = ('{"order_id":%010d,"customer":"c-%06d","amount":%d.%02d,"currency":"EUR",'
               '"qty":%02d,"ts":%d}')

SECTIONS = ("encode", "sink")
TITLES = {
    "encode": "(1) encode only: rows -> publish frames, sink format(\"noop\")             rows/s",
    "sink": "(2) publish with confirms into a queue, every row checked                 rows/s",
}


class SanityError(AssertionError):
    """An encoder or a sink did not do what it was asked."""


# =========================================================================== Spark
def start_spark(driver_memory, arrow_batch=None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("amqwire spark_bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", driver_memory))
    if arrow_batch:
        spark = spark.config("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch))
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_conf(spark, key):
    """A SQL conf's effective value (conf.get(key, default) would hide Spark's own default)."""
    try:
        return spark.conf.get(key)
    except Exception:
        return "?"


def make_dataset(spark, n):
    """N rows of body / routing_key / headers / properties from Spark expressions,
    repartitioned to 2, cached and materialized."""
    from pyspark.sql import functions as F

    i = F.col("id")
    df = spark.range(n).select(
        F.format_string(BODY_FORMAT, i, i % 100003, i % 997, i % 100, i % 50,
                        F.lit(TS0) + i).cast("binary").alias("body"),
        F.format_string("orders.eu.%02d", i % 16).alias("routing_key"),
        F.create_map(F.lit("x-source"), F.lit("spark-bench"),
                     F.lit("x-tenant"), F.format_string("tenant-%03d", i % 251),
                     F.lit("x-trace-id"), F.lpad(F.hex(i * 2654435761), 16, "0")).alias("headers"),
        F.struct(F.lit("application/json").alias("content_type"),
                 F.lit(2).alias("delivery_mode"),
                 F.format_string("msg-%010d", i).alias("message_id"),
                 F.timestamp_seconds(F.lit(TS0) + i).alias("timestamp")).alias("properties"),
    ).repartition(2).cache()
    got = df.count()
    if got != n:
        raise SanityError("dataset: %d rows, expected %d" % (got, n))
    return df


def make_pika_udfs():
    """The anchors: a Python function building one row's frames with pika's encoder, as a
    user would write it today, wrapped three ways.  Returns (frames_fn, {label: udf})."""
    from pyspark.sql import functions as F

    Method, Header, Body = pika.frame.Method, pika.frame.Header, pika.frame.Body
    Publish, BasicProperties = pika.spec.Basic.Publish, pika.spec.BasicProperties

    def pika_frames(body, routing_key, headers, props):
        # one basic.publish: method frame, content header frame, body frames of at most
        # frame_max bytes (what pika's channel does in basic_publish)
        if headers is not None and not isinstance(headers, dict):
            headers = dict(headers)  # arrow to_pylist gives a map as (key, value) pairs
        if props is None:
            properties = BasicProperties(headers=headers)
        else:
            ts = props["timestamp"]
            properties = BasicProperties(
                content_type=props["content_type"], delivery_mode=props["delivery_mode"],
                message_id=props["message_id"],
                timestamp=None if ts is None else int(ts.timestamp()), headers=headers)
        body = b"" if body is None else bytes(body)
        parts = [Method(CHANNEL, Publish(exchange="", routing_key=routing_key)).marshal(),
                 Header(CHANNEL, len(body), properties).marshal()]
        for off in range(0, len(body), BODY_MAX):
            parts.append(Body(CHANNEL, body[off:off + BODY_MAX]).marshal())
        return b"".join(parts)

    def pika_arrow(batches):
        for body, rk, headers, props in batches:
            yield pa.array([pika_frames(b, r, h, p) for b, r, h, p in zip(
                body.to_pylist(), rk.to_pylist(), headers.to_pylist(), props.to_pylist())],
                pa.binary())

    pika_arrow.__annotations__ = {"batches": Iterator[Tuple[pa.Array, pa.Array, pa.Array, pa.Array]],
                                  "return": Iterator[pa.Array]}
    def arrow_floor(batches):
        # the same four columns in, a binary column of FLOOR_BYTES per row out, no work:
        # what any Arrow UDF of this shape costs in Spark before it does anything
        made = {}
        for body, _rk, _headers, _props in batches:
            n = len(body)
            if n not in made:
                offsets = array.array("i", range(0, (n + 1) * FLOOR_BYTES, FLOOR_BYTES)).tobytes()
                made[n] = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                                 pa.py_buffer(bytes(n * FLOOR_BYTES))])
            yield made[n]

    arrow_floor.__annotations__ = dict(pika_arrow.__annotations__)
    udfs = {"plain": F.udf(pika_frames, "binary"),
            "pickled": F.udf(pika_frames, "binary", useArrow=False)}
    udfs["arrow"] = F.arrow_udf(pika_arrow, "binary") if hasattr(F, "arrow_udf") else None
    udfs["floor"] = F.arrow_udf(arrow_floor, "binary") if hasattr(F, "arrow_udf") else None
    return pika_frames, udfs


FLOOR_BYTES = 288  # the average size of a row's frames in this dataset
ARGS = ("body", "routing_key", "headers", "properties")


def encode_columns(udfs):
    """label -> a function df -> Column for each encode row (None: not available)."""
    from pyspark.sql import functions as F
    import amqwire.spark as aws

    cols = [F.col(c) for c in ARGS]
    return {
        "amqwire": lambda: aws.to_amqp_frames("body", F.col("routing_key"), headers="headers",
                                               properties="properties"),
        "to_json": lambda: F.to_json(F.struct(*ARGS)),
        "pika plain": lambda: udfs["plain"](*cols),
        "pika pickled": lambda: udfs["pickled"](*cols),
        "pika arrow": (lambda: udfs["arrow"](*cols)) if udfs["arrow"] is not None else None,
        "floor": (lambda: udfs["floor"](*cols)) if udfs["floor"] is not None else None,
    }


def noop_write(df):
    df.write.format("noop").mode("overwrite").save()


# =========================================================================== sanity
def decode_frames(data):
    """(exchange, routing_key, properties dict, body) of the single publish in ``data``."""
    cmds = [c for c in aw.CommandParser(frame_max=FRAME_MAX).feed(bytes(data))
            if isinstance(c, aw.Command)]
    if len(cmds) != 1 or not isinstance(cmds[0].method, aw.BasicPublish):
        raise SanityError("expected one basic.publish, got %r" % (cmds,))
    c = cmds[0]
    props = {k: v for k, v in c.properties.as_dict().items() if v is not None}
    ts = props.get("timestamp")
    if ts is not None:  # a naive datetime from the codec is UTC
        props["timestamp"] = calendar.timegm(ts.timetuple()) if ts.tzinfo is None else int(ts.timestamp())
    return c.method.exchange, c.method.routing_key, props, c.body


def expected_message(row):
    p = row["properties"]
    return ("", row["routing_key"],
            {"content_type": p["content_type"], "delivery_mode": p["delivery_mode"],
             "message_id": p["message_id"], "timestamp": int(p["timestamp"].timestamp()),
             "headers": dict(row["headers"])},
            bytes(row["body"]))


def check_encoders(warm_df, columns, pika_frames):
    """Before any timing: on SAMPLE_ROWS rows, amqwire's frames must decode to the source row,
    every pika variant must produce amqwire's bytes (or, failing that, the same message), the
    local pika function must agree with the Spark-run ones, and to_json must give JSON.
    Returns (notes, average frame bytes per row)."""
    from pyspark.sql import functions as F

    live = {k: f for k, f in columns.items() if f is not None}
    sel = [F.col(c) for c in ARGS] + [f().alias(k.replace(" ", "_")) for k, f in live.items()]
    rows = warm_df.select(*sel).limit(SAMPLE_ROWS).collect()
    if len(rows) != min(SAMPLE_ROWS, warm_df.count()):
        raise SanityError("sample: %d rows" % len(rows))
    notes = []
    nbytes = 0
    for i, row in enumerate(rows):
        want = expected_message(row)
        ours = row["amqwire"] if "amqwire" in live else None
        if ours is not None:
            nbytes += len(ours)
            got = decode_frames(ours)
            if got != want:
                raise SanityError("amqwire to_amqp_frames, sample row %d: decodes to %r, the row is %r"
                                  % (i, got, want))
        local = pika_frames(row["body"], row["routing_key"], row["headers"], row["properties"])
        if decode_frames(local) != want:
            raise SanityError("pika (local), sample row %d: decodes to %r, the row is %r"
                              % (i, decode_frames(local), want))
        for key in ("pika plain", "pika pickled", "pika arrow"):
            if key not in live:
                continue
            theirs = bytes(row[key.replace(" ", "_")])
            if theirs != local:
                raise SanityError("%s UDF, sample row %d: differs from the same function run locally"
                                  % (key, i))
            if ours is not None and theirs != bytes(ours):
                if decode_frames(theirs) != decode_frames(ours):
                    raise SanityError("%s UDF, sample row %d: %r, amqwire: %r"
                                      % (key, i, decode_frames(theirs), decode_frames(ours)))
                note = "pika's frames decode like amqwire's but differ byte for byte"
                if note not in notes:
                    notes.append(note)
        if "to_json" in live:
            doc = json.loads(row["to_json"])
            if (base64.b64decode(doc["body"]) != bytes(row["body"])
                    or doc["routing_key"] != row["routing_key"] or doc["headers"] != dict(row["headers"])):
                raise SanityError("to_json, sample row %d: %r" % (i, row["to_json"]))
    if ours is not None and not notes:
        notes.append("pika's frames equal amqwire's byte for byte")
    return notes, (nbytes / len(rows) if rows and "amqwire" in live else None)


# =========================================================================== broker
class Broker:
    """The bench's queue and a set-up connection (amqwire blocking client)."""

    def __init__(self, url):
        self.url = url
        self.queue = "amqwire-spark-bench-" + uuid.uuid4().hex[:12]
        self.conn = aw_blocking.connect(url)
        self.ch = self.conn.channel()
        self.ch.queue_declare(self.queue)
        props = self.conn.server_properties or {}
        self.broker = "%s %s" % (props.get("product", "RabbitMQ"), props.get("version", "?"))

    def purge(self):
        self.ch.queue_purge(self.queue)

    def count(self):
        return self.ch.queue_declare(self.queue, passive=True).message_count

    def verify(self, n, what, sample=False, timeout=30.0):
        """The queue must hold exactly n messages (confirmed = enqueued, but poll a little);
        with ``sample``, fetch one and check it is one of the dataset's messages."""
        end = time.monotonic() + timeout
        got = self.count()
        while got != n and time.monotonic() < end:
            time.sleep(0.05)
            got = self.count()
        if got != n:
            raise SanityError("%s: queue holds %d messages, expected %d" % (what, got, n))
        if sample and n:
            msg = self.ch.basic_get(self.queue, no_ack=True)
            if msg is None:
                raise SanityError("%s: basic.get found no message" % what)
            p = msg.properties
            ok = (msg.routing_key == self.queue and msg.body.startswith(b'{"order_id":')
                  and p is not None and p.content_type == "application/json"
                  and p.delivery_mode == 2 and (p.message_id or "").startswith("msg-")
                  and p.timestamp is not None
                  and sorted(p.headers or {}) == ["x-source", "x-tenant", "x-trace-id"])
            if not ok:
                raise SanityError("%s: a message in the queue is not one of the dataset's: "
                                  "routing_key %r, properties %r, body %r"
                                  % (what, msg.routing_key, p, msg.body[:60]))

    def close(self):
        try:
            self.ch.queue_delete(self.queue)
        finally:
            self.conn.close()


def client_pool(df, n):
    """The first min(n, POOL_ROWS) rows of the dataset as an Arrow table (toArrow)."""
    return df.limit(min(n, POOL_ROWS)).toArrow()


def client_messages(table):
    """(body, BasicProperties) per row of ``table``: the same bodies, headers and properties
    as the Spark rows, built before the clock."""
    out = []
    for r in table.select(["body", "headers", "properties"]).to_pylist():
        p = r["properties"]
        out.append((r["body"], aw.BasicProperties(
            content_type=p["content_type"], delivery_mode=p["delivery_mode"],
            message_id=p["message_id"], timestamp=p["timestamp"], headers=dict(r["headers"]))))
    return out


def client_confirm(url, queue, messages, n):
    """amqwire blocking confirmed publish (client_bench's aw_blocking_confirm with properties):
    confirm_select(max_in_flight=10000) before the clock, then ``with ch.batch():
    ch.publish_async("", queue, body, props)`` for n messages cycling over the prepared
    pool, then ch.wait_for_confirms()."""
    with aw_blocking.connect(url) as conn:
        with conn.channel() as ch:
            ch.confirm_select(max_in_flight=CLIENT_MAX_IN_FLIGHT)
            publish = ch.publish_async
            t0 = time.perf_counter()
            with ch.batch():
                for body, props in itertools.islice(itertools.cycle(messages), n):
                    publish("", queue, body, props)
            ch.wait_for_confirms()
            t1 = time.perf_counter()
    return t1 - t0


def client_encoded(url, queue, table, n):
    """amqwire blocking + PublishEncoder: the pool encoded before the clock into buffers of
    10,000 rows (PublishEncoder(channel=ch.channel_id, routing_key=queue).encode_frames),
    then ch.publish_encoded(frames, count) cycling over them until n rows, then
    ch.wait_for_confirms() and every future's result; confirm window 20,000 (the sink's)."""
    with aw_blocking.connect(url) as conn:
        with conn.channel() as ch:
            ch.confirm_select(max_in_flight=ENCODED_MAX_IN_FLIGHT)
            enc = PublishEncoder(channel=ch.channel_id, frame_max=conn.frame_max, routing_key=queue)

            def encode(t):
                return enc.encode_frames(t.column("body"), headers=t.column("headers"),
                                         properties=t.column("properties")), t.num_rows

            chunks = [encode(table.slice(off, ARROW_BATCH))
                      for off in range(0, table.num_rows, ARROW_BATCH)]
            plan, left = [], n
            for frames, count in itertools.cycle(chunks):
                if left <= 0:
                    break
                if count > left:
                    frames, count = encode(table.slice(0, left))
                plan.append((frames, count))
                left -= count
            publish = ch.publish_encoded
            t0 = time.perf_counter()
            futures = [publish(frames, count) for frames, count in plan]
            ch.wait_for_confirms()
            for f in futures:
                f.result(0)
            t1 = time.perf_counter()
    return t1 - t0


def sink_write(url, queue, df):
    (df.drop("routing_key").write.format("amqp").mode("append")
       .option("url", url).option("routing_key", queue).save())


# =========================================================================== rows
class Row:
    def __init__(self, section, key, label, note, anchor=False, info=False, na=None):
        self.section, self.key, self.label, self.note = section, key, label, note
        self.anchor, self.info, self.na = anchor, info, na
        self.secs, self.rates = [], []
        self.error, self.failed_runs, self.dead = None, 0, False
        self.run = None  # run(n, warm) -> seconds

    @property
    def name(self):
        return "%s: %s" % (self.section, self.label)


def build_rows():
    R = Row
    return [
        R("encode", "scan", "cached scan, no encoding", "df.write.format('noop'): the floor", info=True),
        R("encode", "floor", "Arrow UDF round trip only",
          "arrow_udf over the same 4 columns returning %d-byte values, no work" % FLOOR_BYTES,
          info=True),
        R("encode", "amqwire", "amqwire to_amqp_frames",
          "to_amqp_frames('body', F.col('routing_key'), headers=, properties=) (arrow_udf)"),
        R("encode", "to_json", "Spark to_json (JVM)",
          "F.to_json(F.struct(body, routing_key, headers, properties))", anchor=True),
        R("encode", "pika plain", "pika @udf",
          "@F.udf('binary'), pika Method/Header/Body.marshal() per row", anchor=True),
        R("encode", "pika pickled", "pika @udf(useArrow=False)",
          "the same function, rows pickled", info=True),
        R("encode", "pika arrow", "pika arrow_udf iterator",
          "F.arrow_udf over batches, to_pylist, the same function per row", info=True),
        R("sink", "sink", "amqwire sink format('amqp')",
          "df.drop('routing_key').write.format('amqp'), option routing_key; 2 tasks"),
        R("sink", "client", "amqwire client confirmed",
          "publish_async in batch() + wait_for_confirms, max_in_flight 10000; 1 connection",
          anchor=True),
        R("sink", "encoded", "amqwire publish_encoded",
          "frames pre-encoded by PublishEncoder (10k rows/buffer), window 20000; no Spark",
          info=True),
    ]


def attach(rows, df, warm_df, columns, broker, pools):
    """Give every row its run(n, warm) -> seconds."""
    for r in rows:
        if r.section == "encode":
            if r.key == "scan":
                r.run = lambda n, warm: timed(lambda: noop_write(warm_df if warm else df))
            else:
                make = columns.get(r.key)
                if make is None:
                    r.na = r.na or "not available"
                    continue
                r.run = (lambda make: lambda n, warm: timed(
                    lambda: noop_write((warm_df if warm else df).select(make()))))(make)  # noqa: B023 (bound by the outer lambda)
        elif r.key == "sink":
            r.run = lambda n, warm: broker_run(broker, n, warm, lambda: timed(
                lambda: sink_write(broker.url, broker.queue, warm_df if warm else df)))
        elif r.key == "client":
            r.run = lambda n, warm: broker_run(broker, n, warm, lambda: client_confirm(
                broker.url, broker.queue, pools["messages"], n))
        elif r.key == "encoded":
            r.run = lambda n, warm: broker_run(broker, n, warm, lambda: client_encoded(
                broker.url, broker.queue, pools["table"], n))


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class BrokerAlarm(Exception):
    pass


def broker_run(broker, n, warm, fn):
    """Purge, run, verify the queue holds n messages; an alarm during the run -> BrokerAlarm."""
    broker.purge()
    t0 = time.monotonic()
    secs = fn()
    t1 = time.monotonic()
    alarm = cb.ALARMS.overlaps(t0, t1) if cb.ALARMS else None
    broker.verify(n, "after the run", sample=warm)
    broker.purge()
    if alarm:
        raise BrokerAlarm("a broker resource alarm (%s) blocked publishers during the run" % alarm)
    return secs


def execute(row, n, warm, label, attempts=3):
    for attempt in range(1, attempts + 1):
        gc.collect()
        try:
            return row.run(n, warm)
        except BrokerAlarm as exc:
            if attempt == attempts:
                raise
            sys.stderr.write("  !! %s: %s; waiting for it to clear, then again\n" % (label, exc))
            cb.wait_alarm_cleared()
            time.sleep(1.0)


def _short(exc):
    text = str(exc).strip().splitlines()
    # Spark wraps Python errors in long JVM traces: keep the most telling line
    for line in text:
        if "Error:" in line or "Exception:" in line:
            return "%s: %s" % (type(exc).__name__, line.strip()[:300])
    return "%s: %s" % (type(exc).__name__, (text[0] if text else "")[:300])


def run_rows(rows, n, warm_n, repeats, settle):
    for r in rows:
        if r.na:
            continue
        label = "%s (warm-up, %s rows)" % (r.name, format(warm_n, ","))
        sys.stderr.write("  -- %s\n" % label)
        try:
            execute(r, warm_n, True, label)
        except Exception as exc:
            r.error = "warm-up failed: %s" % _short(exc)
            r.dead = True
            sys.stderr.write("  !! %s: %s\n" % (r.name, r.error))
            traceback.print_exc(limit=3, file=sys.stderr)
        time.sleep(settle)
    for section in SECTIONS:
        live = [r for r in rows if r.section == section]
        if not live:
            continue
        for rep in range(repeats):
            for r in live:
                if r.na or r.dead:
                    continue
                label = "%s run %d/%d" % (r.name, rep + 1, repeats)
                try:
                    secs = execute(r, n, False, label)
                except Exception as exc:
                    err = "run %d: %s" % (rep + 1, _short(exc))
                    r.error = err if r.error is None else r.error + "; " + err
                    r.failed_runs += 1
                    sys.stderr.write("  !! %s: %s\n" % (label, err))
                    continue
                r.secs.append(secs)
                r.rates.append(n / secs)
                sys.stderr.write("  ok %s: %s rows/s (%.2f s)\n" % (label, format(round(n / secs), ","), secs))
                time.sleep(settle)
        yield section, live


# =========================================================================== output
def stats(r):
    if r is None or not r.rates:
        return None, None
    return max(r.rates), statistics.median(r.rates)


def ratio(a, b):
    return None if a is None or b is None else a / b


def ref(rows, key):
    return stats(next((r for r in rows if r.key == key), None))


def print_section(section, rows, all_rows, n, repeats):
    print()
    print(TITLES[section] + "   %s rows x %d" % (format(n, ","), repeats))
    w = max(30, max(len(r.label) for r in rows) + 1)
    if section == "encode":
        cols = ("x pika@udf b/m", "x to_json b/m")
        refs = (ref(all_rows, "pika plain"), ref(all_rows, "to_json"))
    else:
        cols = ("% client b/m",)
        refs = (ref(all_rows, "client"),)
    fmt = "  %-*s %11s %13s %8s" + " %15s" * len(cols) + "  %s"
    hdr = fmt % ((w, "row", "best rows/s", "median rows/s", "med s") + cols + ("how",))
    print(hdr)
    print("  " + "-" * (len(hdr) - 2))
    for r in rows:
        if r.na or (r.error and not r.rates):
            print(fmt % ((w, r.label, "n/a", "n/a", "n/a") + ("n/a",) * len(cols)
                         + (r.na or "FAILED: " + r.error,)))
            continue
        b, m = stats(r)
        cells = []
        for (rb, rm) in refs:
            if section == "encode":
                cells.append("%s/%s" % (cb._fmt_x(b, rb), cb._fmt_x(m, rm)))
            else:
                cells.append("%s/%s" % (cb._fmt_pct(b, rb), cb._fmt_pct(m, rm)))
        marks = []
        if r.anchor:
            marks.append("(anchor)")
        elif r.info:
            marks.append("(info)")
        if r.error:
            marks.append("(%d of the runs FAILED: %s)" % (r.failed_runs, r.error))
        print(fmt % ((w, r.label, cb._fmt_rate(b), cb._fmt_rate(m), "%.2f" % statistics.median(r.secs))
                     + tuple(cells) + ("  ".join([r.note] + marks),)))


def target_lines(rows):
    xf = lambda v: "%.2fx" % v  # noqa: E731
    pct = lambda v: "%.0f%%" % (100 * v)  # noqa: E731
    ab, am = ref(rows, "amqwire")
    out = []
    for key, need, desc, f in (("to_json", 1.0, "encode, to_amqp_frames >= Spark's to_json", xf),
                               ("pika plain", 10.0, "encode, to_amqp_frames >= 10x the pika @udf", xf)):
        rb, rm = ref(rows, key)
        out.append(cb._verdict(ratio(ab, rb), ratio(am, rm), need, desc, f))
    sb, sm = ref(rows, "sink")
    cb_, cm = ref(rows, "client")
    out.append(cb._verdict(ratio(sb, cb_), ratio(sm, cm), 0.80,
                           "sink, format('amqp') >= 80% of the client's confirmed publish rate", pct))
    return out


def lib_versions():
    out = {"python": platform.python_version() + " (" + platform.python_implementation() + ")"}
    for dist in ("pyspark", "pyarrow", "pika", "amqwire"):
        v = None
        if _dist_version is not None:
            try:
                v = _dist_version(dist)
            except Exception:
                v = None
        out[dist] = v or "?"
    out["amqwire"] += " (at %s)" % os.path.dirname(os.path.dirname(aw.__file__))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=None, help="rows per run (default 1000000, --quick 50000)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 3, --quick 1)")
    ap.add_argument("--quick", action="store_true", help="50,000 rows, 1 repeat (CI smoke)")
    ap.add_argument("--only", metavar="SUBSTR", help="run only rows whose 'section: label' contains one of "
                    "these comma-separated substrings (e.g. 'encode', 'pika', 'sink: amqwire'); "
                    "'=section: label' matches that row only")
    ap.add_argument("--url", default=os.environ.get("AMQP_URL") or DEFAULT_URL,
                    help="broker URL (default: $AMQP_URL or %s)" % DEFAULT_URL)
    ap.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g)")
    ap.add_argument("--arrow-batch", type=int, default=None,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (default: Spark's, 10000)")
    cb._charts().add_output_options(ap)
    args = ap.parse_args(argv)
    n = args.rows or (50_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    warm_n = min(n, WARM_ROWS_QUICK if args.quick else WARM_ROWS)
    settle = 0.1 if args.quick else 0.5
    ctx = cb.Ctx(args.url)
    t_start = time.monotonic()

    load0 = os.getloadavg()
    up0 = cb.uptime()
    versions = lib_versions()
    print("amqwire Spark benchmark  %s" % time.strftime("%Y-%m-%d %H:%M:%S"))
    print("  machine : %s, %s, %d CPUs" % (platform.node(), platform.machine(), os.cpu_count() or 0))
    print("  uptime  : %s" % up0)
    if load0[0] > 0.5 * (os.cpu_count() or 1):
        print("  WARNING : the machine is busy (1-min load %.2f on %d CPUs): rates are noisy, "
              "ratios may be off" % (load0[0], os.cpu_count() or 0))
    if args.quick:
        print("  NOTE    : " + cb.QUICK_NOTE)
    for k in ("python", "pyspark", "pyarrow", "pika", "amqwire"):
        print("  %-8s: %s" % (k, versions[k]))
    sys.stdout.flush()

    rows = select_rows(build_rows(), args.only, name=lambda row: row.name)
    if not rows:
        raise SystemExit("--only %r matches no row" % args.only)
    need_broker = any(r.section == "sink" for r in rows)

    t0 = time.perf_counter()
    spark = start_spark(args.driver_memory, args.arrow_batch)
    t_spark = time.perf_counter() - t0
    from pyspark.sql import functions as F
    import amqwire.spark as aws
    aws.register(spark)
    if not hasattr(F, "arrow_udf"):
        for r in rows:
            if r.key == "pika arrow":
                r.na = "no F.arrow_udf in this pyspark"
    py_arrow = spark_conf(spark, "spark.sql.execution.pythonUDF.arrow.enabled")
    print("  spark   : local[2], started in %.1f s; spark.sql.execution.pythonUDF.arrow.enabled=%s "
          "(what the plain @udf uses), arrow.maxRecordsPerBatch=%s, driver memory %s"
          % (t_spark, py_arrow, spark_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch"),
             args.driver_memory))

    t0 = time.perf_counter()
    df = make_dataset(spark, n)
    warm_df = df if warm_n == n else make_dataset(spark, warm_n)
    t_data = time.perf_counter() - t0
    sample = df.first()
    print("  dataset : %s rows from spark.range, 2 partitions, cached (%.1f s, not timed): body %d B "
          "JSON-like binary, routing_key, headers map<string,string> (3 keys), properties struct"
          "<content_type, delivery_mode, message_id, timestamp>" % (format(n, ","), t_data, len(sample.body)))

    pika_frames, udfs = make_pika_udfs()
    columns = encode_columns(udfs)
    t0 = time.perf_counter()
    notes, frame_bytes = check_encoders(warm_df, {k: v for k, v in columns.items()
                                                  if any(r.key == k and not r.na for r in rows)
                                                  or k == "amqwire"}, pika_frames)
    print("  checked : %d sample rows before timing (%.1f s): amqwire's frames decode to their rows; %s"
          % (SAMPLE_ROWS, time.perf_counter() - t0, "; ".join(notes)))
    if frame_bytes:
        print("  frames  : %.0f bytes per row on average (method + header + body frame)" % frame_bytes)

    broker = None
    pools = {}
    if need_broker:
        broker = Broker(args.url)
        cb.ALARMS = cb.AlarmWatch(ctx)
        print("  broker  : %s at %s, queue %s (declared here, purged around every run, deleted "
              "at the end; client and broker share this machine)"
              % (broker.broker, ctx.safe_url(), broker.queue))
        if any(r.key in ("client", "encoded") for r in rows):
            pools["table"] = client_pool(df, n)
            pools["messages"] = client_messages(pools["table"])
            print("  clients : %s distinct messages prepared from the dataset (toArrow) before the "
                  "clock, cycled to %s" % (format(pools["table"].num_rows, ","), format(n, ",")))
    print("  timing  : perf_counter around save() (Spark rows: the whole job) or the client calls; "
          "%d timed runs per row, round-robin, +1 warm-up on %s rows; best = highest rows/s"
          % (repeats, format(warm_n, ",")))
    sys.stdout.flush()

    attach(rows, df, warm_df, columns, broker, pools)
    try:
        for section, live in run_rows(rows, n, warm_n, repeats, settle):
            print_section(section, live, rows, n, repeats)
            sys.stdout.flush()
    finally:
        if broker is not None:
            try:
                broker.close()
            except Exception as exc:
                print("  (could not delete queue %s: %s)" % (broker.queue, exc))
            cb.ALARMS.close()

    verdicts = target_lines(rows)
    print()
    for status, desc, detail, _v in verdicts:
        print("  target %-7s %s: %s" % (status, desc, detail))
    failed = [r for r in rows if r.error]
    for r in failed:
        print("  FAILED  %s: %s" % (r.name, r.error))
    load1 = os.getloadavg()
    up1 = cb.uptime()
    print()
    print("uptime at end: %s  (includes this benchmark, Spark and the broker)%s" % (up1, (
        "\n  the machine was busy when the run started: rerun when idle for trustworthy ratios"
        if load0[0] > 0.5 * (os.cpu_count() or 1) else "")))
    print("targets%s: %d met, %d missed, %d not measured; %d rows failed; %d broker alarms seen; "
          "%.0f s in all"
          % (" (informational: --quick)" if args.quick else "", sum(v[0] == "met" for v in verdicts),
             sum(v[0] == "MISSED" for v in verdicts),
             sum(v[0] == "n/a" for v in verdicts), len(failed),
             len(cb.ALARMS.intervals) if cb.ALARMS else 0, time.monotonic() - t_start))

    if args.json or args.results or args.chart:
        doc = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"), "uptime_start": up0, "uptime_end": up1,
               "loadavg_start": load0, "loadavg_end": load1, "cpus": os.cpu_count(),
               "platform": platform.platform(), "broker": broker.broker if broker else None,
               "versions": versions, "rows": n, "repeats": repeats, "warm_rows": warm_n,
               "spark_startup_s": t_spark, "pythonUDF_arrow_enabled": py_arrow,
               "frame_bytes_per_row": frame_bytes, "sanity": notes,
               "results": [{"section": r.section, "row": r.label, "anchor": r.anchor, "info": r.info,
                            "note": r.note, "na": r.na, "error": r.error,
                            "best_rows_s": stats(r)[0], "median_rows_s": stats(r)[1],
                            "rows_s_all": r.rates, "seconds_all": r.secs} for r in rows],
               "targets": [{"status": s, "target": d, "detail": t, "value_best": v}
                           for s, d, t, v in verdicts]}
    cb._charts().write_outputs("spark", doc, args)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
