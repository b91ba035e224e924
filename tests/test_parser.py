"""Bytes in: FrameParser and CommandParser fed streams built by the independent reference
encoder (tests/amqp_reference.py), whole, byte by byte and in random chunks, plus the
error paths."""
import datetime
import random
import struct

import pytest

import amqwire.codec as codec
from amqwire.codec import (
    AMQPSyntaxError,
    CodecError,
    FrameError,
    ProtocolHeaderError,
    UnexpectedFrame,
)

import amqp_reference as R

UTC = datetime.timezone.utc
PATTERN = bytes(range(256))


def body_of(size, salt=0):
    return bytes((b + salt) & 0xFF for b in (PATTERN * (size // 256 + 1))[:size])


def method(name, channel, **kwargs):
    """(frame bytes from the reference, expected MethodFrame, expected method object)"""
    spec = R.BY_NAME[name]
    values = R.defaults(spec)
    values.update(kwargs)
    m = getattr(codec, spec.py_class)(**kwargs)
    return R.method_frame(spec, values, channel), codec.MethodFrame(channel, m), m


def header(channel, size, **props):
    return R.header_frame(channel, size, R.properties(**props)), codec.HeaderFrame(channel, 60, size, codec.BasicProperties(**props))


def body(channel, data):
    return R.frame(R.FRAME_BODY, channel, data), codec.BodyFrame(channel, data)


def heartbeat():
    return R.HEARTBEAT_FRAME, codec.Heartbeat()


class Stream:
    """Collects frame bytes, the expected frames and the expected commands."""

    def __init__(self):
        self.parts = []  # bytes of each frame
        self.frames = []
        self.commands = []

    def add(self, item, command=None):
        data, frame = item[0], item[1]
        self.parts.append(data)
        self.frames.append(frame)
        if command is not None:
            self.commands.append(command)

    @property
    def data(self):
        return b"".join(self.parts)


P1 = dict(
    content_type="application/json",
    headers={"x-retry": "1", "trace": "abc"},
    delivery_mode=2,
    priority=3,
    message_id="m-1",
    timestamp=datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    type="created",
    app_id="tests",
)


def build_stream():
    s = Stream()
    start = method(
        "connection.start",
        0,
        server_properties={"product": "RabbitMQ", "version": "3.13.0"},
        mechanisms=b"PLAIN AMQPLAIN",
        locales=b"en_US",
    )
    s.add(start, codec.Command(0, start[2]))
    s.add(heartbeat(), codec.Heartbeat())

    # channel 1: a 10000-byte delivery in 3 body frames, interleaved with channel 2 and 3
    d1 = method("basic.deliver", 1, consumer_tag="ctag.1", delivery_tag=1, redelivered=False, exchange="ex", routing_key="rk.1")
    body1 = body_of(10000)
    s.add(d1)
    s.add(header(1, len(body1), **P1))
    s.add(body(1, body1[:4088]))
    d2 = method("basic.deliver", 2, consumer_tag="ctag.2", delivery_tag=2**64 - 1, redelivered=True, exchange="", routing_key="q2")
    s.add(d2)
    s.add(header(2, 3))
    s.add(body(2, b"abc"), codec.Command(2, d2[2], codec.BasicProperties(), b"abc"))
    s.add(body(1, body1[4088:8176]))
    s.add(heartbeat(), codec.Heartbeat())
    ack = method("basic.ack", 3, delivery_tag=7, multiple=True)
    s.add(ack, codec.Command(3, ack[2]))
    close0 = method("connection.blocked", 0, reason="low on memory")
    s.add(close0, codec.Command(0, close0[2]))
    s.add(body(1, body1[8176:]), codec.Command(1, d1[2], codec.BasicProperties(**P1), body1))

    # channel 2: get-ok with an empty body (no body frame at all)
    getok = method("basic.get-ok", 2, delivery_tag=9, redelivered=False, exchange="e", routing_key="k", message_count=0)
    s.add(getok)
    s.add(header(2, 0, content_type="text/plain"), codec.Command(2, getok[2], codec.BasicProperties(content_type="text/plain"), b""))

    # channel 65535: basic.return with one body frame, and a big frame_max-sized body
    ret = method("basic.return", 65535, reply_code=312, reply_text="NO_ROUTE", exchange="amq.direct", routing_key="nowhere")
    body3 = body_of(4088, salt=7)
    s.add(ret)
    s.add(header(65535, len(body3), correlation_id="c", reply_to="r"))
    s.add(body(65535, body3), codec.Command(65535, ret[2], codec.BasicProperties(correlation_id="c", reply_to="r"), body3))

    close = method("channel.close", 1, reply_code=406, reply_text="PRECONDITION_FAILED - \u00e9", class_id=50, method_id=10)
    s.add(close, codec.Command(1, close[2]))
    s.add(heartbeat(), codec.Heartbeat())
    return s


STREAM = build_stream()


def feed_chunks(parser, data, sizes):
    out = []
    pos = 0
    for n in sizes:
        got = parser.feed(data[pos : pos + n])
        assert isinstance(got, list)
        out.extend(got)
        pos += n
    assert pos >= len(data)
    return out


def random_sizes(total, seed, max_chunk):
    rnd = random.Random(seed)
    sizes = []
    while sum(sizes) < total:
        sizes.append(rnd.randint(1, max_chunk))
    return sizes


MODES = ["whole", "bytewise"] + [f"random{seed}" for seed in range(6)]


def split(mode, total):
    if mode == "whole":
        return [total]
    if mode == "bytewise":
        return [1] * total
    seed = int(mode[len("random") :])
    return random_sizes(total, seed, [3, 17, 300, 5000, 9000, 40][seed])


def make_parser(kind, **kw):
    return codec.FrameParser(**kw) if kind == "frames" else codec.CommandParser(**kw)


def expected(kind, stream=STREAM):
    return stream.frames if kind == "frames" else stream.commands


# ---------------------------------------------------------------------------
# valid streams


@pytest.mark.parametrize("kind", ["frames", "commands"])
@pytest.mark.parametrize("mode", MODES)
def test_stream(kind, mode):
    data = STREAM.data
    parser = make_parser(kind, frame_max=4096)
    got = feed_chunks(parser, data, split(mode, len(data)))
    assert got == expected(kind)
    assert parser.buffered == 0


@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_stream_default_frame_max_and_repeated(kind):
    parser = make_parser(kind)
    assert parser.frame_max == 131072
    for _ in range(3):
        assert parser.feed(STREAM.data) == expected(kind)
    assert parser.feed(b"") == []


@pytest.mark.parametrize("kind", ["frames", "commands"])
@pytest.mark.parametrize("wrap", ["bytearray", "memoryview", "memoryview-offset"])
def test_feed_bytes_like(kind, wrap):
    data = STREAM.data
    if wrap == "bytearray":
        arg = bytearray(data)
    elif wrap == "memoryview":
        arg = memoryview(bytearray(data))
    else:
        arg = memoryview(b"garbage" + data + b"more")[7:-4]
    parser = make_parser(kind)
    got = parser.feed(arg)
    assert got == expected(kind)
    # mutating the caller's buffer afterwards changes nothing already returned
    if wrap != "memoryview-offset":
        target = arg if isinstance(arg, bytearray) else arg.obj
        target[:] = b"\x00" * len(target)
    assert got == expected(kind)
    for item in got:
        if isinstance(item, codec.BodyFrame):
            assert type(item.data) is bytes
        if isinstance(item, codec.Command) and item.body is not None:
            assert type(item.body) is bytes


@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_partial_bytearray_mutated_before_rest(kind):
    data = STREAM.data
    for cut in (5, 12, len(STREAM.parts[0]) + 3, 4200, 9000):
        parser = make_parser(kind)
        first = bytearray(data[:cut])
        got = parser.feed(first)
        first[:] = b"\xff" * len(first)  # the parser must have copied what it kept
        got += parser.feed(memoryview(bytearray(data))[cut:])
        assert got == expected(kind), cut


def test_trailing_partial_frame():
    # the stream ends with channel.close + heartbeat: cut inside the channel.close frame
    prefix = b"".join(STREAM.parts[:-2])
    last = STREAM.parts[-2]
    assert len(last) > 20
    for k in sorted({1, 3, 6, 7, 8, 9, len(last) - 1}):
        parser = codec.FrameParser()
        got = parser.feed(prefix + last[:k])
        assert got == STREAM.frames[:-2], k
        assert parser.buffered == k
        assert parser.feed(last[k:] + STREAM.parts[-1]) == STREAM.frames[-2:]
        assert parser.buffered == 0


def test_trailing_partial_frame_commands():
    data, frame, m = method("basic.ack", 4, delivery_tag=3)
    for k in range(1, len(data)):
        parser = codec.CommandParser()
        got = parser.feed(STREAM.data + data[:k])
        assert got == STREAM.commands
        assert parser.buffered == k
        assert parser.feed(data[k:]) == [codec.Command(4, m)]
        assert parser.buffered == 0


def test_buffered_large_body_frame():
    data, frame = body(1, body_of(100_000))
    parser = codec.FrameParser()
    assert parser.feed(data[:50_000]) == []
    assert parser.buffered == 50_000
    assert parser.feed(data[50_000:]) == [frame]


def test_big_message_commands():
    big = body_of(1_000_000, salt=3)
    spec = R.BY_NAME["basic.deliver"]
    values = dict(consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q")
    data = R.content(5, spec, values, big, R.properties(delivery_mode=1), frame_max=131072)
    cmd = codec.Command(5, codec.BasicDeliver(**values), codec.BasicProperties(delivery_mode=1), big)
    for mode in ("whole", "random3", "random4"):
        parser = codec.CommandParser()
        assert feed_chunks(parser, data, split(mode, len(data))) == [cmd]


def test_frame_and_command_objects():
    m = codec.BasicAck(delivery_tag=1)
    f = codec.MethodFrame(1, m)
    assert f.channel == 1 and f.method == m
    assert f == codec.MethodFrame(1, codec.BasicAck(delivery_tag=1))
    assert f != codec.MethodFrame(2, m)
    assert codec.Heartbeat() == codec.Heartbeat()
    assert codec.Heartbeat().channel == 0
    h = codec.HeaderFrame(1, 60, 5, codec.BasicProperties(priority=1))
    assert (h.channel, h.class_id, h.body_size, h.properties) == (1, 60, 5, codec.BasicProperties(priority=1))
    b = codec.BodyFrame(1, b"xy")
    assert (b.channel, b.data) == (1, b"xy")
    assert b != codec.BodyFrame(1, b"xz")
    p = codec.ProtocolHeader(0, 9, 1)
    assert (p.major, p.minor, p.revision) == (0, 9, 1)
    assert p == codec.ProtocolHeader(0, 9, 1) and p != codec.ProtocolHeader(0, 9, 0)
    c = codec.Command(1, m)
    assert (c.channel, c.method, c.properties, c.body) == (1, m, None, None)
    assert c == codec.Command(1, codec.BasicAck(delivery_tag=1))
    assert c != codec.Command(1, m, codec.BasicProperties(), b"")
    for obj in (f, h, b, p, c, codec.Heartbeat()):
        assert isinstance(repr(obj), str)


# ---------------------------------------------------------------------------
# framing errors


def check_poisoned(parser, exc_type):
    with pytest.raises(exc_type):
        parser.feed(b"")
    with pytest.raises(exc_type):
        parser.feed(R.HEARTBEAT_FRAME)


PREFIX = STREAM.parts[0] + STREAM.parts[1]  # connection.start + heartbeat
PREFIX_FRAMES = STREAM.frames[:2]
PREFIX_COMMANDS = STREAM.commands[:2]


@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_bad_frame_end(kind):
    good = method("basic.ack", 1, delivery_tag=1)[0]
    bad = good[:-1] + b"\x00"
    parser = make_parser(kind)
    with pytest.raises(FrameError) as info:
        parser.feed(PREFIX + bad)
    exc = info.value
    assert exc.reply_code == 501
    assert exc.offset in (len(PREFIX), len(PREFIX) + len(bad) - 1), exc.offset
    assert str(exc.offset) in str(exc)
    assert exc.parsed == (PREFIX_FRAMES if kind == "frames" else PREFIX_COMMANDS)
    check_poisoned(parser, FrameError)


def test_bad_frame_end_bytewise():
    good = method("basic.ack", 1, delivery_tag=1)[0]
    bad = good[:-1] + b"\xcf"
    parser = codec.FrameParser()
    got = []
    data = PREFIX + bad
    for i in range(len(data) - 1):
        got += parser.feed(data[i : i + 1])
    assert got == PREFIX_FRAMES
    with pytest.raises(FrameError) as info:
        parser.feed(data[-1:])
    assert info.value.parsed == []
    check_poisoned(parser, FrameError)


@pytest.mark.parametrize("frame_type", [0, 4, 5, 7, 9, 0x41 + 1, 255])
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_unknown_frame_type(kind, frame_type):
    parser = make_parser(kind)
    with pytest.raises(FrameError) as info:
        parser.feed(PREFIX + R.frame(frame_type, 1, b"x"))
    assert info.value.reply_code == 501
    assert info.value.offset == len(PREFIX)
    assert info.value.parsed == (PREFIX_FRAMES if kind == "frames" else PREFIX_COMMANDS)
    check_poisoned(parser, FrameError)


@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_frame_size_over_frame_max_raised_at_header(kind):
    parser = make_parser(kind, frame_max=4096)
    hdr = struct.pack(">BHI", 3, 1, 4096 - 8 + 1)
    assert parser.feed(PREFIX + hdr[:6]) == (PREFIX_FRAMES if kind == "frames" else PREFIX_COMMANDS)
    with pytest.raises(FrameError) as info:
        parser.feed(hdr[6:])  # the 7-byte header is complete: no payload needed to know
    assert info.value.reply_code == 501
    assert info.value.parsed == []
    check_poisoned(parser, FrameError)


def test_frame_size_limits():
    # frame_max counts the 8 bytes of overhead: payload frame_max - 8 is the largest allowed
    data, frame = body(1, body_of(4088))
    assert codec.FrameParser(frame_max=4096).feed(data) == [frame]
    with pytest.raises(FrameError):
        codec.FrameParser(frame_max=4096).feed(body(1, body_of(4089))[0])
    with pytest.raises(FrameError):  # a huge declared size is refused before allocating
        codec.FrameParser().feed(b"\x03\x00\x01\xff\xff\xff\xff")
    parser = codec.FrameParser(frame_max=4096)
    parser.frame_max = 8192
    assert parser.frame_max == 8192
    data, frame = body(1, body_of(8184))
    assert parser.feed(data) == [frame]


@pytest.mark.parametrize(
    "bad",
    [
        b"\x08\x00\x01\x00\x00\x00\x00\xce",  # heartbeat on channel 1
        b"\x08\xff\xff\x00\x00\x00\x00\xce",  # heartbeat on channel 65535
        b"\x08\x00\x00\x00\x00\x00\x01\x00\xce",  # heartbeat with a payload
    ],
)
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_bad_heartbeat(kind, bad):
    parser = make_parser(kind)
    with pytest.raises(FrameError) as info:
        parser.feed(PREFIX + bad)
    assert info.value.reply_code == 501
    assert info.value.parsed == (PREFIX_FRAMES if kind == "frames" else PREFIX_COMMANDS)
    check_poisoned(parser, FrameError)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x3c\x00\x28\x00",  # basic.publish, ticket truncated
        b"\x00\x3c\x00\x28\x00\x00\x05ab",  # exchange shortstr overruns the frame
        b"\x00\x3c\x00\xff",  # unknown method
        b"\x00\x3c",  # no method id
        b"\x00\x3c\x00\x50" + b"\x00" * 9 + b"\x00",  # basic.ack with a trailing byte
    ],
)
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_bad_method_payload(kind, payload):
    parser = make_parser(kind)
    with pytest.raises(AMQPSyntaxError) as info:
        parser.feed(PREFIX + R.frame(1, 1, payload))
    assert info.value.reply_code == 502
    assert info.value.parsed == (PREFIX_FRAMES if kind == "frames" else PREFIX_COMMANDS)
    check_poisoned(parser, AMQPSyntaxError)


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">HHQ", 60, 0, 5),  # no property flags
        struct.pack(">HHQ", 60, 0, 5) + b"\x80\x00",  # content_type flagged but missing
        struct.pack(">HHQ", 60, 0, 5) + b"\x80\x00\x09abc",  # content_type overruns
        b"\x00\x3c\x00",  # too short for class/weight/size
    ],
)
def test_bad_header_payload(payload):
    parser = codec.FrameParser()
    with pytest.raises(CodecError) as info:
        parser.feed(PREFIX + R.frame(2, 1, payload))
    assert isinstance(info.value, (AMQPSyntaxError, FrameError))
    assert info.value.parsed == PREFIX_FRAMES
    check_poisoned(parser, CodecError)


# ---------------------------------------------------------------------------
# content assembly errors (CommandParser only)

DELIVER = method("basic.deliver", 1, consumer_tag="c", delivery_tag=1, exchange="", routing_key="q")
ACK = method("basic.ack", 1, delivery_tag=1)


EMPTY_DELIVERY = codec.Command(1, DELIVER[2], codec.BasicProperties(), b"")


@pytest.mark.parametrize(
    "case, frames, completed",
    [
        ("header without method", [header(1, 5)[0]], []),
        ("header after non-content method", [ACK[0], header(1, 5)[0]], [codec.Command(1, ACK[2])]),
        ("body without anything", [body(1, b"x")[0]], []),
        ("body without header", [DELIVER[0], body(1, b"x")[0]], []),
        ("method while header pending", [DELIVER[0], ACK[0]], []),
        ("method while body pending", [DELIVER[0], header(1, 5)[0], body(1, b"ab")[0], ACK[0]], []),
        ("second content method while body pending", [DELIVER[0], header(1, 5)[0], DELIVER[0]], []),
        ("body longer than declared", [DELIVER[0], header(1, 5)[0], body(1, b"abcdef")[0]], []),
        ("bodies longer than declared", [DELIVER[0], header(1, 5)[0], body(1, b"abc")[0], body(1, b"abc")[0]], []),
        ("body after empty content", [DELIVER[0], header(1, 0)[0], body(1, b"a")[0]], [EMPTY_DELIVERY]),
        ("header on another channel", [DELIVER[0], header(2, 5)[0]], []),
        ("second header", [DELIVER[0], header(1, 5)[0], header(1, 5)[0]], []),
    ],
)
def test_unexpected_frames(case, frames, completed):
    parser = codec.CommandParser()
    with pytest.raises(UnexpectedFrame) as info:
        parser.feed(PREFIX + b"".join(frames))
    assert info.value.reply_code == 505
    assert info.value.parsed == PREFIX_COMMANDS + completed
    check_poisoned(parser, UnexpectedFrame)


def test_unexpected_frame_parsed_includes_commands_of_same_feed():
    ok = method("basic.ack", 2, delivery_tag=5)
    deliver = dict(consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q")
    stream = PREFIX + ok[0] + R.content(3, R.BY_NAME["basic.deliver"], deliver, b"hi") + body(1, b"x")[0]
    parser = codec.CommandParser()
    with pytest.raises(UnexpectedFrame) as info:
        parser.feed(stream)
    parsed = info.value.parsed
    assert parsed[:3] == PREFIX_COMMANDS + [codec.Command(2, ok[2])]
    assert len(parsed) == 4 and parsed[3].body == b"hi" and parsed[3].channel == 3


def test_interleaved_channels_are_independent():
    # content pending on channel 1 does not block methods on other channels
    frames = [DELIVER[0], header(1, 4)[0], body(1, b"ab")[0], method("basic.ack", 2, delivery_tag=1)[0], heartbeat()[0], body(1, b"cd")[0]]
    got = codec.CommandParser().feed(b"".join(frames))
    assert got == [
        codec.Command(2, codec.BasicAck(delivery_tag=1)),
        codec.Heartbeat(),
        codec.Command(1, DELIVER[2], codec.BasicProperties(), b"abcd"),
    ]


def test_max_body_size():
    parser = codec.CommandParser(max_body_size=1000)
    data = DELIVER[0] + header(1, 1000)[0] + body(1, body_of(1000))[0]
    assert parser.feed(data) == [codec.Command(1, DELIVER[2], codec.BasicProperties(), body_of(1000))]
    parser = codec.CommandParser(max_body_size=1000)
    with pytest.raises((AMQPSyntaxError, FrameError)) as info:
        parser.feed(PREFIX + DELIVER[0] + header(1, 1001)[0])  # raised at the header, before any body
    assert info.value.parsed == PREFIX_COMMANDS
    check_poisoned(parser, CodecError)
    parser = codec.CommandParser()  # default 128 MiB
    with pytest.raises((AMQPSyntaxError, FrameError)):
        parser.feed(DELIVER[0] + header(1, 128 * 1024 * 1024 + 1)[0])
    with pytest.raises((AMQPSyntaxError, FrameError)):
        codec.CommandParser().feed(DELIVER[0] + header(1, 2**64 - 1)[0])


# ---------------------------------------------------------------------------
# protocol header

SERVER_REJECT = b"AMQP\x00\x00\x09\x01"


@pytest.mark.parametrize("offered", [SERVER_REJECT, b"AMQP\x01\x01\x00\x09", b"AMQP\x00\x00\x08\x00"])
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_server_sends_protocol_header(kind, offered):
    parser = make_parser(kind)
    with pytest.raises(ProtocolHeaderError) as info:
        parser.feed(offered)
    assert info.value.offered == offered
    assert isinstance(info.value, FrameError)
    check_poisoned(parser, ProtocolHeaderError)


@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_server_protocol_header_bytewise(kind):
    parser = make_parser(kind)
    for i in range(7):
        assert parser.feed(SERVER_REJECT[i : i + 1]) == []
    with pytest.raises(ProtocolHeaderError) as info:
        parser.feed(SERVER_REJECT[7:])
    assert info.value.offered == SERVER_REJECT


@pytest.mark.parametrize("mode", ["whole", "bytewise", "random1"])
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_expect_protocol_header(kind, mode):
    data = R.PROTOCOL_HEADER + STREAM.data
    parser = make_parser(kind, expect_protocol_header=True)
    got = feed_chunks(parser, data, split(mode, len(data)))
    assert got[0] == codec.ProtocolHeader(0, 9, 1)
    assert (got[0].major, got[0].minor, got[0].revision) == (0, 9, 1)
    assert got[1:] == expected(kind)


@pytest.mark.parametrize("cut", range(1, 8))
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_expect_protocol_header_split_alone(kind, cut):
    # the client's header arriving in two pieces and nothing after it (the server must answer now)
    parser = make_parser(kind, expect_protocol_header=True)
    assert parser.feed(R.PROTOCOL_HEADER[:cut]) == []
    assert parser.buffered == cut
    assert parser.feed(R.PROTOCOL_HEADER[cut:]) == [codec.ProtocolHeader(0, 9, 1)]
    assert parser.buffered == 0


@pytest.mark.parametrize("offered", [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x09", b"AMQP\x00\x01\x09\x01", b"AMQP\x00\x00\x0a\x01"])
@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_expect_protocol_header_wrong_version(kind, offered):
    parser = make_parser(kind, expect_protocol_header=True)
    with pytest.raises(ProtocolHeaderError) as info:
        parser.feed(offered + STREAM.data)
    assert info.value.offered == offered
    check_poisoned(parser, ProtocolHeaderError)


@pytest.mark.parametrize("kind", ["frames", "commands"])
def test_expect_protocol_header_garbage(kind):
    parser = make_parser(kind, expect_protocol_header=True)
    with pytest.raises(FrameError):
        parser.feed(b"GET / HTTP/1.1\r\n\r\n")
    check_poisoned(parser, FrameError)
