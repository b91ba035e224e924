"""The Spark stream source's and sink's Cython halves, without a broker:

- ``amqwire.spark.stream_chunks.ChunkBatchBuilder``: chunks of AMQP 1.0 messages (written
  by the codec's ``amqp10.encode_message``) to Arrow rows, compared with a reference built
  here in Python from ``amqp10.decode_message`` by the mapping of docs/streams-mapping.md,
  for hand-picked and hypothesis-generated messages; offsets ranges, skipped records,
  opaque records, malformed messages;
- ``amqwire.spark.stream_encode.StreamPublishEncoder``: Arrow columns to Publish frames,
  read back with the codec's parser and ``decode_message``; frame splitting by frame_max,
  skipped rows, the values it refuses;
- the two together: rows encoded by the sink, stored in a chunk as a broker would, read by
  the source's builder, come back as they were written.
"""
from __future__ import annotations

import base64
import datetime
import json
import struct
import uuid
import zlib

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from amqwire.codec.stream import amqp10 as A
from amqwire.codec.stream.frames import StreamParser
from amqwire.spark.decode import PROPERTY_FIELDS, header_text
from amqwire.spark.errors import ArrowTypeError, RecordError, RowEncodeError
from amqwire.spark.stream_batch import stream_schema
from amqwire.spark.stream_chunks import ChunkBatchBuilder
from amqwire.spark.stream_encode import StreamPublishEncoder

UTC = datetime.timezone.utc
STREAM = "orders"
CHUNK_MS = 1_700_000_000_123


# --------------------------------------------------------------------------- chunks


def chunk(records: list[bytes], first_offset: int = 0, *, sub_entry: bool = False, gzip: bool = False) -> bytes:
    """A chunk as a broker stores and delivers it: simple entries, or one sub-entry."""
    if sub_entry:
        raw = b"".join(struct.pack(">I", len(r)) + r for r in records)
        data = raw
        if gzip:
            packer = zlib.compressobj(6, zlib.DEFLATED, 31)
            data = packer.compress(raw) + packer.flush()
        entries = struct.pack(">BHII", 0x80 | ((1 if gzip else 0) << 4), len(records), len(raw), len(data)) + data
        count = 1
    else:
        entries = b"".join(struct.pack(">I", len(r)) + r for r in records)
        count = len(records)
    head = struct.pack(">BBHIqQQIII", 0x50, 0, count, len(records), CHUNK_MS, 1, first_offset,
                       zlib.crc32(entries), len(entries), 0) + b"\0" * 4
    return head + entries


# --------------------------------------------------------------------------- the reference


def _id_text(value):
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, int):
        return str(int(value))
    raise AssertionError(f"no id text for {value!r}")


def _value_text(value):
    """What the headers column shows of an application property's value."""
    if isinstance(value, A.Float):
        return header_text(float(value))
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, A.Symbol):
        return str(value)
    if isinstance(value, A.Timestamp):
        return header_text(int(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    return header_text(value)


def reference_row(record: bytes, offset: int, stream: str = STREAM) -> dict:
    """One row as the builder must make it, from the codec's decoding of the record."""
    row = {"body": record, "stream": stream, "offset": offset,
           "timestamp": datetime.datetime.fromtimestamp(CHUNK_MS / 1000, UTC), "exchange": "", "routing_key": stream,
           "properties": {name: None for name, _ in PROPERTY_FIELDS}, "headers": None}
    if not (record[:1] == b"\x00" and record[1:2] == b"\x53" and 0x70 <= record[2] <= 0x78):
        return row
    message = A.decode_message(record)
    body = message.body
    if isinstance(body, (bytes, bytearray)):
        row["body"] = bytes(body)
    elif isinstance(body, A.Data):
        row["body"] = b"".join(bytes(part) for part in body.parts)
    elif isinstance(body, A.AmqpValue) and isinstance(body.value, (str, bytes)):
        row["body"] = body.value.encode() if isinstance(body.value, str) else body.value
    elif isinstance(body, A.AmqpValue):
        row["body"] = A.encode_value(body.value)
    elif body is None:
        row["body"] = b""
    props = row["properties"]
    annotations = message.message_annotations or {}
    if isinstance(annotations.get("x-exchange"), str):
        row["exchange"] = annotations["x-exchange"]
    if isinstance(annotations.get("x-routing-key"), str):
        row["routing_key"] = annotations["x-routing-key"]
    for key, name in (("x-basic-priority", "priority"), ("x-basic-delivery-mode", "delivery_mode")):
        value = annotations.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
            props[name] = int(value)
    if isinstance(annotations.get("x-basic-expiration"), str):
        props["expiration"] = annotations["x-basic-expiration"]
    p = message.properties
    if p is not None:
        props["message_id"] = _id_text(p.message_id)
        props["correlation_id"] = _id_text(p.correlation_id)
        props["reply_to"] = p.reply_to
        props["content_type"] = p.content_type
        props["content_encoding"] = p.content_encoding
        if p.user_id is not None:
            try:
                props["user_id"] = bytes(p.user_id).decode("utf-8")
            except UnicodeDecodeError:
                props["user_id"] = base64.b64encode(bytes(p.user_id)).decode()
        if isinstance(p.creation_time, datetime.datetime):
            props["timestamp"] = p.creation_time
    headers = []
    for key, value in (message.application_properties or {}).items():
        if key == "x-basic-type" and isinstance(value, str):
            props["type"] = value
        elif key == "x-basic-app-id" and isinstance(value, str):
            props["app_id"] = value
        else:
            headers.append((str(key), _value_text(value)))
    row["headers"] = headers or None
    return row


def build(records, first_offset=0, start=0, end=10**9, **chunk_options):
    builder = ChunkBatchBuilder(STREAM, start, end)
    builder.add_chunk(chunk(records, first_offset, **chunk_options))
    batch = builder.take()
    if batch is not None:
        assert batch.schema.equals(stream_schema())
        batch.validate(full=True)
    return builder, [] if batch is None else batch.to_pylist()


def normalized(rows):
    out = []
    for row in rows:
        row = dict(row, properties=dict(row["properties"]))
        for key in ("timestamp",):
            if row[key] is not None:
                row[key] = row[key].astimezone(UTC)
        if row["properties"]["timestamp"] is not None:
            row["properties"]["timestamp"] = row["properties"]["timestamp"].astimezone(UTC)
        out.append(row)
    return out


RICH = A.encode_message(
    b"payload",
    properties={"message_id": "m-1", "user_id": b"guest", "to": "somewhere", "subject": "s", "reply_to": "r",
                "correlation_id": uuid.UUID(int=7), "content_type": "application/json", "content_encoding": "gzip",
                "absolute_expiry_time": datetime.datetime(2030, 1, 1, tzinfo=UTC),
                "creation_time": datetime.datetime(2024, 2, 3, 4, 5, 6, 789000, tzinfo=UTC), "group_id": "g"},
    application_properties={"text": "plain", "bool": True, "int": -7, "long": 2**40, "ubyte": A.UByte(200),
                            "short": A.Short(-3), "double": 1.5, "float": A.Float(1.1), "bytes": b"\x00\x01\xff",
                            "time": datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=UTC), "void": None,
                            "uuid": uuid.UUID(int=1), "symbol": A.Symbol("sym"), "char": A.Char("c"),
                            "x-basic-type": "order.created", "x-basic-app-id": "billing",
                            "nan": float("nan"), "ulong": A.ULong(2**64 - 1)},
    message_annotations={A.Symbol("x-exchange"): "amq.topic", A.Symbol("x-routing-key"): "orders.eu",
                         A.Symbol("x-basic-priority"): A.UByte(5), A.Symbol("x-basic-delivery-mode"): A.UByte(2),
                         A.Symbol("x-basic-expiration"): "60000", A.Symbol("other"): 1},
    header={"durable": True}, delivery_annotations={A.Symbol("x-opt"): "d"}, footer={A.Symbol("f"): 1},
)


def test_every_field_of_a_rich_message():
    _, rows = build([RICH], first_offset=40)
    (row,) = normalized(rows)
    assert row["body"] == b"payload" and row["offset"] == 40
    assert (row["exchange"], row["routing_key"]) == ("amq.topic", "orders.eu")
    assert row["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert row["properties"] == {
        "content_type": "application/json", "content_encoding": "gzip", "delivery_mode": 2, "priority": 5,
        "correlation_id": "00000000-0000-0000-0000-000000000007", "reply_to": "r", "expiration": "60000",
        "message_id": "m-1", "timestamp": datetime.datetime(2024, 2, 3, 4, 5, 6, 789000, tzinfo=UTC),
        "type": "order.created", "user_id": "guest", "app_id": "billing", "cluster_id": None}
    assert dict(row["headers"]) == {
        "text": "plain", "bool": "true", "int": "-7", "long": "1099511627776", "ubyte": "200", "short": "-3",
        "double": "1.5", "float": "1.100000023841858", "bytes": '"AAH/"', "time": '"2024-02-03T04:05:06Z"',
        "void": None, "uuid": "00000000-0000-0000-0000-000000000001", "symbol": "sym", "char": "c", "nan": "NaN",
        "ulong": "18446744073709551615"}
    assert normalized(rows) == normalized([reference_row(RICH, 40)])


def test_bodies_of_every_kind_and_records_that_are_no_message():
    records = [
        A.encode_message(b""),
        A.encode_message(A.Data([b"ab", b"cd", b"ef"])),
        A.encode_message(A.AmqpValue("text value")),
        A.encode_message(A.AmqpValue(b"binary value")),
        A.encode_message(A.AmqpValue({"a": 1})),
        A.encode_message(None, properties={"message_id": 5}),
        b"opaque bytes, not AMQP 1.0",
        b"",
        b"\x00\x53\x10 starts like a described value, not a section",
    ]
    _, rows = build(records)
    bodies = [row["body"] for row in rows]
    assert bodies == [b"", b"abcdef", b"text value", b"binary value", A.encode_value({"a": 1}), b"",
                      records[6], b"", records[8]]
    assert rows[5]["properties"]["message_id"] == "5"
    assert normalized(rows) == normalized([reference_row(r, i) for i, r in enumerate(records)])


@pytest.mark.parametrize("message_id, shown", [
    ("text", "text"), (A.ULong(2**64 - 1), "18446744073709551615"), (uuid.UUID(int=255), str(uuid.UUID(int=255))),
    (b"\x00\xff", "AP8="),
])
def test_message_ids_as_rabbitmq_shows_them_over_0_9_1(message_id, shown):
    _, rows = build([A.encode_message(b"x", properties={"message_id": message_id, "correlation_id": message_id})])
    assert (rows[0]["properties"]["message_id"], rows[0]["properties"]["correlation_id"]) == (shown, shown)


def test_a_user_id_that_is_not_utf8_is_shown_in_base64():
    _, rows = build([A.encode_message(b"x", properties={"user_id": b"\xff\xfe"})])
    assert rows[0]["properties"]["user_id"] == "//4="


def test_offsets_outside_the_range_or_read_already_are_skipped():
    records = [A.encode_message(b"m%d" % i) for i in range(10)]
    builder = ChunkBatchBuilder(STREAM, 13, 17)
    assert builder.add_chunk(chunk(records[:5], 10)) == 2    # 13, 14
    assert (builder.next_offset, builder.done, builder.first_chunk_offset) == (15, False, 10)
    assert builder.add_chunk(chunk(records[:5], 10)) == 0    # the same chunk again: nothing twice
    assert builder.add_chunk(chunk(records[5:], 15, sub_entry=True, gzip=True)) == 2   # 15, 16; 17.. past the end
    assert builder.done and builder.next_offset == 20
    assert [row["offset"] for row in builder.take().to_pylist()] == [13, 14, 15, 16]
    assert builder.take() is None


def test_batches_are_taken_whenever_asked_and_the_rows_start_again():
    builder = ChunkBatchBuilder(STREAM, 0, 100)
    records = [A.encode_message(b"m%d" % i, application_properties={"i": i}) for i in range(30)]
    builder.add_chunk(chunk(records[:10], 0))
    first = builder.take().to_pylist()
    builder.add_chunk(chunk(records[10:], 10, sub_entry=True))
    second = builder.take().to_pylist()
    assert [r["offset"] for r in first + second] == list(range(30))
    assert [dict(r["headers"])["i"] for r in first + second] == [str(i) for i in range(30)]


@pytest.mark.parametrize("record, problem", [
    (b"\x00\x53\x75\xa0\x05ab", "announces 5 bytes, 2 are left"),
    (b"\x00\x53\x75\xa1\x01a", "a data section holds constructor 0xa1, not binary"),
    (b"\x00\x53\x74\xc1\x02\x01\x40", "a map of 1 elements"),
    (b"\x00\x53\x73\xc0\x01\x05", "5 elements cannot fit in 0 bytes"),
    (b"\x00\x53\x75\xa0\x00\x01", "expected a section"),
    (b"\x00\x53\x74\xc1\x04\x02\x54\x01\x40", "key has constructor 0x54, not a string"),
    (b"\x00\x53\x75\x99", "unknown constructor 0x99"),
    (b"\x00\x53\x74\xc1\x07\x02\xa1\x01k\xa1\x01\xff", "a string (constructor 0xa1) that is not UTF-8"),
])
def test_a_malformed_message_fails_naming_stream_offset_and_byte(record, problem):
    builder = ChunkBatchBuilder(STREAM, 0, 100)
    with pytest.raises(RecordError) as info:
        builder.add_chunk(chunk([A.encode_message(b"fine"), record], 7))
    error = info.value
    assert (error.stream, error.offset) == (STREAM, 8)
    assert problem in str(error) and str(error).startswith(f"amqp source: stream {STREAM!r} offset 8: ")


def test_a_bad_chunk_fails_with_the_codecs_error():
    from amqwire.codec.errors import ChunkError

    data = bytearray(chunk([A.encode_message(b"x")]))
    data[-1] ^= 1
    with pytest.raises(ChunkError, match="CRC32"):
        ChunkBatchBuilder(STREAM, 0, 10).add_chunk(bytes(data))


# --------------------------------------------------------------------------- hypothesis: builder vs reference

texts = st.text(max_size=12)
simple_values = st.one_of(
    st.none(), texts, st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
    st.binary(max_size=12), st.integers(0, 255).map(A.UByte), st.integers(-2**15, 2**15 - 1).map(A.Short),
    st.integers(0, 2**64 - 1).map(A.ULong), st.floats(width=32, allow_nan=False).map(A.Float),
    st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9999, 12, 31),
                 timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    st.uuids(), texts.filter(str.isascii).map(A.Symbol),
)
ids = st.one_of(st.none(), texts, st.integers(0, 2**64 - 1).map(A.ULong), st.uuids(), st.binary(max_size=20))
messages = st.builds(
    lambda body, props, app, ann: A.encode_message(body, properties=props, application_properties=app,
                                                   message_annotations=ann),
    st.one_of(st.binary(max_size=30), st.lists(st.binary(max_size=8), min_size=1, max_size=3).map(A.Data)),
    st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "message_id": ids, "correlation_id": ids, "reply_to": texts, "user_id": st.binary(max_size=8),
        "content_type": texts.filter(str.isascii), "creation_time": st.datetimes(
            min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9999, 1, 1),
            timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))})),
    st.one_of(st.none(), st.dictionaries(st.one_of(texts, st.sampled_from(["x-basic-type", "x-basic-app-id"])),
                                         simple_values, max_size=5)),
    st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        A.Symbol("x-exchange"): texts, A.Symbol("x-routing-key"): texts,
        A.Symbol("x-basic-priority"): st.integers(0, 255).map(A.UByte),
        A.Symbol("x-basic-expiration"): texts})),
)


def _same(a, b):
    """Rows equal, NaN text included."""
    return json.dumps(a, default=str, sort_keys=True) == json.dumps(b, default=str, sort_keys=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8), st.booleans())
def test_the_builder_agrees_with_the_reference(records, sub_entry):
    _, rows = build(records, 100, sub_entry=sub_entry)
    expected = [reference_row(record, 100 + i) for i, record in enumerate(records)]
    assert _same(normalized(rows), normalized(expected))


# --------------------------------------------------------------------------- the encoder


def frames_of(data: bytes) -> list:
    return StreamParser(0, sender="client").feed(data)


def decoded(data: bytes) -> list[tuple[int, object]]:
    return [(pid, A.decode_message(m)) for frame in frames_of(data) for pid, m in frame.messages]


PROPS_TYPE = pa.struct([("content_type", pa.string()), ("content_encoding", pa.string()), ("delivery_mode", pa.int32()),
                        ("priority", pa.int32()), ("correlation_id", pa.string()), ("reply_to", pa.string()),
                        ("expiration", pa.string()), ("message_id", pa.string()),
                        ("timestamp", pa.timestamp("us", tz="UTC")), ("type", pa.string()), ("user_id", pa.string()),
                        ("app_id", pa.string()), ("cluster_id", pa.string())])


def test_encoded_rows_decode_to_what_rabbitmq_maps_0_9_1_onto():
    when = datetime.datetime(2024, 2, 3, 4, 5, 6, 789000, tzinfo=UTC)
    props = pa.array([
        {"content_type": "application/json", "content_encoding": "gzip", "delivery_mode": 2, "priority": 9,
         "correlation_id": "c", "reply_to": "r", "expiration": "600", "message_id": "m", "timestamp": when,
         "type": "t", "user_id": "guest", "app_id": "a", "cluster_id": "dropped"},
        None,
        {"message_id": "only"},
    ], PROPS_TYPE)
    headers = pa.array([[("k", "v")], None, []], pa.map_(pa.string(), pa.string()))
    data, count = StreamPublishEncoder(publisher_id=7).encode(
        5, pa.array([b"one", None, "three"], pa.binary()), headers=headers, properties=props,
        exchange=pa.array(["amq.topic", None, ""]), routing_key=pa.array(["rk", None, None]))
    assert count == 3
    (frame,) = frames_of(data)
    assert frame.publisher_id == 7
    (i1, m1), (i2, m2), (i3, m3) = decoded(data)
    assert (i1, i2, i3) == (5, 6, 7)
    assert m1.body == b"one" and m2.body == b"" and m3.body == b"three"
    assert m1.message_annotations == {"x-exchange": "amq.topic", "x-routing-key": "rk", "x-basic-priority": 9,
                                      "x-basic-delivery-mode": 2, "x-basic-expiration": "600"}
    assert type(m1.message_annotations["x-basic-priority"]) is A.UByte
    p = m1.properties
    assert (p.message_id, p.user_id, p.reply_to, p.correlation_id, p.content_type, p.content_encoding,
            p.creation_time) == ("m", b"guest", "r", "c", "application/json", "gzip", when)
    assert b"\xa3\x10application/json" in data  # a symbol, as RabbitMQ writes content-type
    assert m1.application_properties == {"k": "v", "x-basic-type": "t", "x-basic-app-id": "a"}
    assert (m2.properties, m2.application_properties, m2.message_annotations) == (None, None, None)
    assert m3.message_annotations == {"x-exchange": ""} and m3.application_properties is None
    assert m3.properties.message_id == "only"


def test_header_values_keep_their_types():
    columns = {
        "s": pa.array(["x"]), "b": pa.array([b"\x00"], pa.binary()), "t": pa.array([True]),
        "i8": pa.array([-1], pa.int8()), "i16": pa.array([-300], pa.int16()), "i32": pa.array([7], pa.int32()),
        "i32big": pa.array([70000], pa.int32()), "i64": pa.array([2**40], pa.int64()),
        "u8": pa.array([200], pa.uint8()), "u16": pa.array([60000], pa.uint16()), "u32": pa.array([2**31], pa.uint32()),
        "u64": pa.array([2**63 - 1], pa.uint64()), "f32": pa.array([1.5], pa.float32()), "f64": pa.array([2.5]),
        "ts": pa.array([datetime.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        "d": pa.array([datetime.date(2024, 1, 2)], pa.date32()), "n": pa.array([None], pa.string()),
    }
    headers = pa.StructArray.from_arrays(list(columns.values()), names=list(columns))
    data, _ = StreamPublishEncoder().encode(1, pa.array([b"x"]), headers=headers)
    ((_, message),) = decoded(data)
    got = message.application_properties
    kinds = {name: type(value).__name__ for name, value in got.items()}
    assert kinds == {"s": "str", "b": "bytes", "t": "bool", "i8": "Byte", "i16": "Short", "i32": "int",
                     "i32big": "int", "i64": "int", "u8": "UByte", "u16": "UShort", "u32": "UInt", "u64": "int",
                     "f32": "Float", "f64": "float", "ts": "datetime", "d": "datetime", "n": "NoneType"}
    assert got["ts"] == datetime.datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)  # milliseconds
    assert got["d"] == datetime.datetime(2024, 1, 2, tzinfo=UTC)


def test_frames_split_at_frame_max_and_skipped_rows_are_not_sent():
    bodies = pa.array([bytes([i]) * 400 for i in range(10)])
    encoder = StreamPublishEncoder(frame_max=1024)
    data, count = encoder.encode(1_000, bodies, skip=3)
    assert count == 7
    frames = frames_of(data)
    assert [len(f.messages) for f in frames] == [2, 2, 2, 1] and encoder.frames == 4
    assert all(len(f.encode()) <= 1024 for f in frames)
    assert [pid for _, pid in [(None, p) for f in frames for p, _ in f.messages]] == list(range(1_003, 1_010))
    assert [A.decode_message(m).body[0] for f in frames for _, m in f.messages] == list(range(3, 10))
    with pytest.raises(RowEncodeError, match="row 1: body: its message .* does not fit a frame of frame_max 1024"):
        encoder.encode(1, pa.array([b"x", b"y" * 2000]))
    assert encoder.encode(1, bodies, skip=10) == (b"", 0)


@pytest.mark.parametrize("headers, problem", [
    (pa.array([[("k", [1])]], pa.map_(pa.string(), pa.list_(pa.int64()))), "simple values only"),
    (pa.StructArray.from_arrays([pa.array([1], pa.decimal128(5, 2))], names=["d"]), "a decimal column"),
    (pa.array([[(1, "v")]], pa.map_(pa.int32(), pa.string())), "map keys must be strings"),
])
def test_header_types_an_application_property_cannot_hold_are_refused(headers, problem):
    with pytest.raises(ArrowTypeError, match=problem):
        StreamPublishEncoder().encode(1, pa.array([b"x"]), headers=headers)


def test_values_refused_name_the_row_and_the_field():
    big = pa.StructArray.from_arrays([pa.array([1, 2**63], pa.uint64())], names=["u"])
    with pytest.raises(RowEncodeError, match=r"row 1: headers.u: uint64 9223372036854775808 is over 2\*\*63-1"):
        StreamPublishEncoder().encode(1, pa.array([b"x", b"y"]), headers=big)
    props = pa.array([{"content_type": "tëxt"}], pa.struct([("content_type", pa.string())]))
    with pytest.raises(RowEncodeError, match="row 0: properties.content_type: 'tëxt' is not ASCII"):
        StreamPublishEncoder().encode(1, pa.array([b"x"]), properties=props)
    props = pa.array([{"priority": 256}], pa.struct([("priority", pa.int32())]))
    with pytest.raises(RowEncodeError, match="row 0: properties.priority: 256 is out of range 0..255"):
        StreamPublishEncoder().encode(1, pa.array([b"x"]), properties=props)
    with pytest.raises(ValueError, match="publishing ids start at 1"):
        StreamPublishEncoder().encode(0, pa.array([b"x"]))


def test_json_and_table_bodies():
    body = pa.array([{"id": 1, "name": "a"}], pa.struct([("id", pa.int64()), ("name", pa.string())]))
    data, _ = StreamPublishEncoder(body_format="json").encode(1, body)
    assert decoded(data)[0][1].body == b'{"id":1,"name":"a"}'
    from amqwire.codec import decode_table

    data, _ = StreamPublishEncoder(body_format="table").encode(1, body)
    assert decode_table(decoded(data)[0][1].body) == {"id": 1, "name": "a"}


# --------------------------------------------------------------------------- sink -> stream -> source


rows_strategy = st.lists(st.fixed_dictionaries({
    "body": st.binary(max_size=40),
    "headers": st.one_of(st.none(), st.lists(st.tuples(st.text(min_size=1, max_size=6), st.one_of(st.none(), st.text(
        max_size=10))), max_size=4, unique_by=lambda kv: kv[0])),
    "properties": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "message_id": st.text(max_size=20), "correlation_id": st.text(max_size=8), "reply_to": st.text(max_size=8),
        "content_type": st.text(alphabet=st.characters(max_codepoint=127), max_size=8),
        "priority": st.integers(0, 255), "delivery_mode": st.integers(1, 2), "expiration": st.text(max_size=6),
        "type": st.text(max_size=6), "app_id": st.text(max_size=6), "user_id": st.text(max_size=6),
        "timestamp": st.datetimes(min_value=datetime.datetime(1970, 1, 1), max_value=datetime.datetime(9000, 1, 1),
                                  timezones=st.just(UTC)).map(
                                      lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))})),
}), min_size=1, max_size=20)


@settings(max_examples=120, deadline=None)
@given(rows_strategy)
def test_rows_written_by_the_sink_read_back_by_the_source(rows):
    header_type = pa.map_(pa.string(), pa.string())
    body = pa.array([r["body"] for r in rows], pa.binary())
    headers = pa.array([r["headers"] for r in rows], header_type)
    props = pa.array([r["properties"] for r in rows], PROPS_TYPE)
    data, _ = StreamPublishEncoder().encode(1, body, headers=headers, properties=props)
    records = [m for frame in frames_of(data) for _, m in frame.messages]
    _, got = build(records, 0)
    for row, back in zip(rows, got):
        assert back["body"] == row["body"]
        assert back["headers"] == (row["headers"] or None)
        want = {name: None for name, _ in PROPERTY_FIELDS}
        want.update(row["properties"] or {})
        assert {k: (v.astimezone(UTC) if isinstance(v, datetime.datetime) else v)
                for k, v in back["properties"].items()} == want
        assert (back["exchange"], back["routing_key"]) == ("", STREAM)

