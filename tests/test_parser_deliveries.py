"""CommandParser(delivery_type=...): basic.deliver comes out as one flat Delivery object.

The same streams as test_parser.py, fed whole, byte by byte and in random chunks, must
give the same content as the Command form; malformed input must give the same errors."""
import pytest
from hypothesis import given, settings, strategies as st

import amqwire.codec as codec
from amqwire.codec import AMQPSyntaxError, CodecError, Delivery, UnexpectedFrame

import amqp_reference as R
from test_parser import (
    ACK,
    DELIVER,
    MODES,
    PREFIX,
    STREAM,
    body,
    check_poisoned,
    feed_chunks,
    header,
    method,
    split,
)


class Flat(Delivery):
    """What a client does: a subclass adding behaviour, no state."""

    __slots__ = ()

    def tag(self):
        return self.delivery_tag


def content_of(item):
    """Comparable content of a Command, a Delivery or a Heartbeat."""
    if isinstance(item, Delivery):
        return ("deliver", item.channel_id, item.consumer_tag, item.delivery_tag, item.redelivered,
                item.exchange, item.routing_key, item.properties, item.body)
    if isinstance(item, codec.Command) and type(item.method) is codec.BasicDeliver:
        m = item.method
        return ("deliver", item.channel, m.consumer_tag, m.delivery_tag, m.redelivered,
                m.exchange, m.routing_key, item.properties, item.body)
    return item


@pytest.mark.parametrize("mode", MODES)
def test_stream_same_content_as_commands(mode):
    data = STREAM.data
    got = feed_chunks(codec.CommandParser(frame_max=4096, delivery_type=Flat), data, split(mode, len(data)))
    assert [content_of(x) for x in got] == [content_of(x) for x in STREAM.commands]
    deliveries = [x for x in got if isinstance(x, Delivery)]
    assert len(deliveries) == 2 and all(type(x) is Flat for x in deliveries)
    # everything else is untouched: get-ok and return stay commands
    assert {type(x.method).__name__ for x in got if isinstance(x, codec.Command)} >= {"BasicGetOk", "BasicReturn"}


def test_delivery_fields_and_free_slots():
    frames = R.content(7, R.BY_NAME["basic.deliver"], dict(consumer_tag="ct\u00e9", delivery_tag=2**64 - 1,
                       redelivered=True, exchange="ex", routing_key="rk"), b"hello",
                       R.properties(content_type="text/plain", delivery_mode=2))
    [d] = codec.CommandParser(delivery_type=Flat).feed(frames + R.HEARTBEAT_FRAME)[:1]
    assert (d.channel_id, d.consumer_tag, d.delivery_tag, d.redelivered, d.exchange, d.routing_key, d.body) == (
        7, "ct\u00e9", 2**64 - 1, True, "ex", "rk", b"hello")
    assert d.properties == codec.BasicProperties(content_type="text/plain", delivery_mode=2)
    assert d.channel is None and d.message_count is None and d.tag() == 2**64 - 1
    d.channel = "owner"
    d.delivery_tag += 1  # a client renumbers tags after a recovery
    assert d.channel == "owner" and d.delivery_tag == 2**64
    with pytest.raises(AttributeError):
        d.other = 1  # no instance dict: a subclass with __slots__ = () stays flat


def test_zero_length_body_and_default_type():
    frames = DELIVER[0] + header(1, 0)[0]
    [d] = codec.CommandParser(delivery_type=Delivery).feed(frames)
    assert type(d) is Delivery and d.body == b"" and d.properties == codec.BasicProperties()


def test_constructor_and_repr():
    d = Delivery(3, 9, False, "e", "k", codec.BasicProperties(), b"abc", "tag", 4, None)
    assert (d.channel_id, d.delivery_tag, d.consumer_tag, d.message_count) == (3, 9, "tag", 4)
    assert repr(d) == "Delivery(channel_id=3, consumer_tag='tag', delivery_tag=9, exchange='e', routing_key='k', body=<3 bytes>)"


@pytest.mark.parametrize("bad", [object, int, codec.Command, "Delivery", Delivery(1, 1, False, "", "", None, b"")])
def test_delivery_type_must_be_a_delivery_class(bad):
    with pytest.raises(TypeError, match="delivery_type must be Delivery or a subclass"):
        codec.CommandParser(delivery_type=bad)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x3c\x00\x3c",  # no arguments
        b"\x00\x3c\x00\x3c\x01c",  # consumer tag, then nothing
        b"\x00\x3c\x00\x3c\x09c",  # consumer tag overruns the frame
        b"\x00\x3c\x00\x3c\x01c" + b"\x00" * 8 + b"\x00\x00",  # routing key missing
        b"\x00\x3c\x00\x3c\x01c" + b"\x00" * 8 + b"\x00\x00\x00\x00",  # one trailing byte
        b"\x00\x3c\x00\x3c\x01\xff" + b"\x00" * 8 + b"\x00\x00\x00",  # consumer tag not UTF-8
    ],
)
def test_malformed_deliver_same_error_as_commands(payload):
    stream = PREFIX + R.frame(1, 1, payload)
    errors = []
    for kw in ({}, {"delivery_type": Flat}):
        parser = codec.CommandParser(**kw)
        with pytest.raises(AMQPSyntaxError) as info:
            parser.feed(stream)
        check_poisoned(parser, AMQPSyntaxError)
        errors.append((type(info.value), str(info.value), info.value.offset, info.value.reply_code))
    assert errors[0] == errors[1]
    assert errors[1][3] == 502


@pytest.mark.parametrize(
    "frames",
    [
        [DELIVER[0], ACK[0]],  # method while header pending
        [DELIVER[0], header(1, 5)[0], body(1, b"ab")[0], ACK[0]],  # method while body pending
        [DELIVER[0], header(1, 5)[0], body(1, b"abcdef")[0]],  # body longer than announced
        [DELIVER[0], header(1, 5)[0], header(1, 5)[0]],  # second header
        [DELIVER[0], header(1, 0)[0], body(1, b"a")[0]],  # body after empty content
    ],
)
def test_content_errors_same_as_commands(frames):
    stream = PREFIX + b"".join(frames)
    errors = []
    for kw in ({}, {"delivery_type": Flat}):
        with pytest.raises(UnexpectedFrame) as info:
            codec.CommandParser(**kw).feed(stream)
        errors.append((str(info.value), info.value.offset, [content_of(x) for x in info.value.parsed]))
    assert errors[0] == errors[1]


def test_interleaved_deliveries_on_many_channels():
    frames = []
    for ch in (1, 2, 3):
        frames.append(method("basic.deliver", ch, consumer_tag=f"c{ch}", delivery_tag=ch, exchange="", routing_key="q")[0])
        frames.append(header(ch, 4)[0])
    for ch in (3, 1, 2):
        frames.append(body(ch, b"ab")[0])
    for ch in (2, 3, 1):
        frames.append(body(ch, b"cd")[0])
    data = b"".join(frames)
    for mode in ("whole", "bytewise", "random3"):
        parser = codec.CommandParser(delivery_type=Flat)
        got = feed_chunks(parser, data, split(mode, len(data)))
        assert [(d.channel_id, d.consumer_tag, d.body) for d in got] == [(2, "c2", b"abcd"), (3, "c3", b"abcd"), (1, "c1", b"abcd")]
        assert parser.deliveries == 3


@pytest.mark.parametrize("mode", MODES)
def test_the_parser_counts_the_deliveries_it_returned(mode):
    # what metrics read per socket read, instead of counting the events in Python
    data = STREAM.data
    parser = codec.CommandParser(frame_max=4096, delivery_type=Flat)
    assert parser.deliveries == 0
    got = feed_chunks(parser, data + data, split(mode, 2 * len(data)))
    assert parser.deliveries == sum(isinstance(x, Delivery) for x in got) == 4
    plain = codec.CommandParser(frame_max=4096)  # deliveries as Commands: not counted
    plain.feed(data)
    assert plain.deliveries == 0
    partial = codec.CommandParser(delivery_type=Flat)
    one = R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=5, redelivered=False,
                    exchange="", routing_key="q"), b"x" * 100)
    partial.feed(one[:-1])
    assert partial.deliveries == 0  # counted once returned, not before
    partial.feed(one[-1:])
    assert partial.deliveries == 1


def test_trailing_partial_delivery_is_buffered():
    data = R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=5, redelivered=False,
                     exchange="", routing_key="q"), b"x" * 100)
    parser = codec.CommandParser(delivery_type=Flat)
    assert len(parser.feed(data + data[:20])) == 1 and parser.buffered == 20
    [d] = parser.feed(data[20:])
    assert d.body == b"x" * 100 and parser.buffered == 0


shortstr = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    channel=st.integers(1, 65535),
    consumer_tag=shortstr,
    tag=st.integers(0, 2**64 - 1),
    redelivered=st.booleans(),
    exchange=shortstr,
    routing_key=shortstr,
    payload=st.binary(max_size=9000),
    cut=st.integers(1, 5000),
)
def test_hypothesis_matches_command_form(channel, consumer_tag, tag, redelivered, exchange, routing_key, payload, cut):
    values = dict(consumer_tag=consumer_tag, delivery_tag=tag, redelivered=redelivered, exchange=exchange,
                  routing_key=routing_key)
    data = R.content(channel, R.BY_NAME["basic.deliver"], values, payload, R.properties(priority=3), frame_max=4096)
    whole = codec.CommandParser(frame_max=4096).feed(data)
    sizes = [cut] * (len(data) // cut + 1)
    flat = feed_chunks(codec.CommandParser(frame_max=4096, delivery_type=Flat), data, sizes)
    assert [content_of(x) for x in flat] == [content_of(x) for x in whole]
    assert len(flat) == 1 and type(flat[0]) is Flat


def test_codec_errors_stay_codec_errors():
    # an unknown method after a good delivery: the delivery is in exc.parsed
    good = R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=1, redelivered=False,
                     exchange="", routing_key="q"), b"hi")
    with pytest.raises(CodecError) as info:
        codec.CommandParser(delivery_type=Flat).feed(good + R.frame(1, 1, b"\x00\x3c\x00\xff"))
    assert [type(x) for x in info.value.parsed] == [Flat]


def test_delivery_fields_are_member_slots_that_survive_deletion():
    # Member slots, not Cython properties: CPython 3.11 specializes reads of slots (a
    # consumer reads several fields per message).  A slot can be deleted; nothing may then
    # read a NULL: repr, pickling and __init__ go through getattr/setattr.
    import pickle
    import types

    for name in ("channel_id", "channel", "consumer_tag", "delivery_tag", "redelivered", "exchange",
                 "routing_key", "message_count", "body"):
        assert type(Delivery.__dict__[name]) is types.MemberDescriptorType, name
    # properties is built on first read when the wire had none: a getset, deletable alike
    assert type(Delivery.__dict__["properties"]) is types.GetSetDescriptorType
    d = Flat(3, 7, False, "ex", "rk", None, b"abc", "ct")
    d.body = b"xyz"
    d.delivery_tag += 10
    assert (d.body, d.tag(), d.channel_id) == (b"xyz", 17, 3)
    back = pickle.loads(pickle.dumps(d))
    assert type(back) is Flat and content_of(back) == content_of(d)
    del d.body, d.consumer_tag, d.properties
    with pytest.raises(AttributeError):
        getattr(d, "body")  # noqa: B009 - the read is the test
    with pytest.raises(AttributeError):
        getattr(d, "properties")  # noqa: B009 - the read is the test
    with pytest.raises(AttributeError):
        del d.properties
    assert "body=<0 bytes>" in repr(d) and "consumer_tag=None" in repr(d)
    assert pickle.loads(pickle.dumps(d)).body is None
    d.__init__(1, 2, True, "e", "r", None, b"b")  # refills what was deleted
    assert (d.body, d.consumer_tag, d.channel_id) == (b"b", None, 1)


def _deliveries_without_properties(n, parser_type=Flat):
    data = b"".join(
        R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=tag, redelivered=False,
                  exchange="", routing_key="q"), b"body")
        for tag in range(1, n + 1))
    return codec.CommandParser(delivery_type=parser_type).feed(data)


def test_properties_absent_on_the_wire_are_each_deliverys_own():
    # A header with an empty flag word: the parser builds no BasicProperties until one is
    # read, and then each delivery gets its own: changing one changes no other delivery.
    a, b = _deliveries_without_properties(2)
    pa = a.properties
    assert pa == codec.BasicProperties() and pa.wire == b"\x00\x00"
    assert a.properties is pa  # built once, then kept
    pa.content_type = "text/plain"
    pa.headers = {"k": 1}
    assert b.properties == codec.BasicProperties() and b.properties is not pa
    assert b.properties.content_type is None and b.properties.headers is None
    c, = _deliveries_without_properties(1)
    assert c.properties == codec.BasicProperties() and c.properties.wire == b"\x00\x00"
    # set, pickle and reinit behave as for any field
    b.properties = codec.BasicProperties(message_id="m")
    assert b.properties.message_id == "m"
    c.properties = None
    assert c.properties is None
    import pickle
    d, = _deliveries_without_properties(1)
    back = pickle.loads(pickle.dumps(d))
    assert back.properties == codec.BasicProperties()


def test_properties_on_the_wire_are_decoded_by_the_parser():
    # A flag word with properties is decoded as before (errors at parse time, not on read).
    props = codec.BasicProperties(content_type="a/b").encode()
    data = R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=1, redelivered=False,
                     exchange="", routing_key="q"), b"x", props)
    d, = codec.CommandParser(delivery_type=Flat).feed(data)
    assert d.properties.content_type == "a/b" and d.properties.wire == props
    bad = R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=1, redelivered=False,
                    exchange="", routing_key="q"), b"x", b"\x00\x02")
    with pytest.raises(AMQPSyntaxError):
        codec.CommandParser(delivery_type=Flat).feed(bad)
    trailing = R.content(1, R.BY_NAME["basic.deliver"], dict(consumer_tag="c", delivery_tag=1, redelivered=False,
                         exchange="", routing_key="q"), b"x", b"\x00\x00\x00")
    with pytest.raises(CodecError):
        codec.CommandParser(delivery_type=Flat).feed(trailing)


# --- runs of deliveries and iterating a buffer of them (a client's hot path) ---------------

def _deliver(channel, tag, consumer_tag="c"):
    return R.content(channel, R.BY_NAME["basic.deliver"], dict(
        consumer_tag=consumer_tag, delivery_tag=tag, redelivered=False, exchange="", routing_key="q"), b"b")


def test_one_run_tells_a_read_of_deliveries_to_one_consumer_on_one_channel():
    from amqwire.codec.parser import one_run

    def parsed(*parts):
        return codec.CommandParser(delivery_type=Flat).feed(b"".join(parts))

    assert one_run(parsed(_deliver(1, 1)))
    assert one_run(parsed(*[_deliver(300, tag, "tag-\u00e9") for tag in range(1, 50)]))  # ints above the cache
    assert not one_run([])
    assert not one_run(parsed(_deliver(1, 1), _deliver(2, 2)))  # two channels
    assert not one_run(parsed(_deliver(1, 1), _deliver(1, 2, "other")))  # two consumers
    assert not one_run(parsed(_deliver(1, 1), b"\x08\x00\x00\x00\x00\x00\x00\xce"))  # a heartbeat too
    assert not one_run(codec.CommandParser().feed(_deliver(1, 1)))  # a Command, not a delivery
    a, b = parsed(_deliver(1, 1), _deliver(1, 2))
    assert not one_run([a, Delivery(1, 3, False, "", "q", None, b"", consumer_tag="c")])  # two types
    del b.consumer_tag
    assert not one_run([a, b])  # a deleted field is no match (and no crash)
    assert not one_run([object()])


def test_set_channel_sets_it_on_every_delivery_of_a_list():
    from amqwire.codec.parser import set_channel

    deliveries = codec.CommandParser(delivery_type=Flat).feed(b"".join(_deliver(1, tag) for tag in range(1, 4)))
    del deliveries[1].channel  # a deleted field is set again
    marker = object()
    set_channel(deliveries, marker)
    assert all(d.channel is marker for d in deliveries)
    set_channel(deliveries, None)
    assert all(d.channel is None for d in deliveries)
    with pytest.raises(TypeError, match="index 1"):
        set_channel([deliveries[0], "x"], marker)
    assert deliveries[0].channel is None  # checked before anything is set


def test_delivery_iterator_pops_in_order_and_asks_slow_when_empty():
    from collections import deque

    from amqwire.codec.parser import DeliveryIterator

    buffer = deque([1, 2])
    refills = [[3, 4], []]

    def slow():
        more = refills.pop(0)
        if not more:
            raise StopIteration
        buffer.extend(more[1:])
        return more[0]

    it = DeliveryIterator(buffer, slow)
    assert iter(it) is it
    assert next(it) == 1
    assert buffer.popleft() == 2  # another reader of the same deque: nothing was taken ahead
    assert list(it) == [3, 4]
    with pytest.raises(TypeError):
        DeliveryIterator(None, slow)


def test_delivery_iterator_async_awaits_ready_values_and_the_slow_step():
    import asyncio
    from collections import deque

    from amqwire.codec.parser import DeliveryIterator


    buffer = deque(["a", (1, 2), ValueError("as a value")])
    calls = []

    async def slow():
        calls.append(len(buffer))
        if len(calls) == 1:
            await asyncio.sleep(0)
            return "waited"
        raise StopAsyncIteration

    async def main():
        it = DeliveryIterator(buffer, slow)
        assert it.__aiter__() is it
        ready = it.__anext__()
        assert await ready == "a"
        with pytest.raises(RuntimeError):
            await ready  # once, like a coroutine
        got = [item async for item in it]
        assert got[0] == (1, 2) and isinstance(got[1], ValueError) and got[2] == "waited"
        assert calls == [0, 0]

    asyncio.run(main())
