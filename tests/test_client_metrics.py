"""Metrics (``connect(..., metrics=...)``) and idle-only heartbeats, on both transports
against a real broker."""
from __future__ import annotations

import asyncio

import time

import pytest

from conftest import within

from amqwire.client.metrics import InMemoryMetrics, MetricsCollector, PrometheusMetrics
from amqwire.client.recovery import RecoveryPolicy


async def flushed(ch, q):
    """A round trip: everything published before it was written and read by the broker."""
    return (await ch.queue_declare(q, passive=True)).message_count


def test_in_memory_metrics_count_exactly(run):
    async def scenario(api):
        metrics = InMemoryMetrics()
        conn = await api.connect(metrics=metrics)
        ch = await conn.channel()
        q, full = api.names.queue(), api.names.queue()
        await ch.queue_declare(q)
        await ch.queue_declare(full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
        await ch.confirm_select()
        for i in range(100):
            await ch.publish_async("", q, b"%d" % i)
        for _ in range(5):
            await ch.publish_async("", full, b"nacked")  # no room: the broker nacks them
        await ch.publish_async("", api.names.queue(), b"returned", mandatory=True)  # unroutable
        with pytest.raises(api.errors.PublishError):
            await ch.wait_for_confirms(timeout=30)
        plain = await conn.channel()
        for _ in range(3):
            await plain.basic_publish("", api.names.queue(), b"unconfirmed")
        await flushed(plain, q)

        await ch.basic_qos(prefetch_count=200)
        consumer = await ch.consume(q)
        for count in range(1, 101):
            message = await api.next(consumer)
            if count <= 90 and count % 10 == 0:
                await message.ack(multiple=True)  # 90 acked, 10 at a time
            elif count == 91:
                await message.reject(requeue=False)
            elif count == 100:
                await message.nack(multiple=True, requeue=False)  # 92..100: 9 more
        assert await flushed(ch, q) == 0
        assert await ch.basic_get(q) is None

        # no_ack deliveries interleaved with acked ones on one channel: a multiple ack
        # counts only those that needed settling
        mixed = await conn.channel()
        free, fetched = api.names.queue(), api.names.queue()
        await mixed.queue_declare(free)
        await mixed.queue_declare(fetched)
        for _ in range(4):
            await plain.basic_publish("", free, b"free")
            await plain.basic_publish("", fetched, b"fetched")
        await flushed(plain, free)
        free_consumer = await mixed.consume(free, no_ack=True)
        last = None
        for _ in range(4):
            await api.next(free_consumer)
            last = await mixed.basic_get(fetched)
        await last.ack(multiple=True)  # 4 gets settled; the 4 no_ack deliveries were already
        await flushed(mixed, fetched)
        snap = metrics.snapshot()
        print(snap)
        assert snap["published_count"] == 117
        assert (snap["confirmed_count"], snap["nacked_count"], snap["returned_count"]) == (100, 5, 1)
        assert (snap["delivered_count"], snap["acked_count"], snap["rejected_count"]) == (108, 94, 10)
        assert snap["connections_opened"] == 1 and snap["connections_recovered"] == 0
        assert snap["bytes_sent_total"] > 109 * 8 and snap["bytes_received_total"] > 100 * 8
        assert snap["confirm_latency_count"] == 106
        assert snap["confirm_latency_buckets"][float("inf")] == 106
        assert metrics.confirm_latency.quantile(0.5) is not None  # under 10 s

    run(scenario)


def test_every_confirm_has_one_latency_over_many_writes_and_channels(run):
    async def scenario(api):
        metrics = InMemoryMetrics()
        conn = await api.connect(metrics=metrics)
        channels = [await conn.channel() for _ in range(2)]
        q = api.names.queue()
        await channels[0].queue_declare(q)
        for ch in channels:
            await ch.confirm_select(max_in_flight=300)  # the window makes many writes
        started = time.monotonic()
        for i in range(3000):
            await channels[i % 2].publish_async("", q, b"m")
        for ch in channels:
            await ch.wait_for_confirms(timeout=30)
        elapsed = time.monotonic() - started
        await channels[0].confirm_select()  # again: nothing restarts, nothing is lost
        for _ in range(10):
            await channels[0].publish_async("", q, b"m")
        await channels[0].wait_for_confirms(timeout=30)
        snap = metrics.snapshot()
        assert snap["confirmed_count"] == 3010
        assert snap["confirm_latency_count"] == 3010
        assert 0 <= snap["confirm_latency_sum"] <= 3010 * elapsed + 10
        for ch in channels:  # what was kept per write is forgotten once confirmed
            assert len(ch._stamp_ends) - ch._stamp_head <= 1
        await conn.close()

    run(scenario)


def test_metrics_are_off_by_default(run):
    async def scenario(api):
        conn = await api.connect()
        assert conn._metrics is None

    run(scenario)


def test_the_collector_interface_is_all_no_ops():
    collector = MetricsCollector()
    for name in ("connection_opened", "connection_closed", "connection_recovered", "channel_opened",
                 "channel_closed", "consumer_opened", "consumer_closed"):
        assert getattr(collector, name)() is None
    for name in ("bytes_sent", "bytes_received", "published", "publish_confirmed", "publish_nacked",
                 "publish_returned", "publish_unconfirmed", "delivered", "acked", "rejected"):
        assert getattr(collector, name)(3) is None
    assert collector.confirm_latencies([0.1]) is None
    assert collector.socket_write(100, 2) is None
    assert collector.socket_read(100, 1, 2, 3, 4, 1.0, [(0.5, 2)]) is None


def test_the_per_read_and_per_write_calls_spread_over_the_single_counts():
    calls: list = []

    class Spy(MetricsCollector):
        def __getattribute__(self, name):
            attribute = object.__getattribute__(self, name)
            if name in ("socket_read", "socket_write", "confirm_times") or not callable(attribute):
                return attribute
            return lambda *args: calls.append((name, *args))

    spy = Spy()
    spy.socket_write(120, 3)
    spy.socket_read(64, 2, 5, 1, 1, 10.0, [(9.5, 2), (9.75, 4)])
    assert calls == [
        ("bytes_sent", 120), ("published", 3),
        ("bytes_received", 64), ("delivered", 2), ("publish_confirmed", 5), ("publish_nacked", 1),
        ("publish_returned", 1), ("confirm_latencies", [0.5, 0.5, 0.25, 0.25, 0.25, 0.25]),
    ]


def test_prometheus_exporter(run):
    import prometheus_client  # the prometheus extra, part of the test extra

    async def scenario(api):
        registry = prometheus_client.CollectorRegistry()
        conn = await api.connect(metrics=PrometheusMetrics(registry=registry, labels={"app": api.name}))
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        await ch.confirm_select()
        for _ in range(10):
            await ch.basic_publish("", q, b"x")
        labels = {"app": api.name}
        assert registry.get_sample_value("amqwire_published_total", labels) == 10
        assert registry.get_sample_value("amqwire_confirmed_total", labels) == 10
        assert registry.get_sample_value("amqwire_connections_opened_total", labels) == 1
        assert registry.get_sample_value("amqwire_confirm_latency_seconds_count", labels) == 10
        assert registry.get_sample_value("amqwire_bytes_sent_total", labels) > 0
        text = prometheus_client.generate_latest(registry).decode()
        assert 'amqwire_delivered_total{app="%s"} 0.0' % api.name in text
        consumer = await ch.consume(q)
        gauges = ("amqwire_connections", "amqwire_channels", "amqwire_consumers")
        assert [registry.get_sample_value(name, labels) for name in gauges] == [1, 1, 1]
        await consumer.cancel()
        assert registry.get_sample_value("amqwire_consumers", labels) == 0
        assert registry.get_sample_value("amqwire_unconfirmed_total", labels) == 0
        await conn.close()
        assert [registry.get_sample_value(name, labels) for name in gauges] == [0, 0, 0]

    run(scenario)


def _gauges(metrics: InMemoryMetrics) -> tuple[int, int, int]:
    return metrics.connections_open, metrics.channels_open, metrics.consumers_open


async def _until(predicate, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what()}"
        await asyncio.sleep(0.02)


def test_gauges_of_open_connections_channels_and_consumers(run):
    """Each connection, channel and consumer counts from its open (consume-ok) to its end,
    whichever way it ends: closed, cancelled, closed by the broker, or lost."""
    async def scenario(api):
        metrics = InMemoryMetrics()
        conn = await api.connect(metrics=metrics)
        other = await api.connect(metrics=metrics)
        assert _gauges(metrics) == (2, 0, 0)
        ch, ch2 = await conn.channel(), await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        first, second = await ch.consume(q), await ch.consume(q)
        await ch2.consume(q)
        assert _gauges(metrics) == (2, 2, 3)
        await first.cancel()
        assert _gauges(metrics) == (2, 2, 2)
        with pytest.raises(api.errors.NotFound):
            await ch2.consume(api.names.queue())  # the broker closes ch2: its consumer ends, the failed one never counted
        assert _gauges(metrics) == (2, 1, 1)
        await ch.close()
        assert _gauges(metrics) == (2, 0, 0) and not second.active
        await other.close()
        await conn.close()
        assert _gauges(metrics) == (0, 0, 0)
        assert metrics.snapshot()["channels_open"] == 0

    run(scenario)


def test_unconfirmed_publishes_and_gauges_through_a_loss_and_a_recovery(run):
    """Publishes in flight when the connection is lost are counted as unconfirmed; the
    gauges drop with the loss and come back with the recovery."""
    async def scenario(api):
        metrics = InMemoryMetrics()
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), metrics=metrics,
                                  recovery=RecoveryPolicy(initial_delay=0.1, max_delay=0.5))
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        await ch.consume(q)
        await ch.confirm_select()
        assert _gauges(metrics) == (1, 1, 1)
        proxy.hold()  # the broker never sees them: no verdict can come
        futures = [await ch.publish_async("", q, b"lost") for _ in range(5)]
        proxy.kill()
        for future in futures:
            with pytest.raises(api.errors.PublishUnconfirmed):
                await within(future, 15, "the lost publish's future to fail")
        assert metrics.unconfirmed_count == 5
        assert await within(conn.wait_recovered(timeout=20), 25, "the recovery")
        await _until(lambda: _gauges(metrics) == (1, 1, 1), 10, lambda: f"the gauges back at (1, 1, 1): {_gauges(metrics)}")
        assert metrics.connections_opened == 2 and metrics.connections_recovered == 1
        await conn.close()
        assert _gauges(metrics) == (0, 0, 0)

    run(scenario)


def test_heartbeats_only_when_idle(run):
    """heartbeat=1: while something is written every 50 ms no heartbeat goes out (before,
    one went out every half interval whatever the traffic); idle, they do, and the broker
    keeps the connection."""

    async def scenario(api):
        conn = await api.connect(api.with_query(api.url, heartbeat=1))
        assert conn.heartbeat == 1
        ch = await conn.channel()
        q = api.names.queue()
        await ch.queue_declare(q)
        core = conn._core
        start = core.heartbeats_sent
        for _ in range(50):  # 2.5 s: two and a half intervals
            await ch.basic_publish("", q, b"traffic")
            await asyncio.sleep(0.05)
        busy = core.heartbeats_sent - start
        await asyncio.sleep(2.5)  # idle: one is due at most 1.5 intervals after the last write
        idle = core.heartbeats_sent - start - busy
        print(f"{api.name}: heartbeats sent under traffic {busy}, while idle {idle}")
        assert busy == 0
        assert idle >= 1
        assert conn.is_open and await flushed(ch, q) == 50

    run(scenario)


def test_bucketing_runs_of_one_write_equals_one_by_one():
    import random

    from amqwire.client.metrics import LATENCY_BUCKETS, _Histogram

    rng = random.Random(7)
    for _ in range(200):
        now = 1000.0 + rng.random()
        sent = sorted((now - rng.choice([rng.random() * 0.002, rng.random() * 20, 0.0, 0.001, 10.0]),
                       rng.randint(1, 40)) for _ in range(rng.randint(0, 8)))
        one, bulk = _Histogram(LATENCY_BUCKETS), _Histogram(LATENCY_BUCKETS)
        one.observe([now - t for t, count in sent for _ in range(count)])
        bulk.observe_runs(now, sent)
        assert bulk.counts == one.counts and bulk.count == one.count
        assert bulk.sum == pytest.approx(one.sum, abs=1e-6)
        spread = MetricsCollector()
        seen: list = []
        spread.confirm_latencies = seen.extend  # type: ignore[method-assign]
        spread.confirm_times(now, sent)
        assert sorted(seen) == sorted(now - t for t, count in sent for _ in range(count))


def test_the_connection_gauge_counts_each_socket_that_finished_its_handshake_once():
    """Driven by the lifecycle's transitions: a recovery closes and opens it again; a
    close() while a recovery's handshake is under way passes CLOSING without ever opening."""
    from amqwire.client.lifecycle import ConnectionSignal as E, Lifecycle
    from amqwire.client.session import _ConnectionGauge

    metrics = InMemoryMetrics()
    lifecycle = Lifecycle()
    lifecycle.watch = _ConnectionGauge(metrics)
    seen = []
    for event in (E.SOCKET_UP, E.HANDSHAKE_DONE, E.BLOCK, E.UNBLOCK, E.LOST_RECOVERABLE, E.SOCKET_UP,
                  E.HANDSHAKE_DONE, E.RESTORED, E.LOST_RECOVERABLE, E.SOCKET_UP, E.CLOSE, E.LOST):
        lifecycle.fire(event)
        seen.append(metrics.connections_open)
    assert seen == [0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0]
    assert metrics.connections_opened == 2 and str(lifecycle.state) == "closed"

