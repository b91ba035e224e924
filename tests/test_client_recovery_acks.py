"""A consumer across a recovery, on both transports, against a private node: every message
delivered on the recovered connection can be acked there; only deliveries of the lost
connection are refused; nothing stalls.

Issue "The client core rebuilt around one explicit lifecycle": after a forced close
(``rabbitmqctl close_all_connections``) or a partition that drops packets silently (the
loss found by the heartbeat), acks of messages redelivered on the recovered connection
raised the lost connection's error while the recovery was finishing (re-subscribing the
other consumers); their messages stayed unacked, the prefetch window stayed full and the
consumer waited forever.  Each test widens that window the way a real application does:
several channels with consumers of their own, re-subscribed one after the other.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid

import pytest

PREFETCH = 100
OTHER_CONSUMERS = 6  # channels re-subscribed after the one under test
# AMQWIRE_FAULT_SCALE=full: the counts (50,000 messages, the fault after a third)
FULL = os.environ.get("AMQWIRE_FAULT_SCALE", "ci") == "full"
TOTAL = 50_000 if FULL else 3_000


class Partition:
    """Drops every packet to and from one local TCP port (iptables, both directions, no
    RST): connections through it go half-open, new ones time out.  The rules carry a
    comment of their own and are removed by ``heal()``, and after the test in any case."""

    def __init__(self, port: int):
        self.port = port
        self.tag = f"amqwire-test-{uuid.uuid4().hex[:8]}"
        self.rules = [
            ["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port)],
            ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(port)],
        ]
        self.active = False

    def _iptables(self, action: str, rule: list[str]) -> None:
        subprocess.run(["iptables", "-w", "5", action, *rule, "-m", "comment", "--comment", self.tag, "-j", "DROP"],
                       check=True, capture_output=True, timeout=20)

    def cut(self) -> None:
        for rule in self.rules:
            self._iptables("-I", rule)
        self.active = True

    def heal(self) -> None:
        if self.active:
            for rule in self.rules:
                self._iptables("-D", rule)
            self.active = False


@pytest.fixture
def partition(fault_node):
    if shutil.which("iptables") is None:  # tests/run installs it (tests/ensure_iptables.sh)
        pytest.fail("iptables is not installed: run tests/ensure_iptables.sh")
    made = Partition(fault_node.port)
    yield made
    made.heal()


async def fill(api, url: str, queue: str, count: int) -> None:
    conn = await api.connect(url)
    ch = await conn.channel()
    await ch.queue_declare(queue, durable=True)
    await ch.confirm_select(max_in_flight=2000)
    for n in range(count):
        await ch.publish_async("", queue, b"%d" % n)
    await ch.wait_for_confirms(timeout=60)
    await conn.close()


async def left_in(api, url: str, queue: str) -> int:
    """Messages still in ``queue`` (ready or unacked: asked once no consumer holds any)."""
    conn = await api.connect(url)
    ch = await conn.channel()
    count = (await ch.queue_declare(queue, passive=True)).message_count
    await ch.queue_delete(queue)
    await conn.close()
    return count


async def consume_through(api, url: str, total: int, fault, *, heartbeat: int = 0, stall_after: float = 20.0) -> dict:
    """Consume ``total`` messages with manual acks and prefetch 100 on a recovering
    connection, calling ``fault()`` (a coroutine) once a third are done; returns what was
    seen.  Fails, never hangs: a consumer that gets nothing for ``stall_after`` seconds is
    reported as stalled with the acks that were refused."""
    from amqwire.client import RecoveryPolicy

    E = api.errors
    queue, idle = api.names.queue(), api.names.queue()
    await fill(api, url, queue, total)
    conn = await api.connect(url, heartbeat=heartbeat, connection_timeout=2,
                             recovery=RecoveryPolicy(initial_delay=0.2, max_delay=1.0))
    ch = await conn.channel()
    await ch.basic_qos(prefetch_count=PREFETCH)
    consumer = await ch.consume(queue)
    others = []
    for _ in range(OTHER_CONSUMERS):
        other = await conn.channel()
        await other.queue_declare(idle, durable=True)
        others.append(await other.consume(idle))
    seen: dict[int, int] = {}
    refused_redelivered: list[tuple[int, str]] = []
    refused = 0
    redelivered = 0
    faulted = None
    while len(seen) < total:
        try:
            message = await api.next(consumer, timeout=stall_after)
        except E.AMQPConnectionError:
            assert await conn.wait_recovered(30), "the connection did not recover within 30 s"
            continue
        except (asyncio.TimeoutError, TimeoutError):
            pytest.fail(
                f"{api.name}: the consumer stalled: {len(seen)} of {total} messages after {stall_after} s of nothing; "
                f"{refused} acks refused, {len(refused_redelivered)} of them of redelivered messages "
                f"(delivered on the recovered connection), first: {refused_redelivered[:3]}"
            )
        n = int(message.body)
        seen[n] = seen.get(n, 0) + 1
        if message.redelivered:
            redelivered += 1
        try:
            await message.ack()
        except E.AMQPConnectionError as exc:
            refused += 1
            if message.redelivered:
                refused_redelivered.append((n, repr(exc)[:160]))
        if faulted is None and len(seen) >= total // 3:
            faulted = time.monotonic()
            await fault()
    assert not refused_redelivered, (
        f"{api.name}: {len(refused_redelivered)} acks of messages delivered on the recovered connection "
        f"were refused: {refused_redelivered[:3]}"
    )
    for other in others:
        await other.cancel()
    await conn.close()
    remaining = await left_in(api, url, queue)
    await left_in(api, url, idle)
    assert remaining == 0, f"{api.name}: {remaining} messages left in the queue: acks were lost"
    return {"seen": len(seen), "redelivered": redelivered, "refused": refused}


@pytest.mark.timeout(1800 if FULL else 180)
def test_acks_after_a_forced_close_reach_the_recovered_connection(run, fault_node):
    """The issue's first scenario, three times over: close_all_connections (320
    CONNECTION_FORCED) under a manual-ack consumer with prefetch 100."""
    node = fault_node

    async def scenario(api):
        for _ in range(3):
            async def force_close():
                await asyncio.sleep(0.3)  # the broker fills the window
                await asyncio.to_thread(node.close_all_connections, "amqwire recovery-ack test")

            counts = await consume_through(api, node.url, TOTAL, force_close)
            assert counts["redelivered"] >= 1, counts

    run(scenario, timeout=1300 if FULL else 100)


@pytest.mark.timeout(1800 if FULL else 180)
def test_acks_after_a_partition_reach_the_recovered_connection(run, partition):
    """The issue's second scenario: the broker cut off by a partition (packets dropped both
    ways, no RST) with heartbeat 2 s; the loss is found by the heartbeat, the connection
    recovers once the network heals, and every message delivered after that is ackable."""
    node_url = f"amqp://guest:guest@127.0.0.1:{partition.port}/"

    async def scenario(api):
        async def cut_and_heal():
            await asyncio.sleep(0.3)
            partition.cut()
            try:
                await asyncio.sleep(6)  # the heartbeat finds the loss in 4-6 s
            finally:
                partition.heal()

        counts = await consume_through(api, node_url, TOTAL, cut_and_heal, heartbeat=2, stall_after=25)
        assert counts["seen"] == TOTAL

    run(scenario, timeout=1300 if FULL else 110)


# --------------------------------------------------------------------------- cancels and closes racing a recovery


async def _down(api, conn, proxy) -> None:
    proxy.kill()
    for _ in range(500):
        if not conn.is_open:
            return
        await asyncio.sleep(0.01)
    pytest.fail("the connection did not notice the proxy's kill within 5 s")


async def _queue_counts(api, queue: str) -> tuple[int, int]:
    conn = await api.connect()
    ch = await conn.channel()
    ok = await ch.queue_declare(queue, passive=True)
    await conn.close()
    return ok.message_count, ok.consumer_count


@pytest.mark.parametrize("what", ["consumer.cancel", "channel.close"])
def test_what_is_cancelled_or_closed_while_down_does_not_come_back(run, what):
    """A consumer cancelled (or its channel closed) while the connection is down must not
    be subscribed again by the recovery: it was, and the broker then delivered to a
    consumer nobody reads, whose messages stayed unacked for the connection's life."""

    async def scenario(api):
        from amqwire.client import RecoveryPolicy

        queue = api.names.queue()
        setup = await api.connect()
        sch = await setup.channel()
        await sch.queue_declare(queue)
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=RecoveryPolicy(initial_delay=1.0, max_delay=1.0))
        keep = await conn.channel()  # a channel that does come back
        ch = await conn.channel()
        consumer = await ch.consume(queue)
        await _down(api, conn, proxy)
        if what == "consumer.cancel":
            await consumer.cancel()
        else:
            await ch.close()
        assert not consumer.active
        assert await conn.wait_recovered(20), "no recovery within 20 s"
        await keep.queue_declare(queue, passive=True)
        await sch.confirm_select()
        for n in range(5):
            await sch.basic_publish("", queue, b"%d" % n)
        await sch.wait_for_confirms(timeout=10)  # in the queue before it is counted
        await asyncio.sleep(0.3)  # time for a consumer that came back to take them
        ready, consumers = await _queue_counts(api, queue)
        assert (ready, consumers) == (5, 0), f"{what} while down: {consumers} consumers came back, {ready} of 5 ready"
        await sch.queue_delete(queue)

    run(scenario, timeout=60)


def test_a_consumer_cancelled_while_its_channel_is_restored_is_cancelled_at_the_broker(amqp_url, names):
    """The cancel comes while the recovery restores the channels (a consumer listener of the
    blocking transport runs on the recovery's thread, in the middle of it): the consumer is
    subscribed on the new socket already and must be cancelled there, not only forgotten."""
    from amqwire.client import ConnectionStatus, ConsumerEventKind, RecoveryPolicy, connect
    from conftest import TCPProxy, url_host_port, with_netloc

    queue = names.queue()
    host, port = url_host_port(amqp_url)
    proxy = TCPProxy(host, port)
    try:
        with connect(amqp_url) as setup, setup.channel() as sch:
            sch.queue_declare(queue)
            conn = connect(with_netloc(amqp_url, "127.0.0.1", proxy.port),
                           recovery=RecoveryPolicy(initial_delay=0.3, max_delay=0.3))
            try:
                ch = conn.channel()
                consumer = ch.consume(queue)
                for _ in range(OTHER_CONSUMERS):  # re-subscribed after the one under test
                    conn.channel().consume(queue)
                cancelled = []

                def on_consumer(event):
                    if (event.kind is ConsumerEventKind.CONSUME_OK and event.consumer_tag == consumer.consumer_tag
                            and conn.state is ConnectionStatus.RESTORING):
                        consumer.cancel()
                        cancelled.append(conn.state)

                ch.add_consumer_listener(on_consumer)
                proxy.kill()
                deadline = time.monotonic() + 5
                while conn.is_open:
                    assert time.monotonic() < deadline, "the loss was not noticed within 5 s"
                    time.sleep(0.01)
                assert conn.wait_recovered(20), "no recovery within 20 s"
                assert cancelled == [ConnectionStatus.RESTORING], cancelled
                assert not consumer.active
                time.sleep(0.3)
                consumers = sch.queue_declare(queue, passive=True).consumer_count
                assert consumers == OTHER_CONSUMERS, f"{consumers} consumers at the broker, {OTHER_CONSUMERS} expected"
            finally:
                conn.close()
                sch.queue_delete(queue)
    finally:
        proxy.close()
