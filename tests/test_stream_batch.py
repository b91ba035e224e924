"""amqwire.spark.stream_batch: stream messages to one Arrow record batch, in Cython.

Every batch is compared with a reference built here with plain pyarrow from Python
values (pa.array over lists), and validated in full.  Messages are built directly, or
parsed by the codec from hand-written frames (every field type of RabbitMQ's tables)."""
import datetime
import os
import struct
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st

import amqwire.codec as codec
from amqwire.client import Message
from amqwire.codec import BasicProperties
from amqwire.spark.decode import PROPERTY_FIELDS, header_text
from amqwire.spark.errors import MessageRowError
from amqwire.spark.stream_batch import build_batch, stream_schema

import amqp_reference as R
from test_parser_stream_offset import delivery_frames, entry, offset_entry, table

UTC = datetime.timezone.utc
TS = pa.timestamp("us", tz="UTC")
ALL_PROPERTIES = dict(
    content_type="application/json", content_encoding="gzip", delivery_mode=2, priority=9,
    correlation_id="corr-1", reply_to="amq.rabbitmq.reply-to", expiration="60000", message_id="m-1",
    timestamp=datetime.datetime(2024, 2, 29, 23, 59, 58, tzinfo=UTC), type="order.created",
    user_id="guest", app_id="billing", cluster_id="c1",
)


def message(offset, body=b"payload", *, properties=None, exchange="", routing_key="orders", tag=1):
    return Message(1, tag, False, exchange, routing_key, properties or BasicProperties(), body,
                   stream_offset=offset)


def reference(messages, stream):
    """The batch as plain pyarrow builds it from Python values, one Python object per row;
    headers without the broker's x-stream-offset, null when none are left."""
    props = [m.properties for m in messages]
    kinds = {"string": pa.string(), "int32": pa.int32(), "timestamp": TS}
    columns = [
        pa.array([m.body for m in messages], pa.binary()),
        pa.array([stream] * len(messages), pa.string()),
        pa.array([m.stream_offset for m in messages], pa.int64()),
        pa.array([p.timestamp for p in props], TS),
        pa.array([m.exchange for m in messages], pa.string()),
        pa.array([m.routing_key for m in messages], pa.string()),
        pa.StructArray.from_arrays(
            [pa.array([getattr(p, name) for p in props], kinds[kind]) for name, kind in PROPERTY_FIELDS],
            fields=[pa.field(name, kinds[kind]) for name, kind in PROPERTY_FIELDS]),
        pa.array([[(k, header_text(v)) for k, v in (p.headers or {}).items() if k != "x-stream-offset"] or None
                  for p in props], pa.map_(pa.string(), pa.string())),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=stream_schema())


def check(messages, stream="orders"):
    got = build_batch(messages, stream)
    got.validate(full=True)
    expected = reference(messages, stream)
    assert got.schema == expected.schema
    assert got.equals(expected), (got.to_pylist()[:3], expected.to_pylist()[:3])
    return got


def parsed(*frames):
    """Messages as the client gets them: parsed by the codec from frames."""
    parser = codec.CommandParser(frame_max=1 << 20, delivery_type=Message)
    return [d for d in parser.feed(b"".join(frames)) if isinstance(d, Message)]


# ---------------------------------------------------------------------------- the schema

def test_schema_is_the_contract():
    assert stream_schema() == pa.schema([    # nullable, as Spark makes them of the source's DDL
        pa.field("body", pa.binary()),
        pa.field("stream", pa.string()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TS),
        pa.field("exchange", pa.string()),
        pa.field("routing_key", pa.string()),
        pa.field("properties", pa.struct([
            ("content_type", pa.string()), ("content_encoding", pa.string()), ("delivery_mode", pa.int32()),
            ("priority", pa.int32()), ("correlation_id", pa.string()), ("reply_to", pa.string()),
            ("expiration", pa.string()), ("message_id", pa.string()), ("timestamp", TS), ("type", pa.string()),
            ("user_id", pa.string()), ("app_id", pa.string()), ("cluster_id", pa.string())])),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
    ])


# ---------------------------------------------------------------------------- properties

def test_every_property_set():
    got = check([message(7, properties=BasicProperties(**ALL_PROPERTIES, headers={"k": "v"}))])
    row = got.to_pylist()[0]
    assert row["properties"] == ALL_PROPERTIES
    assert row["timestamp"] == ALL_PROPERTIES["timestamp"]
    assert (row["offset"], row["stream"], row["headers"]) == (7, "orders", [("k", "v")])


def test_no_property_set():
    got = check([message(0, properties=BasicProperties())])
    row = got.to_pylist()[0]
    assert row["properties"] == {name: None for name, _ in PROPERTY_FIELDS}
    assert row["timestamp"] is None and row["headers"] is None
    assert got.column("properties").null_count == 0


def test_each_property_alone():
    messages = [message(i, properties=BasicProperties(**{name: value}))
                for i, (name, value) in enumerate(ALL_PROPERTIES.items())]
    got = check(messages)
    for row, (name, value) in zip(got.to_pylist(), ALL_PROPERTIES.items()):
        assert {k: v for k, v in row["properties"].items() if v is not None} == {name: value}


def test_parsed_properties_equal_the_published_ones():
    props = BasicProperties(**ALL_PROPERTIES, headers={"tenant": "ü"})
    got = check(parsed(delivery_frames_with(props, offset=41)))
    row = got.to_pylist()[0]
    assert row["offset"] == 41 and row["properties"] == ALL_PROPERTIES
    assert row["headers"] == [("tenant", "ü")]


def delivery_frames_with(props, *, offset, tag=1, body=b"body"):
    """A stream delivery of ``props`` whose headers end with x-stream-offset as RabbitMQ sends
    it (type 'l', which the encoder writes only for ints past 32 bits)."""
    rest = props.as_dict()
    headers = rest.pop("headers", {})
    first = {name: rest.pop(name) for name in ("content_type", "content_encoding") if name in rest}
    before, after = BasicProperties(**first).encode(), BasicProperties(**rest).encode()
    flags = struct.unpack(">H", before[:2])[0] | struct.unpack(">H", after[:2])[0] | 0x2000
    entries = codec.encode_table(headers)[4:] + offset_entry(offset)
    wire = struct.pack(">H", flags) + before[2:] + struct.pack(">I", len(entries)) + entries + after[2:]
    values = dict(consumer_tag="ct", delivery_tag=tag, redelivered=False, exchange="ex", routing_key="rk")
    return R.content(1, R.BY_NAME["basic.deliver"], values, body, wire)


def test_timestamps_naive_and_other_zones_are_utc():
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    stamps = [datetime.datetime(2024, 1, 1, 12, 0, 0),                           # naive: UTC
              datetime.datetime(2024, 1, 1, 14, 0, 0, tzinfo=plus2),
              datetime.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
              datetime.datetime(1, 1, 1, tzinfo=UTC), datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)]
    got = check([message(i, properties=BasicProperties(timestamp=ts)) for i, ts in enumerate(stamps)])
    values = got.column("timestamp").to_pylist()
    assert values[0] == values[1] == datetime.datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert values[2].microsecond == 123456


# ---------------------------------------------------------------------------- headers

# every field type of RabbitMQ's tables, on the wire, with the text it must become
EVERY_TYPE = [
    (entry("S", b"S", R.longstr("text")), "text"),
    (entry("S-not-utf8", b"S", R.longstr(b"\xff\xfe")), '"//4="'),
    (entry("x", b"x", R.longstr(b"\x00\x01")), '"AAE="'),
    (entry("x-empty", b"x", R.longstr(b"")), '""'),
    (entry("x-2", b"x", R.longstr(b"ab")), '"YWI="'),
    (entry("x-3", b"x", R.longstr(b"abc")), '"YWJj"'),
    (entry("A", b"A", struct.pack(">I", 10) + b"l" + struct.pack(">q", 7) + b"V"), "[7,null]"),
    (entry("A-empty", b"A", struct.pack(">I", 0)), "[]"),
    (entry("F", b"F", table(offset_entry(99), entry("s", b"S", R.longstr("ü\"\n")))),
     '{"x-stream-offset":99,"s":"\\u00fc\\"\\n"}'),
    (entry("F-empty", b"F", table()), "{}"),
    (entry("t", b"t", b"\x01"), "true"),
    (entry("t0", b"t", b"\x00"), "false"),
    (entry("b", b"b", b"\xff"), "-1"),
    (entry("B", b"B", b"\xff"), "255"),
    (entry("s", b"s", b"\xff\xfe"), "-2"),
    (entry("u", b"u", b"\xff\xfe"), "65534"),
    (entry("I", b"I", struct.pack(">i", -5)), "-5"),
    (entry("i", b"i", struct.pack(">I", 4294967295)), "4294967295"),
    (entry("l-min", b"l", struct.pack(">q", -2**63)), "-9223372036854775808"),
    (entry("L", b"L", struct.pack(">q", 2**63 - 1)), "9223372036854775807"),
    (entry("f", b"f", struct.pack(">f", 0.1)), "0.10000000149011612"),
    (entry("d", b"d", struct.pack(">d", 2.5)), "2.5"),
    (entry("d-big", b"d", struct.pack(">d", 1e300)), "1e+300"),
    (entry("d-whole", b"d", struct.pack(">d", 3.0)), "3.0"),
    (entry("d-nan", b"d", struct.pack(">d", float("nan"))), "NaN"),
    (entry("d-inf", b"d", struct.pack(">d", float("-inf"))), "-Infinity"),
    (entry("D", b"D", b"\x02" + struct.pack(">i", 314)), "3.14"),
    (entry("D-whole", b"D", b"\x02" + struct.pack(">i", 500)), "5"),
    (entry("T", b"T", struct.pack(">Q", 1_700_000_000)), '"2023-11-14T22:13:20Z"'),
    (entry("T-0", b"T", struct.pack(">Q", 0)), '"1970-01-01T00:00:00Z"'),
    (entry("V", b"V", b""), None),
    (entry("clé ✓", b"S", R.longstr("välue ✓")), "välue ✓"),
]


def test_every_header_type_of_the_rabbitmq_dialect():
    headers = table(*(wire for wire, _ in EVERY_TYPE), offset_entry(1234))
    [m] = parsed(delivery_frames(headers, payload=b"x"))
    assert m.stream_offset == 1234
    got = check([m])
    expected = [(wire[1:1 + wire[0]].decode(), text) for wire, text in EVERY_TYPE]
    assert got.column("headers").to_pylist()[0] == expected


def test_header_values_built_in_python():
    plus1 = datetime.timezone(datetime.timedelta(hours=1))
    headers = {
        "big": 2**70, "neg": -(2**63) - 1, "bytearray": bytearray(b"\x00"), "tuple": (1, "a"),
        "naive": datetime.datetime(2024, 1, 1, 0, 0, 1),
        "plus1": datetime.datetime(2024, 1, 1, 0, 0, 1, tzinfo=plus1),
        "micro": datetime.datetime(2024, 1, 1, 0, 0, 1, 5, tzinfo=UTC),
        "decimal": Decimal("-0.001"), "nested": {"a": [b"\x01", {"b": None}], "t": True},
        "float": 1e16, "tiny": 5e-324, "neg0": -0.0, "bool": False, "empty": "",
    }
    got = check([message(1, properties=BasicProperties(headers=headers))])
    rendered = dict(got.column("headers").to_pylist()[0])
    assert rendered["micro"] == '"2024-01-01T00:00:01.000005Z"'
    assert rendered["float"] == "1e+16" and rendered["neg0"] == "-0.0" and rendered["big"] == str(2**70)


def test_headers_without_any_of_the_publishers_are_null():
    only_offset = parsed(delivery_frames(table(offset_entry(5))))
    got = check([message(1, properties=BasicProperties(headers={})), message(2)] + only_offset)
    assert got.column("headers").to_pylist() == [None, None, None]
    assert got.column("offset").to_pylist() == [1, 2, 5]


def test_the_offset_header_is_left_out_whatever_its_type_but_nested_ones_stay():
    headers = {"a": "1", "x-stream-offset": "not the broker's", "F": {"x-stream-offset": 3}}
    got = check([message(1, properties=BasicProperties(headers=headers))])
    assert got.column("headers").to_pylist() == [[("a", "1"), ("F", '{"x-stream-offset":3}')]]


def test_unicode_keys_and_values():
    headers = {"ключ": "значение", "鍵": "値", "emoji 🎉": "🎉", "": "empty key"}
    got = check([message(1, properties=BasicProperties(headers=headers, content_type="text/ü"),
                         routing_key="routé", exchange="échange")], stream="flüsse")
    row = got.to_pylist()[0]
    assert row["headers"] == list(headers.items()) and row["stream"] == "flüsse"


# ---------------------------------------------------------------------------- bodies and sizes

def test_empty_batch():
    got = check([])
    assert got.num_rows == 0 and got.schema == stream_schema()


def test_bodies_empty_and_large():
    large = bytes(range(256)) * (5 * 4096)   # 5 MiB
    got = check([message(1, b""), message(2, large), message(3, b""), message(4, memoryview(large)[:10])])
    assert got.column("body").to_pylist() == [b"", large, b"", large[:10]]


def test_ten_thousand_messages():
    messages = [message(1000 + 3 * i, f"body {i}".encode() * (i % 5), tag=i,
                        properties=BasicProperties(headers={"i": i, "s": str(i)} if i % 3 else None,
                                                   priority=i % 10 if i % 2 else None))
                for i in range(10_000)]
    got = check(messages, stream="big")
    assert got.column("offset").to_pylist() == [1000 + 3 * i for i in range(10_000)]


def test_many_parsed_deliveries():
    frames = [delivery_frames_with(BasicProperties(headers={"n": i * 1.5}),
                                   offset=i, tag=i + 1, body=b"b" * i) for i in range(300)]
    got = check(parsed(*frames))
    assert got.column("offset").to_pylist() == list(range(300))


def test_the_batch_outlives_its_messages():
    got = build_batch([message(5, b"abc" * 100, properties=BasicProperties(headers={"k": "v" * 50}))], "s")
    import gc
    gc.collect()
    assert got.column("body")[0].as_py() == b"abc" * 100 and got.column("headers")[0].as_py() == [("k", "v" * 50)]


# ---------------------------------------------------------------------------- errors

def test_a_message_without_a_stream_offset_is_an_error_naming_its_index():
    messages = [message(1), message(None), message(3)]
    with pytest.raises(MessageRowError, match=r"message 1: stream_offset") as info:
        build_batch(messages, "orders")
    assert (info.value.index, info.value.field) == (1, "stream_offset")
    assert isinstance(info.value, ValueError) and isinstance(info.value, codec.AmqwireError)


def test_a_deleted_slot_is_an_error_not_a_crash():
    m = message(1)
    del m.stream_offset
    with pytest.raises(MessageRowError, match="message 0: stream_offset"):
        build_batch([m], "s")
    m = message(1)
    del m.body
    with pytest.raises(MessageRowError, match="message 0: body"):
        build_batch([m], "s")


@pytest.mark.parametrize("bad,field", [
    (dict(body=None), "body"), (dict(body="text"), "body"), (dict(routing_key=5), "routing_key"),
    (dict(properties=BasicProperties(priority=2**40)), "properties.priority"),
    (dict(properties=BasicProperties(content_type=b"x")), "properties.content_type"),
    (dict(properties=BasicProperties(timestamp=5)), "properties.timestamp"),
    (dict(properties=BasicProperties(headers={1: "a"})), "headers"),
    (dict(properties=BasicProperties(headers=["a"])), "headers"),
    (dict(properties=BasicProperties(headers={"k": object()})), "headers"),
    (dict(properties="nope"), "properties"),
])
def test_fields_of_the_wrong_type_name_the_message_and_field(bad, field):
    fields = dict(body=b"b", properties=BasicProperties(), routing_key="rk")
    fields.update(bad)
    bad_message = Message(1, 1, False, "", fields["routing_key"], fields["properties"], fields["body"],
                          stream_offset=2)
    with pytest.raises(MessageRowError) as info:
        build_batch([message(1), bad_message], "s")
    assert (info.value.index, info.value.field) == (1, field)


def test_not_a_message():
    with pytest.raises(MessageRowError, match="message 0: message: expected a Delivery"):
        build_batch([object()], "s")
    with pytest.raises(TypeError):
        build_batch(5, "s")
    with pytest.raises(TypeError):
        build_batch([], None)


# ---------------------------------------------------------------------------- hypothesis

text = st.text(max_size=12)
header_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats() | text | st.binary(max_size=8)
    | st.datetimes(min_value=datetime.datetime(1970, 1, 1), timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=0))
    | st.decimals(places=2, min_value=-10**6, max_value=10**6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8)
properties = st.builds(
    BasicProperties,
    content_type=st.none() | text, content_encoding=st.none() | text,
    headers=st.none() | st.dictionaries(text, header_values, max_size=5),
    delivery_mode=st.none() | st.integers(0, 255), priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | text, reply_to=st.none() | text, expiration=st.none() | text,
    message_id=st.none() | text,
    timestamp=st.none() | st.datetimes(min_value=datetime.datetime(1970, 1, 1), timezones=st.just(UTC))
    .map(lambda d: d.replace(microsecond=0)),
    type=st.none() | text, user_id=st.none() | text, app_id=st.none() | text, cluster_id=st.none() | text)
messages = st.lists(st.builds(message, st.integers(0, 2**63 - 1), st.binary(max_size=64), properties=properties,
                              exchange=text, routing_key=text), max_size=20)


@settings(max_examples=150, deadline=None)
@given(messages, text)
def test_random_messages_equal_the_reference(batch, stream):
    check(batch, stream)


@settings(max_examples=60, deadline=None)
@given(messages)
def test_random_messages_through_the_codec(batch):
    """The same messages as the parser hands them over: properties decoded from the wire."""
    frames = []
    for i, m in enumerate(batch):
        frames.append(delivery_frames_with(m.properties, offset=m.stream_offset, tag=i + 1, body=m.body))
    got = check(parsed(*frames), "s")
    assert got.column("offset").to_pylist() == [m.stream_offset for m in batch]


@settings(max_examples=100, deadline=None)
@given(messages, text)
def test_random_messages_equal_the_python_builder_of_the_source(batch, stream):
    """The plain-Python build_batch this module stands in for (spark/stream_rows.py)."""
    from amqwire.spark import stream_rows

    got = build_batch(batch, stream)
    expected = stream_rows.build_batch(batch, stream)
    assert got.schema == expected.schema and got.equals(expected)


@pytest.mark.skipif(os.environ.get("AMQWIRE_BIG_BATCH") != "1",
                    reason="needs ~4 GB of memory: AMQWIRE_BIG_BATCH=1 runs it")
def test_bodies_past_2_gib_become_large_binary():
    body = b"\x01" * (1100 << 20)                      # 1.1 GiB, twice: past 2**31 - 1
    got = build_batch([message(1, b"head"), message(2, body), message(3, body), message(4, b"tail")], "s")
    got.validate()
    column = got.column("body")
    assert column.type == pa.large_binary() and got.schema.field("stream").type == pa.string()
    assert column[3].as_py() == b"tail" and column[0].as_py() == b"head"
    assert pc.binary_length(column).to_pylist() == [4, len(body), len(body), 4]
    assert pc.all(pc.equal(column.slice(2, 1), pa.array([body], pa.large_binary()))).as_py()
