"""Listeners, the default consumer and the exception handler, on both transports, against a
real broker (a private node for the alarm, the forced close and the recovery).

Listeners receive one event object each (amqwire.client.listeners); on the blocking
transport the scenario's listeners get proxies of them, so the tests read attributes only.
"""
from __future__ import annotations

import asyncio
import logging
import time

import pytest


def collector():
    """A list and a listener appending to it (a plain function: both transports)."""
    seen: list = []
    return seen, seen.append


async def until(api, conn, predicate, timeout: float = 15.0, what: str = "") -> None:
    """Run callbacks (blocking: process_events) until ``predicate()``."""
    assert await api.pump(conn, predicate, timeout), f"timed out waiting for {what or predicate}"


async def eventually(predicate, timeout: float = 15.0, what: str = "") -> None:
    """Wait for ``predicate()`` without running callbacks: listeners need no pumping."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what or predicate}"
        await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- close listeners


def test_close_listeners_of_a_close_by_the_application(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        other = await conn.channel()
        conn_closed, on_conn_closed = collector()
        ch_closed, on_ch_closed = collector()
        other_closed, on_other_closed = collector()
        conn.add_close_listener(on_conn_closed)
        ch.add_close_listener(on_ch_closed)
        other.add_close_listener(on_other_closed)
        await ch.close()
        assert [(e.channel_id, e.by_application, e.by_broker, e.reply_code, e.cause) for e in ch_closed] == [
            (ch.channel_id, True, False, 200, None)
        ]
        await conn.close(320, "bye")
        assert [(e.channel_id, e.by_application, e.by_broker, e.reply_code, e.reply_text, e.cause, e.recovering)
                for e in conn_closed] == [(0, True, False, 320, "bye", None, False)]
        assert [(e.by_application, e.recovering) for e in other_closed] == [(True, False)]
        assert len(ch_closed) == 1  # closed before: not again with the connection

    run(scenario)


def test_close_during_a_recovery_is_announced(run):
    """Lost (a recovery follows), then close() while reconnecting fails: the close listener
    hears both, the second one by the application and final."""
    from amqwire.client import RecoveryPolicy

    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=RecoveryPolicy(initial_delay=0.1, max_delay=0.2))
        events, on_closed = collector()
        started, on_started = collector()
        conn.add_close_listener(on_closed)
        conn.add_recovery_started_listener(on_started)
        proxy.close()  # the connection drops and every reconnection is refused
        await eventually(lambda: bool(started), what="the recovery")
        await conn.close()
        assert [(e.by_application, e.recovering) for e in events] == [(False, True), (True, False)]
        assert isinstance(events[0].cause, api.errors.ConnectionLost) and events[1].cause is None

    run(scenario)


def test_close_listener_of_a_channel_the_broker_closed(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        closed, on_closed = collector()
        ch.add_close_listener(on_closed)
        with pytest.raises(E.NotFound):
            await ch.queue_declare(api.names.queue(), passive=True)
        [event] = closed
        assert (event.by_application, event.by_broker, event.reply_code) == (False, True, 404)
        assert "NOT_FOUND" in event.reply_text and event.cause.reply_code == 404
        assert conn.is_open

    run(scenario)


def test_listeners_are_removable(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        closed, on_closed = collector()
        raw = ch._obj if api.name == "blocking" else ch  # the proxy wraps callables afresh
        raw.add_close_listener(on_closed)
        raw.remove_close_listener(on_closed)
        with pytest.raises(ValueError, match="not a registered listener"):
            raw.remove_close_listener(on_closed)
        await ch.close()
        assert closed == []

    run(scenario)


# --------------------------------------------------------------------------- confirms, flow


def test_confirm_listener_sees_every_ack_and_nack(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        q = api.names.queue()
        # room for 5: the broker nacks every publish beyond (reject-publish)
        await ch.queue_declare(q, arguments={"x-max-length": 5, "x-overflow": "reject-publish"})
        await ch.confirm_select()
        confirms, on_confirm = collector()
        ch.add_confirm_listener(on_confirm)
        futures = [await ch.publish_async("", q, b"m%d" % i) for i in range(20)]
        for future in futures:
            try:
                await api.wait(future)
            except api.errors.PublishNacked:
                pass
        acked: set = set()
        nacked: set = set()
        covered = 0
        for event in confirms:
            target = acked if event.ack else nacked
            tags = range(covered + 1, event.delivery_tag + 1) if event.multiple else [event.delivery_tag]
            target.update(tags)
            covered = max(covered, event.delivery_tag)
        assert acked == set(range(1, 6)) and nacked == set(range(6, 21))
        assert all(e.channel_id == ch.channel_id for e in confirms)

    run(scenario)


def test_flow_listener(run):
    """RabbitMQ no longer sends channel.flow (it blocks connections instead): the frame is
    fed to the real connection as if the broker had sent it; the client answers flow-ok."""
    from amqwire.codec import ChannelFlow

    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy))
        ch = await conn.channel()
        flows, on_flow = collector()
        ch.add_flow_listener(on_flow)
        proxy.hold()  # the broker never asked: its answer to our flow-ok must not come in between
        raw = conn._obj if api.name == "blocking" else conn
        raw._data_received(ChannelFlow(False).encode(ch.channel_id))
        assert [(e.channel_id, e.active) for e in flows] == [(ch.channel_id, False)]
        assert ch._flow_paused
        raw._data_received(ChannelFlow(True).encode(ch.channel_id))
        assert [e.active for e in flows] == [False, True]
        assert not ch._flow_paused
        proxy.kill()

    run(scenario)


# --------------------------------------------------------------------------- consumers


def test_consumer_lifecycle_listener(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        other = await conn.channel()
        events, on_event = collector()
        ch.add_consumer_listener(on_event)
        q1, q2 = api.names.queue(), api.names.queue()
        await ch.queue_declare(q1)
        await ch.queue_declare(q2)
        c1 = await ch.consume(q1, consumer_tag="c1")
        c2 = await ch.consume(q2, consumer_tag="c2")
        await ch.basic_recover()
        await c1.cancel()
        await other.queue_delete(q2)  # the broker cancels c2
        await eventually(lambda: len(events) >= 6, what="basic.cancel from the broker")
        await ch.close()
        seen = [(e.kind.value, e.consumer_tag) for e in events]
        assert seen == [("consume_ok", "c1"), ("consume_ok", "c2"), ("recover_ok", "c1"), ("recover_ok", "c2"),
                        ("cancel_ok", "c1"), ("cancelled", "c2")]
        assert all(e.channel_id == ch.channel_id for e in events)
        queues = {e.consumer_tag: e.queue for e in events}
        assert queues == {"c1": q1, "c2": q2}
        assert not c2.active

    run(scenario)


def test_consumer_listener_sees_its_channel_close(run):
    async def scenario(api):
        E = api.errors
        conn = await api.connect()
        ch = await conn.channel()
        events, on_event = collector()
        ch.add_consumer_listener(on_event)
        q = api.names.queue()
        await ch.queue_declare(q)
        await ch.consume(q, consumer_tag="gone")
        with pytest.raises(E.NotFound):
            await ch.queue_declare(api.names.queue(), passive=True)
        assert events  # the listeners ran before the call raised
        last = events[-1]
        assert (last.kind.value, last.consumer_tag, last.error.reply_code) == ("channel_closed", "gone", 404)

    run(scenario)


# --------------------------------------------------------------------------- default consumer


async def late_consumer(api, with_default: bool):
    """A consume whose consume-ok comes after its timeout: the client cancels it, and the
    deliveries the broker sent first are for a tag the channel does not know."""
    proxy = api.proxy()
    conn = await api.connect(api.proxy_url(proxy))
    ch = await conn.channel()
    q = api.names.queue()
    await ch.queue_declare(q)
    await ch.confirm_select()
    for i in range(3):
        await ch.basic_publish("", q, b"orphan %d" % i)
    received: list = []
    if with_default:
        ch.set_default_consumer(received.append)
    proxy.hold()
    with pytest.raises(api.errors.OperationTimeout):
        await ch.consume(q, timeout=0.3)
    proxy.release()
    return conn, ch, q, received


def test_deliveries_for_an_unknown_consumer_go_to_the_default_consumer(run):
    async def scenario(api):
        conn, ch, q, received = await late_consumer(api, with_default=True)
        await until(api, conn, lambda: len(received) >= 3, what="the default consumer")
        assert sorted(m.body for m in received) == [b"orphan 0", b"orphan 1", b"orphan 2"]
        for message in received:
            await message.ack()
        assert ch.default_consumer is not None
        await asyncio.sleep(0.2)
        assert (await ch.queue_declare(q, passive=True)).message_count == 0

    run(scenario)


def test_broker_cancel_of_an_unknown_tag_goes_to_the_default_cancel_handler(run):
    """basic.cancel from the broker for a tag no consumer of the channel holds goes to
    ``on_cancel`` (the Java client's DefaultConsumer.handleCancel); a known consumer's
    cancel does not.  No broker sends that on purpose: the frame is fed to the connection
    behind a held proxy, as if the broker had cancelled a consumer the client gave up on."""
    from amqwire.codec import BasicCancel

    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=False)
        ch = await conn.channel()
        other = await conn.channel()
        cancelled: list = []
        ch.set_default_consumer(None, on_cancel=cancelled.append)
        assert ch.default_consumer is None
        q = api.names.queue()
        await ch.queue_declare(q)
        known = await ch.consume(q, consumer_tag="known")
        await other.queue_delete(q)  # the broker cancels the known consumer: not a default-consumer matter
        await until(api, conn, lambda: not known.active, what="the broker's cancel of the known consumer")
        proxy.hold()
        raw = conn._obj if api.name == "blocking" else conn
        raw._data_received(BasicCancel("ghost", True).encode(ch.channel_id))
        await until(api, conn, lambda: cancelled == ["ghost"], what="on_cancel with the unknown tag")
        assert ch.is_open
        proxy.kill()

    run(scenario)


def test_deliveries_for_an_unknown_consumer_are_nacked_back(run, caplog):
    caplog.set_level(logging.WARNING, logger="amqwire.client")

    async def scenario(api):
        conn, ch, q, _ = await late_consumer(api, with_default=False)
        deadline = time.monotonic() + 15
        while (await ch.queue_declare(q, passive=True)).message_count != 3:  # requeued, none lost
            assert time.monotonic() < deadline, "the orphan deliveries never went back to the queue"
            await asyncio.sleep(0.05)
        assert ch.is_open

    run(scenario)
    warnings = [r for r in caplog.records if "unknown consumer" in r.getMessage()]
    assert len(warnings) == 1, "logged once per channel"


def test_the_dispatch_answers_unknown_deliveries_after_it_never_from_inside(run, monkeypatch):
    # The core's output is handled without calling back into the core: the nacks the
    # dispatch owes are queued once it is over.
    import threading

    from amqwire.client import protocol as proto
    from amqwire.client.session import ConnectionBase

    inside = threading.local()
    calls_inside: list[str] = []
    dispatch = ConnectionBase._dispatch

    def watched_dispatch(self, *args, **kwargs):
        inside.active = True
        try:
            return dispatch(self, *args, **kwargs)
        finally:
            inside.active = False

    monkeypatch.setattr(ConnectionBase, "_dispatch", watched_dispatch)
    def watching(name):
        real = getattr(proto.ConnectionProtocol, name)

        def watched(self, *args, **kwargs):
            if getattr(inside, "active", False):
                calls_inside.append(name)
            return real(self, *args, **kwargs)
        return watched

    for name in ("basic_ack", "basic_nack", "basic_reject", "send_method", "connection_lost", "drain_unconfirmed"):
        monkeypatch.setattr(proto.ConnectionProtocol, name, watching(name))

    async def scenario(api):
        conn, ch, q, _ = await late_consumer(api, with_default=False)
        deadline = time.monotonic() + 15
        while (await ch.queue_declare(q, passive=True)).message_count != 3:
            assert time.monotonic() < deadline, "the orphan deliveries never went back to the queue"
            await asyncio.sleep(0.05)

    run(scenario)
    assert calls_inside == []


# --------------------------------------------------------------------------- exception handler


def test_callback_exceptions_go_to_the_exception_handler(run):
    async def scenario(api):
        failures: list = []
        conn = await api.connect(exception_handler=failures.append)
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        got: list = []

        def on_message(message):
            got.append(message.body)
            if message.body == b"bad":
                raise RuntimeError("consumer failed on purpose")

        def on_return(returned):
            raise KeyError("return failed on purpose")

        def on_closed(event):
            raise ValueError("listener failed on purpose")

        ch.add_on_return_callback(on_return)
        ch.add_close_listener(on_closed)
        await ch.consume(q, on_message)
        for body in (b"good", b"bad", b"after"):
            await ch.basic_publish("", q, body)
        await ch.basic_publish("", api.names.queue(), b"nobody", mandatory=True)
        await until(api, conn, lambda: len(got) == 3 and len(failures) == 2, what="the callbacks")
        assert got == [b"good", b"bad", b"after"]  # the next callbacks still run
        await ch.close()
        by_where = {f.where: f for f in failures}
        assert set(by_where) == {"consumer", "return", "listener"}
        assert str(by_where["consumer"].error) == "consumer failed on purpose"
        assert by_where["consumer"].arg.body == b"bad"
        assert by_where["consumer"].channel.channel_id == ch.channel_id
        assert isinstance(by_where["return"].error, KeyError)
        assert isinstance(by_where["listener"].error, ValueError)

    run(scenario)


def test_coroutine_callbacks_and_listeners_report_to_the_handler(amqp_url, names):
    """asyncio: a coroutine listener's or consumer's exception reaches the handler; the
    connection keeps its task until it ends."""
    from amqwire.client import aio

    failures: list = []

    async def main():
        async with aio.connect(amqp_url, exception_handler=failures.append) as conn:
            ch = await conn.channel()
            q = names.queue()
            await ch.queue_declare(q)

            async def on_message(message):
                await asyncio.sleep(0)
                raise RuntimeError("async consumer failed")

            async def on_closed(event):
                await asyncio.sleep(0)
                raise RuntimeError("async listener failed")

            await ch.consume(q, on_message)
            other = await conn.channel()
            other.add_close_listener(on_closed)
            await ch.basic_publish("", q, b"x")
            await other.close()
            await eventually(lambda: len(failures) >= 2, 10, "the handler")
            await eventually(lambda: not conn._io._tasks, 10, "the finished tasks to be dropped")

    asyncio.run(main())
    assert sorted(str(f.error) for f in failures) == ["async consumer failed", "async listener failed"]
    assert {f.where for f in failures} == {"consumer", "listener"}


def test_strict_handler_closes_the_channel_of_a_failing_consumer(run):
    async def scenario(api):
        from amqwire.client.listeners import close_channel_on_consumer_error

        conn = await api.connect(exception_handler=close_channel_on_consumer_error)
        ch = await conn.channel()
        admin = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        closed, on_closed = collector()
        ch.add_close_listener(on_closed)

        def on_message(message):
            raise RuntimeError("no ack, and the channel goes")

        await ch.consume(q, on_message)
        await admin.basic_publish("", q, b"x")
        await until(api, conn, lambda: bool(closed), what="the channel's close")
        assert closed[0].by_application and closed[0].reply_code == 200
        assert not ch.is_open and conn.is_open
        deadline = time.monotonic() + 10
        while (await admin.queue_declare(q, passive=True)).message_count != 1:  # requeued
            assert time.monotonic() < deadline, "timed out after 10 s waiting for the delivery to be requeued"
            await asyncio.sleep(0.05)

    run(scenario)


# --------------------------------------------------------------------------- a private broker


def test_blocked_recovery_and_shutdown_listeners(broker_node, names):
    """On one private node, both transports at once: a memory alarm fires the blocked and
    unblocked listeners once each; a forced close fires the close listeners (by the broker,
    320, recovering), the recovery listeners and the consumers' connection_lost then
    consume_ok; a crashed broker makes the recovery attempts fail until the policy gives up (recovery_failed, final),
    and the close listeners hear the end."""
    from amqwire.client import RecoveryPolicy
    from conftest import TRANSPORTS, Api

    node = broker_node()
    kinds = ("blocked", "unblocked", "closed", "started", "succeeded", "failed", "consumer", "channel")

    async def subscribe(api):
        proxy = api.proxy()
        policy = RecoveryPolicy(initial_delay=0.2, max_delay=0.5, max_attempts=3)
        conn = await api.connect(api.proxy_url(proxy), recovery=policy)
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        await ch.consume(q, consumer_tag="survivor")
        seen: dict = {kind: [] for kind in kinds}
        conn.add_blocked_listener(seen["blocked"].append)
        conn.add_unblocked_listener(seen["unblocked"].append)
        conn.add_close_listener(seen["closed"].append)
        conn.add_recovery_started_listener(seen["started"].append)
        conn.add_recovery_succeeded_listener(seen["succeeded"].append)
        conn.add_recovery_failed_listener(seen["failed"].append)
        ch.add_consumer_listener(seen["consumer"].append)
        ch.add_close_listener(seen["channel"].append)
        return proxy, ch, q, seen

    async def main():
        apis = [Api(transport, node.url, names) for transport in TRANSPORTS]
        try:
            clients = [await subscribe(api) for api in apis]
            every = [client[3] for client in clients]

            await asyncio.to_thread(node.set_memory_alarm)
            for _, ch, q, _ in clients:
                await ch.basic_publish("", q, b"the broker blocks after this one")
            await eventually(lambda: all(seen["blocked"] for seen in every), what="connection.blocked")
            await asyncio.to_thread(node.clear_memory_alarm)
            await eventually(lambda: all(seen["unblocked"] for seen in every), what="connection.unblocked")
            await asyncio.sleep(0.5)
            for seen in every:
                assert len(seen["blocked"]) == 1 and len(seen["unblocked"]) == 1
                assert "memory" in seen["blocked"][0].reason

            await asyncio.to_thread(node.close_all_connections, "forced by the test")
            await eventually(lambda: all(seen["succeeded"] for seen in every), what="the recoveries")
            for seen in every:
                [closed] = seen["closed"]
                assert (closed.by_broker, closed.by_application, closed.reply_code, closed.recovering) == (
                    True, False, 320, True)
                assert "forced by the test" in closed.reply_text and closed.cause.reply_code == 320
                assert [(e.attempt, e.error.reply_code) for e in seen["started"]] == [(0, 320)]
                assert seen["succeeded"][0].attempt >= 1
                assert [(e.kind.value, e.recovering) for e in seen["consumer"]] == [
                    ("connection_lost", True), ("consume_ok", False)]
                assert [(e.by_broker, e.reply_code, e.recovering) for e in seen["channel"]] == [(True, 320, True)]

            await asyncio.to_thread(node.kill)  # the connections drop; every reconnection fails
            await eventually(lambda: all(any(e.final for e in seen["failed"]) for seen in every), timeout=60,
                             what=lambda: f"the recoveries to give up: {[(s['failed'], s['closed']) for s in every]}")
            for seen in every:
                assert [(e.attempt, e.final) for e in seen["failed"]] == [(1, False), (2, False), (3, True)]
                assert len(seen["succeeded"]) == 1 and len(seen["started"]) == 2
                # the loss (a recovery follows), then the end: the recovery gave up
                assert [(e.recovering, e.by_application) for e in seen["closed"][1:]] == [(True, False), (False, False)]
                assert seen["channel"][-1].recovering is False
        finally:
            for api in apis:
                await api.aclose()

    asyncio.run(asyncio.wait_for(main(), 120))
