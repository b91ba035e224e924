"""Delivery.stream_offset: the parser reads the int64 header ``x-stream-offset`` (what
RabbitMQ adds to each delivery from a stream queue) from the header bytes in place.

Fed whole, byte by byte, in random chunks and followed by trailing bytes; only a
top-level entry of type 'l' counts; the headers dict is decoded as before."""
import datetime
import struct
from decimal import Decimal

import pytest
from hypothesis import given, settings, strategies as st

import amqwire.codec as codec
from amqwire.codec import Delivery

import amqp_reference as R
from test_parser import MODES, feed_chunks, split
from test_parser_deliveries import Flat

F_CONTENT_TYPE = 0x8000
F_HEADERS = 0x2000
F_PRIORITY = 0x0800


def entry(key: str, letter: bytes, value: bytes) -> bytes:
    return R.shortstr(key) + letter + value


def table(*entries: bytes) -> bytes:
    payload = b"".join(entries)
    return struct.pack(">I", len(payload)) + payload


def offset_entry(value: int, key: str = "x-stream-offset") -> bytes:
    return entry(key, b"l", struct.pack(">q", value))


def delivery_frames(headers=None, *, tag=1, payload=b"body", content_type=None, priority=None):
    """A basic.deliver on channel 1 whose properties are built by hand (headers raw)."""
    flags, props = 0, b""
    if content_type is not None:
        flags |= F_CONTENT_TYPE
        props += R.shortstr(content_type)
    if headers is not None:
        flags |= F_HEADERS
        props += headers
    if priority is not None:
        flags |= F_PRIORITY
        props += bytes([priority])
    values = dict(consumer_tag="ct", delivery_tag=tag, redelivered=False, exchange="", routing_key="s")
    return R.content(1, R.BY_NAME["basic.deliver"], values, payload, struct.pack(">H", flags) + props)


# every field type RabbitMQ's tables carry, under other names, before the offset
EVERY_TYPE = (
    entry("S", b"S", R.longstr("text")),
    entry("x", b"x", R.longstr(b"\x00\x01")),
    entry("A", b"A", struct.pack(">I", 10) + b"l" + struct.pack(">q", 7) + b"V"),
    entry("F", b"F", table(offset_entry(99))),  # nested: not the delivery's offset
    entry("t", b"t", b"\x01"),
    entry("b", b"b", b"\xff"),
    entry("B", b"B", b"\xff"),
    entry("s", b"s", b"\xff\xfe"),
    entry("u", b"u", b"\xff\xfe"),
    entry("I", b"I", struct.pack(">i", -5)),
    entry("i", b"i", struct.pack(">I", 5)),
    entry("f", b"f", struct.pack(">f", 1.5)),
    entry("d", b"d", struct.pack(">d", 2.5)),
    entry("D", b"D", b"\x02" + struct.pack(">i", 314)),
    entry("T", b"T", struct.pack(">Q", 1_700_000_000)),
    entry("V", b"V", b""),
    entry("L", b"L", struct.pack(">q", 3)),
    entry("x-stream-offset-not", b"l", struct.pack(">q", 5)),  # a longer key that starts the same
    entry("x-stream-offseT", b"l", struct.pack(">q", 6)),  # same length, other key
)


CASES = [
    ("no properties", None, None),
    ("headers without the key", table(entry("a", b"S", R.longstr("b"))), None),
    ("empty headers", table(), None),
    ("only the key", table(offset_entry(42)), 42),
    ("zero", table(offset_entry(0)), 0),
    ("largest", table(offset_entry(2**63 - 1)), 2**63 - 1),
    ("negative stays signed", table(offset_entry(-1)), -1),
    ("after every other type", table(*EVERY_TYPE, offset_entry(123456789012)), 123456789012),
    ("first of two", table(offset_entry(1), offset_entry(2)), 1),
    ("only nested", table(entry("F", b"F", table(offset_entry(9)))), None),
    ("wrong type I", table(entry("x-stream-offset", b"I", struct.pack(">i", 4))), None),
    ("wrong type S", table(entry("x-stream-offset", b"S", R.longstr("4"))), None),
    ("wrong type first, then l", table(entry("x-stream-offset", b"L", struct.pack(">q", 4)), offset_entry(8)), 8),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,headers,expected", CASES, ids=[c[0] for c in CASES])
def test_stream_offset_read_from_the_header(name, headers, expected, mode):
    data = delivery_frames(headers, content_type="application/json", priority=4) + R.HEARTBEAT_FRAME
    got = feed_chunks(codec.CommandParser(frame_max=4096, delivery_type=Flat), data, split(mode, len(data)))
    assert len(got) == 2 and type(got[0]) is Flat
    d = got[0]
    assert d.stream_offset == expected
    assert type(d.stream_offset) is (int if expected is not None else type(None))
    # the rest of the properties is decoded as before, the headers dict included
    whole = codec.CommandParser(frame_max=4096).feed(data)[0]
    assert d.properties == whole.properties and d.body == whole.body == b"body"
    assert d.properties.content_type == "application/json" and d.properties.priority == 4


@pytest.mark.parametrize("headers,expected", [(h, e) for _, h, e in CASES])
def test_stream_offset_without_other_properties_and_with_trailing_bytes(headers, expected):
    parser = codec.CommandParser(delivery_type=Delivery)
    data = delivery_frames(headers, tag=1) + delivery_frames(None, tag=2)
    cut = data + delivery_frames(headers, tag=3)[:11]  # a frame cut short after both
    got = parser.feed(cut)
    assert [(d.delivery_tag, d.stream_offset) for d in got] == [(1, expected), (2, None)]
    assert parser.buffered == 11


def test_stream_offset_many_deliveries_in_one_read():
    data = b"".join(delivery_frames(table(offset_entry(1000 + n)), tag=n + 1) for n in range(50))
    got = codec.CommandParser(delivery_type=Flat).feed(data)
    assert [d.stream_offset for d in got] == list(range(1000, 1050))


def test_commands_and_frames_are_unchanged():
    # Without delivery_type the offset stays where it is: in properties.headers.
    data = delivery_frames(table(offset_entry(7)))
    [cmd] = codec.CommandParser().feed(data)
    assert cmd.properties.headers == {"x-stream-offset": 7}
    frames = codec.FrameParser().feed(data)
    assert frames[1].properties.headers == {"x-stream-offset": 7}


def test_malformed_headers_are_refused_as_before():
    bad = table(entry("a", b"Z", b""), offset_entry(1))
    with pytest.raises(codec.AMQPSyntaxError, match="headers.*unknown field type b'Z'"):
        codec.CommandParser(delivery_type=Flat).feed(delivery_frames(bad))


def test_stream_offset_is_a_member_slot_built_and_pickled():
    import pickle
    import types

    assert type(Delivery.__dict__["stream_offset"]) is types.MemberDescriptorType
    d = Flat(3, 7, False, "ex", "rk", None, b"abc", "ct", stream_offset=5)
    assert d.stream_offset == 5
    back = pickle.loads(pickle.dumps(d))
    assert back.stream_offset == 5 and back.delivery_tag == 7
    assert Flat(3, 7, False, "ex", "rk", None, b"abc").stream_offset is None


# hypothesis: tables of any values the codec writes, the offset anywhere or nowhere

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.binary(max_size=8)
    | st.decimals(places=2, min_value=-1000, max_value=1000, allow_nan=False, allow_infinity=False)
    | st.datetimes(min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(2100, 1, 1)).map(
        lambda t: t.replace(microsecond=0, tzinfo=datetime.timezone.utc)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    others=st.dictionaries(st.text(max_size=20).filter(lambda k: k != "x-stream-offset"), VALUES, max_size=6),
    offset=st.none() | st.integers(-(2**63), 2**63 - 1),
    position=st.integers(0, 6),
    cut=st.integers(1, 40),
)
def test_stream_offset_found_anywhere(others, offset, position, cut):
    payload = codec.encode_table(others)[4:]
    encoded = [R.shortstr(k) + v for k, v in _entries(payload)]
    if offset is not None:
        encoded.insert(min(position, len(encoded)), offset_entry(offset))
    data = delivery_frames(table(*encoded))
    got = feed_chunks(codec.CommandParser(frame_max=4096, delivery_type=Flat), data, [cut] * (len(data) // cut + 1))
    assert len(got) == 1
    assert got[0].stream_offset == offset
    assert got[0].properties.headers == codec.decode_table(table(*encoded))


def _entries(payload: bytes):
    """Split an encoded table's payload into (key, letter + value) pairs."""
    pos = 0
    while pos < len(payload):
        n = payload[pos]
        key = payload[pos + 1 : pos + 1 + n].decode()
        pos += 1 + n
        start = pos
        pos += 1 + _value_size(payload, pos)
        yield key, payload[start:pos]


def _value_size(data: bytes, pos: int) -> int:
    letter = data[pos : pos + 1]
    fixed = {b"t": 1, b"b": 1, b"B": 1, b"s": 2, b"u": 2, b"I": 4, b"i": 4, b"f": 4,
             b"l": 8, b"L": 8, b"d": 8, b"T": 8, b"D": 5, b"V": 0}
    if letter in fixed:
        return fixed[letter]
    return 4 + struct.unpack_from(">I", data, pos + 1)[0]


def test_decimal_helper_sanity():
    # the helper above splits what encode_table writes, decimals included
    payload = codec.encode_table({"d": Decimal("1.25"), "n": None})[4:]
    assert [k for k, _ in _entries(payload)] == ["d", "n"]
