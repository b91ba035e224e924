"""amqwire.client against a real RabbitMQ (AMQP_URL), on both transports.

Each scenario is written once as ``async def scenario(api)`` and run by the ``run``
fixture (conftest.py) for the blocking and the asyncio client: ``api.connect`` returns an
``amqwire.client.aio`` connection, or a blocking one behind a proxy whose methods are
awaited (they run in a thread).  A few tests that are about the transport itself (context
managers, busy user code, start_consuming) are written natively for each.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import os
import pickle
import random
import socket
import threading
import time
import traceback
import uuid
from decimal import Decimal

import pytest

from conftest import within

UTC = datetime.timezone.utc


# --------------------------------------------------------------------------- helpers


async def get_one(ch, queue, timeout=5.0, no_ack=False):
    """basic_get until a message arrives (for publishes whose arrival is not ordered
    with the get, e.g. fire-and-forget from another channel)."""
    deadline = time.monotonic() + timeout
    while True:
        msg = await ch.basic_get(queue, no_ack=no_ack)
        if msg is not None or time.monotonic() > deadline:
            return msg
        await asyncio.sleep(0.02)


async def queue_state(api, conn, queue):
    """QueueDeclareOk of a passive declare on a fresh channel, or None if the queue does
    not exist (the 404 closes that channel only)."""
    ch = await conn.channel()
    try:
        return await ch.queue_declare(queue, passive=True)
    except api.errors.NotFound:
        return None
    finally:
        await ch.close()


async def exchange_exists(api, conn, exchange):
    ch = await conn.channel()
    try:
        await ch.exchange_declare(exchange, passive=True)
        return True
    except api.errors.NotFound:
        return False
    finally:
        await ch.close()


def busy(seconds):
    """Busy user code: a pure Python loop (the GIL is only released at switch intervals)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def all_types_headers():
    """One header of every type the codec writes (docs/codec.md: the Python -> AMQP mapping)."""
    return {
        "bool-true": True,
        "bool-false": False,
        "int32": 2**31 - 1,
        "int32-negative": -(2**31),
        "int64": 2**40 + 7,
        "int64-negative": -(2**62),
        "float": 1.25,
        "float-negative": -3.0e-7,
        "decimal": Decimal("3.14"),
        "decimal-negative": Decimal("-12.345"),
        "str": "h\u00e9llo w\u00f6rld \u2713",
        "str-empty": "",
        "bytes": b"\x00\x01\xfe\xff",
        "datetime": datetime.datetime(2024, 2, 29, 23, 59, 58, tzinfo=UTC),
        "nested": {"a": 1, "b": {"c": "d", "e": [1, 2]}, "f": None},
        "list": [1, "two", 3.5, None, True, b"\x07", [False, {"k": "v"}]],
        "list-empty": [],
        "none": None,
    }


def all_properties(api):
    """All 14 basic properties set (user_id must be the connection's user: RabbitMQ checks)."""
    return api.BasicProperties(
        content_type="application/json",
        content_encoding="gzip",
        headers=all_types_headers(),
        delivery_mode=2,
        priority=7,
        correlation_id="corr-" + uuid.uuid4().hex,
        reply_to="amq.rabbitmq.reply-to.test",
        expiration="600000",
        message_id="msg-" + uuid.uuid4().hex,
        timestamp=datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
        type="order.created",
        user_id=api.username,
        app_id="amqwire-tests",
        cluster_id="cluster-7",
    )


def assert_properties_equal(got, expected):
    assert got is not None
    assert got.as_dict() == expected.as_dict()   # per-field diff when it fails
    assert got == expected


def assert_no_secret(exc, secret):
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert secret not in str(exc)
    assert secret not in repr(exc)
    assert secret not in text, "the password appears in the exception chain"


# --------------------------------------------------------------------------- handshake


def test_handshake_server_properties(run, server_tune):
    s_channel_max, s_frame_max, s_heartbeat = server_tune

    async def scenario(api):
        conn = await api.connect()
        assert conn.is_open
        sp = conn.server_properties
        assert sp["product"] == "RabbitMQ"          # long strings decode as str
        assert isinstance(sp["version"], str)
        caps = sp["capabilities"]
        for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify",
                    "connection.blocked", "exchange_exchange_bindings"):
            assert caps[cap] is True, cap
        assert 0 < conn.frame_max <= s_frame_max
        assert 0 < conn.channel_max <= s_channel_max
        assert 0 <= conn.heartbeat <= s_heartbeat
        assert (conn.params.host, conn.params.port) == (api.host, api.port)
        assert conn.blocked is False

    run(scenario)


@pytest.mark.parametrize("via", ["kwargs", "url"])
def test_tune_negotiation(run, server_tune, via):
    """Negotiated values are the lower non-zero value of both sides."""
    s_channel_max, s_frame_max, s_heartbeat = server_tune

    async def connect(api, **asked):
        if via == "kwargs":
            return await api.connect(**asked)
        return await api.connect(api.with_query(api.url, **asked))

    async def scenario(api):
        conn = await connect(api, heartbeat=5, frame_max=65536, channel_max=100)
        assert (conn.heartbeat, conn.frame_max, conn.channel_max) == (5, 65536, 100)
        ch = await conn.channel()
        assert 1 <= ch.channel_id <= 100
        ok = await ch.queue_declare("", exclusive=True)
        assert ok.queue

        big = await connect(api, heartbeat=s_heartbeat * 10, frame_max=s_frame_max * 8,
                            channel_max=min(65535, s_channel_max * 4))
        assert (big.heartbeat, big.frame_max, big.channel_max) == (s_heartbeat, s_frame_max, s_channel_max)

    run(scenario)


def test_channel_max_is_enforced_and_ids_are_reused(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect(channel_max=3)
        assert conn.channel_max == 3
        chs = [await conn.channel() for _ in range(3)]
        assert sorted(ch.channel_id for ch in chs) == [1, 2, 3]
        with pytest.raises(E.InvalidStateError):                      # refused locally
            await conn.channel()
        await chs[1].close()
        ch = await conn.channel()
        assert ch.channel_id == chs[1].channel_id
        await ch.queue_declare("", exclusive=True)
        assert conn.is_open

    run(scenario)


def test_update_secret(run):
    async def scenario(api):
        conn = await api.connect()
        await conn.update_secret(api.password, "amqwire test")        # update-secret-ok
        ch = await conn.channel()
        await ch.queue_declare("", exclusive=True)
        assert conn.is_open

    run(scenario)


def test_client_properties_seen_by_broker(run, rabbitmqctl):
    """The broker sees our connection_name and the capabilities that make it send
    basic.cancel, connection.blocked and basic.nack to us."""

    async def scenario(api):
        tag = "amqwire-test-" + uuid.uuid4().hex
        await api.connect(client_properties={"connection_name": tag})
        out = await asyncio.to_thread(rabbitmqctl, "-q", "list_connections", "pid",
                                      "client_properties", "--formatter", "json")
        # other clients share this broker: their entries may not be (key, type, value) triples
        mine = [c for c in json.loads(out)
                if any(len(p) == 3 and p[0] == "connection_name" and p[2] == tag for p in c["client_properties"])]
        assert len(mine) == 1, out
        props = {k: v for k, _t, v in mine[0]["client_properties"]}
        caps = {k: v for k, _t, v in props["capabilities"]}
        for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify",
                    "connection.blocked", "authentication_failure_close"):
            assert caps.get(cap) is True, (cap, caps)

    run(scenario)


# --------------------------------------------------------------------------- exchanges


def test_exchange_methods(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()
        src, dst = api.names.exchange(), api.names.exchange()
        q = (await ch.queue_declare("", exclusive=True)).queue

        await ch.exchange_declare(src, "topic")
        await ch.exchange_declare(src, "topic", passive=True)      # exists: no error
        await ch.exchange_declare(dst, "fanout", auto_delete=False, durable=False)
        await ch.exchange_bind(dst, src, "a.*")
        await ch.queue_bind(q, dst)

        await ch.basic_publish(src, "a.b", b"routed")              # confirmed: in the queue now
        msg = await ch.basic_get(q, no_ack=True)
        assert (msg.body, msg.exchange, msg.routing_key) == (b"routed", src, "a.b")
        await ch.basic_publish(src, "b.c", b"not matching")
        assert await ch.basic_get(q) is None

        await ch.exchange_unbind(dst, src, "a.*")
        with pytest.raises(E.MessageReturned):                      # no binding any more
            await ch.basic_publish(src, "a.b", b"after unbind", mandatory=True)

        # if_unused: dst still has the queue bound
        ch2 = await conn.channel()
        with pytest.raises(E.PreconditionFailed) as ei:
            await ch2.exchange_delete(dst, if_unused=True)
        assert ei.value.reply_code == 406
        assert not ch2.is_open

        await ch.exchange_delete(dst)
        await ch.exchange_delete(src)
        assert not await exchange_exists(api, conn, dst)
        assert not await exchange_exists(api, conn, src)

        with pytest.raises(E.NotFound) as ei:
            await ch.exchange_declare(dst, "fanout", passive=True)
        assert ei.value.reply_code == 404
        assert "exchange.declare" in str(ei.value)
        assert not ch.is_open
        assert conn.is_open

    run(scenario)


# --------------------------------------------------------------------------- queues


def test_queue_methods(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()

        ok = await ch.queue_declare("", exclusive=True)             # server-named
        assert ok.queue.startswith("amq.gen-")
        assert (ok.message_count, ok.consumer_count) == (0, 0)

        q = api.names.queue()
        ok = await ch.queue_declare(q, durable=False, auto_delete=False)
        assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 0)
        for i in range(3):
            await ch.basic_publish("", q, b"m%d" % i)
        ok = await ch.queue_declare(q, passive=True)
        assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 3, 0)
        assert await ch.queue_purge(q) == 3
        assert (await ch.queue_declare(q, passive=True)).message_count == 0

        ex = api.names.exchange()
        await ch.exchange_declare(ex, "direct")
        await ch.queue_bind(q, ex, "key")
        await ch.basic_publish(ex, "key", b"bound", mandatory=True)
        assert (await ch.basic_get(q, no_ack=True)).body == b"bound"
        await ch.queue_unbind(q, ex, "key")
        with pytest.raises(E.MessageReturned):
            await ch.basic_publish(ex, "key", b"unbound", mandatory=True)

        # if_empty refuses a non-empty queue (406 closes that channel)
        await ch.basic_publish("", q, b"x")
        await ch.basic_publish("", q, b"y")
        ch2 = await conn.channel()
        with pytest.raises(E.PreconditionFailed) as ei:
            await ch2.queue_delete(q, if_empty=True)
        assert ei.value.reply_code == 406
        assert await ch.queue_delete(q) == 2
        assert await queue_state(api, conn, q) is None

        # exclusive: another connection cannot use it (405 RESOURCE_LOCKED)
        excl = api.names.queue()
        await ch.queue_declare(excl, exclusive=True)
        other = await api.connect()
        och = await other.channel()
        with pytest.raises(E.ResourceLocked) as ei:
            await och.queue_declare(excl, passive=True)
        assert ei.value.reply_code == 405
        await conn.close()
        assert await queue_state(api, other, excl) is None           # gone with its connection

    run(scenario)


def test_passive_declare_missing_queue_closes_only_the_channel(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        missing = api.names.queue()
        with pytest.raises(E.NotFound) as ei:
            await ch.queue_declare(missing, passive=True)
        exc = ei.value
        assert isinstance(exc, E.ChannelClosed)
        assert exc.reply_code == 404
        assert "NOT_FOUND" in exc.reply_text and missing in exc.reply_text
        assert (exc.class_id, exc.method_id) == (50, 10)
        assert exc.method_name == "queue.declare"
        assert "queue.declare" in str(exc) and "404" in str(exc)
        assert exc.by_broker is True

        assert not ch.is_open
        with pytest.raises(E.ChannelClosed):
            await ch.queue_declare("", exclusive=True)
        with pytest.raises(E.ChannelClosed):
            await ch.basic_publish("", "whatever", b"x")
        with pytest.raises(E.ChannelClosed):
            await ch.basic_get("whatever")

        assert conn.is_open
        ch2 = await conn.channel()
        q = (await ch2.queue_declare("", exclusive=True)).queue
        await ch2.basic_publish("", q, b"still works")
        assert (await get_one(ch2, q)).body == b"still works"

    run(scenario)


# --------------------------------------------------------------------------- consuming


def test_qos_consume_iterator_and_cancel(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        for i in range(5):
            await ch.basic_publish("", q, b"m%d" % i)
        await ch.basic_qos(prefetch_count=2)

        consumer = await ch.consume(q)
        assert isinstance(consumer.consumer_tag, str) and consumer.consumer_tag
        m0 = await api.next(consumer)
        m1 = await api.next(consumer)
        assert (m0.body, m1.body) == (b"m0", b"m1")
        assert m0.consumer_tag == consumer.consumer_tag
        assert (m0.exchange, m0.routing_key, m0.redelivered) == ("", q, False)
        assert m0.message_count is None
        assert m1.delivery_tag > m0.delivery_tag
        assert await consumer.get(timeout=0.5) is None               # prefetch window full
        await m0.ack()
        m2 = await api.next(consumer)
        assert m2.body == b"m2"
        await ch.basic_ack(m2.delivery_tag, multiple=True)            # m1 and m2
        got = [(await api.next(consumer)).body for _ in range(2)]
        assert got == [b"m3", b"m4"]
        assert (await queue_state(api, conn, q)).consumer_count == 1
        await ch.basic_ack(0, multiple=True)                          # 0 + multiple: everything so far

        await consumer.cancel()
        with pytest.raises(StopAsyncIteration):                       # iteration ends
            await api.next(consumer, timeout=5)
        assert (await queue_state(api, conn, q)).consumer_count == 0

        # basic_cancel with an explicit consumer tag
        c2 = await ch.consume(q, consumer_tag="my-tag", no_ack=True)
        assert c2.consumer_tag == "my-tag"
        assert (await queue_state(api, conn, q)).consumer_count == 1
        await ch.basic_cancel("my-tag")
        assert (await queue_state(api, conn, q)).consumer_count == 0
        await ch.basic_publish("", q, b"left")
        assert (await queue_state(api, conn, q)).message_count == 1   # nobody took it

    run(scenario)


def test_reads_of_deliveries_for_several_consumers_hand_each_out_once_in_order(run):
    # Messages queued before consuming arrive in big reads holding runs for three consumers
    # on two channels (a read of one run takes the fast path, a mixed one the general path).
    # Each consumer gets each of its messages once, in order, whether read through its
    # iterator or get() in turns; a stopped iteration leaves the rest for the next reader.
    async def scenario(api):
        conn = await api.connect()
        ch1 = await conn.channel()
        ch2 = await conn.channel()
        queues = [(await ch1.queue_declare("", exclusive=True)).queue for _ in range(3)]
        n = 120
        await ch1.confirm_select()
        for i in range(n):
            for q in queues:
                await ch1.basic_publish("", q, b"%d" % i)
        await ch1.wait_for_confirms()
        consumers = [await ch1.consume(queues[0]), await ch1.consume(queues[1]), await ch2.consume(queues[2])]
        for turn in range(n):
            for consumer in consumers:
                if turn % 2:
                    message = await consumer.get(timeout=10)
                else:
                    message = await api.next(consumer)
                assert message is not None and message.body == b"%d" % turn, (turn, consumer)
                assert message.consumer_tag == consumer.consumer_tag
        for consumer in consumers:
            assert await consumer.get(timeout=0.2) is None
        await ch1.basic_ack(0, multiple=True)
        await ch2.basic_ack(0, multiple=True)
        await conn.close()

    run(scenario)


def test_consume_with_callback(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        got = []
        consumer = await ch.consume(q, callback=got.append, no_ack=True)
        for i in range(3):
            await ch.basic_publish("", q, b"cb%d" % i)
        assert await api.pump(conn, lambda: len(got) >= 3, timeout=5), got
        assert [m.body for m in got] == [b"cb0", b"cb1", b"cb2"]
        assert all(m.consumer_tag == consumer.consumer_tag for m in got)
        await ch.basic_cancel(consumer.consumer_tag)
        await ch.basic_publish("", q, b"after cancel")
        await api.pump(conn, lambda: len(got) > 3, timeout=0.5)
        assert len(got) == 3

        # callback consumer with manual acks: ack from the message
        q2 = (await ch.queue_declare("", exclusive=True)).queue
        got2 = []
        await ch.consume(q2, callback=got2.append)
        await ch.basic_publish("", q2, b"ack me")
        assert await api.pump(conn, lambda: got2, timeout=5)
        await got2[0].ack()
        await ch.close()
        ch2 = await conn.channel()
        assert await ch2.basic_get(q2) is None                        # it was acked

    run(scenario)


def test_consumer_cancelled_by_broker(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch1 = await conn.channel()
        ch2 = await conn.channel()
        q = api.names.queue()
        await ch1.queue_declare(q)
        consumer = await ch1.consume(q)
        await ch2.queue_delete(q)
        with pytest.raises(E.ConsumerCancelled) as ei:
            await api.next(consumer, timeout=5)
        assert ei.value.consumer_tag == consumer.consumer_tag
        assert ch1.is_open                                           # only the consumer ended
        await ch1.queue_declare("", exclusive=True)

    run(scenario)


# --------------------------------------------------------------------------- get / ack


def test_basic_get(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        assert await ch.basic_get(q) is None
        await ch.basic_publish("", q, b"one")
        await ch.basic_publish("", q, b"two")
        m = await ch.basic_get(q)
        assert (m.body, m.message_count, m.redelivered) == (b"one", 1, False)
        assert (m.exchange, m.routing_key, m.consumer_tag) == ("", q, None)
        assert isinstance(m.delivery_tag, int) and m.delivery_tag >= 1
        m2 = await ch.basic_get(q, no_ack=True)
        assert (m2.body, m2.message_count) == (b"two", 0)
        await m.ack()
        assert await ch.basic_get(q) is None

    run(scenario)


def test_ack_nack_reject_multiple_and_requeue(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        for i in range(8):
            await ch.basic_publish("", q, b"m%d" % i)
        g = [await ch.basic_get(q) for _ in range(8)]
        assert [m.body for m in g] == [b"m%d" % i for i in range(8)]
        assert not any(m.redelivered for m in g)

        await ch.basic_ack(g[1].delivery_tag, multiple=True)               # m0 m1 gone
        await ch.basic_nack(g[2].delivery_tag, requeue=False)              # m2 dropped
        await ch.basic_reject(g[3].delivery_tag, requeue=True)             # m3 back
        await ch.basic_nack(g[5].delivery_tag, multiple=True, requeue=True)  # m4 m5 back
        await g[6].reject(requeue=False)                                   # m6 dropped
        await g[7].nack(requeue=True)                                      # m7 back

        again = []
        while (m := await ch.basic_get(q)) is not None:
            again.append(m)
        assert sorted(m.body for m in again) == [b"m3", b"m4", b"m5", b"m7"]
        assert all(m.redelivered for m in again)

        await again[0].ack()
        await again[1].nack(multiple=False, requeue=False)
        await again[3].ack(multiple=True)                                  # again[2] and [3]
        await ch.close()
        ch = await conn.channel()
        assert await ch.basic_get(q) is None                               # nothing unacked came back
        assert (await ch.queue_declare(q, passive=True)).message_count == 0

        # requeue=False on a multiple nack
        await ch.confirm_select()
        for i in range(3):
            await ch.basic_publish("", q, b"n%d" % i)
        g = [await ch.basic_get(q) for _ in range(3)]
        await g[2].nack(multiple=True, requeue=False)
        assert await ch.basic_get(q) is None

    run(scenario)


def test_basic_recover(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        await ch.basic_publish("", q, b"r1")
        await ch.basic_publish("", q, b"r2")
        first = [await ch.basic_get(q) for _ in range(2)]
        assert not any(m.redelivered for m in first)
        await ch.basic_recover(requeue=True)
        again = [await get_one(ch, q) for _ in range(2)]
        assert sorted(m.body for m in again) == [b"r1", b"r2"]
        assert all(m.redelivered for m in again)
        await ch.basic_ack(0, multiple=True)

    run(scenario)


# --------------------------------------------------------------------------- publishing


def test_concurrent_calls_on_one_channel(run):
    """Concurrent synchronous requests on one channel are serialized by the client (asyncio:
    tasks; blocking: threads), as are confirmed publishes."""

    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        oks = await asyncio.gather(*(ch.queue_declare("", exclusive=True) for _ in range(20)))
        assert len({ok.queue for ok in oks}) == 20
        await ch.confirm_select()
        q = oks[0].queue
        await asyncio.gather(*(ch.basic_publish("", q, b"%d" % i) for i in range(50)))
        assert (await ch.queue_declare(q, passive=True)).message_count == 50

    run(scenario)


async def _async_callback_scenario(amqp_url):
    from amqwire.client import aio

    conn = await aio.connect(amqp_url)
    try:
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        got = []

        async def on_message(msg):
            await asyncio.sleep(0)
            got.append(msg.body)
            await msg.ack()

        await ch.consume(q, callback=on_message)
        for i in range(3):
            await ch.basic_publish("", q, b"c%d" % i)
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:  # noqa: ASYNC110 (polls a count, no event to wait on)
            await asyncio.sleep(0.01)
        assert got == [b"c0", b"c1", b"c2"]
        await asyncio.sleep(0.1)
        assert (await ch.queue_declare(q, passive=True)).message_count == 0
    finally:
        await conn.close()


def test_coroutine_callback_aio(amqp_url):
    """asyncio: a coroutine function as consumer callback is awaited."""
    asyncio.run(asyncio.wait_for(_async_callback_scenario(amqp_url), 30))


def test_fire_and_forget_publish(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        for i in range(100):
            await ch.basic_publish("", q, b"%d" % i)
        bodies = [(await get_one(ch, q, no_ack=True)).body for _ in range(100)]
        assert bodies == [b"%d" % i for i in range(100)]

    run(scenario)


def test_confirm_select_publish_async_and_wait_for_confirms(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        with pytest.raises(E.InvalidStateError):                    # needs confirm mode
            await ch.publish_async("", q, b"x")
        await ch.confirm_select()
        await ch.basic_publish("", q, b"confirmed")
        assert (await ch.queue_declare(q, passive=True)).message_count == 1

        done = []
        futs = [await ch.publish_async("", q, b"a%d" % i, callback=done.append) for i in range(200)]
        await ch.wait_for_confirms(timeout=10)
        for f in futs:
            assert await api.wait(f) is None
        assert await api.pump(conn, lambda: len(done) == 200, timeout=5)
        assert all(f.done() for f in futs)
        late = []
        futs[0].add_done_callback(late.append)                        # already done: called now
        assert await api.pump(conn, lambda: late, timeout=5)
        assert (await ch.queue_declare(q, passive=True)).message_count == 201
        await ch.wait_for_confirms(timeout=10)                           # nothing outstanding

    run(scenario)


def test_publish_async_with_and_without_room(run):
    """The way with room (compiled: the blocking transport's publish_async is a compiled
    function, asyncio's a compiled coroutine) and the way that waits
    (_publish_waiting) keep publish_async's contract on both transports: options by
    keyword only, mandatory returns, callbacks, a full window waited for within timeout."""
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        await ch.confirm_select(max_in_flight=4)
        with pytest.raises(TypeError):
            await ch.publish_async("", q, b"x", None, True)  # mandatory is keyword-only
        done = []
        returned = await ch.publish_async("", "amq.no-such-queue", b"r", mandatory=True, callback=done.append)
        with pytest.raises(E.MessageReturned):
            await api.wait(returned, timeout=10)
        assert await api.pump(conn, lambda: done == [returned], timeout=5)
        futures = [await ch.publish_async("", q, b"%d" % i, timeout=10) for i in range(40)]  # waits for room
        for future in futures:
            assert await api.wait(future, timeout=10) is None
        assert (await ch.queue_declare(q, passive=True)).message_count == 40
        bodies = [(await get_one(ch, q, no_ack=True)).body for _ in range(40)]
        assert bodies == [b"%d" % i for i in range(40)]  # each once, in order
        assert await ch.basic_get(q, no_ack=True) is None

    run(scenario)


def test_tx_commit_and_rollback(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        await ch.tx_select()
        await ch.basic_publish("", q, b"rolled back")
        await ch.tx_rollback()
        assert await ch.basic_get(q) is None
        assert (await ch.queue_declare(q, passive=True)).message_count == 0

        await ch.basic_publish("", q, b"committed")
        assert (await ch.queue_declare(q, passive=True)).message_count == 0  # not before commit
        await ch.tx_commit()
        m = await ch.basic_get(q)
        assert m.body == b"committed"
        # acks are transactional too
        await m.ack()
        await ch.tx_rollback()
        await ch.close()
        ch = await conn.channel()
        m = await get_one(ch, q)
        assert m.body == b"committed" and m.redelivered

    run(scenario)


def test_all_properties_round_trip(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        props = all_properties(api)
        body = "b\u00f6dy".encode()

        await ch.basic_publish("", q, body, props)
        got = await ch.basic_get(q, no_ack=True)
        assert got.body == body
        assert_properties_equal(got.properties, props)

        consumer = await ch.consume(q, no_ack=True)
        await ch.basic_publish("", q, body, props)
        got = await api.next(consumer)
        assert got.body == body
        assert_properties_equal(got.properties, props)
        assert got.properties.headers["datetime"].tzinfo is not None

        # no properties at all: nothing appears
        await ch.basic_publish("", q, b"bare")
        got = await api.next(consumer)
        assert got.properties == api.BasicProperties()
        assert all(v is None for v in got.properties.as_dict().values())

    run(scenario)


@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_bodies_byte_exact(run, frame_max):
    sizes = [0, 1, frame_max - 9, frame_max - 8, frame_max - 7, 2 * frame_max,
             1024 * 1024 + 3, 10 * 1024 * 1024]
    bodies = [os.urandom(n) for n in sizes]

    async def scenario(api):
        conn = await api.connect(frame_max=frame_max)
        assert conn.frame_max == frame_max
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        props = api.BasicProperties(message_id="body")
        for body in bodies:                                          # publish -> get
            await ch.basic_publish("", q, body, props)
            m = await ch.basic_get(q, no_ack=True)
            assert len(m.body) == len(body)
            assert m.body == body
        consumer = await ch.consume(q, no_ack=True)                  # publish -> consume
        for body in bodies:
            await ch.basic_publish("", q, body, props)
        for body in bodies:
            m = await api.next(consumer, timeout=20)
            assert len(m.body) == len(body)
            assert m.body == body
            assert m.properties.message_id == "body"

    run(scenario)


def test_mandatory_unroutable_returns(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        nowhere = api.names.queue()                                  # never declared
        ch = await conn.channel()
        await ch.confirm_select()
        props = api.BasicProperties(message_id="ret-1")
        with pytest.raises(E.MessageReturned) as ei:
            await ch.basic_publish("", nowhere, b"returned", props, mandatory=True)
        exc = ei.value
        assert isinstance(exc, E.PublishError)
        assert (exc.reply_code, exc.reply_text) == (312, "NO_ROUTE")
        assert (exc.exchange, exc.routing_key) == ("", nowhere)
        assert exc.message.body == b"returned"
        assert exc.message.properties.message_id == "ret-1"
        assert (exc.message.reply_code, exc.message.routing_key) == (312, nowhere)

        await ch.basic_publish("", nowhere, b"not mandatory")         # silently dropped: acked

        fut = await ch.publish_async("", nowhere, b"async", mandatory=True)
        with pytest.raises(E.MessageReturned) as ei:
            await api.wait(fut)
        assert ei.value.reply_code == 312 and ei.value.message.body == b"async"

        ch2 = await conn.channel()
        await ch2.confirm_select()
        futs = [await ch2.publish_async("", nowhere, b"w%d" % i, mandatory=True) for i in range(2)]
        with pytest.raises(E.MessageReturned) as ei:
            await ch2.wait_for_confirms(timeout=10)
        assert len(ei.value.failures) == 2
        for f in futs:
            with pytest.raises(E.MessageReturned):
                await api.wait(f)
        await ch2.wait_for_confirms(timeout=10)                         # reported once

        # not in confirm mode: the on-return callback gets a ReturnedMessage
        ch3 = await conn.channel()
        returned = []
        ch3.add_on_return_callback(returned.append)
        await ch3.basic_publish("", nowhere, b"cb", api.BasicProperties(message_id="ret-2"),
                                mandatory=True)
        assert await api.pump(conn, lambda: returned, timeout=5)
        r = returned[0]
        assert (r.reply_code, r.reply_text, r.exchange, r.routing_key) == (312, "NO_ROUTE", "", nowhere)
        assert (r.body, r.properties.message_id) == (b"cb", "ret-2")

    run(scenario)


def test_publisher_nacks(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        await ch.confirm_select()
        await ch.basic_publish("", q, b"fits")
        with pytest.raises(E.PublishNacked) as ei:
            await ch.basic_publish("", q, b"rejected")
        assert isinstance(ei.value, E.PublishError)
        assert ei.value.delivery_tag == 2

        futs = [await ch.publish_async("", q, b"n%d" % i) for i in range(3)]
        for f in futs:
            with pytest.raises(E.PublishNacked):
                await api.wait(f)

        ch2 = await conn.channel()
        await ch2.confirm_select()
        for i in range(2):
            await ch2.publish_async("", q, b"w%d" % i)
        with pytest.raises(E.PublishNacked) as ei:
            await ch2.wait_for_confirms(timeout=10)
        assert len(ei.value.failures) == 2
        assert (await ch.queue_declare(q, passive=True)).message_count == 1

    run(scenario)


def test_a_confirmed_publish_to_a_missing_exchange_is_not_found_and_unconfirmed(run):
    """The broker closes the channel (404 NOT_FOUND) at a confirmed publish to a missing
    exchange: basic_publish, the publish's future and wait_for_confirms all raise one
    exception that is both PublishUnconfirmed and NotFound, with the close's fields."""

    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        missing = api.names.exchange()

        def check(exc, delivery_tag, channel_id):
            assert isinstance(exc, E.PublishUnconfirmed) and isinstance(exc, E.NotFound)
            assert isinstance(exc, E.PublishError) and isinstance(exc, E.ChannelClosed)
            assert exc.delivery_tag == delivery_tag
            assert (exc.reply_code, exc.by_broker, exc.channel) == (404, True, channel_id)
            assert "NOT_FOUND" in exc.reply_text and missing in exc.reply_text
            assert exc.method_name == "basic.publish"
            assert isinstance(exc.cause, E.NotFound) and exc.cause.reply_text == exc.reply_text
            assert str(exc).startswith(f"publish with delivery tag {delivery_tag} was never confirmed: ")
            back = pickle.loads(pickle.dumps(exc))
            assert type(back) is type(exc) and (back.reply_code, back.delivery_tag) == (404, delivery_tag)

        ch = await conn.channel()                                      # basic_publish
        await ch.confirm_select()
        with pytest.raises(E.NotFound) as ei:
            await ch.basic_publish(missing, "rk", b"lost")
        check(ei.value, 1, ch.channel_id)
        assert not ch.is_open and conn.is_open

        ch = await conn.channel()                                      # publish_async's future
        await ch.confirm_select()
        fut = await ch.publish_async(missing, "rk", b"lost")
        with pytest.raises(E.PublishUnconfirmed) as ei:
            await api.wait(fut)
        check(ei.value, 1, ch.channel_id)

        ch = await conn.channel()                                      # wait_for_confirms
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        assert await api.wait(await ch.publish_async("", q, b"kept")) is None
        await ch.publish_async(missing, "rk", b"lost")
        with pytest.raises(E.NotFound) as ei:
            await ch.wait_for_confirms(timeout=10)
        check(ei.value, 2, ch.channel_id)
        assert ei.value.failures == [ei.value]
        assert conn.is_open

    run(scenario)


# --------------------------------------------------------------------------- errors / close


def test_close_twice_and_closed_channel_is_invalid(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        await ch.close()
        await ch.close()                                             # twice is fine
        assert not ch.is_open
        with pytest.raises(E.InvalidStateError):
            await ch.queue_declare("", exclusive=True)
        with pytest.raises(E.InvalidStateError):
            await ch.basic_publish("", "q", b"x")
        ch2 = await conn.channel()
        assert ch2.channel_id and ch2.is_open
        await conn.close()
        await conn.close()
        assert not conn.is_open and not ch2.is_open
        with pytest.raises((E.InvalidStateError, E.ConnectionClosed)):
            await conn.channel()
        with pytest.raises((E.InvalidStateError, E.ConnectionClosed)):
            await ch2.queue_declare("", exclusive=True)

    run(scenario)


def test_close_ends_pending_waits(run):
    """A consumer being iterated (or a get without timeout) in another task/thread does not
    hang when its channel or connection is closed by the user: iteration ends."""

    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        consumer = await ch.consume(q)
        pending = asyncio.ensure_future(api.next(consumer, timeout=10))
        await asyncio.sleep(0.2)
        await ch.close()
        with pytest.raises((StopAsyncIteration, E.InvalidStateError, E.ChannelClosed)):
            await asyncio.wait_for(pending, 5)

        ch2 = await conn.channel()
        q2 = (await ch2.queue_declare("", exclusive=True)).queue
        consumer2 = await ch2.consume(q2)
        pending = asyncio.ensure_future(consumer2.get())
        await asyncio.sleep(0.2)
        await conn.close()
        result = None
        try:
            result = await asyncio.wait_for(pending, 5)
        except (E.InvalidStateError, E.ConnectionClosed):
            pass
        assert result is None

    run(scenario)


def test_unknown_delivery_tag(run):
    """A tag never delivered on the channel is refused locally (InvalidStateError, nothing
    sent, the channel stays open); a tag the broker no longer knows (acked twice) makes the
    broker close the channel with 406, raised by the next call on that channel."""

    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        with pytest.raises(E.InvalidStateError):
            await ch.basic_ack(999)
        assert ch.is_open
        q = (await ch.queue_declare("", exclusive=True)).queue
        await ch.basic_publish("", q, b"x")
        msg = await get_one(ch, q)
        await ch.basic_ack(msg.delivery_tag)
        await ch.basic_ack(msg.delivery_tag)                          # unknown to the broker now
        with pytest.raises(E.PreconditionFailed) as ei:
            await ch.queue_declare("", exclusive=True)
        assert ei.value.reply_code == 406
        assert "unknown delivery tag" in ei.value.reply_text
        assert ei.value.method_name == "basic.ack"
        assert not ch.is_open
        assert conn.is_open
        ch2 = await conn.channel()
        await ch2.queue_declare("", exclusive=True)

    run(scenario)


def test_broker_channel_close_racing_with_calls(run):
    """Repeatedly: the broker closes the channel (406) while the next call is being made.
    That call raises the broker's error (never a bare state error), and the channel number
    is freed for the next channel."""

    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        rng = random.Random(1234)
        ids = set()
        for _ in range(50):
            ch = await conn.channel()
            ids.add(ch.channel_id)
            q = (await ch.queue_declare("", exclusive=True)).queue
            await ch.basic_publish("", q, b"x")
            msg = await get_one(ch, q)
            await ch.basic_ack(msg.delivery_tag)
            await ch.basic_ack(msg.delivery_tag)
            await asyncio.sleep(rng.random() * 0.002)
            with pytest.raises(E.PreconditionFailed):
                await ch.queue_declare("", exclusive=True)
        assert ids == {1}, f"channel numbers not reused: {sorted(ids)}"
        assert conn.is_open

    run(scenario)


def test_broker_channel_close_race_blocking(amqp_url):
    """Blocking, all in the calling thread (tighter timing than through the scenario proxy):
    a broker channel.close racing with the next calls; the next channel must get the freed
    number and open cleanly, never inherit the old channel's close."""
    from amqwire.client import blocking
    from amqwire.client.errors import PreconditionFailed

    rng = random.Random(4321)
    with blocking.connect(amqp_url) as conn:
        for i in range(150):
            ch = conn.channel()
            assert ch.channel_id == 1, f"iteration {i}: channel number {ch.channel_id} (1 leaked)"
            q = ch.queue_declare("", exclusive=True).queue
            ch.basic_publish("", q, b"x")
            msg, deadline = None, time.monotonic() + 10
            while msg is None:
                assert time.monotonic() < deadline, f"iteration {i}: the message published never came (10 s)"
                msg = ch.basic_get(q)
            ch.basic_ack(msg.delivery_tag)
            ch.basic_ack(msg.delivery_tag)
            time.sleep(rng.random() * 0.002)
            with pytest.raises(PreconditionFailed):
                ch.queue_declare("", exclusive=True)


def test_connection_closed_by_broker(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        with pytest.raises(E.ConnectionClosed) as ei:
            await ch.exchange_declare(api.names.exchange(), "nonexistent-type")
        exc = ei.value
        assert isinstance(exc, E.AMQPConnectionError)
        assert exc.reply_code == 503
        assert "COMMAND_INVALID" in exc.reply_text
        assert exc.method_name == "exchange.declare"
        assert exc.by_broker is True
        assert not conn.is_open
        assert not ch.is_open
        # every later call reports the broker's close (not a bare "closed" state error)
        with pytest.raises(E.ConnectionClosed) as ei:
            await conn.channel()
        assert ei.value.reply_code == 503
        with pytest.raises(E.ConnectionClosed) as ei:
            await ch.basic_publish("", "q", b"x")
        assert ei.value.reply_code == 503
        with pytest.raises(E.ConnectionClosed) as ei:
            await ch.queue_declare("", exclusive=True)
        assert ei.value.reply_code == 503
        await conn.close()                                            # fine after a broker close

    run(scenario)


def test_connection_lost_reports_unconfirmed(run):
    async def scenario(api):
        E = api.errors
        proxy = api.proxy()
        # no recovery: the later calls must find the connection lost, not recovered through the proxy
        conn = await api.connect(api.proxy_url(proxy), recovery=False)
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        proxy.freeze()
        futs = [await ch.publish_async("", q, b"u%d" % i) for i in range(3)]
        proxy.kill()
        for seqno, f in enumerate(futs, 1):
            with pytest.raises(E.PublishUnconfirmed) as ei:
                await api.wait(f, timeout=10)
            assert isinstance(ei.value, E.PublishError)
            assert ei.value.delivery_tag == seqno
        assert await api.pump(conn, lambda: not conn.is_open, timeout=5)
        # later calls report the loss (not a bare "closed" state error)
        with pytest.raises(E.ConnectionLost):
            await ch.queue_declare("", exclusive=True)
        with pytest.raises(E.ConnectionLost):
            await ch.basic_publish("", q, b"x")
        with pytest.raises(E.ConnectionLost):
            await conn.channel()
        await conn.close()

    run(scenario)


def test_connection_lost_reports_unconfirmed_repeatedly_blocking(tcp_proxy):
    """Blocking, repeated (the outcome must not depend on which thread notices the loss
    first): futures of publishes in flight when the socket dies raise PublishUnconfirmed."""
    from amqwire.client import blocking
    from amqwire.client.errors import PublishUnconfirmed

    outcomes = []
    for _ in range(30):
        proxy, url = tcp_proxy()
        try:
            conn = blocking.connect(url)
            ch = conn.channel()
            ch.confirm_select()
            q = ch.queue_declare("", exclusive=True).queue
            proxy.freeze()
            futs = [ch.publish_async("", q, b"u%d" % i) for i in range(3)]
            proxy.kill()
            for f in futs:
                try:
                    f.result(10)
                    outcomes.append("acked")
                except Exception as exc:  # noqa: BLE001 - collected and checked below
                    outcomes.append(type(exc).__name__)
                    if isinstance(exc, PublishUnconfirmed):
                        assert exc.delivery_tag == f.delivery_tag
            conn.close()
        finally:
            proxy.close()
    wrong = {o: outcomes.count(o) for o in set(outcomes) if o != "PublishUnconfirmed"}
    assert not wrong, f"of {len(outcomes)} futures: {wrong}"


def test_close_with_silent_peer_reports_unconfirmed(run):
    """close() while publishes are unconfirmed and the broker has gone silent: close returns
    (it does not wait forever for close-ok) and the futures raise PublishUnconfirmed."""

    async def scenario(api):
        E = api.errors
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), connection_timeout=2)
        ch = await conn.channel()
        await ch.confirm_select()
        q = (await ch.queue_declare("", exclusive=True)).queue
        proxy.freeze()
        futs = [await ch.publish_async("", q, b"c%d" % i) for i in range(2)]
        t0 = time.monotonic()
        await asyncio.wait_for(conn.close(), 15)
        assert time.monotonic() - t0 < 10
        assert not conn.is_open
        for seqno, f in enumerate(futs, 1):
            with pytest.raises(E.PublishUnconfirmed) as ei:
                await api.wait(f, timeout=5)
            assert ei.value.delivery_tag == seqno

    run(scenario)


# --------------------------------------------------------------------------- URLs / auth


def test_auth_failure_and_vhost_url(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect(api.url_with(path="/%2F"))          # percent-encoded "/"
        assert conn.params.vhost == "/"
        assert conn.is_open

        secret = "Wr0ng-" + uuid.uuid4().hex
        bad = api.url_with(password=secret, path="/%2F")
        with pytest.raises(E.AuthenticationError) as ei:
            await api.connect(bad)
        assert isinstance(ei.value, E.AMQPConnectionError)
        assert_no_secret(ei.value, secret)

        with pytest.raises(E.AMQPConnectionError) as ei:              # 530 on connection.open
            await api.connect(api.url_with(path="/amqwire-no-such-vhost"))
        assert "NOT_ALLOWED" in str(ei.value)
        # the broker's reply code is kept: on the error itself or on its cause
        chain, err = [], ei.value
        while err is not None and len(chain) < 10:
            chain.append(err)
            err = err.__cause__ or err.__context__
        assert 530 in [getattr(e, "reply_code", None) for e in chain], chain

    run(scenario)


def test_parse_url_masks_password():
    from amqwire.client.url import parse_url

    secret = "S3cret-" + uuid.uuid4().hex
    params = parse_url(f"amqp://bob:{secret}@example.invalid:5673/%2Fv?heartbeat=7")
    assert (params.username, params.password, params.vhost, params.port, params.heartbeat) == \
        ("bob", secret, "/v", 5673, 7)
    assert secret not in repr(params) and secret not in str(params)
    with pytest.raises(ValueError, match="bogus"):
        parse_url("amqp://guest:guest@localhost/?bogus=1")
    with pytest.raises(ValueError, match="heartbeat"):
        parse_url("amqp://guest:guest@localhost/?heartbeat=abc")
    assert parse_url("amqp://localhost").vhost == "/"
    assert parse_url("amqp://localhost/").vhost == "/"
    assert parse_url("amqps://localhost").port == 5671


def test_unreachable_and_failover(run):
    async def scenario(api):
        E = api.errors
        secret = "Pw-" + uuid.uuid4().hex
        dead = api.url_with(port=api.closed_port(), password=secret)
        t0 = time.monotonic()
        with pytest.raises(E.AMQPConnectionError) as ei:
            await api.connect(dead)
        assert time.monotonic() - t0 < 5
        assert_no_secret(ei.value, secret)

        conn = await api.connect([api.url_with(port=api.closed_port()), api.url])
        assert conn.is_open
        assert conn.params.port == api.port
        ch = await conn.channel()
        await ch.queue_declare("", exclusive=True)

    run(scenario)


def test_silent_server_times_out_during_handshake(run):
    """A peer that accepts TCP but never speaks AMQP: connect fails, it does not hang."""

    async def scenario(api):
        E = api.errors
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(4)
            url = api.url_with(host="127.0.0.1", port=listener.getsockname()[1])
            t0 = time.monotonic()
            with pytest.raises(E.AMQPConnectionError):
                await asyncio.wait_for(api.connect(url, connection_timeout=1), 15)
            assert time.monotonic() - t0 < 10

    run(scenario)


# --------------------------------------------------------------------------- heartbeats


def test_heartbeat_survives_busy_user_code_blocking(amqp_url):
    """Blocking: heartbeat=1, 5 s of CPU-bound user code in the calling thread."""
    from amqwire.client import blocking

    with blocking.connect(amqp_url, heartbeat=1) as conn:
        assert conn.heartbeat == 1
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).queue
        busy(5.0)
        assert conn.is_open
        ch.basic_publish("", q, b"alive")
        deadline = time.monotonic() + 5
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = ch.basic_get(q, no_ack=True)
        assert msg is not None and msg.body == b"alive"


def test_heartbeat_survives_busy_user_code_aio(amqp_url):
    """asyncio: heartbeat=1, 5 s of CPU-bound user code (in a worker thread, so the loop
    itself stays free, as asyncio code must)."""
    from amqwire.client import aio

    async def main():
        conn = await aio.connect(amqp_url, heartbeat=1)
        try:
            assert conn.heartbeat == 1
            ch = await conn.channel()
            q = (await ch.queue_declare("", exclusive=True)).queue
            await asyncio.to_thread(busy, 5.0)
            assert conn.is_open
            await ch.basic_publish("", q, b"alive")
            msg = await get_one(ch, q, no_ack=True)
            assert msg is not None and msg.body == b"alive"
        finally:
            await conn.close()

    asyncio.run(asyncio.wait_for(main(), 60))


# A silent peer (heartbeat detection, with and without recovery): test_client_faults.py,
# scenario 3 of the fault suite.


# --------------------------------------------------------------------------- blocked


def test_connection_blocked(run, broker_node):
    """Memory alarm (watermark 0, on a private node) -> connection.blocked:
    blocked_action="raise" raises ConnectionBlockedError, "wait" waits until
    connection.unblocked."""
    node = broker_node()

    async def scenario(api):
        E = api.errors
        conn_raise = await api.connect(node.url, blocked_action="raise")
        conn_wait = await api.connect(node.url, blocked_action="wait")
        conn_timeout = await api.connect(node.url, blocked_action="wait", blocked_timeout=0.5)
        ch_raise = await conn_raise.channel()
        ch_wait = await conn_wait.channel()
        ch_timeout = await conn_timeout.channel()
        q = (await ch_raise.queue_declare("", exclusive=True)).queue
        assert not conn_raise.blocked and not conn_wait.blocked
        await asyncio.to_thread(node.set_memory_alarm)
        pending = None
        try:
            # RabbitMQ sends connection.blocked when a connection publishes during the alarm
            await ch_raise.basic_publish("", q, b"first")
            await ch_wait.basic_publish("", q, b"second")
            await ch_timeout.basic_publish("", q, b"third")
            assert await api.pump(conn_raise, lambda: conn_raise.blocked, timeout=10)
            assert await api.pump(conn_wait, lambda: conn_wait.blocked, timeout=10)
            assert await api.pump(conn_timeout, lambda: conn_timeout.blocked, timeout=10)
            t0 = time.monotonic()
            with pytest.raises(E.ConnectionBlockedError):             # waited blocked_timeout
                await ch_timeout.basic_publish("", q, b"timed out")
            assert 0.4 < time.monotonic() - t0 < 5
            with pytest.raises(E.ConnectionBlockedError) as ei:
                await ch_raise.basic_publish("", q, b"refused")
            assert "memory" in ei.value.reason
            with pytest.raises(E.ConnectionBlockedError) as ei:       # the publish's own timeout
                await ch_wait.basic_publish("", q, b"timed out too", timeout=0.5)
            assert "still blocked after 0.5 s" in str(ei.value)       # not 0.49998...
            assert 0.4 < ei.value.waited <= 0.5 and "memory" in ei.value.reason
            pending = asyncio.ensure_future(ch_wait.basic_publish("", q, b"waited"))
            await asyncio.sleep(0.5)
            assert not pending.done()                                 # waits while blocked
        finally:
            await asyncio.to_thread(node.clear_memory_alarm)
        await asyncio.wait_for(pending, 15)
        assert await api.pump(conn_raise, lambda: not conn_raise.blocked, timeout=10)
        assert await api.pump(conn_wait, lambda: not conn_wait.blocked, timeout=10)
        got = sorted([(await get_one(ch_raise, q, timeout=10, no_ack=True)).body for _ in range(4)])
        assert got == [b"first", b"second", b"third", b"waited"]
        assert await ch_raise.basic_get(q) is None

    run(scenario)


# --------------------------------------------------------------------------- channel.flow, oversized header


async def eventually(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(0.02)


def _held_bytes(proxy) -> bytes:
    """What a held TCPProxy keeps back, both ways, in order."""
    with proxy.lock:
        pairs = list(proxy.pairs)
    return b"".join(data for pair in pairs for _, data in (pair["held"] or []))


def test_publish_held_while_channel_flow_is_off(run):
    """channel.flow(active=false) holds publishes until flow(active=true); a publish's
    timeout says how long it waited; a channel closed meanwhile refuses the held publish.
    RabbitMQ no longer sends channel.flow (it blocks connections instead): the frames are
    fed to the real connection as if the broker had sent them, behind a held proxy (the
    broker must not see our flow-ok to a flow it never sent)."""
    from amqwire.codec import ChannelClose, ChannelFlow

    async def scenario(api):
        E = api.errors
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=False)
        ch = await conn.channel()
        raw = conn._obj if api.name == "blocking" else conn
        proxy.hold()
        raw._data_received(ChannelFlow(False).encode(ch.channel_id))
        pending = asyncio.ensure_future(ch.basic_publish("", "nowhere", b"held-by-flow"))
        await asyncio.sleep(0.3)
        assert not pending.done(), "a publish went on while channel.flow was off"
        assert b"held-by-flow" not in _held_bytes(proxy)
        raw._data_received(ChannelFlow(True).encode(ch.channel_id))
        await within(pending, 10, "the held publish to go on after channel.flow(active=true)")
        await eventually(lambda: b"held-by-flow" in _held_bytes(proxy), 10, "the publish to reach the socket")

        raw._data_received(ChannelFlow(False).encode(ch.channel_id))
        with pytest.raises(E.OperationTimeout) as ei:
            await ch.basic_publish("", "nowhere", b"timed-out", timeout=0.3)
        assert f"waited 0.3 s on channel {ch.channel_id} for channel.flow" in str(ei.value)  # not "0.0 s"
        assert 0.25 < ei.value.timeout <= 0.3

        refused = asyncio.ensure_future(ch.basic_publish("", "nowhere", b"refused"))
        await asyncio.sleep(0.2)
        assert not refused.done()
        raw._data_received(ChannelClose(406, "PRECONDITION_FAILED - closed under a held publish", 0, 0)
                           .encode(ch.channel_id))
        with pytest.raises(E.ChannelClosed) as ei:
            await within(refused, 10, "the held publish to be refused by the channel's close")
        assert ei.value.reply_code == 406
        assert b"refused" not in _held_bytes(proxy) and b"timed-out" not in _held_bytes(proxy)
        proxy.kill()

    run(scenario)


def test_content_header_over_frame_max_is_refused_whole(run):
    """A content header cannot be split over frames: properties whose header frame exceeds
    frame_max raise a FrameError naming the header, before anything of that publish is
    written; the channel and connection go on (in confirm mode too: no delivery tag is
    used up)."""

    async def scenario(api):
        from amqwire.codec import BasicProperties, FrameError

        conn = await api.connect(api.with_query(api.url, frame_max=4096))
        ch = await conn.channel()
        q = (await ch.queue_declare("", exclusive=True)).queue
        too_big = BasicProperties(headers={"big": "y" * 5000})
        for confirm in (False, True):
            if confirm:
                await ch.confirm_select()
            with pytest.raises(FrameError) as ei:
                await ch.basic_publish("", q, b"never", too_big)
            assert "content header" in str(ei.value) and "exceeds frame_max 4096" in str(ei.value)
            await ch.basic_publish("", q, b"after", BasicProperties(headers={"small": "y" * 100}))
            if confirm:
                await within(ch.wait_for_confirms(timeout=10), 15, "the confirm of the publish after the refused one")
            got = await get_one(ch, q, timeout=10, no_ack=True)
            assert got is not None and got.body == b"after" and got.properties.headers == {"small": "y" * 100}
            assert await ch.basic_get(q) is None  # nothing of the refused publish arrived
        assert ch.is_open and conn.is_open

    run(scenario)


# --------------------------------------------------------------------------- transport-specific


def test_context_managers_blocking(amqp_url):
    from amqwire.client import blocking
    from amqwire.client.errors import InvalidStateError

    with blocking.connect(amqp_url) as conn:
        with conn.channel() as ch:
            q = ch.queue_declare("", exclusive=True).queue
            ch.basic_publish("", q, b"cm")
            with ch.consume(q) as consumer:
                msg = consumer.get(timeout=5)
                assert msg.body == b"cm"
                msg.ack()
                assert ch.queue_declare(q, passive=True).consumer_count == 1
            assert ch.queue_declare(q, passive=True).consumer_count == 0
        assert not ch.is_open
        with pytest.raises(InvalidStateError):
            ch.queue_declare("", exclusive=True)
        assert conn.is_open
    assert not conn.is_open
    conn.close()


def test_context_managers_aio(amqp_url):
    from amqwire.client import aio
    from amqwire.client.errors import InvalidStateError

    async def nested_context_managers():
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                q = (await ch.queue_declare("", exclusive=True)).queue
                await ch.basic_publish("", q, b"cm")
                async with ch.consume(q) as consumer:
                    msg = await consumer.get(timeout=5)
                    assert msg.body == b"cm"
                    await msg.ack()
                    assert (await ch.queue_declare(q, passive=True)).consumer_count == 1
                    await consumer.cancel()
                    async for m in consumer:                          # ends after cancel
                        raise AssertionError(f"unexpected {m!r}")
                assert (await ch.queue_declare(q, passive=True)).consumer_count == 0
                async with ch.consume(q) as consumer:                 # exit cancels it
                    assert (await ch.queue_declare(q, passive=True)).consumer_count == 1
                assert (await ch.queue_declare(q, passive=True)).consumer_count == 0
            assert not ch.is_open
            with pytest.raises(InvalidStateError):
                await ch.queue_declare("", exclusive=True)
            assert conn.is_open
        assert not conn.is_open
        await conn.close()                                            # twice is fine

    async def iteration_with_break():
        conn = await aio.connect(amqp_url)
        try:
            ch = await conn.channel()
            q = (await ch.queue_declare("", exclusive=True)).queue
            for i in range(3):
                await ch.basic_publish("", q, b"i%d" % i)
            got = []
            async with ch.consume(q, no_ack=True) as consumer:
                async for m in consumer:
                    got.append(m.body)
                    if len(got) == 3:
                        break
            assert got == [b"i0", b"i1", b"i2"]
        finally:
            await conn.close()

    async def main():
        await nested_context_managers()
        await iteration_with_break()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_start_consuming_blocking(amqp_url):
    from amqwire.client import blocking

    with blocking.connect(amqp_url) as conn:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).queue
        for i in range(5):
            ch.basic_publish("", q, b"s%d" % i)
        got = []

        def on_message(msg):
            got.append(msg.body)
            msg.ack()
            if len(got) == 5:
                ch.stop_consuming()

        ch.consume(q, callback=on_message)
        timer = threading.Timer(10, ch.stop_consuming)                # a safety net only
        timer.start()
        try:
            ch.start_consuming()
        finally:
            timer.cancel()
        assert got == [b"s%d" % i for i in range(5)]
        ch.close()
        ch = conn.channel()
        assert ch.basic_get(q) is None


def test_batch_publish_blocking(amqp_url):
    from amqwire.client import blocking

    with blocking.connect(amqp_url) as conn:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).queue
        ch.confirm_select()
        with ch.batch():
            futs = [ch.publish_async("", q, b"b%d" % i) for i in range(500)]
        ch.wait_for_confirms(timeout=10)
        assert all(f.done() for f in futs)
        assert ch.queue_declare(q, passive=True).message_count == 500


# --------------------------------------------------------------------------- recovery


def _connection_pid(rabbitmqctl, name):
    """The pid (in the form close_connection takes) of the connection with this
    connection_name, or None."""
    out = rabbitmqctl("-q", "list_connections", "--no-table-headers", "pid", "client_properties")
    for line in out.splitlines():
        pid, _, props = line.partition("\t")
        if '{"connection_name","%s"}' % name in props:
            return pid.strip()
    return None


def test_recovery_after_forced_close(run, broker_node):
    node = broker_node()
    rabbitmqctl = node.rabbitmqctl

    async def scenario(api):
        tag = "amqwire-recovery-" + uuid.uuid4().hex
        conn = await api.connect(node.url, recovery=True, client_properties={"connection_name": tag})
        ch = await conn.channel()
        ex, q = api.names.exchange(), api.names.queue()
        # auto-delete: both vanish with the connection, so they exist afterwards only if
        # the client re-declared them
        await ch.exchange_declare(ex, "direct", auto_delete=True)
        await ch.queue_declare(q, auto_delete=True)
        await ch.queue_bind(q, ex, "rk")
        consumer = await ch.consume(q, no_ack=True)
        # a second channel: prefetch 1, a server-named exclusive queue (gets a new name on
        # recovery), a manual-ack consumer, confirm mode
        ch2 = await conn.channel()
        await ch2.basic_qos(prefetch_count=1)
        sq = (await ch2.queue_declare("", exclusive=True)).queue
        await ch2.queue_bind(sq, ex, "rk")
        consumer2 = await ch2.consume(sq)
        await ch2.confirm_select()

        other = await api.connect(node.url)
        och = await other.channel()
        await och.confirm_select()
        await och.basic_publish(ex, "rk", b"before", mandatory=True)
        assert (await api.next(consumer)).body == b"before"
        await (await api.next(consumer2)).ack()

        pid = await asyncio.to_thread(_connection_pid, rabbitmqctl, tag)
        assert pid, "connection not found by its connection_name"
        await asyncio.to_thread(rabbitmqctl, "close_connection", pid, "amqwire recovery test")

        deadline = time.monotonic() + 20
        while True:                                                   # a new connection...
            new_pid = await asyncio.to_thread(_connection_pid, rabbitmqctl, tag)
            if new_pid and new_pid != pid:
                break
            assert time.monotonic() < deadline, "the client did not reconnect within 20 s"
            await asyncio.sleep(0.1)
        while True:                                                   # ...that re-subscribed
            state = await queue_state(api, other, q)
            if state is not None and state.consumer_count == 1:
                break
            assert time.monotonic() < deadline, "the client did not recover within 20 s"
            await asyncio.sleep(0.1)
        assert await exchange_exists(api, other, ex)
        await och.basic_publish(ex, "rk", b"after", mandatory=True)   # the binding is back
        assert (await api.next(consumer)).body == b"after"             # same consumer object
        m = await api.next(consumer2)
        assert m.body == b"after"
        await och.basic_publish(ex, "rk", b"after2", mandatory=True)
        assert (await api.next(consumer)).body == b"after2"
        assert await consumer2.get(timeout=0.5) is None                # prefetch 1 is back
        await m.ack()                                                   # tag from the new connection
        assert (await api.next(consumer2)).body == b"after2"
        await ch2.basic_publish(ex, "rk", b"confirmed", mandatory=True)  # confirm mode is back
        assert conn.is_open
        await ch.queue_declare("", exclusive=True)                       # the channel works

    run(scenario)


def test_recovery_reports_unconfirmed_publishes(run):
    async def scenario(api):
        E = api.errors
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=True)
        ch = await conn.channel()
        await ch.confirm_select()
        q = api.names.queue()
        await ch.queue_declare(q)
        proxy.freeze()
        futs = [await ch.publish_async("", q, b"lost%d" % i) for i in range(3)]
        proxy.kill()                                                  # never confirmed
        for seqno, f in enumerate(futs, 1):
            with pytest.raises(E.PublishUnconfirmed) as ei:
                await api.wait(f, timeout=15)
            assert ei.value.delivery_tag == seqno
        deadline = time.monotonic() + 20
        while True:                                                   # recovered: publishing works
            try:
                await ch.basic_publish("", q, b"after")
                break
            except E.AMQPError:
                assert time.monotonic() < deadline, "no recovery within 20 s"
                await asyncio.sleep(0.2)
        assert proxy.accepted >= 2
        m = await get_one(ch, q, no_ack=True)
        assert m.body == b"after"    # the unconfirmed ones never reached the broker (frozen)

    run(scenario)
