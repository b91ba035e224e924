"""The Producer through broker faults, on two PRIVATE RabbitMQ nodes A and B (never the
shared broker): A's app stopped mid-stream, a node crashed and restarted mid-stream, a memory alarm.

The message count of the long runs is ``AMQWIRE_PRODUCER_FAULT_COUNT`` (default 4,000, to
stay within CI's budget).  The issue's full run, 100,000 sends::

    AMQWIRE_PRODUCER_FAULT_COUNT=100000 PYTHONPATH=... python -m pytest -s tests/test_producer_faults.py

``-s`` shows the counts each test prints (sent, confirmed, failed by kind, where the
messages are, duplicates).
"""
from __future__ import annotations

import asyncio
import collections
import os
import socket
import threading
import time
import uuid

import pytest

from amqwire.codec import BasicProperties
from amqwire.client import Producer, SendFailed, SendTimeout, aio, connect

COUNT = int(os.environ.get("AMQWIRE_PRODUCER_FAULT_COUNT", "4000"))
PERSISTENT = BasicProperties(delivery_mode=2)
WINDOW = 500


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two independent private nodes, A and B, started side by side, for this module."""
    from broker_node import BrokerNode, BrokerNodeError

    made = [BrokerNode(), BrokerNode()]
    errors: list = []

    def start(node):
        try:
            node.start()
        except BrokerNodeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(n,)) for n in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if errors:
            pytest.fail(f"a private RabbitMQ node did not start: {errors[0]}", pytrace=False)
        yield made
    finally:
        for node in made:
            node.cleanup(graceful=False)


def declare(url: str, queue: str) -> None:
    with connect(url) as conn, conn.channel() as ch:
        ch.queue_declare(queue, durable=True)


def stored_ids(url: str, queue: str) -> list[str]:
    """The message ids of everything in the queue, taken off it."""
    ids = []
    with connect(url) as conn, conn.channel() as ch:
        left = ch.queue_declare(queue, passive=True).message_count
        if not left:
            return ids
        ch.basic_qos(prefetch_count=2000)
        consumer = ch.consume(queue, no_ack=True)
        while len(ids) < left:
            message = consumer.get(timeout=30)
            assert message is not None, f"{len(ids)} of {left} messages read from {queue}"
            ids.append(message.properties.message_id)
        consumer.cancel()
    return ids


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def outcomes_report(label: str, ok: list, failed: list, stores: dict, stats) -> tuple[int, int]:
    stored = [i for ids in stores.values() for i in ids]
    unique = set(stored)
    kinds = collections.Counter(
        type(e).__name__ + ("(" + type(getattr(e, "error", None)).__name__ + ")" if getattr(e, "error", None) else "")
        for e in failed)
    print(f"\n{label}: {len(ok) + len(failed)} sends: {len(ok)} confirmed, {len(failed)} failed {dict(kinds)}; "
          + ", ".join(f"{len(ids)} in {name}" for name, ids in stores.items())
          + f"; {len(stored) - len(unique)} duplicates; {stats.retried} retries; "
          f"latency p50 {stats.latency_p50 * 1000:.1f} ms p99 {stats.latency_p99 * 1000:.1f} ms")
    return len(stored) - len(unique), len(unique)


# --------------------------------------------------------------------------- A stops, B goes on


def _failover_blocking(urls: list[str], queue: str, n: int, stop_a) -> tuple[list, list, object]:
    ok: list = []
    stopped = threading.Event()  # the last fifth of each feeder's sends waits for the stop
    failed: list = []
    lock = threading.Lock()
    with Producer(urls, timeout=30, retries=2, retry_backoff=0.05, avoid_backoff=1.0, max_in_flight=2000) as producer:
        def sync_sends(count: int) -> None:
            for i in range(count):
                if i == count * 4 // 5:
                    stopped.wait(120)
                try:
                    result = producer.send("", queue, b"s%d" % i, PERSISTENT)
                    with lock:
                        ok.append(result.message_id)
                except (SendFailed, SendTimeout) as exc:
                    with lock:
                        failed.append(exc)

        futures: list = []

        def async_sends(count: int) -> None:
            for i in range(count):
                if i == count * 4 // 5:
                    stopped.wait(120)
                if i >= WINDOW:  # a stream, not one burst: at most WINDOW sends unsettled
                    futures[i - WINDOW].exception(120)
                futures.append(producer.send_async("", queue, b"a%d" % i, PERSISTENT))

        threads = [threading.Thread(target=sync_sends, args=(n // 8,)) for _ in range(4)]
        threads.append(threading.Thread(target=async_sends, args=(n - 4 * (n // 8),)))
        for t in threads:
            t.start()
        while producer.stats().confirmed < n * 0.3 and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        stop_a()
        stopped.set()
        for t in threads:
            t.join(300)
        for future in futures:
            try:
                ok.append(future.result(60).message_id)
            except (SendFailed, SendTimeout) as exc:
                failed.append(exc)
        assert all(f.done() for f in futures)
        stats = producer.stats()
    return ok, failed, stats


async def _failover_aio(urls: list[str], queue: str, n: int, stop_a) -> tuple[list, list, object]:
    ok: list = []
    stopped = asyncio.Event()
    failed: list = []
    async with aio.Producer(urls, policy="pinned", timeout=30, retries=2, retry_backoff=0.05, avoid_backoff=1.0,
                            max_in_flight=2000) as producer:
        async def sync_sends(count: int) -> None:
            for i in range(count):
                if i == count * 4 // 5:
                    await stopped.wait()
                try:
                    ok.append((await producer.send("", queue, b"s%d" % i, PERSISTENT)).message_id)
                except (SendFailed, SendTimeout) as exc:
                    failed.append(exc)

        futures: list = []

        async def async_sends(count: int) -> None:
            for i in range(count):
                if i == count * 4 // 5:
                    await stopped.wait()
                if i >= WINDOW:  # a stream, not one burst
                    await asyncio.wait([futures[i - WINDOW]])
                futures.append(await producer.send_async("", queue, b"a%d" % i, PERSISTENT))

        tasks = [asyncio.ensure_future(sync_sends(n // 8)) for _ in range(4)]
        tasks.append(asyncio.ensure_future(async_sends(n - 4 * (n // 8))))
        while producer.stats().confirmed < n * 0.3:  # noqa: ASYNC110 (polls a counter; no event to wait on)
            await asyncio.sleep(0.01)
        await asyncio.to_thread(stop_a)
        stopped.set()
        await asyncio.gather(*tasks)
        for future in futures:
            try:
                ok.append((await future).message_id)
            except (SendFailed, SendTimeout) as exc:
                failed.append(exc)
        stats = producer.stats()
    return ok, failed, stats


@pytest.mark.timeout(600)
@pytest.mark.parametrize("transport", ["blocking", "aio"])
def test_a_broker_stopped_mid_stream_sends_go_on_through_the_other(transport, nodes):
    """Blocking: policy round_robin; asyncio: pinned to A, failing over to B."""
    a, b = nodes
    queue = f"failover-{uuid.uuid4().hex[:8]}"
    declare(a.url, queue)
    declare(b.url, queue)
    n = COUNT if transport == "blocking" else COUNT // 2
    stopped = []

    def stop_a():
        a.rabbitmqctl("stop_app")
        stopped.append(time.monotonic())

    try:
        if transport == "blocking":
            ok, failed, stats = _failover_blocking([a.url, b.url], queue, n, stop_a)
        else:
            ok, failed, stats = asyncio.run(_failover_aio([a.url, b.url], queue, n, stop_a))
    finally:
        if stopped:
            a.rabbitmqctl("start_app")
            wait_port(a.port)
    assert stopped, "A was never stopped: nothing was tested"
    stores = {"A": stored_ids(a.url, queue), "B": stored_ids(b.url, queue)}
    policy = "round_robin" if transport == "blocking" else "pinned"
    duplicates, unique = outcomes_report(f"A stopped mid-stream ({transport}, {policy})", ok, failed, stores, stats)
    assert len(ok) + len(failed) == n  # every send reported, none unsettled
    assert stats.pending == 0 and stats.confirmed == len(ok) and stats.failed == len(failed)
    missing = set(ok) - set(stores["A"]) - set(stores["B"])
    assert not missing, f"{len(missing)} sends reported confirmed are in neither queue"
    assert len(set(ok)) == len(ok)
    # A took sends before it stopped; B took every send made after (a fifth of each feeder's)
    assert stores["A"] and len(set(stores["B"])) >= n // 5 - len(failed)
    for exc in failed:  # a failure says why: its attempts and the last error
        assert exc.attempts, exc


# --------------------------------------------------------------------------- a restart, with retries


@pytest.mark.timeout(600)
def test_a_broker_crashed_and_restarted_mid_stream_loses_nothing_with_retries(nodes):
    b = nodes[1]
    queue = f"restart-{uuid.uuid4().hex[:8]}"
    declare(b.url, queue)
    n = COUNT // 2
    with Producer(b.url, timeout=60, retries=5, retry_backoff=0.05, avoid_backoff=0.2, max_in_flight=2000) as producer:
        futures: list = []

        restarted = threading.Event()

        def feed() -> None:
            for i in range(n):
                if i == n * 4 // 5:
                    restarted.wait(120)  # the last fifth goes after the restart
                if i >= WINDOW:  # a stream, not one burst
                    futures[i - WINDOW].exception(120)
                futures.append(producer.send_async("", queue, b"%d" % i, PERSISTENT))

        feeder = threading.Thread(target=feed)
        first_connection = producer.brokers[0].connection
        feeder.start()
        while producer.stats().confirmed < n * 0.3 and feeder.is_alive():
            time.sleep(0.01)
        b.kill()  # a crash: what was not confirmed yet is retried (and may land twice)
        b.start()
        restarted.set()
        feeder.join(300)
        ok, failed = [], []
        for future in futures:
            try:
                ok.append(future.result(120).message_id)
            except (SendFailed, SendTimeout) as exc:
                failed.append(exc)
        stats = producer.stats()
        reconnected = producer.brokers[0].connection is not first_connection
    stores = {"B": stored_ids(b.url, queue)}
    duplicates, unique = outcomes_report("B crashed (SIGKILL) and restarted mid-stream, retries on", ok, failed, stores, stats)
    assert reconnected and stats.retried, "the crash did not touch the stream: nothing was tested"
    assert failed == [] and len(ok) == n  # nothing lost
    assert not set(ok) - set(stores["B"])
    assert unique == n and len(stores["B"]) == n + duplicates


# --------------------------------------------------------------------------- a memory alarm


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["blocking", "aio"])
def test_a_memory_alarm_makes_sends_time_out_clearly_then_sending_goes_on(transport, nodes):
    b = nodes[1]
    queue = f"alarm-{uuid.uuid4().hex[:8]}"
    declare(b.url, queue)

    async def aio_run(during):
        async with aio.Producer(b.url, timeout=1.0) as producer:
            await producer.send("", queue, b"before")
            await asyncio.to_thread(b.set_memory_alarm)
            try:
                futures = [await producer.send_async("", queue, b"during") for _ in range(during)]
                await asyncio.sleep(0.5)  # connection.blocked is in: these wait in the producer
                futures += [await producer.send_async("", queue, b"during") for _ in range(during)]
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
            finally:
                await asyncio.to_thread(b.clear_memory_alarm)
            after = await producer.send("", queue, b"after", timeout=30)
            return outcomes, after, producer.stats()

    def blocking_run(during):
        with Producer(b.url, timeout=1.0) as producer:
            producer.send("", queue, b"before")
            b.set_memory_alarm()
            try:
                futures = [producer.send_async("", queue, b"during") for _ in range(during)]
                time.sleep(0.5)  # connection.blocked is in: these wait in the producer
                futures += [producer.send_async("", queue, b"during") for _ in range(during)]
                outcomes = [f.exception(30) or f.result() for f in futures]
            finally:
                b.clear_memory_alarm()
            after = producer.send("", queue, b"after", timeout=30)
            return outcomes, after, producer.stats()

    outcomes, after, stats = asyncio.run(aio_run(20)) if transport == "aio" else blocking_run(20)
    print(f"\nmemory alarm ({transport}): {collections.Counter(getattr(o, 'operation', type(o).__name__) for o in outcomes)}")
    timeouts = [o for o in outcomes if isinstance(o, SendTimeout)]
    # The alarm blocks every publishing connection: a send may only have landed before the
    # broker read it; all others waited to their deadline and say for what.
    assert len(timeouts) >= len(outcomes) - 1, outcomes[:3]
    assert all("connection.blocked" in t.operation for t in timeouts), {t.operation for t in timeouts}
    assert all("timed out after 1.0 s" in str(t) for t in timeouts)
    assert after.attempts == 1 and stats.pending == 0
