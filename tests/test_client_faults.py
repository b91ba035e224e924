"""Faults, on both transports, against a real broker: the same fault gives the same
exception, nothing is left unsettled, a request that timed out leaves its channel usable.

Each test here reproduced a defect of the two separate transports (issue "One client,
written once"): a publish waiting for window room across a connection loss, an early
return of wait_for_confirms under threads, InvalidStateError during a recovery, different
exceptions for a peer that is not a broker, a cancelled RPC wedging its channel, lost
exceptions of coroutine callbacks, an ERROR log for a refused login.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import pytest

from conftest import TCPProxy

def holding_proxy(api) -> TCPProxy:
    """A proxy to the shared broker that can hold (delay) every byte: ``hold()``/``release()``."""
    return api.proxy()


async def declare_directly(api, queue: str) -> None:
    """Declare a queue over a connection of its own (not through a proxy)."""
    conn = await api.connect()
    ch = await conn.channel()
    await ch.queue_declare(queue)
    await conn.close()


async def ack_until_recovered(api, conn, message, timeout: float = 30) -> list:
    """Ack ``message`` every 10 ms until the connection is back (and at least one ack was
    refused while it was down); returns what the refused acks raised."""
    raised = []
    deadline = time.monotonic() + timeout
    while not (conn.is_open and raised):
        try:
            await message.ack()
        except Exception as exc:  # noqa: BLE001 - the caller checks every one
            raised.append(exc)
        assert time.monotonic() < deadline, f"no recovery within {timeout} s"
        await asyncio.sleep(0.01)
    return raised


# --------------------------------------------------------------------------- timeouts


def test_a_timed_out_request_leaves_the_channel_usable(run):
    async def scenario(api):
        E = api.errors
        proxy = holding_proxy(api)
        conn = await api.connect(api.proxy_url(proxy))
        ch = await conn.channel()
        late, next_one = api.names.queue(), api.names.queue()
        proxy.hold()
        started = time.monotonic()
        with pytest.raises(E.OperationTimeout) as info:
            await ch.queue_declare(late, timeout=0.3)
        assert time.monotonic() - started < 5
        assert isinstance(info.value, TimeoutError)
        assert str(info.value) == f"no reply to queue.declare on channel {ch.channel_id} within 0.3 s"
        proxy.release()
        ok = await ch.queue_declare(next_one, timeout=10)      # not the late reply
        assert ok.queue == next_one
        assert (await ch.queue_declare(late, passive=True)).queue == late  # the late one happened
        assert ch.is_open and conn.is_open

    run(scenario)


def test_the_connection_wide_rpc_timeout_applies(run):
    async def scenario(api):
        E = api.errors
        proxy = holding_proxy(api)
        conn = await api.connect(api.proxy_url(proxy), rpc_timeout=0.3)
        ch = await conn.channel()
        q = api.names.queue()
        proxy.hold()
        with pytest.raises(E.OperationTimeout):
            await ch.queue_declare(q)
        with pytest.raises(E.OperationTimeout) as info:             # still waiting for the first reply
            await ch.queue_purge(q)
        assert info.value.earlier and "queue.purge" in str(info.value)
        proxy.release()
        assert await ch.queue_purge(q, timeout=10) == 0

    run(scenario)


def test_a_timed_out_basic_get_puts_its_message_back(run):
    async def scenario(api):
        E = api.errors
        proxy = holding_proxy(api)
        conn = await api.connect(api.proxy_url(proxy))
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        await ch.confirm_select()
        await ch.basic_publish("", q, b"fetched late")
        proxy.hold()
        with pytest.raises(E.OperationTimeout):
            await ch.basic_get(q, timeout=0.3)
        proxy.release()
        deadline = time.monotonic() + 10
        while True:   # the late get-ok was rejected back to the queue: it comes again
            message = await ch.basic_get(q, no_ack=True, timeout=10)
            if message is not None:
                break
            assert time.monotonic() < deadline, "the message fetched late never came back"
            await asyncio.sleep(0.05)
        assert message.body == b"fetched late" and message.redelivered

    run(scenario)


def test_a_cancelled_request_leaves_the_channel_usable():
    from amqwire.client import aio
    from conftest import DEFAULT_URL, Names, url_host_port, with_netloc

    async def main():
        host, port = url_host_port(DEFAULT_URL)
        proxy = TCPProxy(host, port)
        names = Names()
        try:
            async with aio.connect(with_netloc(DEFAULT_URL, "127.0.0.1", proxy.port)) as conn:
                ch = await conn.channel()
                first, second, third = names.queue(), names.queue(), names.queue()
                proxy.hold()
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(ch.queue_declare(first, auto_delete=True), 0.2)
                task = asyncio.ensure_future(ch.queue_declare(second, auto_delete=True))
                await asyncio.sleep(0.1)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                proxy.release()
                ok = await ch.queue_declare(third, auto_delete=True)   # no InvalidStateError
                assert ok.queue == third
                assert (await ch.queue_declare(first, passive=True)).queue == first
        finally:
            proxy.close()

    asyncio.run(main())


# --------------------------------------------------------------------------- losing the connection


@pytest.mark.parametrize("recovery", [False, True], ids=["no-recovery", "recovery"])
def test_a_publish_waiting_for_window_room_fails_with_the_connection(run, recovery):
    async def scenario(api):
        E = api.errors
        from amqwire.client import RecoveryPolicy

        q = api.names.queue()
        await declare_directly(api, q)
        proxy = api.proxy()
        policy = RecoveryPolicy(initial_delay=0.2, max_delay=0.5) if recovery else False
        conn = await api.connect(api.proxy_url(proxy), recovery=policy)
        ch = await conn.channel()
        await ch.confirm_select(max_in_flight=10)
        proxy.freeze()                                    # the broker stops answering
        futures = [await ch.publish_async("", q, b"in flight") for _ in range(10)]
        waiting = asyncio.ensure_future(ch.publish_async("", q, b"waits for room"))
        await asyncio.sleep(0.5)
        assert not waiting.done()                         # the window is full
        proxy.kill()
        try:
            last = await asyncio.wait_for(waiting, 15)
        except E.AMQPConnectionError:
            last = None                                   # told at once: fine
        for future in futures:
            with pytest.raises(E.PublishUnconfirmed):
                await api.wait(future, timeout=15)
        if last is not None:                              # queued after a recovery: must settle
            await api.wait(last, timeout=15)

    run(scenario)


def test_acks_during_a_recovery_raise_connection_errors(run):
    async def scenario(api):
        E = api.errors
        from amqwire.client import RecoveryPolicy

        q = api.names.queue()
        await declare_directly(api, q)
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=RecoveryPolicy(initial_delay=0.8, max_delay=0.8))
        ch = await conn.channel()
        await ch.confirm_select()
        for i in range(3):
            await ch.basic_publish("", q, b"%d" % i)
        consumer = await ch.consume(q)
        message = await api.next(consumer)
        proxy.kill()
        raised = await ack_until_recovered(api, conn, message, timeout=20)
        assert raised, "no ack was refused while the connection was down"
        wrong = [exc for exc in raised if not isinstance(exc, E.AMQPConnectionError)]
        assert not wrong, wrong[:3]
        await message.ack()      # from before the recovery: void (the broker requeued it), no error
        while True:   # the ones delivered before the loss come again, redelivered
            again = await api.next(consumer)
            if again.body == message.body:
                break
        assert again.redelivered

    run(scenario)


def test_wait_for_confirms_covers_every_future_of_every_thread(amqp_url, names):
    """Threads, a channel each, batches of publish_async then wait_for_confirms: when it
    returns, every future of that channel is settled."""
    from amqwire.client import connect

    q = names.queue()
    stop = time.monotonic() + 4
    unsettled = []
    errors = []
    with connect(amqp_url) as conn:
        with conn.channel() as ch:
            ch.queue_declare(q)

        def worker():
            try:
                with conn.channel() as ch:
                    ch.confirm_select(max_in_flight=1000)
                    while time.monotonic() < stop:
                        batch = [ch.publish_async("", q, b"x") for _ in range(200)]
                        ch.wait_for_confirms(timeout=30)
                        unsettled.extend(f for f in batch if not f.done())
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        with conn.channel() as ch:
            ch.queue_purge(q)
    assert not errors, errors
    assert not unsettled, f"{len(unsettled)} futures were pending after wait_for_confirms returned"


def test_wait_for_confirms_covers_every_future_of_every_task(amqp_url, names):
    from amqwire.client import aio

    q = names.queue()

    async def main():
        unsettled = []
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                await ch.queue_declare(q)
            stop = time.monotonic() + 3

            async def worker():
                async with conn.channel() as ch:
                    await ch.confirm_select(max_in_flight=1000)
                    while time.monotonic() < stop:
                        batch = [await ch.publish_async("", q, b"x") for _ in range(200)]
                        await ch.wait_for_confirms(timeout=30)
                        unsettled.extend(f for f in batch if not f.done())

            await asyncio.gather(*(worker() for _ in range(8)))
            async with conn.channel() as ch:
                await ch.queue_purge(q)
        return unsettled

    assert not asyncio.run(main())


# --------------------------------------------------------------------------- peers that are not brokers


class FakePeer:
    """A TCP server that answers every connection with ``reply`` and closes it."""

    def __init__(self, reply: bytes):
        self.reply = reply
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(8)
                    conn.sendall(self.reply)
                    time.sleep(0.05)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


PEERS = {
    "http": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "amqp-1.0-header": b"AMQP\x00\x01\x00\x00",
    "garbage": bytes(range(200, 256)) * 4,
}


@pytest.mark.parametrize("peer", PEERS)
def test_a_peer_that_is_not_a_broker_gives_the_same_error_on_both_transports(peer):
    from amqwire.client import aio, connect
    from amqwire.client.errors import ConnectionLost

    server = FakePeer(PEERS[peer])
    url = f"amqp://guest:guest@127.0.0.1:{server.port}/?connection_timeout=5"
    try:
        with pytest.raises(ConnectionLost) as blocking_error:
            connect(url)

        async def main():
            await aio.connect(url)

        with pytest.raises(ConnectionLost) as aio_error:
            asyncio.run(main())
    finally:
        server.close()
    assert type(blocking_error.value) is type(aio_error.value)
    assert str(blocking_error.value) == str(aio_error.value)
    text = str(blocking_error.value)
    if peer == "amqp-1.0-header":
        assert "does not accept AMQP 0-9-1" in text and "1-0-0" in text, text
    else:
        assert "is not speaking AMQP 0-9-1" in text, text
        assert repr(PEERS[peer][:8])[2:-1] in text, text
        assert "frame type" not in text


def test_a_refused_login_is_not_logged_as_a_lost_connection(run, caplog):
    async def scenario(api):
        E = api.errors
        caplog.set_level(logging.INFO, logger="amqwire.client")
        with pytest.raises(E.AuthenticationError):
            await api.connect(api.url_with(password="certainly-wrong"))
        errors = [r for r in caplog.records if r.name == "amqwire.client" and r.levelno >= logging.ERROR]
        assert not errors, [r.getMessage() for r in errors]

    run(scenario)


# --------------------------------------------------------------------------- callbacks


def test_coroutine_callbacks_exceptions_are_logged(amqp_url, names, caplog):
    from amqwire.client import aio

    caplog.set_level(logging.ERROR, logger="amqwire.client")
    q = names.queue()

    async def main():
        async with aio.connect(amqp_url) as conn:
            ch = await conn.channel()
            await ch.queue_declare(q)

            async def on_return(returned):
                await asyncio.sleep(0)
                raise RuntimeError("return callback failed on purpose")

            async def on_message(message):
                await message.ack()
                raise RuntimeError("consumer callback failed on purpose")

            ch.add_on_return_callback(on_return)
            await ch.basic_publish("", "amqwire-no-such-queue", b"x", mandatory=True)
            await ch.consume(q, on_message)
            await ch.basic_publish("", q, b"y")
            deadline = time.monotonic() + 10
            while len([r for r in caplog.records if r.exc_info]) < 2 and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            assert not conn._tasks  # finished tasks are not kept

    asyncio.run(main())
    texts = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert "return callback failed on purpose" in texts
    assert "consumer callback failed on purpose" in texts


# --------------------------------------------------------------------------- a private broker that restarts


def test_every_confirmed_publish_survives_a_broker_restart(run, broker_node):
    """Confirmed publishes (a window of 200) while the broker restarts, with recovery on:
    every future settles; every publish reported acked is in the queue afterwards; calls
    made while the connection is down raise connection errors, never InvalidStateError."""
    node = broker_node()

    async def scenario(api):
        E = api.errors
        from amqwire.client import RecoveryPolicy

        conn = await api.connect(node.url, recovery=RecoveryPolicy(initial_delay=0.2, max_delay=1.0))
        ch = await conn.channel()
        await ch.queue_declare("survivors", durable=True)
        await ch.confirm_select(max_in_flight=200)
        persistent = api.BasicProperties(delivery_mode=2)
        futures = {}
        refused = []
        restart = None
        deadline = time.monotonic() + 90
        i = 0
        after = None  # publish on through the restart, and 500 more after it
        while after is None or i < after + 500:
            assert time.monotonic() < deadline, "publishing did not get through the restart"
            if i == 1000 and restart is None:
                restart = asyncio.ensure_future(asyncio.to_thread(node.restart_app))
            if after is None and restart is not None and restart.done():
                after = i
            try:
                futures[i] = await ch.publish_async("", "survivors", b"%d" % i, persistent)
                i += 1
            except E.AMQPConnectionError as exc:
                refused.append(exc)
                await conn.wait_recovered(30)
            except Exception as exc:  # noqa: BLE001 - the wrong kind: fail with it
                pytest.fail(f"publish_async raised {exc!r} while the broker restarted")
        await asyncio.wait_for(restart, 60)
        acked, failed = set(), []
        for n, future in futures.items():
            try:
                await api.wait(future, timeout=30)
                acked.add(n)
            except E.PublishError as exc:
                failed.append(exc)
        assert all(isinstance(exc, E.PublishUnconfirmed) for exc in failed), failed[:3]
        assert refused or failed, "the restart did not touch the publisher: nothing was tested"
        assert await conn.wait_recovered(30)

        reader = await api.connect(node.url)
        rch = await reader.channel()
        stored = set()
        while True:
            message = await rch.basic_get("survivors", no_ack=True)
            if message is None:
                break
            stored.add(int(message.body))
        missing = acked - stored
        assert not missing, f"{len(missing)} publishes reported acked are not in the queue: {sorted(missing)[:10]}"

    run(scenario, timeout=180)


def test_acks_after_the_broker_force_closes_the_connection(run, broker_node):
    """rabbitmqctl close_all_connections (320 CONNECTION_FORCED) with recovery on: acks made
    while the connection recovers raise connection errors; after it, the old delivery's
    ack is void and its message comes again."""
    node = broker_node()

    async def scenario(api):
        E = api.errors
        from amqwire.client import RecoveryPolicy

        conn = await api.connect(node.url, recovery=RecoveryPolicy(initial_delay=0.8, max_delay=0.8))
        ch = await conn.channel()
        await ch.queue_declare("forced", durable=True)
        await ch.confirm_select()
        await ch.basic_qos(prefetch_count=1)
        for n in range(3):
            await ch.basic_publish("", "forced", b"%d" % n)
        consumer = await ch.consume("forced")
        message = await api.next(consumer)
        await asyncio.to_thread(node.close_all_connections, "amqwire fault test")
        raised = await ack_until_recovered(api, conn, message)
        wrong = [exc for exc in raised if not isinstance(exc, E.AMQPConnectionError)]
        assert not wrong, wrong[:3]
        assert any(isinstance(exc, E.ConnectionClosed) and exc.reply_code == 320 for exc in raised), raised[:3]
        await message.ack()   # from before the recovery: void
        again = await api.next(consumer)
        assert again.body == message.body and again.redelivered
        await again.ack()

    run(scenario, timeout=120)
