"""amqwire.spark at the Arrow level (no Spark session): PublishEncoder / encode_batch turn
pyarrow columns into per-row basic.publish frames; decode_batch / decode_one read them back.

Byte vectors written out by hand, equality with amqwire.codec.encode_publish and with
pika's own frame marshalling, round trips through the codec's CommandParser and through
decode_batch, every supported Arrow header type (with the AMQP type letter checked in the
bytes), sliced / chunked / large inputs, JSON and field-table bodies, body frame splitting
by frame_max, row errors (and that an encoder is still good after one), Hypothesis.
"""
from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqwire.codec import (
    AMQPSyntaxError,
    BasicAck,
    BasicProperties,
    BasicPublish,
    CommandParser,
    FrameError,
    QueueDeclare,
    decode_table,
    encode_publish,
)
from amqwire.spark import PROPERTY_NAMES, PublishEncoder, decode_batch, encode_batch
from amqwire.spark.decode import decode_one, decoded_type
from amqwire.spark.errors import ArrowTypeError, RowEncodeError

UTC = datetime.timezone.utc
JAN1 = datetime.datetime(2021, 1, 1, tzinfo=UTC)  # 1609459200 == 0x5FEE6600
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# --------------------------------------------------------------------------- helpers


def h(s: str) -> bytes:
    """bytes.fromhex that tolerates spaces and '|' separators."""
    return bytes.fromhex(s.replace("|", " "))


def rks(n: int, value: str = "rk") -> pa.Array:
    return pa.array([value] * n, pa.string())


def bodies(n: int, value: bytes = b"x") -> pa.Array:
    return pa.array([value] * n, pa.binary())


def split_frames(data: bytes) -> list[tuple[int, int, bytes]]:
    """(type, channel, payload) of each frame, read by hand (independent of the codec);
    asserts every frame ends with 0xCE and nothing is left over."""
    out, i = [], 0
    while i < len(data):
        assert len(data) - i >= 8, f"partial frame at {i}"
        ftype = data[i]
        channel = int.from_bytes(data[i + 1:i + 3], "big")
        size = int.from_bytes(data[i + 3:i + 7], "big")
        assert data[i + 7 + size] == 0xCE, f"bad frame end at {i + 7 + size}"
        out.append((ftype, channel, bytes(data[i + 7:i + 7 + size])))
        i += 8 + size
    return out


def header_payload(row: bytes) -> bytes:
    frames = split_frames(row)
    assert frames[1][0] == 2
    return frames[1][2]


def property_flags(row: bytes) -> int:
    return int.from_bytes(header_payload(row)[12:14], "big")


def headers_table_bytes(row: bytes) -> bytes:
    """The raw headers field table of a row whose only property is headers."""
    payload = header_payload(row)
    assert int.from_bytes(payload[12:14], "big") == 0x2000
    return payload[14:]


def command_of(row: bytes):
    parser = CommandParser(0, max_body_size=1 << 40)
    commands = parser.feed(row)
    assert len(commands) == 1 and parser.buffered == 0, commands
    return commands[0]


def commands_of(frames: pa.Array) -> list:
    return [command_of(value) for value in frames.to_pylist()]


def assert_well_formed(frames: pa.Array, n: int) -> None:
    assert isinstance(frames, pa.Array)
    assert frames.type == pa.binary()
    assert len(frames) == n and frames.null_count == 0
    frames.validate(full=True)


def encode_ok(enc: PublishEncoder, *args, **kwargs) -> pa.Array:
    """encode() and encode_frames() of the same input; checks they agree."""
    frames = enc.encode(*args, **kwargs)
    assert_well_formed(frames, len(args[0]))
    assert enc.encode_frames(*args, **kwargs) == b"".join(frames.to_pylist())
    return frames


# --------------------------------------------------------------------------- byte vectors

VECTOR_PLAIN = h(
    "01 0001 0000000b | 003c 0028 | 0000 | 00 | 02 726b | 00 | ce"
    "02 0001 0000000e | 003c | 0000 | 0000000000000002 | 0000 | ce"
    "03 0001 00000002 | 6869 | ce"
)

# channel 7, exchange "ex", routing key "a.b", mandatory; null body (size 0, no body frame);
# content_type, headers {"k": "v"} (from the headers column) and delivery_mode 2
VECTOR_PROPS = h(
    "01 0007 0000000e | 003c 0028 | 0000 | 02 6578 | 03 612e62 | 01 | ce"
    "02 0007 00000026 | 003c | 0000 | 0000000000000000 | b000"
    "  | 0a 746578742f706c61696e"
    "  | 00000008 01 6b 53 00000001 76"
    "  | 02 | ce"
)

# channel 2, exchange "x", routing key "", a string body "héllo"; struct headers
# {n: int32 -2, t: true}, priority 9, correlation_id "c1", timestamp 2021-01-01
VECTOR_STRUCT_HEADERS = h(
    "01 0002 0000000a | 003c 0028 | 0000 | 01 78 | 00 | 00 | ce"
    "02 0002 00000029 | 003c | 0000 | 0000000000000006 | 2c40"
    "  | 0000000b 01 6e 49 fffffffe 01 74 74 01"
    "  | 09 | 02 6331 | 000000005fee6600 | ce"
    "03 0002 00000006 | 68 c3a9 6c6c6f | ce"
)


def test_vector_plain_publish():
    frames = encode_ok(PublishEncoder(), bodies(1, b"hi"), rks(1))
    assert frames.to_pylist() == [VECTOR_PLAIN]
    assert VECTOR_PLAIN == encode_publish(1, "", "rk", b"hi", None, False, frame_max=131072)


def test_vector_properties_and_null_body():
    enc = PublishEncoder(channel=7, mandatory=True)
    props = pa.array([{"content_type": "text/plain", "delivery_mode": 2}],
                     pa.struct([("content_type", pa.string()), ("delivery_mode", pa.uint8())]))
    headers = pa.array([[("k", "v")]], pa.map_(pa.string(), pa.string()))
    frames = encode_ok(enc, pa.array([None], pa.binary()), pa.array(["a.b"]), pa.array(["ex"]),
                       headers=headers, properties=props)
    assert frames.to_pylist() == [VECTOR_PROPS]
    expected_props = BasicProperties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2)
    assert VECTOR_PROPS == encode_publish(7, "ex", "a.b", b"", expected_props, True, frame_max=131072)


def test_vector_struct_headers_string_body():
    enc = PublishEncoder(channel=2, frame_max=4096)
    headers = pa.array([{"n": -2, "t": True}], pa.struct([("n", pa.int32()), ("t", pa.bool_())]))
    props = pa.array(
        [{"priority": 9, "correlation_id": "c1", "timestamp": datetime.datetime(2021, 1, 1)}],
        pa.struct([("priority", pa.uint8()), ("correlation_id", pa.string()), ("timestamp", pa.timestamp("s"))]),
    )
    frames = encode_ok(enc, pa.array(["héllo"]), pa.array([""]), pa.array(["x"]),
                       headers=headers, properties=props)
    assert frames.to_pylist() == [VECTOR_STRUCT_HEADERS]
    expected_props = BasicProperties(headers={"n": -2, "t": True}, priority=9, correlation_id="c1", timestamp=JAN1)
    assert VECTOR_STRUCT_HEADERS == encode_publish(2, "x", "", "héllo", expected_props, False, frame_max=4096)


def test_vector_body_split_at_frame_max():
    body = bytes(range(256)) * 15 + bytes(249)  # 4089 bytes: one byte over a frame's payload
    assert len(body) == 4089
    expected = (
        h("01 0001 0000000b 003c0028 0000 00 02726b 00 ce")
        + h("02 0001 0000000e 003c 0000 0000000000000ff9 0000 ce")
        + h("03 0001 00000ff8") + body[:4088] + h("ce")
        + h("03 0001 00000001") + body[4088:] + h("ce")
    )
    frames = encode_ok(PublishEncoder(frame_max=4096), bodies(1, body), rks(1))
    assert frames.to_pylist() == [expected]
    assert expected == encode_publish(1, "", "rk", body, None, False, frame_max=4096)


def test_vectors_back_to_back_in_one_batch():
    enc = PublishEncoder(channel=2, frame_max=4096)
    body = pa.array(["héllo", "héllo"])
    headers = pa.array([{"n": -2, "t": True}] * 2, pa.struct([("n", pa.int32()), ("t", pa.bool_())]))
    props = pa.array(
        [{"priority": 9, "correlation_id": "c1", "timestamp": datetime.datetime(2021, 1, 1)}] * 2,
        pa.struct([("priority", pa.uint8()), ("correlation_id", pa.string()), ("timestamp", pa.timestamp("s"))]),
    )
    frames = encode_ok(enc, body, pa.array(["", ""]), pa.array(["x", "x"]), headers=headers, properties=props)
    assert frames.to_pylist() == [VECTOR_STRUCT_HEADERS, VECTOR_STRUCT_HEADERS]
    assert enc.encode_frames(body, pa.array(["", ""]), pa.array(["x", "x"]), headers=headers,
                             properties=props) == VECTOR_STRUCT_HEADERS * 2


ALL_PROPS_TYPE = pa.struct([
    ("content_type", pa.string()),
    ("content_encoding", pa.string()),
    ("headers", pa.map_(pa.string(), pa.string())),
    ("delivery_mode", pa.uint8()),
    ("priority", pa.int32()),
    ("correlation_id", pa.string()),
    ("reply_to", pa.string()),
    ("expiration", pa.string()),
    ("message_id", pa.string()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("type", pa.string()),
    ("user_id", pa.string()),
    ("app_id", pa.string()),
    ("cluster_id", pa.string()),
])


def all_props_row(i: int) -> dict:
    return {
        "content_type": "application/json",
        "content_encoding": "gzip",
        "headers": [("trace", f"t-{i}"), ("name", "dé😀\"\\"), ("empty", "")],
        "delivery_mode": 2,
        "priority": i % 10,
        "correlation_id": f"corr-{i}",
        "reply_to": "amq.rabbitmq.reply-to",
        "expiration": "60000",
        "message_id": f"id-{i}",
        "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, 999000, tzinfo=UTC),
        "type": "event",
        "user_id": "guest",
        "app_id": "amqwire-tests",
        "cluster_id": "c" * 255,
    }


def test_all_fourteen_properties_match_pika():
    import pika.frame
    import pika.spec

    frame_max = 4096
    payload = frame_max - 8
    rows = [all_props_row(i) for i in range(3)]
    body_values = [b"", b"hello", bytes(i & 0xFF for i in range(10000))]
    enc = PublishEncoder(channel=3, frame_max=frame_max, mandatory=True)
    frames = encode_ok(enc, pa.array(body_values), pa.array(["rk-0", "rk-1", "rk-2"]), pa.array(["ex"] * 3),
                       properties=pa.array(rows, ALL_PROPS_TYPE))
    for i, (row, body, value) in enumerate(zip(rows, body_values, frames.to_pylist())):
        props = pika.spec.BasicProperties(
            content_type=row["content_type"],
            content_encoding=row["content_encoding"],
            headers=dict(row["headers"]),
            delivery_mode=2,
            priority=row["priority"],
            correlation_id=row["correlation_id"],
            reply_to=row["reply_to"],
            expiration=row["expiration"],
            message_id=row["message_id"],
            timestamp=1700000000,
            type=row["type"],
            user_id=row["user_id"],
            app_id=row["app_id"],
            cluster_id=row["cluster_id"],
        )
        expected = pika.frame.Method(3, pika.spec.Basic.Publish(exchange="ex", routing_key=f"rk-{i}",
                                                                mandatory=True)).marshal()
        expected += pika.frame.Header(3, len(body), props).marshal()
        for at in range(0, len(body), payload):
            expected += pika.frame.Body(3, body[at:at + payload]).marshal()
        assert value == expected, i
        # pika's property list (flags first), found where it belongs in the header frame
        assert header_payload(value)[12:] == b"".join(props.encode())
        assert property_flags(value) == 0xFFFC
        ours = BasicProperties(**{**row, "headers": dict(row["headers"]),
                                  "timestamp": datetime.datetime.fromtimestamp(1700000000, UTC)})
        assert value == encode_publish(3, "ex", f"rk-{i}", body, ours, True, frame_max=frame_max)
    assert [len(split_frames(v)) for v in frames.to_pylist()] == [2, 3, 5]


def test_method_frame_matches_pika_publish_encode():
    import pika.spec

    enc = PublishEncoder(channel=1, mandatory=False)
    [value] = encode_ok(enc, bodies(1), pa.array(["routing.key"]), pa.array(["amq.topic"])).to_pylist()
    method_payload = split_frames(value)[0][2]
    assert method_payload == struct.pack(">HH", 60, 40) + b"".join(
        pika.spec.Basic.Publish(exchange="amq.topic", routing_key="routing.key").encode())


# --------------------------------------------------------------------------- properties


PROPERTY_CASES = {
    # name: (arrow type, arrow values, the decoded values)
    "content_type": (pa.string(), ["application/json", None, ""], ["application/json", None, ""]),
    "content_encoding": (pa.large_string(), ["gzip", None, "ü"], ["gzip", None, "ü"]),
    "headers": (pa.map_(pa.string(), pa.string()), [[("a", "b")], None, []], [{"a": "b"}, None, {}]),
    "delivery_mode": (pa.uint8(), [2, None, 0], [2, None, 0]),
    "priority": (pa.int64(), [255, None, 0], [255, None, 0]),
    "correlation_id": (pa.string(), ["c" * 255, None, "x"], ["c" * 255, None, "x"]),
    "reply_to": (pa.string(), ["amq.rabbitmq.reply-to", None, "q"], ["amq.rabbitmq.reply-to", None, "q"]),
    "expiration": (pa.string(), ["1000", None, "0"], ["1000", None, "0"]),
    "message_id": (pa.string(), ["m-1", None, "m-2"], ["m-1", None, "m-2"]),
    "timestamp": (pa.timestamp("us", tz="UTC"),
                  [datetime.datetime(2021, 1, 1, 0, 0, 0, 999999, tzinfo=UTC), None, datetime.datetime(1970, 1, 1)],
                  [JAN1, None, datetime.datetime(1970, 1, 1, tzinfo=UTC)]),
    "type": (pa.string(), ["order.created", None, "t"], ["order.created", None, "t"]),
    "user_id": (pa.string(), ["guest", None, "u"], ["guest", None, "u"]),
    "app_id": (pa.string(), ["app", None, "a"], ["app", None, "a"]),
    "cluster_id": (pa.string(), ["cl", None, "c"], ["cl", None, "c"]),
}


def test_property_cases_cover_every_property():
    assert set(PROPERTY_CASES) == set(PROPERTY_NAMES)
    assert len(PROPERTY_NAMES) == 14


@pytest.mark.parametrize("name", list(PROPERTY_CASES))
def test_each_property_alone_round_trips(name):
    arrow_type, values, decoded = PROPERTY_CASES[name]
    props = pa.StructArray.from_arrays([pa.array(values, arrow_type)], names=[name])
    frames = encode_ok(PublishEncoder(), bodies(3), rks(3), properties=props)
    bit = 1 << (15 - PROPERTY_NAMES.index(name))
    for value, expected, command in zip(frames.to_pylist(), decoded, commands_of(frames)):
        if expected is None:
            assert property_flags(value) == 0
            assert command.properties == BasicProperties()
        else:
            assert property_flags(value) == bit
            assert command.properties == BasicProperties(**{name: expected})
            assert getattr(command.properties, name) == expected
            assert value == encode_publish(1, "", "rk", b"x", BasicProperties(**{name: expected}), False)
    rows = decode_batch(frames).to_pylist()
    for row, expected in zip(rows, decoded):
        if name == "headers":
            assert row["headers"] == (None if expected is None else list(expected.items()))
            assert all(v is None for v in row["properties"].values())
        else:
            assert row["properties"][name] == expected
            assert all(v is None for k, v in row["properties"].items() if k != name)
            assert row["headers"] is None


def test_all_fourteen_properties_round_trip():
    rows = [all_props_row(i) for i in range(4)]
    frames = encode_ok(PublishEncoder(), bodies(4), rks(4), properties=pa.array(rows, ALL_PROPS_TYPE))
    for row, command in zip(rows, commands_of(frames)):
        expected = dict(row, headers=dict(row["headers"]), timestamp=datetime.datetime.fromtimestamp(1700000000, UTC))
        assert command.properties == BasicProperties(**expected)
    for row, decoded in zip(rows, decode_batch(frames).to_pylist()):
        assert decoded["headers"] == row["headers"]
        expected = {k: v for k, v in row.items() if k != "headers"}
        expected["timestamp"] = datetime.datetime.fromtimestamp(1700000000, UTC)
        assert decoded["properties"] == expected


def test_properties_struct_null_row_has_no_properties():
    props = pa.array([{"content_type": "a"}, None, {"content_type": None}, {"content_type": "b"}],
                     pa.struct([("content_type", pa.string())]))
    frames = encode_ok(PublishEncoder(), bodies(4), rks(4), properties=props)
    assert [property_flags(v) for v in frames.to_pylist()] == [0x8000, 0, 0, 0x8000]
    assert [c.properties.content_type for c in commands_of(frames)] == ["a", None, None, "b"]


def test_null_properties_row_with_headers_column_keeps_the_headers():
    props = pa.array([None, {"priority": 1}], pa.struct([("priority", pa.int8())]))
    headers = pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int32()))
    frames = encode_ok(PublishEncoder(), bodies(2), rks(2), headers=headers, properties=props)
    assert [c.properties for c in commands_of(frames)] == [
        BasicProperties(headers={"k": 1}), BasicProperties(priority=1)]


def test_headers_inside_properties():
    props = pa.array(
        [{"headers": [("a", 1)], "app_id": "x"}, {"headers": None, "app_id": "y"}, None],
        pa.struct([("headers", pa.map_(pa.string(), pa.int32())), ("app_id", pa.string())]),
    )
    frames = encode_ok(PublishEncoder(), bodies(3), rks(3), properties=props)
    assert [c.properties for c in commands_of(frames)] == [
        BasicProperties(headers={"a": 1}, app_id="x"), BasicProperties(app_id="y"), BasicProperties()]


def test_headers_given_twice_is_an_error():
    props = pa.array([{"headers": [("a", "b")]}], pa.struct([("headers", pa.map_(pa.string(), pa.string()))]))
    headers = pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string()))
    with pytest.raises(ValueError, match="headers"):
        PublishEncoder().encode(bodies(1), rks(1), headers=headers, properties=props)


@pytest.mark.parametrize("arrow_type, value", [
    (pa.timestamp("s"), datetime.datetime(2021, 1, 1, 0, 0, 0)),
    (pa.timestamp("ms"), datetime.datetime(2021, 1, 1, 0, 0, 0, 999000)),
    (pa.timestamp("us", tz="UTC"), datetime.datetime(2021, 1, 1, 0, 0, 0, 999999, tzinfo=UTC)),
    (pa.timestamp("ns", tz="Asia/Tokyo"), datetime.datetime(2021, 1, 1, 0, 0, 0, 1, tzinfo=UTC)),
    (pa.date32(), datetime.date(2021, 1, 1)),
    (pa.date64(), datetime.date(2021, 1, 1)),
    (pa.int64(), 1609459200),
    (pa.uint32(), 1609459200),
    (pa.int32(), 1609459200),
])
def test_timestamp_property_types(arrow_type, value):
    props = pa.StructArray.from_arrays([pa.array([value], arrow_type)], names=["timestamp"])
    [value_bytes] = encode_ok(PublishEncoder(), bodies(1), rks(1), properties=props).to_pylist()
    assert header_payload(value_bytes)[12:] == h("0040 000000005fee6600")
    assert command_of(value_bytes).properties.timestamp == JAN1


@pytest.mark.parametrize("arrow_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(),
                                        pa.uint16(), pa.uint32(), pa.uint64()])
def test_delivery_mode_and_priority_integer_types(arrow_type):
    props = pa.StructArray.from_arrays([pa.array([2, 0, 127], arrow_type), pa.array([0, 9, 127], arrow_type)],
                                       names=["delivery_mode", "priority"])
    frames = encode_ok(PublishEncoder(), bodies(3), rks(3), properties=props)
    assert [(c.properties.delivery_mode, c.properties.priority) for c in commands_of(frames)] == [
        (2, 0), (0, 9), (127, 127)]


# --------------------------------------------------------------------------- header value types

# (arrow type, value, the field value bytes after the key (type letter first), decoded value)
HEADER_TYPES = [
    ("string", pa.string(), "é", "53 00000002 c3a9", "é"),
    ("large_string", pa.large_string(), "ab", "53 00000002 6162", "ab"),
    ("binary", pa.binary(), b"\x00\x01", "78 00000002 0001", b"\x00\x01"),
    ("large_binary", pa.large_binary(), b"\xff", "78 00000001 ff", b"\xff"),
    ("bool_true", pa.bool_(), True, "74 01", True),
    ("bool_false", pa.bool_(), False, "74 00", False),
    ("int8", pa.int8(), -5, "62 fb", -5),
    ("int16", pa.int16(), -2, "73 fffe", -2),
    ("int32", pa.int32(), -3, "49 fffffffd", -3),
    ("int64", pa.int64(), -4, "6c fffffffffffffffc", -4),
    ("int64_max", pa.int64(), 2**63 - 1, "6c 7fffffffffffffff", 2**63 - 1),
    ("uint8", pa.uint8(), 200, "42 c8", 200),
    ("uint16", pa.uint16(), 65535, "75 ffff", 65535),
    ("uint32", pa.uint32(), 4294967295, "69 ffffffff", 4294967295),
    ("uint64", pa.uint64(), 2**63 - 1, "6c 7fffffffffffffff", 2**63 - 1),
    ("float32", pa.float32(), 1.5, "66 3fc00000", 1.5),
    ("float64", pa.float64(), -2.5, "64 c004000000000000", -2.5),
    ("timestamp_s", pa.timestamp("s"), datetime.datetime(2021, 1, 1), "54 000000005fee6600", JAN1),
    ("timestamp_ms", pa.timestamp("ms"), datetime.datetime(2021, 1, 1, 0, 0, 0, 900000), "54 000000005fee6600", JAN1),
    ("timestamp_us_tz", pa.timestamp("us", tz="UTC"), datetime.datetime(2021, 1, 1, 0, 0, 0, 999999, tzinfo=UTC),
     "54 000000005fee6600", JAN1),
    ("timestamp_ns_tz", pa.timestamp("ns", tz="America/New_York"), JAN1, "54 000000005fee6600", JAN1),
    ("date32", pa.date32(), datetime.date(2021, 1, 1), "54 000000005fee6600", JAN1),
    ("date64", pa.date64(), datetime.date(2021, 1, 1), "54 000000005fee6600", JAN1),
    ("decimal", pa.decimal128(10, 2), decimal.Decimal("123.45"), "44 02 00003039", decimal.Decimal("123.45")),
    ("decimal_negative", pa.decimal128(10, 2), decimal.Decimal("-1.00"), "44 02 ffffff9c", decimal.Decimal("-1.00")),
    ("decimal_int32_max", pa.decimal128(12, 0), decimal.Decimal(2**31 - 1), "44 00 7fffffff",
     decimal.Decimal(2**31 - 1)),
    ("null", pa.null(), None, "56", None),
    ("struct", pa.struct([("a", pa.int32()), ("s", pa.string())]), {"a": 1, "s": None},
     "46 0000000a 01 61 49 00000001 01 73 56", {"a": 1, "s": None}),
    ("map", pa.map_(pa.string(), pa.string()), [("x", "y")], "46 00000008 01 78 53 00000001 79", {"x": "y"}),
    ("list", pa.list_(pa.int32()), [1, None, 2], "41 0000000b 49 00000001 56 49 00000002", [1, None, 2]),
    ("large_list", pa.large_list(pa.string()), ["a"], "41 00000006 53 00000001 61", ["a"]),
    ("nested", pa.struct([("m", pa.map_(pa.string(), pa.list_(pa.struct([("b", pa.bool_())]))))]),
     {"m": [("k", [{"b": True}])]},
     "46 00000017 01 6d 46 00000010 01 6b 41 00000009 46 00000004 01 62 74 01",
     {"m": {"k": [{"b": True}]}}),
]


def expected_json(value):
    """What decode_batch's header text holds for a decoded header value, after json.loads."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: expected_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expected_json(v) for v in value]
    return value


@pytest.mark.parametrize("name, arrow_type, value, value_hex, decoded", HEADER_TYPES, ids=[c[0] for c in HEADER_TYPES])
def test_header_value_types(name, arrow_type, value, value_hex, decoded):
    headers = pa.array([[("k", value)], [("k", None)]], pa.map_(pa.string(), arrow_type))
    frames = encode_ok(PublishEncoder(), bodies(2), rks(2), headers=headers)
    value_bytes = h(value_hex)
    entry = b"\x01k" + value_bytes
    rows = frames.to_pylist()
    assert headers_table_bytes(rows[0]) == len(entry).to_bytes(4, "big") + entry
    assert headers_table_bytes(rows[1]) == h("00000003 01 6b 56")  # a null value is void
    assert decode_table(headers_table_bytes(rows[0])) == {"k": decoded}
    c0, c1 = commands_of(frames)
    assert c0.properties.headers == {"k": decoded}
    assert c1.properties.headers == {"k": None}
    decoded_rows = decode_batch(frames).to_pylist()
    assert decoded_rows[1]["headers"] == [("k", None)]
    text = decoded_rows[0]["headers"][0][1]
    if isinstance(decoded, str):
        assert text == decoded
    elif decoded is None:
        assert text is None
    else:
        assert json.loads(text) == expected_json(decoded)


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "Asia/Kolkata"])
def test_header_timestamp_units_and_zones(unit, tz):
    # 2021-01-01T00:00:00 UTC plus less than a second: floored to the second
    per_second = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]
    raw = pa.array([1609459200 * per_second + per_second - 1, 1609459201 * per_second], pa.int64())
    headers = pa.MapArray.from_arrays(pa.array([0, 1, 2], pa.int32()), pa.array(["t", "t"]),
                                      raw.cast(pa.timestamp(unit, tz=tz)))
    frames = encode_ok(PublishEncoder(), bodies(2), rks(2), headers=headers)
    first, second = frames.to_pylist()
    expected_first = 1609459200
    assert headers_table_bytes(first) == h("0000000b 01 74 54") + expected_first.to_bytes(8, "big")
    assert headers_table_bytes(second) == h("0000000b 01 74 54") + (1609459201).to_bytes(8, "big")
    assert [c.properties.headers["t"] for c in commands_of(frames)] == [
        datetime.datetime.fromtimestamp(expected_first, UTC), datetime.datetime.fromtimestamp(1609459201, UTC)]


@pytest.mark.parametrize("arrow_type, bad, shown", [
    (pa.timestamp("ms"), datetime.datetime(1969, 12, 31, 23, 59, 59, 500000), "timestamp -1 s is before 1970"),
    (pa.timestamp("s"), datetime.datetime(1, 1, 1), "timestamp -62135596800 s is before 1970"),
    (pa.date32(), datetime.date(1969, 12, 31), "timestamp -86400 s is before 1970"),
    (pa.date32(), 2932897, "timestamp 253402300800 s is after 9999-12-31T23:59:59Z"),  # day 10000-01-01
])
def test_header_timestamp_outside_unsigned_seconds_is_a_row_error(arrow_type, bad, shown):
    # AMQP timestamps are unsigned: a pre-1970 value written as negative seconds would be
    # read by RabbitMQ, pika, pamqp and py-amqp as a date far in the future.
    enc = PublishEncoder()
    headers = pa.array([[("k", datetime.datetime(2021, 1, 1) if arrow_type != pa.date32()
                          else datetime.date(2021, 1, 1))], [("k", bad)]], pa.map_(pa.string(), arrow_type))
    err = row_error(enc, bodies(2), rks(2), headers=headers)
    assert (err.row, err.field) == (1, "headers") and shown in err.problem, err  # as other header value errors
    assert_still_good(enc)


def test_header_timestamp_bounds_are_unsigned_seconds_a_datetime_holds():
    headers = pa.array([[("lo", 0), ("hi", 253402300799)]], pa.map_(pa.string(), pa.timestamp("s")))
    frames = encode_ok(PublishEncoder(), bodies(1), rks(1), headers=headers)
    assert headers_table_bytes(frames.to_pylist()[0]) == (
        h("00000018 026c6f 54 0000000000000000 026869 54") + (253402300799).to_bytes(8, "big"))
    assert commands_of(frames)[0].properties.headers == {
        "lo": datetime.datetime(1970, 1, 1, tzinfo=UTC), "hi": datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)}


def test_header_text_in_decode_batch():
    headers = pa.array([{
        "s": "plain", "i": 5, "b": b"\x00\x01", "t": datetime.datetime(2021, 1, 1), "f": 0.5, "flag": True,
        "n": {"a": [1, 2]}, "d": decimal.Decimal("1.25"), "v": None,
    }], pa.struct([
        ("s", pa.string()), ("i", pa.int64()), ("b", pa.binary()), ("t", pa.timestamp("s")), ("f", pa.float32()),
        ("flag", pa.bool_()), ("n", pa.struct([("a", pa.list_(pa.int32()))])), ("d", pa.decimal128(5, 2)),
        ("v", pa.string()),
    ]))
    [row] = decode_batch(encode_ok(PublishEncoder(), bodies(1), rks(1), headers=headers)).to_pylist()
    text = dict(row["headers"])
    assert [k for k, _ in row["headers"]] == ["s", "i", "b", "t", "f", "flag", "n", "d", "v"]
    assert text["s"] == "plain"
    assert json.loads(text["i"]) == 5
    assert base64.b64decode(json.loads(text["b"])) == b"\x00\x01"
    assert json.loads(text["t"]) == "2021-01-01T00:00:00Z"
    assert json.loads(text["f"]) == 0.5
    assert json.loads(text["flag"]) is True
    assert json.loads(text["n"]) == {"a": [1, 2]}
    assert json.loads(text["d"]) == 1.25
    assert text["v"] is None


def test_headers_map_null_vs_empty():
    headers = pa.array([None, [], [("a", "b")]], pa.map_(pa.string(), pa.string()))
    frames = encode_ok(PublishEncoder(), bodies(3), rks(3), headers=headers)
    rows = frames.to_pylist()
    assert property_flags(rows[0]) == 0
    assert headers_table_bytes(rows[1]) == h("00000000")
    assert [c.properties.headers for c in commands_of(frames)] == [None, {}, {"a": "b"}]
    assert [r["headers"] for r in decode_batch(frames).to_pylist()] == [None, [], [("a", "b")]]


def test_headers_struct_null_row_and_null_typed_column():
    headers = pa.array([{"a": 1}, None], pa.struct([("a", pa.int16())]))
    frames = encode_ok(PublishEncoder(), bodies(2), rks(2), headers=headers)
    assert [c.properties.headers for c in commands_of(frames)] == [{"a": 1}, None]
    frames = encode_ok(PublishEncoder(), bodies(2), rks(2), headers=pa.nulls(2))
    assert [property_flags(v) for v in frames.to_pylist()] == [0, 0]


def test_header_keys_order_and_duplicates_kept():
    headers = pa.array([[("z", 1), ("a", 2), ("m", 3)]], pa.map_(pa.string(), pa.int32()))
    [value] = encode_ok(PublishEncoder(), bodies(1), rks(1), headers=headers).to_pylist()
    table = headers_table_bytes(value)
    assert table == h("0000 0015 017a 49 00000001 0161 49 00000002 016d 49 00000003")


def test_header_key_of_255_bytes_is_fine():
    key = "é" * 127 + "k"  # 255 bytes in UTF-8
    headers = pa.array([[(key, "v")]], pa.map_(pa.string(), pa.string()))
    [command] = commands_of(encode_ok(PublishEncoder(), bodies(1), rks(1), headers=headers))
    assert command.properties.headers == {key: "v"}


# --------------------------------------------------------------------------- column shapes


def rebuilt(arr: pa.Array) -> pa.Array:
    """The same values in a fresh array with offset 0."""
    return pa.array(arr.to_pylist(), arr.type)


NESTED_HEADERS_TYPE = pa.map_(pa.string(), pa.struct([("l", pa.list_(pa.string())), ("n", pa.int64())]))
PROPS_TYPE = pa.struct([("content_type", pa.string()), ("priority", pa.int32()),
                        ("headers", pa.map_(pa.string(), pa.list_(pa.int32())))])


def sample_columns(n: int = 23):
    body = pa.array([None if i % 5 == 3 else bytes([i]) * i for i in range(n)], pa.binary())
    routing = pa.array([f"rk.{i}" for i in range(n)])
    exchange = pa.array(["" if i % 2 else f"ex{i}" for i in range(n)])
    headers = pa.array(
        [None if i % 7 == 2 else [(f"k{j}", {"l": None if j == 1 else [str(i)] * j, "n": i * j})
                                  for j in range(i % 4)] for i in range(n)],
        NESTED_HEADERS_TYPE,
    )
    props = pa.array(
        [None if i % 6 == 5 else {"content_type": None if i % 3 else f"ct{i}", "priority": i % 10,
                                  "headers": None if i % 4 == 0 else [("x", [i, None])]} for i in range(n)],
        PROPS_TYPE,
    )
    return body, routing, exchange, headers, props


def check_sliced_rows(frames: pa.Array, props: pa.Array, offset: int, nested_headers: bool) -> None:
    commands = commands_of(frames)
    assert len(commands) == len(props) - offset
    for i, command in enumerate(commands):
        source = i + offset
        assert command.method.routing_key == f"rk.{source}"
        assert command.body == (b"" if source % 5 == 3 else bytes([source]) * source)
        p = props[source].as_py()
        if p is None:
            assert command.properties == BasicProperties()
            continue
        assert command.properties.priority == p["priority"]
        assert command.properties.content_type == p["content_type"]
        if nested_headers:
            assert command.properties.headers == (None if p["headers"] is None else {"x": [source, None]})


@pytest.mark.parametrize("offset", [1, 3, 8, 13])
def test_sliced_body_routing_exchange_and_headers(offset):
    body, routing, exchange, headers, props = sample_columns()
    enc = PublishEncoder()
    expected = enc.encode(rebuilt(body.slice(offset)), rebuilt(routing.slice(offset)),
                          rebuilt(exchange.slice(offset)), headers=rebuilt(headers.slice(offset)))
    got = enc.encode(body.slice(offset), routing.slice(offset), exchange.slice(offset),
                     headers=headers.slice(offset))
    assert got.to_pylist() == expected.to_pylist()
    for i, command in enumerate(commands_of(got)):
        source = i + offset
        assert command.method.routing_key == f"rk.{source}"
        assert command.method.exchange == ("" if source % 2 else f"ex{source}")
        assert command.body == (b"" if source % 5 == 3 else bytes([source]) * source)
        h_source = headers[source].as_py()
        assert command.properties.headers == (
            None if h_source is None else {k: v for k, v in h_source})


@pytest.mark.parametrize("offset", [1, 3, 8, 13])
def test_sliced_properties_struct(offset):
    body, routing, exchange, headers, props = sample_columns()
    plain = pa.array([None if p is None else {"content_type": p["content_type"], "priority": p["priority"]}
                      for p in props.to_pylist()],
                     pa.struct([("content_type", pa.string()), ("priority", pa.int32())]))
    enc = PublishEncoder()
    expected = enc.encode(rebuilt(body.slice(offset)), rebuilt(routing.slice(offset)),
                          properties=rebuilt(plain.slice(offset)))
    got = enc.encode(body.slice(offset), routing.slice(offset), properties=plain.slice(offset))
    assert got.to_pylist() == expected.to_pylist()
    check_sliced_rows(got, props, offset, nested_headers=False)
    # with the headers column beside it
    got = enc.encode(body.slice(offset), routing.slice(offset), headers=headers.slice(offset),
                     properties=plain.slice(offset))
    expected = enc.encode(rebuilt(body.slice(offset)), rebuilt(routing.slice(offset)),
                          headers=rebuilt(headers.slice(offset)), properties=rebuilt(plain.slice(offset)))
    assert got.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("offset", [1, 3, 8, 13])
def test_sliced_properties_struct_with_headers_inside(offset):
    body, routing, exchange, headers, props = sample_columns()
    enc = PublishEncoder()
    expected = enc.encode(rebuilt(body.slice(offset)), rebuilt(routing.slice(offset)),
                          properties=rebuilt(props.slice(offset)))
    got = enc.encode(body.slice(offset), routing.slice(offset), properties=props.slice(offset))
    assert got.to_pylist() == expected.to_pylist()
    check_sliced_rows(got, props, offset, nested_headers=True)


@pytest.mark.parametrize("offset", [1, 4, 9])
def test_sliced_struct_headers(offset):
    # a struct's offset applies to its children: nested struct, list and map fields
    headers_type = pa.struct([("s", pa.string()), ("inner", pa.struct([("n", pa.int64()), ("f", pa.float64())])),
                              ("l", pa.list_(pa.int16())), ("m", pa.map_(pa.string(), pa.bool_()))])
    values = [None if i % 4 == 1 else {"s": None if i % 3 == 0 else f"s{i}",
                                       "inner": None if i % 5 == 0 else {"n": i, "f": i / 2},
                                       "l": [i, None] if i % 2 else [],
                                       "m": [(f"k{i}", i % 2 == 0)]} for i in range(14)]
    headers = pa.array(values, headers_type)
    enc = PublishEncoder()
    got = enc.encode(bodies(14 - offset), rks(14 - offset), headers=headers.slice(offset))
    assert got.to_pylist() == enc.encode(bodies(14 - offset), rks(14 - offset),
                                         headers=rebuilt(headers.slice(offset))).to_pylist()
    for i, command in enumerate(commands_of(got)):
        v = values[i + offset]
        if v is None:
            assert command.properties.headers is None
        else:
            assert command.properties.headers == {**v, "m": dict(v["m"])}


@pytest.mark.parametrize("offset", [1, 5, 9])
def test_sliced_children_inside_nested_values(offset):
    # list and map values whose child arrays are themselves slices (offset != 0)
    values = pa.array([[9], [1, 2], [3], [4, 5, 6], [7], [8]], pa.list_(pa.int32())).slice(offset % 3)
    keys = pa.array(["zz", "a", "b", "c", "d", "e"]).slice(1)
    mapped = pa.MapArray.from_arrays(pa.array([0, 1, 3], pa.int32()), keys.slice(0, 3), values.slice(1, 3))
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 3], pa.int32()),
                                     pa.array([100, 1, 2, 3, 4], pa.int64()).slice(1))
    headers = pa.StructArray.from_arrays([mapped, lists], names=["m", "l"])
    enc = PublishEncoder()
    got = enc.encode(bodies(2), rks(2), headers=headers)
    expected = enc.encode(bodies(2), rks(2), headers=rebuilt(headers))
    assert got.to_pylist() == expected.to_pylist()
    assert [c.properties.headers for c in commands_of(got)] == [
        {"m": dict(mapped[0].as_py()), "l": [1, 2]},
        {"m": dict(mapped[1].as_py()), "l": [3]},
    ]
    json_enc = PublishEncoder(body_format="json")
    assert [json.loads(c.body) for c in commands_of(json_enc.encode(headers, rks(2)))] == [
        {"m": dict(mapped[0].as_py()), "l": [1, 2]},
        {"m": dict(mapped[1].as_py()), "l": [3]},
    ]


def test_sliced_json_and_table_bodies():
    body = pa.array([{"a": i, "s": None if i % 2 else f"s{i}"} if i % 5 else None for i in range(20)],
                    pa.struct([("a", pa.int32()), ("s", pa.string())]))
    for fmt in ("json", "table"):
        enc = PublishEncoder(body_format=fmt)
        got = enc.encode(body.slice(7), rks(13))
        assert got.to_pylist() == enc.encode(rebuilt(body.slice(7)), rks(13)).to_pylist()
    got = commands_of(PublishEncoder(body_format="json").encode(body.slice(7), rks(13)))
    assert [c.body for c in got][:4] == [b'{"a":7}', b'{"a":8,"s":"s8"}', b'{"a":9}', b""]


def test_chunked_array_inputs():
    body, routing, exchange, headers, props = sample_columns(10)
    chunked = [pa.chunked_array([c.slice(0, 4), c.slice(4)]) for c in (body, routing, exchange, headers, props)]
    enc = PublishEncoder()
    expected = enc.encode(body, routing, exchange, headers=headers)
    got = enc.encode(chunked[0], chunked[1], chunked[2], headers=chunked[3])
    assert got.to_pylist() == expected.to_pylist()
    expected = enc.encode(body, routing, properties=props)
    got = enc.encode(chunked[0], chunked[1], properties=chunked[4])
    assert got.to_pylist() == expected.to_pylist()


def test_large_types_and_string_bodies_give_the_same_bytes():
    values = ["", "héllo", None, "x" * 5000]
    enc = PublishEncoder(frame_max=4096)
    routing = pa.array(["a", "b", "c", "d"])
    headers = pa.array([[("k", "v")]] * 4, pa.map_(pa.string(), pa.string()))
    reference = enc.encode(pa.array([None if v is None else v.encode() for v in values], pa.binary()), routing,
                           pa.array(["e"] * 4), headers=headers).to_pylist()
    for body_type in (pa.binary(), pa.large_binary(), pa.string(), pa.large_string()):
        raw = [None if v is None else (v if pa.types.is_string(body_type) or pa.types.is_large_string(body_type)
                                       else v.encode()) for v in values]
        for rk_type in (pa.string(), pa.large_string()):
            got = enc.encode(pa.array(raw, body_type), routing.cast(rk_type), pa.array(["e"] * 4, rk_type),
                             headers=headers.cast(pa.map_(pa.large_string(), pa.large_string())))
            assert got.to_pylist() == reference, (body_type, rk_type)
    assert [c.body for c in commands_of(pa.array(reference))] == [b"", "héllo".encode(), b"", b"x" * 5000]


def test_null_typed_body_gives_empty_bodies():
    frames = encode_ok(PublishEncoder(), pa.nulls(2), pa.array(["a", "b"]))
    for value in frames.to_pylist():
        assert len(split_frames(value)) == 2  # no body frame
        assert header_payload(value)[4:12] == bytes(8)
    assert [c.body for c in commands_of(frames)] == [b"", b""]


def test_null_body_has_size_zero_and_no_body_frame():
    frames = encode_ok(PublishEncoder(), pa.array([b"ab", None, b""]), rks(3))
    rows = frames.to_pylist()
    assert [len(split_frames(v)) for v in rows] == [3, 2, 2]
    assert [int.from_bytes(header_payload(v)[4:12], "big") for v in rows] == [2, 0, 0]
    assert rows[1] == rows[2] == encode_publish(1, "", "rk", b"", None, False)


def test_literal_exchange_and_routing_key_override_columns():
    enc = PublishEncoder(exchange="lit-ex", routing_key="lit-rk")
    frames = encode_ok(enc, bodies(2), pa.array(["a", None]), pa.array([None, "b"]))
    assert [(c.method.exchange, c.method.routing_key) for c in commands_of(frames)] == [("lit-ex", "lit-rk")] * 2
    # no routing key column needed with a literal; no exchange column means the default exchange
    frames = encode_ok(PublishEncoder(routing_key="q"), bodies(2))
    assert [(c.method.exchange, c.method.routing_key) for c in commands_of(frames)] == [("", "q")] * 2


def test_encode_batch_matches_the_encoder():
    body, routing, exchange, headers, props = sample_columns(6)
    one_shot = encode_batch(body, routing, exchange, headers, None, channel=9, frame_max=4096, mandatory=True)
    enc = PublishEncoder(channel=9, frame_max=4096, mandatory=True)
    assert one_shot.to_pylist() == enc.encode(body, routing, exchange, headers).to_pylist()
    assert all(c.channel == 9 and c.method.mandatory for c in commands_of(one_shot))
    literal = encode_batch(body, default_exchange="e", default_routing_key="r")
    assert [(c.method.exchange, c.method.routing_key) for c in commands_of(literal)] == [("e", "r")] * 6


def test_empty_batch():
    enc = PublishEncoder()
    frames = enc.encode(pa.array([], pa.binary()), pa.array([], pa.string()))
    assert frames.type == pa.binary() and len(frames) == 0
    assert enc.encode_frames(pa.array([], pa.binary()), pa.array([], pa.string())) == b""


def test_channel_and_mandatory_in_every_frame():
    frames = encode_ok(PublishEncoder(channel=65535, mandatory=True, frame_max=4096),
                       bodies(2, b"y" * 9000), rks(2))
    for value in frames.to_pylist():
        parts = split_frames(value)
        assert [t for t, _, _ in parts] == [1, 2, 3, 3, 3]
        assert {c for _, c, _ in parts} == {65535}
        assert parts[0][2][-1] == 1  # the mandatory bit
    assert all(c.method == BasicPublish(0, "", "rk", True, False) for c in commands_of(frames))


@pytest.mark.parametrize("kwargs, exc", [
    ({"channel": 0}, ValueError),
    ({"channel": 65536}, ValueError),
    ({"body_format": "xml"}, ValueError),
    ({"exchange": "e" * 256}, ValueError),
    ({"routing_key": "r" * 256}, ValueError),
    ({"routing_key": b"rk"}, TypeError),
])
def test_bad_encoder_settings(kwargs, exc):
    with pytest.raises(exc):
        PublishEncoder(**kwargs)


# --------------------------------------------------------------------------- errors


def good_batch():
    return (pa.array([b"ok-1", b"ok-2"]), pa.array(["r1", "r2"]))


def assert_still_good(enc: PublishEncoder, **encoder_kwargs):
    """After a failed encode the same encoder produces exactly what a fresh one does."""
    fresh = PublishEncoder(**encoder_kwargs)
    assert enc.encode(*good_batch()).to_pylist() == fresh.encode(*good_batch()).to_pylist()
    assert enc.encode_frames(*good_batch()) == fresh.encode_frames(*good_batch())
    assert [c.body for c in commands_of(enc.encode(*good_batch()))] == [b"ok-1", b"ok-2"]


def row_error(enc, *args, **kwargs) -> RowEncodeError:
    with pytest.raises(RowEncodeError) as info:
        enc.encode(*args, **kwargs)
    with pytest.raises(RowEncodeError):
        enc.encode_frames(*args, **kwargs)
    err = info.value
    assert isinstance(err, AMQPSyntaxError)
    assert str(err).startswith(f"row {err.row}: ")
    return err


def test_null_routing_key():
    enc = PublishEncoder()
    big = bodies(3, b"z" * 100000)  # row 0 written in full before row 2 fails
    err = row_error(enc, big, pa.array(["a", "b", None]))
    assert (err.row, err.field) == (2, "routing_key")
    assert "row 2" in str(err) and "routing_key" in str(err) and "null" in str(err)
    assert_still_good(enc)


def test_null_typed_routing_key_column():
    enc = PublishEncoder()
    err = row_error(enc, bodies(2), pa.nulls(2, pa.string()))
    assert (err.row, err.field) == (0, "routing_key")
    assert_still_good(enc)


def test_null_exchange():
    enc = PublishEncoder()
    err = row_error(enc, bodies(2), rks(2), pa.array(["", None]))
    assert (err.row, err.field) == (1, "exchange")
    assert "row 1" in str(err) and "exchange" in str(err)
    assert_still_good(enc)


def test_routing_key_and_exchange_of_256_bytes():
    enc = PublishEncoder()
    ok = "é" * 127 + "k"  # 255 bytes
    frames = encode_ok(enc, bodies(1), pa.array([ok]), pa.array([ok]))
    assert commands_of(frames)[0].method.routing_key == ok
    err = row_error(enc, bodies(2), pa.array(["a", ok + "x"]))
    assert (err.row, err.field) == (1, "routing_key")
    assert "256 bytes" in str(err)
    err = row_error(enc, bodies(2), rks(2), pa.array(["é" * 128, ""]))
    assert (err.row, err.field) == (0, "exchange")
    assert_still_good(enc)


@pytest.mark.parametrize("name", [n for n in PROPERTY_NAMES
                                  if n not in ("headers", "delivery_mode", "priority", "timestamp")])
def test_short_string_property_of_256_bytes(name):
    enc = PublishEncoder()
    props = pa.StructArray.from_arrays([pa.array(["ok", "p" * 256, "ok"])], names=[name])
    err = row_error(enc, bodies(3), rks(3), properties=props)
    assert (err.row, err.field) == (1, f"properties.{name}")
    assert "row 1" in str(err) and f"properties.{name}" in str(err)
    assert_still_good(enc)


@pytest.mark.parametrize("name", ["delivery_mode", "priority"])
@pytest.mark.parametrize("arrow_type, bad", [(pa.int32(), 256), (pa.int64(), -1), (pa.int8(), -1),
                                             (pa.uint16(), 256), (pa.uint64(), 2**64 - 1)])
def test_octet_property_out_of_range(name, arrow_type, bad):
    enc = PublishEncoder()
    props = pa.StructArray.from_arrays([pa.array([1, bad], arrow_type)], names=[name])
    err = row_error(enc, bodies(2), rks(2), properties=props)
    assert (err.row, err.field) == (1, f"properties.{name}")
    assert_still_good(enc)


@pytest.mark.parametrize("arrow_type, bad", [(pa.int64(), -1), (pa.int32(), -1),
                                             (pa.timestamp("s"), datetime.datetime(1969, 12, 31, 23, 59, 59)),
                                             (pa.date32(), datetime.date(1969, 12, 31)),
                                             (pa.date32(), 2932897),  # day of 10000-01-01
                                             (pa.int64(), 253402300800),
                                             (pa.uint64(), 2**63), (pa.uint64(), 2**64 - 1)])
def test_timestamp_property_out_of_range(arrow_type, bad):
    enc = PublishEncoder()
    props = pa.StructArray.from_arrays([pa.array([bad], arrow_type)], names=["timestamp"])
    err = row_error(enc, bodies(1), rks(1), properties=props)
    assert (err.row, err.field) == (0, "properties.timestamp")
    assert_still_good(enc)


def test_octet_property_error_message_shows_the_value():
    props = pa.StructArray.from_arrays([pa.array([-1], pa.int64())], names=["delivery_mode"])
    with pytest.raises(RowEncodeError) as info:
        PublishEncoder().encode(bodies(1), rks(1), properties=props)
    assert "-1 is out of range" in str(info.value)


@pytest.mark.parametrize("arrow_type, bad, text", [
    (pa.uint64(), 2**63, "9223372036854775808"),
    (pa.uint64(), 2**64 - 1, "18446744073709551615"),
    (pa.decimal128(12, 2), decimal.Decimal("21474836.48"), "21474836.48"),
    (pa.decimal128(38, 0), decimal.Decimal(-(2**31) - 1), str(-(2**31) - 1)),
    (pa.decimal128(38, 0), decimal.Decimal(2**64), str(2**64)),
])
def test_header_value_that_does_not_fit(arrow_type, bad, text):
    enc = PublishEncoder()
    headers = pa.array([[("ok", None)], [("k", bad)]], pa.map_(pa.string(), arrow_type))
    err = row_error(enc, bodies(2), rks(2), headers=headers)
    assert err.row == 1
    assert text in str(err)
    assert_still_good(enc)


def test_header_value_error_names_the_headers_column():
    headers = pa.array([[("k", 2**63)]], pa.map_(pa.string(), pa.uint64()))
    with pytest.raises(RowEncodeError) as info:
        PublishEncoder().encode(bodies(1), rks(1), headers=headers)
    assert info.value.field.startswith("headers")
    assert "headers" in str(info.value)


def test_decimal_edges_that_fit():
    headers = pa.array([[("min", decimal.Decimal(-(2**31))), ("max", decimal.Decimal(2**31 - 1))]],
                       pa.map_(pa.string(), pa.decimal128(38, 0)))
    [command] = commands_of(encode_ok(PublishEncoder(), bodies(1), rks(1), headers=headers))
    assert command.properties.headers == {"min": decimal.Decimal(-(2**31)), "max": decimal.Decimal(2**31 - 1)}


def test_map_key_over_255_bytes():
    enc = PublishEncoder()
    headers = pa.array([[("a", 1)], [("a", 1), ("k" * 256, 2)]], pa.map_(pa.string(), pa.int32()))
    err = row_error(enc, bodies(2), rks(2), headers=headers)
    assert (err.row, err.field) == (1, "headers")
    assert "256 bytes" in str(err)
    assert_still_good(enc)


class RelabelledArray:
    """An Arrow C data export of ``array`` under another (physically identical) schema:
    how a producer other than pyarrow can hand over a map with a null key, which pyarrow
    itself refuses to build."""

    def __init__(self, array: pa.Array, arrow_type: pa.DataType):
        self.array = array
        self.arrow_type = arrow_type

    def __arrow_c_array__(self, requested_schema=None):
        _, array_capsule = self.array.__arrow_c_array__()
        return self.arrow_type.__arrow_c_schema__(), array_capsule


def null_key_map() -> RelabelledArray:
    entry = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.int32())])
    lists = pa.array([[{"key": "a", "value": 1}], [{"key": "b", "value": 2}, {"key": None, "value": 3}]],
                     pa.list_(entry))
    return RelabelledArray(lists, pa.map_(pa.string(), pa.int32()))


def test_null_map_key():
    enc = PublishEncoder()
    err = row_error(enc, bodies(2), rks(2), headers=null_key_map())
    assert (err.row, err.field) == (1, "headers")
    assert "null" in str(err)
    assert_still_good(enc)
    table = PublishEncoder(body_format="table")
    err = row_error(table, null_key_map(), rks(2))
    assert err.row == 1


def test_null_map_key_in_a_json_body():
    enc = PublishEncoder(body_format="json")
    try:
        frames = enc.encode(null_key_map(), rks(2))
    except RowEncodeError as err:
        assert err.row == 1
    else:
        for command in commands_of(frames):
            json.loads(command.body)


def test_unknown_property_name():
    enc = PublishEncoder()
    props = pa.array([{"content_type": "a", "colour": "red"}])
    with pytest.raises(ArrowTypeError, match="colour") as info:
        enc.encode(bodies(1), rks(1), properties=props)
    assert isinstance(info.value, TypeError)
    assert_still_good(enc)


@pytest.mark.parametrize("name, arrow_type, value", [
    ("content_type", pa.int64(), 5),
    ("reply_to", pa.binary(), b"q"),
    ("delivery_mode", pa.string(), "2"),
    ("priority", pa.float64(), 1.0),
    ("priority", pa.bool_(), True),
    ("timestamp", pa.string(), "2021-01-01"),
    ("headers", pa.string(), "a=b"),
    ("headers", pa.list_(pa.string()), ["a"]),
])
def test_wrong_property_type(name, arrow_type, value):
    enc = PublishEncoder()
    props = pa.StructArray.from_arrays([pa.array([value], arrow_type)], names=[name])
    with pytest.raises(ArrowTypeError, match=f"properties.{name}"):
        enc.encode(bodies(1), rks(1), properties=props)
    assert_still_good(enc)


@pytest.mark.parametrize("what, kwargs", [
    ("properties", {"properties": pa.array([b"x"])}),
    ("headers", {"headers": pa.array(["a=b"])}),
    ("headers", {"headers": pa.array([[(1, "v")]], pa.map_(pa.int32(), pa.string()))}),
    ("routing_key", {"routing_key": pa.array([1])}),
    ("exchange", {"exchange": pa.array([b"e"])}),
])
def test_wrong_column_types(what, kwargs):
    enc = PublishEncoder()
    kwargs.setdefault("routing_key", rks(1))
    with pytest.raises(ArrowTypeError, match=what):
        enc.encode(bodies(1), **kwargs)
    assert_still_good(enc)


@pytest.mark.parametrize("body_format, body", [
    ("raw", pa.array([1], pa.int64())),
    ("raw", pa.array([{"a": 1}])),
    ("json", pa.array([b"x"])),
    ("table", pa.array(["x"])),
    ("table", pa.array([[1]], pa.list_(pa.int32()))),
])
def test_body_of_the_wrong_type_for_the_format(body_format, body):
    enc = PublishEncoder(body_format=body_format)
    with pytest.raises(ArrowTypeError, match="body"):
        enc.encode(body, rks(1))
    good = good_batch()[0] if body_format == "raw" else pa.array([{"a": 1}, {"a": 2}])
    fresh = PublishEncoder(body_format=body_format)
    assert enc.encode(good, rks(2)).to_pylist() == fresh.encode(good, rks(2)).to_pylist()


@pytest.mark.parametrize("arrow_type", [pa.float16(), pa.time32("s"), pa.duration("s"), pa.binary(3),
                                        pa.dictionary(pa.int8(), pa.string()), pa.decimal256(40, 2)])
def test_unsupported_header_types(arrow_type):
    enc = PublishEncoder()
    headers = pa.array([[("k", None)]], pa.map_(pa.string(), arrow_type))
    with pytest.raises(ArrowTypeError):
        enc.encode(bodies(1), rks(1), headers=headers)
    assert_still_good(enc)


def test_not_an_arrow_array():
    with pytest.raises(ArrowTypeError, match="body"):
        PublishEncoder().encode([b"a"], rks(1))


@pytest.mark.parametrize("column", ["routing_key", "exchange", "headers", "properties"])
def test_mismatched_column_lengths(column):
    enc = PublishEncoder()
    columns = {
        "routing_key": rks(3),
        "exchange": pa.array(["e"] * 3),
        "headers": pa.array([[("k", "v")]] * 3, pa.map_(pa.string(), pa.string())),
        "properties": pa.array([{"priority": 1}] * 3),
    }
    columns[column] = columns[column].slice(1)
    with pytest.raises(ValueError, match=column):
        enc.encode(bodies(3), **columns)
    assert_still_good(enc)


def test_no_routing_key_at_all():
    with pytest.raises(ValueError, match="routing_key"):
        PublishEncoder().encode(bodies(1))


def test_header_frame_over_frame_max():
    enc = PublishEncoder(frame_max=4096)
    # header frame = 8 + 14 + 4 (table size) + 7 (key "k", 'S', u32 size) + len(value) = 33 + n
    fits = pa.array([[("k", "v" * 4063)]], pa.map_(pa.string(), pa.string()))
    [value] = encode_ok(enc, bodies(1), rks(1), headers=fits).to_pylist()
    assert 8 + len(header_payload(value)) == 4096  # exactly frame_max is allowed
    assert command_of(value).properties.headers == {"k": "v" * 4063}
    too_big = pa.array([[("k", "v")], [("k", "v" * 4064)]], pa.map_(pa.string(), pa.string()))
    err = row_error(enc, bodies(2), rks(2), headers=too_big)
    assert err.row == 1
    assert "4097" in str(err) and "4096" in str(err)
    assert_still_good(enc, frame_max=4096)
    # with no limit the same row is fine
    [command] = commands_of(encode_ok(PublishEncoder(frame_max=0), bodies(1), rks(1), headers=too_big.slice(1)))
    assert command.properties.headers == {"k": "v" * 4064}


def test_error_fails_the_whole_batch_and_a_bigger_batch_after_is_whole():
    enc = PublishEncoder(frame_max=4096)
    n = 500
    good = pa.array([bytes([i % 256]) * (i * 10) for i in range(n)])
    routing = pa.array([f"r{i}" for i in range(n)])
    bad_routing = pa.array([f"r{i}" if i != n - 1 else None for i in range(n)])
    err = row_error(enc, good, bad_routing)
    assert err.row == n - 1
    frames = enc.encode(good, routing)
    assert frames.to_pylist() == PublishEncoder(frame_max=4096).encode(good, routing).to_pylist()
    assert [c.body for c in commands_of(frames)] == good.to_pylist()


def test_row_encode_error_pickles():
    import pickle

    try:
        PublishEncoder().encode(bodies(3), pa.array(["a", "b", None]))
    except RowEncodeError as err:
        copy = pickle.loads(pickle.dumps(err))
    assert isinstance(copy, RowEncodeError)
    assert (copy.row, copy.field, str(copy)) == (2, "routing_key", "row 2: routing_key: is null")


# --------------------------------------------------------------------------- frame_max


@pytest.mark.parametrize("size, chunks", [
    (0, []),
    (1, [1]),
    (4088, [4088]),
    (4089, [4088, 1]),
    (3 * 4088 + 1, [4088, 4088, 4088, 1]),
])
def test_body_frames_at_frame_max_4096(size, chunks):
    body = bytes((i * 7) & 0xFF for i in range(size))
    frames = encode_ok(PublishEncoder(frame_max=4096), pa.array([body]), rks(1))
    [value] = frames.to_pylist()
    parts = split_frames(value)
    assert [len(p) for t, _, p in parts if t == 3] == chunks
    assert all(len(p) + 8 <= 4096 for _, _, p in parts)
    assert b"".join(p for t, _, p in parts if t == 3) == body
    assert value == encode_publish(1, "", "rk", body, None, False, frame_max=4096)
    assert command_of(value).body == body


@pytest.mark.parametrize("frame_max", [0, 4096, 131072])
def test_frame_max_zero_means_one_body_frame(frame_max):
    body = bytes(range(256)) * 800  # 204800 bytes
    [value] = encode_ok(PublishEncoder(frame_max=frame_max), pa.array([body]), rks(1)).to_pylist()
    sizes = [len(p) for t, _, p in split_frames(value) if t == 3]
    if frame_max == 0:
        assert sizes == [len(body)]
    else:
        assert sizes == [frame_max - 8] * (len(body) // (frame_max - 8)) + [len(body) % (frame_max - 8)]
    assert value == encode_publish(1, "", "rk", body, None, False, frame_max=frame_max)


def test_default_frame_max_is_131072():
    body = b"b" * 131072
    [value] = encode_ok(PublishEncoder(), pa.array([body]), rks(1)).to_pylist()
    assert [len(p) for t, _, p in split_frames(value) if t == 3] == [131064, 8]


@pytest.mark.parametrize("frame_max, exc", [
    (1, ValueError), (4095, ValueError), (-1, ValueError), (2**32, ValueError),
    (True, TypeError), (4096.0, TypeError), ("4096", TypeError), (None, TypeError),
])
def test_invalid_frame_max(frame_max, exc):
    with pytest.raises(exc):
        PublishEncoder(frame_max=frame_max)
    with pytest.raises(exc):
        encode_batch(bodies(1), rks(1), frame_max=frame_max)


def test_frame_max_limits_accepted():
    for frame_max in (4096, 2**32 - 1):
        [command] = commands_of(encode_ok(PublishEncoder(frame_max=frame_max), bodies(1, b"abc"), rks(1)))
        assert command.body == b"abc"


# --------------------------------------------------------------------------- JSON bodies


def json_bodies(body: pa.Array) -> list:
    frames = encode_ok(PublishEncoder(body_format="json"), body, rks(len(body)))
    for value, command in zip(frames.to_pylist(), commands_of(frames)):
        assert int.from_bytes(header_payload(value)[4:12], "big") == len(command.body)
    return [json.loads(c.body) if c.body else None for c in commands_of(frames)]


def test_json_all_types():
    cols = {
        "s": pa.array(['q"uo\\te\n\x01\x1f\x7f é 😀\t\r/', None]),
        "b": pa.array([b"\x00\xff\x10", b""]),
        "b2": pa.array([b"a", b"ab"], pa.large_binary()),
        "bo": pa.array([True, False]),
        "i8": pa.array([-128, 127], pa.int8()),
        "i16": pa.array([-32768, 1], pa.int16()),
        "i32": pa.array([-(2**31), 2], pa.int32()),
        "i64": pa.array([-(2**63), 2**63 - 1], pa.int64()),
        "u8": pa.array([255, 0], pa.uint8()),
        "u16": pa.array([65535, 0], pa.uint16()),
        "u32": pa.array([2**32 - 1, 0], pa.uint32()),
        "u64": pa.array([2**64 - 1, 0], pa.uint64()),
        "f32": pa.array([0.1, 1e20], pa.float32()),
        "f32b": pa.array([float("nan"), float("-inf")], pa.float32()),
        "f64": pa.array([0.1, float("inf")], pa.float64()),
        "f64b": pa.array([1e16, -0.0], pa.float64()),
        "f64c": pa.array([100.0, 1.5e-7], pa.float64()),
        "ts_s": pa.array([datetime.datetime(2024, 2, 29, 23, 59, 59), datetime.datetime(1969, 12, 31, 23, 59, 59)],
                         pa.timestamp("s")),
        "ts_ms": pa.array([datetime.datetime(2024, 1, 1, 0, 0, 0, 5000), None], pa.timestamp("ms", tz="UTC")),
        "ts_us": pa.array([datetime.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
                           datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
                          pa.timestamp("us", tz="Europe/Paris")),
        "ts_ns": pa.array([1, -1], pa.timestamp("ns")),
        "d32": pa.array([datetime.date(2000, 3, 1), datetime.date(1, 1, 1)], pa.date32()),
        "dec": pa.array([decimal.Decimal("1.50"), decimal.Decimal("-0.01")], pa.decimal128(5, 2)),
        "lst": pa.array([[1, None, 3], []], pa.list_(pa.int32())),
        "llst": pa.array([["a"], None], pa.large_list(pa.string())),
        "mp": pa.array([[("k", 1.5), ("j", None)], []], pa.map_(pa.string(), pa.float64())),
        "st": pa.array([{"x": 1, "y": None}, None], pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "nul": pa.nulls(2),
        "ls": pa.array(["big", "x"], pa.large_string()),
        "ü \"key\"": pa.array([1, 2], pa.int8()),
    }
    body = pa.StructArray.from_arrays(list(cols.values()), names=list(cols.keys()))
    first, second = json_bodies(body)
    assert first == {
        "s": 'q"uo\\te\n\x01\x1f\x7f é 😀\t\r/',
        "b": "AP8Q", "b2": "YQ==", "bo": True,
        "i8": -128, "i16": -32768, "i32": -(2**31), "i64": -(2**63),
        "u8": 255, "u16": 65535, "u32": 2**32 - 1, "u64": 2**64 - 1,
        "f32": 0.1, "f32b": "NaN", "f64": 0.1, "f64b": 1e16, "f64c": 100.0,
        "ts_s": "2024-02-29T23:59:59", "ts_ms": "2024-01-01T00:00:00.005Z", "ts_us": "2024-01-01T00:00:00.123456Z",
        "ts_ns": "1970-01-01T00:00:00.000000001", "d32": "2000-03-01",
        "dec": 1.5, "lst": [1, None, 3], "llst": ["a"], "mp": {"k": 1.5, "j": None}, "st": {"x": 1},
        "ls": "big", "ü \"key\"": 1,
    }
    assert second == {
        "b": "", "b2": "YWI=", "bo": False,
        "i8": 127, "i16": 1, "i32": 2, "i64": 2**63 - 1,
        "u8": 0, "u16": 0, "u32": 0, "u64": 0,
        "f32": 1e20, "f32b": "-Infinity", "f64": "Infinity", "f64b": -0.0, "f64c": 1.5e-7,
        "ts_s": "1969-12-31T23:59:59", "ts_us": "1969-12-31T23:59:59.999999Z",
        "ts_ns": "1969-12-31T23:59:59.999999999", "d32": "0001-01-01",
        "dec": -0.01, "lst": [], "mp": {}, "ls": "x", "ü \"key\"": 2,
    }
    assert math.copysign(1.0, second["f64b"]) == -1.0


def f32(value: float) -> float:
    return struct.unpack(">f", struct.pack(">f", value))[0]


def significant_digits(text: str) -> int:
    mantissa = text.lstrip("-").lower().split("e")[0].replace(".", "")
    return len(mantissa.strip("0")) or 1


def shortest_f32_digits(value: float) -> int:
    def same(k: int) -> bool:
        try:
            return f32(float("%.*g" % (k, value))) == f32(value)
        except OverflowError:  # rounded past float32's largest value
            return False

    return next(k for k in range(1, 10) if same(k))


def json_float32_text(value: float) -> str:
    body = pa.StructArray.from_arrays([pa.array([value], pa.float32())], names=["f"])
    [command] = commands_of(PublishEncoder(body_format="json").encode(body, rks(1)))
    assert command.body.startswith(b'{"f":') and command.body.endswith(b"}")
    return command.body[5:-1].decode()


@pytest.mark.parametrize("value, text", [(0.1, "0.1"), (1.0, "1.0"), (0.3, "0.3"), (-2.5, "-2.5"),
                                         (3.14159, "3.14159"), (1e20, "1e+20")])
def test_json_float32_exact_text(value, text):
    assert json_float32_text(value) == text


@pytest.mark.parametrize("value", [0.1, 1 / 3, 3.4028234663852886e38, 1.1754943508222875e-38, 16777216.0,
                                   16777217.0, 123456.789, -7.0e-10, 2.0**-126 * 1.5, 0.0])
def test_json_float32_shortest_repr(value):
    text = json_float32_text(value)
    assert f32(json.loads(text)) == f32(value)
    assert significant_digits(text) == shortest_f32_digits(value), text


@pytest.mark.parametrize("value", [1e-45, 2.8e-45, 1e-40])
def test_json_float32_subnormal_shortest_repr(value):
    text = json_float32_text(value)
    assert f32(json.loads(text)) == f32(value)
    assert significant_digits(text) == shortest_f32_digits(value), text


def test_json_float64_repr():
    values = [0.1, 1 / 3, 1e300, 5e-324, 123456789.125, -1e-7]
    body = pa.StructArray.from_arrays([pa.array(values, pa.float64())], names=["d"])
    got = [c.body for c in commands_of(PublishEncoder(body_format="json").encode(body, rks(len(values))))]
    assert got == [b'{"d":' + repr(v).encode() + b"}" for v in values]


@pytest.mark.parametrize("text", [
    'say "hi"', "back\\slash", "line\nfeed", "\x00\x01\x02\x1f", "tab\tcr\r", "emoji 😀🎉", "ü é ñ 中文",
    "\u2028\u2029", "</script>", "", "\x7f", "\ud7ff\ue000\U0010ffff",
])
def test_json_string_escaping(text):
    # (a struct field name cannot hold NUL: the C data interface names are C strings)
    name = text.replace("\x00", "") or "empty"
    body = pa.StructArray.from_arrays([pa.array([text]), pa.array([[(text, text)]], pa.map_(pa.string(),
                                                                                            pa.string()))],
                                      names=[name, "m"])
    [command] = commands_of(PublishEncoder(body_format="json").encode(body, rks(1)))
    assert json.loads(command.body) == {name: text, "m": {text: text}}
    assert all(b >= 0x20 for b in command.body)  # control characters escaped


def test_json_nested_lists_and_maps():
    inner = pa.struct([("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.list_(pa.int64())))])
    body = pa.array([
        {"items": [{"tags": ["a", None], "attrs": [("x", [1, 2]), ("y", None)]}, None], "n": None},
        {"items": [], "n": {"tags": None, "attrs": []}},
        None,
    ], pa.struct([("items", pa.list_(inner)), ("n", inner)]))
    assert json_bodies(body) == [
        {"items": [{"tags": ["a", None], "attrs": {"x": [1, 2], "y": None}}, None]},
        {"items": [], "n": {"attrs": {}}},
        None,
    ]


def test_json_map_body():
    body = pa.array([[("a", {"x": 1})], [], None], pa.map_(pa.string(), pa.struct([("x", pa.int32())])))
    frames = PublishEncoder(body_format="json").encode(body, rks(3))
    assert [c.body for c in commands_of(frames)] == [b'{"a":{"x":1}}', b"{}", b""]


def test_json_map_with_integer_keys():
    body = pa.array([[(1, "a"), (-2, "b")]], pa.map_(pa.int32(), pa.string()))
    assert json_bodies(body) == [{"1": "a", "-2": "b"}]


def test_json_map_with_timestamp_and_binary_keys():
    ts = pa.array([[(datetime.datetime(2020, 1, 1), "a")]], pa.map_(pa.timestamp("s"), pa.string()))
    assert json_bodies(ts) == [{"2020-01-01T00:00:00": "a"}]
    binary = pa.array([[(b"ab", "b")]], pa.map_(pa.binary(), pa.string()))
    assert json_bodies(binary) == [{"YWI=": "b"}]


def test_json_null_struct_fields_left_out():
    body = pa.array([{"a": None, "b": None}, {"a": 1, "b": None}, {"a": None, "b": "x"}],
                    pa.struct([("a", pa.int32()), ("b", pa.string())]))
    frames = PublishEncoder(body_format="json").encode(body, rks(3))
    assert [c.body for c in commands_of(frames)] == [b"{}", b'{"a":1}', b'{"b":"x"}']


def test_json_and_properties_together():
    body = pa.array([{"a": 1}])
    props = pa.array([{"content_type": "application/json"}])
    [command] = commands_of(PublishEncoder(body_format="json").encode(body, rks(1), properties=props))
    assert command.properties.content_type == "application/json"
    assert json.loads(command.body) == {"a": 1}


def test_json_body_split_in_frames():
    big = "x" * 10000
    body = pa.array([{"s": big}])
    [value] = PublishEncoder(body_format="json", frame_max=4096).encode(body, rks(1)).to_pylist()
    assert [len(p) for t, _, p in split_frames(value) if t == 3] == [4088, 4088, 10008 - 8176]
    assert json.loads(command_of(value).body) == {"s": big}


# --------------------------------------------------------------------------- table bodies


def test_table_bodies():
    body = pa.array([
        {"s": "é", "i": 7, "l": [1, 2], "m": [("k", True)], "t": datetime.datetime(2021, 1, 1),
         "d": decimal.Decimal("1.25"), "b": b"\x00", "f": 0.5},
        {"s": None, "i": None, "l": None, "m": [], "t": None, "d": None, "b": None, "f": None},
        None,
    ], pa.struct([("s", pa.string()), ("i", pa.int64()), ("l", pa.list_(pa.int8())),
                  ("m", pa.map_(pa.string(), pa.bool_())), ("t", pa.timestamp("ms")),
                  ("d", pa.decimal128(9, 2)), ("b", pa.binary()), ("f", pa.float32())]))
    frames = encode_ok(PublishEncoder(body_format="table"), body, rks(3))
    got = [c.body for c in commands_of(frames)]
    assert decode_table(got[0]) == {"s": "é", "i": 7, "l": [1, 2], "m": {"k": True}, "t": JAN1,
                                    "d": decimal.Decimal("1.25"), "b": b"\x00", "f": 0.5}
    assert decode_table(got[1]) == {"s": None, "i": None, "l": None, "m": {}, "t": None, "d": None,
                                    "b": None, "f": None}
    assert got[2] == b""
    # the exact bytes of a small one
    small = pa.array([{"a": 1}], pa.struct([("a", pa.int32())]))
    [command] = commands_of(PublishEncoder(body_format="table").encode(small, rks(1)))
    assert command.body == h("00000007 01 61 49 00000001")


def test_table_map_body():
    body = pa.array([[("x", "1"), ("y", "2")], []], pa.map_(pa.string(), pa.string()))
    frames = encode_ok(PublishEncoder(body_format="table"), body, rks(2))
    assert [decode_table(c.body) for c in commands_of(frames)] == [{"x": "1", "y": "2"}, {}]


def test_table_body_field_name_too_long():
    body = pa.StructArray.from_arrays([pa.array([1])], names=["n" * 256])
    with pytest.raises(ArrowTypeError):
        PublishEncoder(body_format="table").encode(body, rks(1))
    # JSON has no such limit
    assert json_bodies(body) == [{"n" * 256: 1}]


# --------------------------------------------------------------------------- decoder


def test_decode_one_whole():
    frames = encode_ok(PublishEncoder(channel=5, mandatory=True, frame_max=4096),
                       pa.array([b"a" * 5000]), pa.array(["r"]), pa.array(["e"]),
                       properties=pa.array([{"priority": 3, "headers": [("k", 1)]}],
                                           pa.struct([("priority", pa.int8()),
                                                      ("headers", pa.map_(pa.string(), pa.int16()))])))
    row = decode_one(frames.to_pylist()[0], 0)
    assert row["exchange"] == "e" and row["routing_key"] == "r" and row["mandatory"] is True
    assert row["body"] == b"a" * 5000
    assert row["headers"] == [("k", "1")]
    assert row["properties"]["priority"] == 3


def test_decode_batch_type_nulls_and_inputs():
    frames = encode_ok(PublishEncoder(), pa.array([b"a", b"b", b"c"]), pa.array(["x", "y", "z"]))
    with_null = pa.array(frames.to_pylist()[:1] + [None] + frames.to_pylist()[1:], pa.binary())
    decoded = decode_batch(with_null)
    assert decoded.type == decoded_type()
    assert [None if r is None else r["body"] for r in decoded.to_pylist()] == [b"a", None, b"b", b"c"]
    assert decode_batch(with_null.slice(1)).to_pylist() == decoded.to_pylist()[1:]
    assert decode_batch(pa.chunked_array([frames.slice(0, 1), frames.slice(1)])).to_pylist() == \
        decode_batch(frames).to_pylist()
    assert decode_batch(frames.cast(pa.large_binary())).to_pylist() == decode_batch(frames).to_pylist()
    with pytest.raises(ArrowTypeError):
        decode_batch(pa.array(["x"]))
    with pytest.raises(ArrowTypeError):
        decode_batch([b"x"])


def one_publish() -> bytes:
    props = pa.array([{"content_type": "t", "headers": [("k", "v")]}],
                     pa.struct([("content_type", pa.string()), ("headers", pa.map_(pa.string(), pa.string()))]))
    [value] = PublishEncoder(frame_max=4096).encode(pa.array([b"b" * 4100]), rks(1),
                                                    properties=props).to_pylist()
    return value


def test_decode_truncated_values_raise_naming_the_row():
    value = one_publish()
    assert decode_one(value, 5)["body"] == b"b" * 4100
    for cut in range(len(value)):
        with pytest.raises(FrameError, match="row 5"):
            decode_one(value[:cut], 5)
    with pytest.raises(FrameError, match="row 1"):
        decode_batch(pa.array([value, value[:-1], value]))


@pytest.mark.parametrize("extra", [
    b"\x01", b"\x03\x00\x01\x00\x00", b"\x02\x00\x01\x00\x00\x00\x00", HEARTBEAT,
    encode_publish(1, "", "rk", b"again"),
    BasicAck(1, False).encode(1),
])
def test_decode_trailing_bytes_raise_naming_the_row(extra):
    value = one_publish()
    with pytest.raises(FrameError, match="row 7"):
        decode_one(value + extra, 7)
    with pytest.raises(FrameError, match="row 2"):
        decode_batch(pa.array([value, value, value + extra]))


@pytest.mark.parametrize("extra", [b"\xce", b"\xff" * 8])
def test_decode_trailing_garbage_names_the_row(extra):
    value = one_publish()
    with pytest.raises(FrameError, match="row 3"):
        decode_one(value + extra, 3)


@pytest.mark.parametrize("data", [
    BasicAck(1, False).encode(1),
    QueueDeclare(queue="q").encode(1),
])
def test_decode_a_non_publish_raises(data):
    with pytest.raises(FrameError, match="row 4"):
        decode_one(data, 4)
    with pytest.raises(FrameError, match="row 1"):
        decode_batch(pa.array([one_publish(), data]))


def test_decode_a_heartbeat_raises_frame_error():
    with pytest.raises(FrameError, match="row 4"):
        decode_one(HEARTBEAT, 4)


# --------------------------------------------------------------------------- Hypothesis

KEYS = st.text(max_size=12)
SHORT_TEXT = st.text(max_size=20)
INT64 = st.integers(-(2**63), 2**63 - 1)

HEADER_KINDS = {
    "str": (pa.map_(pa.string(), pa.string()), st.dictionaries(KEYS, st.none() | SHORT_TEXT, max_size=6)),
    "int": (pa.map_(pa.string(), pa.int64()), st.dictionaries(KEYS, st.none() | INT64, max_size=6)),
    "nested": (
        pa.map_(pa.string(), pa.map_(pa.string(), pa.list_(pa.int64()))),
        st.dictionaries(KEYS, st.none() | st.dictionaries(KEYS, st.none() | st.lists(st.none() | INT64, max_size=4),
                                                          max_size=3), max_size=4),
    ),
}

ROWS = st.lists(
    st.tuples(
        SHORT_TEXT,                                   # routing key
        st.none() | st.binary(max_size=300),          # body
        st.none() | st.sampled_from(["", "amq.direct", "ex-é"]),
    ),
    max_size=12,
)


def as_map(value):
    """A Python dict to what pyarrow takes for a map (recursively)."""
    if isinstance(value, dict):
        return [(k, as_map(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [as_map(v) for v in value]
    return value


def header_json(value):
    return None if value is None else (value if isinstance(value, str) else json.dumps(value, separators=(",", ":")))


@SETTINGS
@given(kind=st.sampled_from(sorted(HEADER_KINDS)), rows=ROWS, data=st.data(),
       frame_max=st.sampled_from([0, 4096]), offset=st.integers(0, 3))
def test_hypothesis_round_trip(kind, rows, data, frame_max, offset):
    arrow_type, strategy = HEADER_KINDS[kind]
    headers = [data.draw(st.none() | strategy) for _ in rows]
    pad = offset  # leading rows dropped by a slice, so offsets are exercised too
    routing = pa.array(["pad"] * pad + [r for r, _, _ in rows], pa.string()).slice(pad)
    body = pa.array([b"pad"] * pad + [b for _, b, _ in rows], pa.binary()).slice(pad)
    exchange = pa.array([""] * pad + [e or "" for _, _, e in rows], pa.string()).slice(pad)
    header_col = pa.array([None] * pad + [None if x is None else as_map(x) for x in headers], arrow_type).slice(pad)
    enc = PublishEncoder(frame_max=frame_max)
    frames = enc.encode(body, routing, exchange, headers=header_col)
    assert_well_formed(frames, len(rows))
    for (rk, b, ex), hdrs, command in zip(rows, headers, commands_of(frames)):
        assert command.method == BasicPublish(0, ex or "", rk, False, False)
        assert command.body == (b or b"")
        assert command.properties.headers == hdrs
    decoded = decode_batch(frames).to_pylist()
    for (rk, b, ex), hdrs, row in zip(rows, headers, decoded):
        assert (row["routing_key"], row["exchange"], row["body"]) == (rk, ex or "", b or b"")
        assert row["headers"] == (None if hdrs is None else [(k, header_json(v)) for k, v in hdrs.items()])
    if frame_max:
        for value in frames.to_pylist():
            assert all(len(p) + 8 <= frame_max for _, _, p in split_frames(value))
    assert enc.encode_frames(body, routing, exchange, headers=header_col) == b"".join(frames.to_pylist())


JSON_ROW = st.fixed_dictionaries({
    "s": st.none() | st.text(max_size=30),
    "i": st.none() | INT64,
    "f": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    "b": st.none() | st.binary(max_size=20),
    "l": st.none() | st.lists(st.none() | st.text(max_size=5), max_size=4),
})
JSON_TYPE = pa.struct([("s", pa.string()), ("i", pa.int64()), ("f", pa.float64()), ("b", pa.binary()),
                       ("l", pa.list_(pa.string()))])


@SETTINGS
@given(st.lists(st.none() | JSON_ROW, max_size=10))
def test_hypothesis_json_bodies(rows):
    body = pa.array(rows, JSON_TYPE)
    got = json_bodies(body) if rows else []
    for row, parsed in zip(rows, got):
        if row is None:
            assert parsed is None
            continue
        expected = {k: v for k, v in row.items() if v is not None}
        if "b" in expected:
            expected["b"] = base64.b64encode(expected["b"]).decode()
        assert parsed == expected


@SETTINGS
@given(st.lists(st.none() | st.dictionaries(KEYS, st.none() | INT64, max_size=5), max_size=8))
def test_hypothesis_table_bodies(rows):
    body = pa.array([None if r is None else list(r.items()) for r in rows], pa.map_(pa.string(), pa.int64()))
    frames = PublishEncoder(body_format="table").encode(body, rks(len(rows)))
    for row, command in zip(rows, commands_of(frames)):
        if row is None:
            assert command.body == b""
        else:
            assert decode_table(command.body) == row
