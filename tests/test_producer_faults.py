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
import contextlib
import os
import socket
import sys
import threading
import time
import uuid

import pytest

from conftest import Deadline, WaitTimedOut, within

from amqwire.codec import BasicProperties
from amqwire.client import Producer, SendFailed, SendTimeout, aio, connect

COUNT = int(os.environ.get("AMQWIRE_PRODUCER_FAULT_COUNT", "4000"))
PERSISTENT = BasicProperties(delivery_mode=2)
WINDOW = 500


@pytest.fixture(scope="module")
def nodes(tmp_path_factory, request):
    """Two independent private nodes, A and B, started side by side, for this module.
    When a test of the module failed, their logs are kept and their tails printed."""
    from broker_node import BrokerNode, BrokerNodeError

    made = [BrokerNode(), BrokerNode()]
    errors: list = []
    failed_before = request.session.testsfailed

    def start(node):
        try:
            node.start()
        except BrokerNodeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(n,), daemon=True, name=f"start {n.name}") for n in made]
    for t in threads:
        t.start()
    try:
        # each start gives up after its own start_timeout (60 s)
        Deadline(made[0].start_timeout + 30, "the private nodes A and B to start").join(threads)
        if errors:
            pytest.fail(f"a private RabbitMQ node did not start: {errors[0]}", pytrace=False)
        yield made
    finally:
        failed = request.session.testsfailed > failed_before
        for node in made:
            keep = tmp_path_factory.mktemp("broker-node-logs") / node.name if failed else None
            node.cleanup(keep_logs=keep, graceful=failed)  # a clean stop flushes the log
            if keep is not None:
                print(f"\n{node.name}: logs kept in {keep}\n{node.log_tail(60, log_dir=keep)}", file=sys.stderr)


def declare(url: str, queue: str) -> None:
    with connect(url) as conn, conn.channel() as ch:
        ch.queue_declare(queue, durable=True)


def stored_ids(url: str, queue: str, limit: float = 30) -> list[str]:
    """The message ids of everything in the queue, taken off it (within ``limit`` seconds)."""
    ids: list[str] = []
    with connect(url) as conn, conn.channel() as ch:
        left = ch.queue_declare(queue, passive=True).message_count
        if not left:
            return ids
        ch.basic_qos(prefetch_count=2000)
        consumer = ch.consume(queue, no_ack=True)
        reading = Deadline(limit, f"the {left} messages of {queue} at {url}")
        while len(ids) < left:
            if reading.expired():
                raise reading.fail(f"{len(ids)} read")
            message = consumer.get(timeout=min(10.0, reading.left(0.01)))
            assert message is not None, f"{len(ids)} of {left} messages read from {queue}: then none for 10 s"
            ids.append(message.properties.message_id)
        consumer.cancel()
    return ids


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise WaitTimedOut(f"timed out after {timeout:g} s waiting for port {port} to accept connections") from exc
            time.sleep(0.2)


CLOSE = 30  # a producer's close: flush, the last confirms, the connections


@contextlib.contextmanager
def closed_within(producer, seconds: float = CLOSE):
    """``with Producer(...)``, its close bounded: ``Producer.__exit__`` waits for the
    flush without a limit, so it runs in a thread the test gives up on after ``seconds``."""
    try:
        yield producer
    finally:
        closer = threading.Thread(target=producer.__exit__, args=(None, None, None), daemon=True, name="close")
        closer.start()
        Deadline(seconds, "the producer's close (its flush, the last confirms, the connections)").join([closer])


@contextlib.asynccontextmanager
async def aio_closed_within(producer, seconds: float = CLOSE):
    """``async with aio.Producer(...)``, its open and its close bounded."""
    await within(producer.__aenter__(), 30, "the producer to open")
    try:
        yield producer
    finally:
        await within(producer.__aexit__(None, None, None), seconds,
                     "the producer's close (its flush, the last confirms, the connections)")


def until_confirmed(producer, target: float, limit: float, going_on=lambda: True) -> None:
    """Poll the producer's confirmed count up to ``target`` (while ``going_on()``), for at
    most ``limit`` seconds."""
    deadline = Deadline(limit, f"{target:.0f} sends confirmed")
    while producer.stats().confirmed < target and going_on():
        if deadline.expired():
            raise deadline.fail(f"{producer.stats()}")
        time.sleep(0.01)


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


# The phases' bounds, within the test's 600 s with the set-up, reading the queues back and
# restarting A: 30% of the sends confirmed before A stops, then the feeders' last sends
# (through B), then the futures still unsettled.
BEFORE_STOP, AFTER_STOP, SETTLE = 90, 120, 30


def _failover_blocking(urls: list[str], queue: str, n: int, stop_a) -> tuple[list, list, object]:
    ok: list = []
    stopped = threading.Event()  # the last fifth of each feeder's sends waits for the stop
    failed: list = []
    errors: list = []  # what ended a feeder early (a wait that gave up)
    lock = threading.Lock()
    with closed_within(Producer(urls, timeout=30, retries=2, retry_backoff=0.05, avoid_backoff=1.0,
                                max_in_flight=2000)) as producer:
        def sync_sends(count: int) -> None:
            for i in range(count):
                if i == count * 4 // 5:
                    stopped.wait(BEFORE_STOP + 60)
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
                    stopped.wait(BEFORE_STOP + 60)
                if i >= WINDOW:  # a stream, not one burst: at most WINDOW sends unsettled
                    futures[i - WINDOW].exception(60)  # OperationTimeout past 60 s: ends this feeder
                futures.append(producer.send_async("", queue, b"a%d" % i, PERSISTENT))

        def feeder(target, count: int) -> None:
            try:
                target(count)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=feeder, args=(sync_sends, n // 8), daemon=True, name=f"sync feeder {k}")
                   for k in range(4)]
        threads.append(threading.Thread(target=feeder, args=(async_sends, n - 4 * (n // 8)), daemon=True,
                                        name="async feeder"))
        for t in threads:
            t.start()
        try:
            until_confirmed(producer, n * 0.3, BEFORE_STOP, lambda: any(t.is_alive() for t in threads))
            stop_a()
        finally:
            stopped.set()
        Deadline(AFTER_STOP, "the feeders' sends after A stopped").join(threads)
        assert not errors, f"a feeder gave up: {errors[0]!r}"
        settling = Deadline(SETTLE, "the send_async futures to settle")
        for future in futures:
            try:
                ok.append(settling.result(future).message_id)
            except (SendFailed, SendTimeout) as exc:
                failed.append(exc)
        assert all(f.done() for f in futures)
        stats = producer.stats()
    return ok, failed, stats


async def _failover_aio(urls: list[str], queue: str, n: int, stop_a) -> tuple[list, list, object]:
    ok: list = []
    stopped = asyncio.Event()
    failed: list = []
    async with aio_closed_within(aio.Producer(urls, policy="pinned", timeout=30, retries=2, retry_backoff=0.05,
                                              avoid_backoff=1.0, max_in_flight=2000)) as producer:
        async def sync_sends(count: int) -> None:
            for i in range(count):
                if i == count * 4 // 5:
                    await stopped.wait()  # set by the test whatever happens (finally)
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
                    await within(asyncio.wait([futures[i - WINDOW]]), 60, f"send_async {i - WINDOW} to settle")
                futures.append(await producer.send_async("", queue, b"a%d" % i, PERSISTENT))

        tasks = [asyncio.ensure_future(sync_sends(n // 8)) for _ in range(4)]
        tasks.append(asyncio.ensure_future(async_sends(n - 4 * (n // 8))))
        try:
            before = Deadline(BEFORE_STOP, f"{n * 0.3:.0f} sends confirmed before stopping A")
            while producer.stats().confirmed < n * 0.3:  # polls a counter (no event to wait on), up to a deadline
                if before.expired():
                    raise before.fail(f"{producer.stats()}")
                await asyncio.sleep(0.01)
            await within(asyncio.to_thread(stop_a), 90, "rabbitmqctl stop_app on A")
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        finally:
            stopped.set()
        await within(asyncio.gather(*tasks), AFTER_STOP, "the feeders' sends after A stopped")
        outcomes = await within(asyncio.gather(*futures, return_exceptions=True), SETTLE,
                                "the send_async futures to settle")
        for outcome in outcomes:
            if isinstance(outcome, (SendFailed, SendTimeout)):
                failed.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                ok.append(outcome.message_id)
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
            ok, failed, stats = asyncio.run(within(_failover_aio([a.url, b.url], queue, n, stop_a),
                                                   30 + BEFORE_STOP + 90 + AFTER_STOP + SETTLE + CLOSE + 30,
                                                   "the pinned producer's failover run (and its close)"))
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
    # RabbitMQ 3.10 keeps a fresh declare in mnesia's log cache for a moment: SIGKILLed
    # within it, the node comes back without the queue (seen here with a kill 0.3 s after
    # the declare). The node writes it out now, so the crash below tests the Producer.
    b.eval("disk_log:sync(latest_log).")
    n = COUNT // 2
    with closed_within(Producer(b.url, timeout=60, retries=5, retry_backoff=0.05, avoid_backoff=0.2,
                                max_in_flight=2000)) as producer:
        futures: list = []

        restarted = threading.Event()
        errors: list = []

        def feed() -> None:
            try:
                for i in range(n):
                    if i == n * 4 // 5:
                        restarted.wait(BEFORE_STOP + 90)  # the last fifth goes after the restart
                    if i >= WINDOW:  # a stream, not one burst
                        futures[i - WINDOW].exception(90)  # OperationTimeout past 90 s: ends the feeder
                    futures.append(producer.send_async("", queue, b"%d" % i, PERSISTENT))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        feeder = threading.Thread(target=feed, daemon=True, name="feeder")
        first_connection = producer.brokers[0].connection
        feeder.start()
        try:
            until_confirmed(producer, n * 0.3, BEFORE_STOP, feeder.is_alive)
            b.kill()  # a crash: what was not confirmed yet is retried (and may land twice)
            b.start()  # gives up after its start_timeout (60 s)
        finally:
            restarted.set()
        Deadline(180, "the feeder's sends after the restart").join([feeder])
        assert not errors, f"the feeder gave up: {errors[0]!r}"
        ok, failed = [], []
        settling = Deadline(60, "the send_async futures to settle after the restart")
        for future in futures:
            try:
                ok.append(settling.result(future).message_id)
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
        async with aio_closed_within(aio.Producer(b.url, timeout=1.0)) as producer:
            await within(producer.send("", queue, b"before"), 30, "the send before the alarm")
            await within(asyncio.to_thread(b.set_memory_alarm), 90, "the memory alarm to be set")
            try:
                futures = [await producer.send_async("", queue, b"during") for _ in range(during)]
                await asyncio.sleep(0.5)  # connection.blocked is in: these wait in the producer
                futures += [await producer.send_async("", queue, b"during") for _ in range(during)]
                outcomes = await within(asyncio.gather(*futures, return_exceptions=True), 30,
                                        "the sends made during the alarm to time out (timeout=1.0)")
            finally:
                await within(asyncio.to_thread(b.clear_memory_alarm), 90, "the memory alarm to be cleared")
            after = await within(producer.send("", queue, b"after", timeout=30), 45, "the send after the alarm")
            return outcomes, after, producer.stats()

    def blocking_run(during):
        with closed_within(Producer(b.url, timeout=1.0)) as producer:
            producer.send("", queue, b"before")
            b.set_memory_alarm()
            try:
                futures = [producer.send_async("", queue, b"during") for _ in range(during)]
                time.sleep(0.5)  # connection.blocked is in: these wait in the producer
                futures += [producer.send_async("", queue, b"during") for _ in range(during)]
                settling = Deadline(30, "the sends made during the alarm to time out (timeout=1.0)")
                outcomes = [f.exception(settling.left(0.001)) or f.result() for f in futures]
            finally:
                b.clear_memory_alarm()
            after = producer.send("", queue, b"after", timeout=30)
            return outcomes, after, producer.stats()

    if transport == "aio":
        outcomes, after, stats = asyncio.run(within(aio_run(20), 270, "the memory alarm scenario (and its close)"))
    else:
        outcomes, after, stats = blocking_run(20)
    print(f"\nmemory alarm ({transport}): {collections.Counter(getattr(o, 'operation', type(o).__name__) for o in outcomes)}")
    timeouts = [o for o in outcomes if isinstance(o, SendTimeout)]
    # The alarm blocks every publishing connection: a send may only have landed before the
    # broker read it; all others waited to their deadline and say for what.
    assert len(timeouts) >= len(outcomes) - 1, outcomes[:3]
    assert all("connection.blocked" in t.operation for t in timeouts), {t.operation for t in timeouts}
    assert all("timed out after 1.0 s" in str(t) for t in timeouts)
    assert after.attempts == 1 and stats.pending == 0
