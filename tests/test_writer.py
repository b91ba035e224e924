"""Frames out: encode_publish, encode_publish_iov and FrameWriter, checked against the
independent reference encoder (tests/amqp_reference.py) and pamqp."""
import array
import datetime

import pytest

import amqwire.codec as codec
from amqwire.codec import AMQPSyntaxError, UnsupportedValueError

import amqp_reference as R

UTC = datetime.timezone.utc
PATTERN = bytes(range(256))


def make_body(size, kind):
    raw = (PATTERN * (size // 256 + 1))[:size]
    if kind == "bytes":
        return raw
    if kind == "bytearray":
        return bytearray(raw)
    if kind == "memoryview":
        return memoryview(bytearray(raw))
    if kind == "str":
        return ("x\u00e9\u2713" * (size // 3 + 1))[:size]
    raise ValueError(kind)


def raw_body(body):
    if isinstance(body, str):
        return body.encode("utf-8")
    return bytes(memoryview(body).cast("B")) if isinstance(body, memoryview) else bytes(body)


def sizes_for(frame_max):
    if frame_max == 0:
        return [0, 1, 4089, 300_001]
    chunk = frame_max - 8
    return [0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 1]


CASES = [(fm, size) for fm in (4096, 4097, 131072, 0) for size in sizes_for(fm)]
KINDS = ["bytes", "bytearray", "memoryview", "str"]


def base_object(obj):
    while isinstance(obj, memoryview):
        obj = obj.obj
    return obj


FULL_PROPS = dict(
    content_type="application/json",
    content_encoding="gzip",
    headers={"a": "1", "b": "\u00fc"},
    delivery_mode=2,
    priority=9,
    correlation_id="corr-\u00e9",
    reply_to="amq.rabbitmq.reply-to",
    expiration="60000",
    message_id="mid-1",
    timestamp=datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    type="evt",
    user_id="guest",
    app_id="app",
    cluster_id="c1",
)


# ---------------------------------------------------------------------------
# encode_publish


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("frame_max, size", CASES)
def test_encode_publish_matches_reference(frame_max, size, kind):
    body = make_body(size, kind)
    expected = R.publish(3, "amq.topic", "a.b.c", raw_body(body), mandatory=True, frame_max=frame_max)
    got = codec.encode_publish(3, "amq.topic", "a.b.c", body, mandatory=True, frame_max=frame_max)
    assert type(got) is bytes
    assert got == expected
    if frame_max == 131072:
        assert codec.encode_publish(3, "amq.topic", "a.b.c", body, mandatory=True) == expected


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("frame_max, size", CASES)
def test_encode_publish_iov_joins_to_same_bytes(frame_max, size, kind):
    body = make_body(size, kind)
    pieces = codec.encode_publish_iov(3, "amq.topic", "a.b.c", body, mandatory=True, frame_max=frame_max)
    assert isinstance(pieces, list)
    for p in pieces:
        memoryview(p)  # every piece is bytes-like
    expected = R.publish(3, "amq.topic", "a.b.c", raw_body(body), mandatory=True, frame_max=frame_max)
    assert b"".join(pieces) == expected
    assert b"".join(pieces) == codec.encode_publish(3, "amq.topic", "a.b.c", body, mandatory=True, frame_max=frame_max)


def test_frame_counts():
    chunk = 4096 - 8
    for size, n_body in [(0, 0), (1, 1), (chunk, 1), (chunk + 1, 2), (3 * chunk + 1, 4)]:
        data = codec.encode_publish(1, "", "q", b"z" * size, frame_max=4096)
        parsed = codec.FrameParser(frame_max=4096).feed(data)
        assert [type(f).__name__ for f in parsed] == ["MethodFrame", "HeaderFrame"] + ["BodyFrame"] * n_body
        assert all(len(f.data) <= chunk for f in parsed[2:])
        assert b"".join(f.data for f in parsed[2:]) == b"z" * size
        assert parsed[1].body_size == size


def test_publish_flags_and_channels():
    for mandatory, immediate in [(False, False), (True, False), (False, True), (True, True)]:
        for channel in (0, 1, 65535):
            got = codec.encode_publish(channel, "e", "k", b"b", mandatory=mandatory, immediate=immediate)
            assert got == R.publish(channel, "e", "k", b"b", mandatory=mandatory, immediate=immediate)


def test_publish_with_properties():
    props = codec.BasicProperties(**FULL_PROPS)
    ref_props = R.properties(**FULL_PROPS)
    assert props.encode() == ref_props
    body = make_body(9000, "bytes")
    got = codec.encode_publish(2, "ex", "rk", body, properties=props, frame_max=4096)
    assert got == R.publish(2, "ex", "rk", body, props=ref_props, frame_max=4096)
    pieces = codec.encode_publish_iov(2, "ex", "rk", body, properties=props, frame_max=4096)
    assert b"".join(pieces) == got


@pytest.mark.parametrize(
    "props",
    [dict(delivery_mode=2), dict(content_type="text/plain"), dict(headers={}), dict(cluster_id="x"), dict(priority=0),
     dict(timestamp=datetime.datetime(1970, 1, 1, tzinfo=UTC))],
)
def test_publish_with_single_property(props):
    got = codec.encode_publish(1, "", "q", b"hi", properties=codec.BasicProperties(**props))
    assert got == R.publish(1, "", "q", b"hi", props=R.properties(**props))


def test_publish_empty_properties_same_as_none():
    assert codec.encode_publish(1, "", "q", b"x", properties=codec.BasicProperties()) == codec.encode_publish(1, "", "q", b"x")


def test_body_memoryview_of_wide_items_and_slices():
    arr = array.array("I", range(1000))
    got = codec.encode_publish(1, "", "q", memoryview(arr), frame_max=4096)
    assert got == R.publish(1, "", "q", arr.tobytes(), frame_max=4096)
    got = codec.encode_publish(1, "", "q", arr, frame_max=4096)
    assert got == R.publish(1, "", "q", arr.tobytes(), frame_max=4096)
    raw = make_body(20000, "bytes")
    view = memoryview(raw)[3:10003]
    assert codec.encode_publish(1, "", "q", view, frame_max=4096) == R.publish(1, "", "q", raw[3:10003], frame_max=4096)
    iov = codec.encode_publish_iov(1, "", "q", view, frame_max=4096)
    assert b"".join(iov) == R.publish(1, "", "q", raw[3:10003], frame_max=4096)


# ---------------------------------------------------------------------------
# zero copy


def test_iov_shares_bytes_body():
    chunk = 131072 - 8
    body = make_body(3 * chunk + 1, "bytes")
    pieces = codec.encode_publish_iov(1, "ex", "rk", body)
    shared = [p for p in pieces if isinstance(p, memoryview) and base_object(p) is body]
    assert sum(p.nbytes for p in shared) >= 3 * chunk, [type(p).__name__ for p in pieces]


@pytest.mark.parametrize("wrap", [False, True])
def test_iov_shares_bytearray_body_memory(wrap):
    chunk = 131072 - 8
    body = make_body(3 * chunk + 1, "bytearray")
    arg = memoryview(body) if wrap else body
    pieces = codec.encode_publish_iov(1, "ex", "rk", arg)
    assert any(isinstance(p, memoryview) and base_object(p) is body for p in pieces)
    # mutate the body afterwards: the large chunks are views, so the change shows
    for pos in (0, 100, chunk + 7, 2 * chunk + 5):
        body[pos] ^= 0xFF
    assert b"".join(pieces) == R.publish(1, "ex", "rk", bytes(body))


def test_iov_str_body():
    body = "\u2713" * 50000
    pieces = codec.encode_publish_iov(1, "", "q", body, frame_max=4096)
    assert b"".join(pieces) == R.publish(1, "", "q", body.encode(), frame_max=4096)


# ---------------------------------------------------------------------------
# frame_max validation


@pytest.mark.parametrize("bad", [1, 100, 4095])
def test_frame_max_too_small(bad):
    with pytest.raises(ValueError):
        codec.encode_publish(1, "", "q", b"x", frame_max=bad)
    with pytest.raises(ValueError):
        codec.encode_publish_iov(1, "", "q", b"x", frame_max=bad)
    with pytest.raises(ValueError):
        codec.FrameWriter(frame_max=bad)
    w = codec.FrameWriter(frame_max=8192)
    with pytest.raises(ValueError):
        w.frame_max = bad
    assert w.frame_max == 8192


def test_frame_max_boundaries_accepted():
    for fm in (0, 4096, 4097, 2**31):
        codec.FrameWriter(frame_max=fm)
        assert codec.encode_publish(1, "", "q", b"x", frame_max=fm) == R.publish(1, "", "q", b"x")


# ---------------------------------------------------------------------------
# FrameWriter


def publish_args(i):
    props = None if i % 3 == 0 else codec.BasicProperties(delivery_mode=2, message_id=f"m{i}")
    body = make_body((i * 1237) % 10000, ["bytes", "bytearray", "memoryview", "str"][i % 4])
    return (i % 5, f"ex{i % 2}", f"rk.{i}", body, props, bool(i % 2), False)


def test_writer_publish_many_equals_concatenation():
    w = codec.FrameWriter(frame_max=4096)
    assert w.frame_max == 4096
    expected = []
    for i in range(60):
        ch, ex, rk, body, props, mandatory, immediate = publish_args(i)
        w.publish(ch, ex, rk, body, props, mandatory=mandatory, immediate=immediate)
        expected.append(codec.encode_publish(ch, ex, rk, body, props, mandatory, immediate, frame_max=4096))
        ref_props = b"\x00\x00" if props is None else R.properties(delivery_mode=2, message_id=f"m{i}")
        assert expected[-1] == R.publish(ch, ex, rk, raw_body(body), props=ref_props, mandatory=mandatory, frame_max=4096)
    data = b"".join(expected)
    assert len(w) == len(data)
    assert w.getvalue() == data
    assert w.take() == data
    assert len(w) == 0
    assert w.getvalue() == b""


def test_writer_default_frame_max_and_large_bodies():
    w = codec.FrameWriter()
    assert w.frame_max == 131072
    bodies = [make_body(n, "bytes") for n in (300_000, 0, 131064, 131065, 1_000_000)]
    for b in bodies:
        w.publish(7, "", "q", b)
    assert w.getvalue() == b"".join(R.publish(7, "", "q", b) for b in bodies)


def test_writer_frame_max_setter():
    w = codec.FrameWriter()
    w.frame_max = 4096
    assert w.frame_max == 4096
    body = make_body(10000, "bytes")
    w.publish(1, "", "q", body)
    w.frame_max = 0
    w.publish(1, "", "q", body)
    assert w.getvalue() == R.publish(1, "", "q", body, frame_max=4096) + R.publish(1, "", "q", body, frame_max=0)


def test_writer_method_heartbeat_protocol_header():
    w = codec.FrameWriter()
    w.protocol_header()
    assert w.getvalue() == b"AMQP\x00\x00\x09\x01"
    w.method(0, codec.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=60))
    w.heartbeat()
    w.method(3, codec.ChannelOpen())
    expected = (
        b"AMQP\x00\x00\x09\x01"
        + R.method_frame(R.BY_NAME["connection.tune-ok"], dict(channel_max=2047, frame_max=131072, heartbeat=60), 0)
        + b"\x08\x00\x00\x00\x00\x00\x00\xce"
        + R.method_frame(R.BY_NAME["channel.open"], dict(out_of_band=""), 3)
    )
    assert w.getvalue() == expected
    assert len(w) == len(expected)
    w.clear()
    assert len(w) == 0 and w.getvalue() == b""
    w.heartbeat()
    assert w.take() == codec.HEARTBEAT_FRAME
    assert w.take() == b""


@pytest.mark.parametrize("channel, tag, multiple", [
    (1, 0, True), (1, 1, False), (7, 2**32 + 5, True), (65535, 2**64 - 1, False), (2, 3, 1), (2, 3, 0),
])
def test_writer_ack_is_the_basic_ack_method_frame(channel, tag, multiple):
    w = codec.FrameWriter()
    w.ack(channel, tag, multiple)
    expected = R.method_frame(R.BY_NAME["basic.ack"], dict(delivery_tag=tag, multiple=bool(multiple)), channel)
    assert w.getvalue() == expected
    w.clear()
    w.method(channel, codec.BasicAck(tag, multiple))
    assert w.getvalue() == expected


@pytest.mark.parametrize("tag, multiple, error, field", [
    (-1, False, AMQPSyntaxError, "delivery_tag"),
    (2**64, False, AMQPSyntaxError, "delivery_tag"),
    (1.0, False, UnsupportedValueError, "delivery_tag"),
    (True, False, UnsupportedValueError, "delivery_tag"),
    (1, 2, UnsupportedValueError, "multiple"),
    (1, "yes", UnsupportedValueError, "multiple"),
])
def test_writer_ack_refuses_what_basic_ack_refuses_and_writes_nothing(tag, multiple, error, field):
    w = codec.FrameWriter()
    w.heartbeat()
    with pytest.raises(error, match="basic.ack." + field):
        w.ack(1, tag, multiple)
    with pytest.raises(error, match="basic.ack." + field):
        codec.BasicAck(tag, multiple)
    assert w.getvalue() == codec.HEARTBEAT_FRAME
    with pytest.raises(ValueError, match="channel"):
        w.ack(65536, 1)


@pytest.mark.parametrize("size", [0, 5, 4088, 4089, 10000])
def test_writer_content(size):
    w = codec.FrameWriter(frame_max=4096)
    body = make_body(size, "bytes")
    deliver = codec.BasicDeliver(consumer_tag="ctag", delivery_tag=42, redelivered=True, exchange="ex", routing_key="rk")
    props = codec.BasicProperties(content_type="text/plain", headers={"k": "v"})
    w.content(9, deliver, props, body)
    values = dict(consumer_tag="ctag", delivery_tag=42, redelivered=True, exchange="ex", routing_key="rk")
    expected = R.content(9, R.BY_NAME["basic.deliver"], values, body,
                         R.properties(content_type="text/plain", headers={"k": "v"}), frame_max=4096)
    assert w.getvalue() == expected
    # the same through content() with a publish equals publish()
    w2 = codec.FrameWriter(frame_max=4096)
    w2.content(1, codec.BasicPublish(exchange="e", routing_key="r", mandatory=True), codec.BasicProperties(), body)
    assert w2.getvalue() == codec.encode_publish(1, "e", "r", body, mandatory=True, frame_max=4096)


def test_writer_mixed_sequence():
    w = codec.FrameWriter(frame_max=4096)
    w.method(1, codec.BasicQos(prefetch_count=10))
    w.publish(1, "", "q", b"abc")
    w.heartbeat()
    w.method(1, codec.BasicAck(delivery_tag=1, multiple=True))
    expected = (
        codec.BasicQos(prefetch_count=10).encode(1)
        + R.publish(1, "", "q", b"abc", frame_max=4096)
        + R.HEARTBEAT_FRAME
        + codec.BasicAck(delivery_tag=1, multiple=True).encode(1)
    )
    assert w.take() == expected


# ---------------------------------------------------------------------------
# errors leave the writer untouched


def prefilled():
    w = codec.FrameWriter(frame_max=4096)
    w.publish(1, "ex", "rk", make_body(5000, "bytes"))
    w.heartbeat()
    return w, w.getvalue()


def assert_unchanged(w, before):
    assert len(w) == len(before)
    assert w.getvalue() == before


def assert_still_usable(w, before):
    w.publish(2, "", "q", b"after")  # appends right after the old contents
    assert w.getvalue() == before + R.publish(2, "", "q", b"after", frame_max=4096)


def test_publish_long_routing_key_is_atomic():
    w, before = prefilled()
    with pytest.raises(AMQPSyntaxError) as info:
        w.publish(1, "ex", "r" * 256, make_body(9000, "bytes"))
    assert "routing_key" in str(info.value)
    assert_unchanged(w, before)
    assert_still_usable(w, before)


def test_publish_long_exchange_is_atomic():
    w, before = prefilled()
    with pytest.raises(AMQPSyntaxError):
        w.publish(1, "\u00e9" * 128, "rk", b"x")
    assert_unchanged(w, before)
    assert_still_usable(w, before)


def test_publish_bad_body_type_is_atomic():
    w, before = prefilled()
    with pytest.raises((TypeError, ValueError)):
        w.publish(1, "ex", "rk", 12345)
    assert_unchanged(w, before)
    with pytest.raises((TypeError, ValueError)):
        w.publish(1, "ex", "rk", [b"a"])
    assert_unchanged(w, before)
    with pytest.raises((TypeError, ValueError)):
        w.content(1, codec.BasicPublish(exchange="ex"), codec.BasicProperties(delivery_mode=2), 12345)
    assert_unchanged(w, before)
    assert_still_usable(w, before)


def test_publish_bad_headers_is_atomic():
    w, before = prefilled()
    with pytest.raises(UnsupportedValueError):
        w.publish(1, "ex", "rk", make_body(9000, "bytes"), codec.BasicProperties(headers={"ok": 1, "bad": {"x": object()}}))
    assert_unchanged(w, before)
    with pytest.raises(UnsupportedValueError):
        w.content(1, codec.BasicPublish(), codec.BasicProperties(headers={"bad": {1, 2}}), make_body(9000, "bytes"))
    assert_unchanged(w, before)
    assert_still_usable(w, before)


def test_encode_publish_errors():
    with pytest.raises(AMQPSyntaxError):
        codec.encode_publish(1, "", "r" * 256, b"x")
    with pytest.raises(AMQPSyntaxError):  # no UTF-8 encoding for a lone surrogate
        codec.encode_publish(1, "", "rk\udc80", b"x")
    with pytest.raises(AMQPSyntaxError):
        codec.encode_publish_iov(1, "", "r" * 256, b"x" * 200000)


# ---------------------------------------------------------------------------
# pamqp builds the same bytes

from pamqp import body as pamqp_body  # noqa: E402
from pamqp import commands as pamqp_commands  # noqa: E402
from pamqp import frame as pamqp_frame  # noqa: E402
from pamqp import header as pamqp_header  # noqa: E402


def pamqp_message(channel, exchange, routing_key, body, props, mandatory, frame_max):
    out = pamqp_frame.marshal(pamqp_commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory), channel)
    out += pamqp_frame.marshal(pamqp_header.ContentHeader(0, len(body), props), channel)
    chunk = frame_max - 8
    for i in range(0, len(body), chunk):
        out += pamqp_frame.marshal(pamqp_body.ContentBody(body[i : i + chunk]), channel)
    return out


@pytest.mark.parametrize("size", [0, 1, 4088, 4089, 20000])
def test_matches_pamqp(size):
    ts = datetime.datetime(2023, 6, 7, 8, 9, 10, tzinfo=UTC)
    theirs_props = pamqp_commands.Basic.Properties(
        content_type="application/octet-stream",
        content_encoding="identity",
        headers={"h1": "v1", "h2": "v2"},
        delivery_mode=2,
        priority=5,
        correlation_id="c-1",
        reply_to="replies",
        expiration="1000",
        message_id="m-1",
        timestamp=ts,
        message_type="kind",
        user_id="guest",
        app_id="amqwire-tests",
    )
    ours_props = codec.BasicProperties(
        content_type="application/octet-stream",
        content_encoding="identity",
        headers={"h1": "v1", "h2": "v2"},
        delivery_mode=2,
        priority=5,
        correlation_id="c-1",
        reply_to="replies",
        expiration="1000",
        message_id="m-1",
        timestamp=ts,
        type="kind",
        user_id="guest",
        app_id="amqwire-tests",
    )
    body = make_body(size, "bytes")
    theirs = pamqp_message(4, "amq.direct", "key.1", body, theirs_props, True, 4096)
    assert codec.encode_publish(4, "amq.direct", "key.1", body, ours_props, mandatory=True, frame_max=4096) == theirs
    w = codec.FrameWriter(frame_max=4096)
    w.publish(4, "amq.direct", "key.1", body, ours_props, mandatory=True)
    assert w.getvalue() == theirs


def test_matches_pamqp_no_properties():
    body = b"hello"
    theirs = pamqp_message(1, "", "q", body, None, False, 131072)
    assert codec.encode_publish(1, "", "q", body) == theirs


def test_the_writer_counts_the_publishes_it_wrote_and_not_the_refused():
    # what metrics read per socket write, instead of counting each publish in Python
    w = codec.FrameWriter()
    assert w.publishes == 0
    w.publish(1, "", "q", b"bytes body")
    w.publish(1, "", "q", bytearray(b"buffer body"))
    w.publish(1, "", "q", "str body")
    before = len(w)
    with pytest.raises(AMQPSyntaxError):
        w.publish(1, "", "k" * 256, b"x")  # routing key too long: nothing written, not counted
    assert len(w) == before and w.publishes == 3
    w.take()
    assert w.publishes == 3  # a count of everything ever written, not of what is buffered
    w.method(1, codec.BasicAck(1, False))
    assert w.publishes == 3


@pytest.mark.parametrize("frames", [0, 1, 511, 512, 513, 3000])
def test_take_view_hands_over_what_take_would_copy(frames):
    """take_view: the bytes take() would return; from HAND_OVER_AT (4,096) bytes a read-only
    memoryview of the writer's own memory, which the writer never touches again: it stays
    as it was while the writer goes on, after the writer is gone, and cannot be written."""
    import gc

    copied, handed = codec.FrameWriter(), codec.FrameWriter()
    for w in (copied, handed):
        for i in range(frames):
            w.publish(i % 7 + 1, "ex", f"rk-{i}", b"x" * (i % 50), None)
            if i % 100 == 0:
                w.heartbeat()
    expected = copied.take()
    data = handed.take_view()
    assert len(handed) == 0 and handed.getvalue() == b""
    assert data == expected and len(data) == len(expected)
    if len(expected) < 4096:
        assert type(data) is bytes
        return
    assert type(data) is memoryview and data.readonly and data.format == "B"
    with pytest.raises(TypeError):
        data[0] = 0  # type: ignore[index]
    handed.publish(1, "ex", "after", b"y" * 5000, None)  # the writer writes into fresh memory
    handed.heartbeat()
    assert data == expected
    assert handed.take_view() == codec.encode_publish(1, "ex", "after", b"y" * 5000) + bytes(codec.HEARTBEAT_FRAME)
    del handed
    gc.collect()
    assert bytes(data) == expected
    assert codec.CommandParser().feed(data)  # what a socket would get parses as written


def test_a_handed_over_buffer_is_freed_with_its_last_view():
    """The memory take_view hands over lives as long as a view of it: slices and views of
    the view keep it, and it is freed with the last one (no leak, run a thousand times)."""
    import tracemalloc

    w = codec.FrameWriter()
    tracemalloc.start()
    try:
        for _ in range(1000):
            w.publish(1, "", "q", b"z" * 8000, None)
            data = w.take_view()
            piece = memoryview(data)[100:200]
            del data
            assert len(bytes(piece)) == 100
            del piece
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current < 1_000_000, f"{current} bytes still held after 1,000 hand-overs"
