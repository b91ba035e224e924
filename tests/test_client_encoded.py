"""Publishing pre-encoded frames (amqwire.spark's PublishEncoder output).

- The sans-IO core ``ConnectionProtocol.publish_encoded(channel, frames, count, token)``:
  the frames go out as they are, in order with everything else; in confirm mode ``count``
  seqnos are taken (the first one returned) and confirms resolve them against ``token``;
  bad calls (empty frames with a count, frames for another channel, ...) queue nothing
  and take no seqno.  Driven by scripted bytes, no socket.
- The blocking client's ``Channel.publish_encoded(frames, count)`` against
  the real broker: one PublishFuture per batch in confirm mode (acked, nacked, returned),
  None without confirms; the messages arrive as encoded.
"""
from __future__ import annotations

import datetime
import time

import pyarrow as pa
import pytest

import amqwire.codec as codec
from amqwire.client import protocol as proto
from amqwire.client.errors import InvalidStateError, MessageReturned, PublishNacked
from amqwire.codec import (
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    ChannelOpen,
    ChannelOpenOk,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionTune,
    ConnectionTuneOk,
    QueueDeclare,
)
from amqwire.spark import PublishEncoder

UTC = datetime.timezone.utc


# --------------------------------------------------------------------------- the core, no socket


class Broker:
    """Plays the server: parses what the client queued, encodes what the server sends."""

    def __init__(self, p, frame_max=131072):
        self.p = p
        self.parser = codec.CommandParser(frame_max, expect_protocol_header=True)

    def sent(self):
        return self.parser.feed(self.p.data_to_send())

    def send(self, channel, method):
        return self.p.receive_data(method.encode(channel))


def connected():
    p = proto.ConnectionProtocol(username="guest", password="guest")
    broker = Broker(p)
    p.initiate()
    broker.sent()
    server_props = {"product": "RabbitMQ", "capabilities": {"publisher_confirms": True, "basic.nack": True}}
    p.receive_data(ConnectionStart(0, 9, server_props, b"PLAIN", b"en_US").encode(0))
    broker.sent()
    broker.send(0, ConnectionTune(2047, 131072, 60))
    assert [type(c.method) for c in broker.sent()] == [ConnectionTuneOk, ConnectionOpen]
    broker.send(0, ConnectionOpenOk())
    assert p.state == "open"
    return p, broker


def open_channel(p, broker):
    cid = p.open_channel()
    assert [(c.channel, c.method) for c in broker.sent()] == [(cid, ChannelOpen())]
    broker.send(cid, ChannelOpenOk())
    return cid


def confirm_mode(p, broker, cid):
    p.send_method(cid, ConfirmSelect())
    assert [c.method for c in broker.sent()] == [ConfirmSelect()]
    broker.send(cid, ConfirmSelectOk())


def confirmed(events):
    return [(e.channel_id, e.ack, list(e.seqnos), list(e.tokens)) for e in events if isinstance(e, proto.Confirmed)]


def encoded(cid: int, n: int, prefix: str = "m", **encoder_kwargs) -> bytes:
    enc = PublishEncoder(channel=cid, **encoder_kwargs)
    return enc.encode_frames(pa.array([f"{prefix}{i}".encode() for i in range(n)]),
                             pa.array([f"rk{i}" for i in range(n)]), pa.array(["ex"] * n))


def setup(confirms=True):
    p, broker = connected()
    cid = open_channel(p, broker)
    if confirms:
        confirm_mode(p, broker, cid)
    return p, broker, cid


def test_without_confirms_the_frames_go_out_as_they_are():
    p, broker, cid = setup(confirms=False)
    frames = encoded(cid, 3)
    assert p.publish_encoded(cid, frames, 3) == 0
    data = p.data_to_send()
    assert data == frames
    commands = broker.parser.feed(data)
    assert [(c.channel, c.method, c.body) for c in commands] == [
        (cid, BasicPublish(0, "ex", f"rk{i}", False, False), f"m{i}".encode()) for i in range(3)]


def test_frames_are_not_copied():
    p, broker, cid = setup(confirms=False)
    frames = encoded(cid, 2)
    p.publish_encoded(cid, frames, 2)
    pieces = p.buffers_to_send()
    assert any(isinstance(piece, memoryview) and piece.obj is frames for piece in pieces)
    assert b"".join(bytes(piece) for piece in pieces) == frames


@pytest.mark.parametrize("wrap", [bytearray, memoryview, pa.py_buffer])
def test_any_buffer_is_accepted(wrap):
    p, broker, cid = setup()
    frames = encoded(cid, 4)
    assert p.publish_encoded(cid, wrap(frames), 4) == 1
    assert [c.body for c in broker.sent()] == [b"m0", b"m1", b"m2", b"m3"]
    assert confirmed(broker.send(cid, BasicAck(4, True))) == [(cid, True, [1, 2, 3, 4], [None] * 4)]


def test_seqnos_and_tokens_in_confirm_mode():
    p, broker, cid = setup()
    assert p.publish(cid, "ex", "one", b"1", token="t1") == 1
    assert p.publish_encoded(cid, encoded(cid, 3, "a"), 3, token="batch-a") == 2
    assert p.publish(cid, "ex", "five", b"5", token="t5") == 5
    assert p.publish_encoded(cid, encoded(cid, 2, "b"), 2, token="batch-b") == 6
    assert p.publish_encoded(cid, b"", 0, token="nothing") == 0  # takes no seqno
    assert p.publish(cid, "ex", "eight", b"8", token="t8") == 8
    bodies = [c.body for c in broker.sent()]
    assert bodies == [b"1", b"a0", b"a1", b"a2", b"5", b"b0", b"b1", b"8"]
    assert confirmed(broker.send(cid, BasicAck(3, True))) == [(cid, True, [1, 2, 3], ["t1", "batch-a", "batch-a"])]
    assert confirmed(broker.send(cid, BasicAck(4, False))) == [(cid, True, [4], ["batch-a"])]
    assert confirmed(broker.send(cid, BasicNack(7, True, False))) == [
        (cid, False, [5, 6, 7], ["t5", "batch-b", "batch-b"])]
    assert confirmed(broker.send(cid, BasicAck(8, False))) == [(cid, True, [8], ["t8"])]
    assert p.drain_unconfirmed() == {}


def test_a_big_batch_is_resolved_exactly_once():
    p, broker, cid = setup()
    n = 1000
    assert p.publish_encoded(cid, encoded(cid, n), n, token="big") == 1
    assert len(broker.sent()) == n
    data = b"".join([
        BasicAck(100, True).encode(cid), BasicAck(150, False).encode(cid), BasicNack(149, False, False).encode(cid),
        BasicAck(500, True).encode(cid), BasicNack(999, True, False).encode(cid), BasicAck(1000, False).encode(cid),
    ])
    seen, acked = [], []
    for _, ack, seqnos, tokens in confirmed(p.receive_data(data)):
        assert set(tokens) == {"big"} and len(tokens) == len(seqnos)
        seen += seqnos
        if ack:
            acked += seqnos
    assert sorted(seen) == list(range(1, n + 1))
    assert len(seen) == n
    assert sorted(acked) == list(range(1, 149)) + list(range(150, 501)) + [1000]


def test_unconfirmed_encoded_publishes_are_drained_with_their_token():
    p, broker, cid = setup()
    p.publish_encoded(cid, encoded(cid, 3), 3, token="x")
    broker.send(cid, BasicAck(1, False))
    assert p.drain_unconfirmed() == {cid: [(2, "x"), (3, "x")]}


def test_order_with_other_methods_and_publishes():
    p, broker, cid = setup()
    p.send_method(cid, QueueDeclare(queue="before", nowait=True))
    p.publish(cid, "ex", "plain-1", b"p1")
    p.publish_encoded(cid, encoded(cid, 2, "e"), 2)
    p.publish(cid, "ex", "plain-2", b"p2" * 100000)  # a big body: its own buffers
    p.publish_encoded(cid, encoded(cid, 1, "f"), 1)
    p.send_method(cid, QueueDeclare(queue="after", nowait=True))
    commands = broker.sent()
    assert [(type(c.method).__name__, c.body) for c in commands] == [
        ("QueueDeclare", None), ("BasicPublish", b"p1"), ("BasicPublish", b"e0"), ("BasicPublish", b"e1"),
        ("BasicPublish", b"p2" * 100000), ("BasicPublish", b"f0"), ("QueueDeclare", None)]
    assert [c.method.queue for c in commands if isinstance(c.method, QueueDeclare)] == ["before", "after"]


def test_encoded_with_properties_and_split_bodies():
    p, broker, cid = setup(confirms=False)
    enc = PublishEncoder(channel=cid, frame_max=4096, mandatory=True)
    props = pa.array([{"content_type": "a/b", "headers": [("k", 1)]}, None],
                     pa.struct([("content_type", pa.string()), ("headers", pa.map_(pa.string(), pa.int32()))]))
    frames = enc.encode_frames(pa.array([b"z" * 10000, b""]), pa.array(["r", "s"]), properties=props)
    p.publish_encoded(cid, frames, 2)
    commands = broker.sent()
    assert [(c.method.mandatory, c.properties, c.body) for c in commands] == [
        (True, BasicProperties(content_type="a/b", headers={"k": 1}), b"z" * 10000),
        (True, BasicProperties(), b""),
    ]


@pytest.mark.parametrize("case", ["empty-with-count", "frames-with-zero-count", "negative-count",
                                  "other-channel", "starts-with-header-frame", "starts-with-body-frame"])
def test_bad_calls_queue_nothing_and_take_no_seqno(case):
    p, broker, cid = setup()
    assert p.publish(cid, "ex", "first", b"1") == 1
    broker.sent()
    good = encoded(cid, 2)
    method_frame_len = 8 + int.from_bytes(good[3:7], "big")
    frames, count = {
        "empty-with-count": (b"", 1),
        "frames-with-zero-count": (good, 0),
        "negative-count": (good, -1),
        "other-channel": (encoded(cid + 1, 2), 2),
        "starts-with-header-frame": (good[method_frame_len:], 1),
        "starts-with-body-frame": (b"\x03" + cid.to_bytes(2, "big") + b"\x00\x00\x00\x01x\xce", 1),
    }[case]
    with pytest.raises(ValueError) as info:
        p.publish_encoded(cid, frames, count, token="bad")
    if case == "other-channel":
        assert str(cid) in str(info.value) and str(cid + 1) in str(info.value)
    assert p.data_to_send() == b""
    assert p.publish_encoded(cid, good, 2, token="good") == 2  # seqno 2: nothing was taken
    assert [c.body for c in broker.sent()] == [b"m0", b"m1"]
    assert confirmed(broker.send(cid, BasicAck(3, True))) == [(cid, True, [1, 2, 3], [None, "good", "good"])]


def test_channel_not_open():
    p, broker = connected()
    with pytest.raises(InvalidStateError):
        p.publish_encoded(1, encoded(1, 1), 1)
    cid = p.open_channel()  # opening, not open yet
    broker.sent()
    with pytest.raises(InvalidStateError):
        p.publish_encoded(cid, encoded(cid, 1), 1)
    assert p.data_to_send() == b""


# --------------------------------------------------------------------------- the blocking client + broker


@pytest.fixture
def conn(amqp_url):
    from amqwire.client import connect

    connection = connect(amqp_url)
    try:
        yield connection
    finally:
        try:
            connection.close()
        except Exception:
            pass


PROPS_TYPE = pa.struct([("message_id", pa.string()), ("priority", pa.uint8()),
                        ("timestamp", pa.timestamp("s", tz="UTC")), ("headers", pa.map_(pa.string(), pa.int64()))])


def batch_columns(batch: int, n: int):
    ids = [batch * n + i for i in range(n)]
    body = pa.array([f"body-{i}".encode() * (1 + i % 3) for i in ids])
    props = pa.array([{"message_id": f"id-{i}", "priority": i % 10,
                       "timestamp": datetime.datetime(2024, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=i),
                       "headers": [("batch", batch), ("row", i)]} for i in ids], PROPS_TYPE)
    return body, props


def expected_message(batch: int, n: int, i: int):
    k = batch * n + i
    return (f"body-{k}".encode() * (1 + k % 3),
            BasicProperties(message_id=f"id-{k}", priority=k % 10,
                            timestamp=datetime.datetime(2024, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=k),
                            headers={"batch": batch, "row": k}))


def get_messages(ch, queue, count, deadline_s=20.0):
    """basic_get (acking) until ``count`` messages were read (or the deadline passes)."""
    out = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count and time.monotonic() < deadline:
        msg = ch.basic_get(queue)
        if msg is None:
            time.sleep(0.02)
            continue
        ch.basic_ack(msg.delivery_tag)
        out.append(msg)
    return out


def test_batches_in_confirm_mode(conn, names):
    ch = conn.channel()
    queue = names.queue()
    ch.queue_declare(queue)
    ch.confirm_select()
    n, batches = 1000, 10
    enc = PublishEncoder(channel=ch.channel_id, routing_key=queue, frame_max=4096)
    futures = []
    for b in range(batches):
        body, props = batch_columns(b, n)
        futures.append(ch.publish_encoded(enc.encode_frames(body, properties=props), n))
    assert [f.count for f in futures] == [n] * batches
    assert [f.delivery_tag for f in futures] == [1 + b * n for b in range(batches)]
    for future in futures:
        assert future.result(30) is None
        assert future.done()
    assert ch.queue_declare(queue, passive=True).message_count == n * batches
    # the first messages come back as encoded (one channel, one queue: in order)
    got = get_messages(ch, queue, 30)
    assert [(m.body, m.properties, m.routing_key, m.exchange) for m in got] == [
        (*expected_message(0, n, i), queue, "") for i in range(30)]
    ch.queue_purge(queue)


def test_batch_bigger_than_the_confirm_window(conn, names):
    ch = conn.channel()
    queue = names.queue()
    ch.queue_declare(queue)
    ch.confirm_select(max_in_flight=500)
    enc = PublishEncoder(channel=ch.channel_id, routing_key=queue)
    sent = [[b"b%d-%d" % (b, i) for i in range(1000)] for b in range(3)]
    futures = [ch.publish_encoded(enc.encode_frames(pa.array(bodies)), 1000) for bodies in sent]
    for future in futures:
        assert future.result(30) is None
    assert ch.queue_declare(queue, passive=True).message_count == 3000
    # every body once, in order (one channel, one queue): a loss and a duplicate cannot cancel out
    got = [m.body for m in get_messages(ch, queue, 3000)]
    assert got == [body for bodies in sent for body in bodies]
    assert ch.queue_declare(queue, passive=True).message_count == 0


def test_empty_batch_in_confirm_mode(conn):
    ch = conn.channel()
    ch.confirm_select()
    future = ch.publish_encoded(b"", 0)
    assert future.done() and future.count == 0
    assert future.result(1) is None


def test_mandatory_unroutable_batch_fails_with_message_returned(conn, names):
    ch = conn.channel()
    queue = names.queue()
    ch.queue_declare(queue)
    ch.confirm_select()
    enc = PublishEncoder(channel=ch.channel_id, mandatory=True)
    nowhere = names.unique("nowhere")
    lost = ch.publish_encoded(enc.encode_frames(pa.array([b"c", b"d"]), pa.array([queue, nowhere])), 2)
    with pytest.raises(MessageReturned) as info:
        lost.result(10)
    assert info.value.routing_key == nowhere
    assert info.value.reply_code == 312
    assert info.value.message.body == b"d"
    routed = ch.publish_encoded(enc.encode_frames(pa.array([b"a", b"b"]), pa.array([queue, queue])), 2)
    assert routed.result(10) is None
    assert ch.queue_declare(queue, passive=True).message_count == 3


def test_return_settles_the_batch_it_belongs_to(conn, names):
    # RabbitMQ returns (and acks) an unroutable message at once, while the acks of messages
    # routed to a queue come later (here: persistent messages to a durable queue wait for the
    # disk).  The return must fail the batch holding the seqno of the ack that follows it,
    # not the oldest batch in flight.
    ch = conn.channel()
    queue = names.queue()
    ch.queue_declare(queue, durable=True)
    ch.confirm_select()
    enc = PublishEncoder(channel=ch.channel_id, mandatory=True)
    persistent = pa.array([{"delivery_mode": 2}] * 50, pa.struct([("delivery_mode", pa.uint8())]))
    routed = ch.publish_encoded(enc.encode_frames(pa.array([b"r"] * 50), pa.array([queue] * 50),
                                                  properties=persistent), 50)
    nowhere = names.unique("nowhere")
    lost = ch.publish_encoded(enc.encode_frames(pa.array([b"lost"]), pa.array([nowhere])), 1)
    with pytest.raises(MessageReturned):
        lost.result(10)
    assert routed.result(10) is None


def test_rejected_publish_encoded_call_does_not_swallow_the_next_return(conn, names):
    # A call refused before sending (frames for another channel) leaves nothing behind that
    # could take the next basic.return.
    ch = conn.channel()
    ch.confirm_select()
    nowhere = names.unique("nowhere")
    wrong = PublishEncoder(channel=ch.channel_id + 1, mandatory=True)
    with pytest.raises(ValueError):
        ch.publish_encoded(wrong.encode_frames(pa.array([b"x"]), pa.array([nowhere])), 1)
    enc = PublishEncoder(channel=ch.channel_id, mandatory=True)
    future = ch.publish_encoded(enc.encode_frames(pa.array([b"x"]), pa.array([nowhere])), 1)
    with pytest.raises(MessageReturned):
        future.result(10)


def test_reject_publish_overflow_fails_with_publish_nacked(conn, names):
    ch = conn.channel()
    queue = names.queue()
    ch.queue_declare(queue, arguments={"x-max-length": 5, "x-overflow": "reject-publish"})
    ch.confirm_select()
    enc = PublishEncoder(channel=ch.channel_id, routing_key=queue)
    future = ch.publish_encoded(enc.encode_frames(pa.array([b"%d" % i for i in range(10)])), 10)
    with pytest.raises(PublishNacked):
        future.result(10)
    assert future.done()
    assert ch.queue_declare(queue, passive=True).message_count == 5
    # the channel is still usable, and the next batch that fits is acked
    ch.queue_purge(queue)
    assert ch.publish_encoded(enc.encode_frames(pa.array([b"ok"])), 1).result(10) is None


def test_without_confirm_mode(conn, names):
    ch = conn.channel()
    queue = names.queue()
    ch.queue_declare(queue)
    enc = PublishEncoder(channel=ch.channel_id, routing_key=queue, body_format="json")
    body = pa.array([{"i": i, "s": f"é{i}"} for i in range(200)])
    props = pa.array([{"content_type": "application/json"}] * 200)
    assert ch.publish_encoded(enc.encode_frames(body, properties=props), 200) is None
    got = get_messages(ch, queue, 200)
    assert [m.body for m in got] == [('{"i":%d,"s":"é%d"}' % (i, i)).encode() for i in range(200)]
    assert {m.properties.content_type for m in got} == {"application/json"}


def test_frames_for_another_channel_are_refused(conn):
    ch = conn.channel()
    ch.confirm_select()
    other = PublishEncoder(channel=ch.channel_id + 1, routing_key="q")
    with pytest.raises(ValueError):
        ch.publish_encoded(other.encode_frames(pa.array([b"x"])), 1)
    # the channel is fine afterwards (an unbound routing key, not mandatory: dropped and acked)
    enc = PublishEncoder(channel=ch.channel_id, routing_key="amqwire-test-unbound-routing-key")
    future = ch.publish_encoded(enc.encode_frames(pa.array([b"x"])), 1)
    assert future.delivery_tag == 1  # the refused call took no seqno
    assert future.result(10) is None


# ------------------------------------------------------------------ asyncio transport


def test_aio_publish_encoded_batches_confirmed_returned_and_nacked(amqp_url, names):
    import asyncio

    from amqwire.client import aio

    queue, capped = names.queue(), names.queue()
    nowhere = names.unique("nowhere")

    async def scenario():
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                await ch.queue_declare(queue)
                await ch.queue_declare(capped, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
                await ch.confirm_select(max_in_flight=1500)  # smaller than a batch: waits for room
                enc = PublishEncoder(channel=ch.channel_id, mandatory=True)
                batches = [
                    await ch.publish_encoded(
                        enc.encode_frames(pa.array([b"%d" % (i * 1000 + j) for j in range(1000)]),
                                          pa.array([queue] * 1000)), 1000)
                    for i in range(4)
                ]
                assert await asyncio.gather(*batches) == [None] * 4
                assert (await ch.queue_declare(queue, passive=True)).message_count == 4000
                returned = await ch.publish_encoded(
                    enc.encode_frames(pa.array([b"a", b"b"]), pa.array([queue, nowhere])), 2)
                with pytest.raises(MessageReturned) as info:
                    await returned
                assert info.value.routing_key == nowhere
                nacked = await ch.publish_encoded(
                    enc.encode_frames(pa.array([b"1", b"2", b"3"]), pa.array([capped] * 3)), 3)
                with pytest.raises(PublishNacked):
                    await nacked
                empty = await ch.publish_encoded(b"", 0)
                assert empty.done() and empty.result() is None
                message = await ch.basic_get(queue, no_ack=True)
                assert message.body == b"0"

    asyncio.run(scenario())


def test_aio_publish_encoded_without_confirms_returns_none(amqp_url, names):
    import asyncio

    from amqwire.client import aio

    queue = names.queue()

    async def scenario():
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                await ch.queue_declare(queue)
                enc = PublishEncoder(channel=ch.channel_id, routing_key=queue)
                assert await ch.publish_encoded(enc.encode_frames(pa.array([b"x"] * 10)), 10) is None
                for _ in range(100):
                    if (await ch.queue_declare(queue, passive=True)).message_count == 10:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError("the 10 messages did not arrive")

    asyncio.run(scenario())
