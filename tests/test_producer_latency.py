"""Latency-aware broker choice (RocketMQ's LatencyFaultTolerance) and retries elsewhere, on
two PRIVATE RabbitMQ nodes A and B (never the shared broker).  B is reached through a
DelayProxy that holds its replies back for a while: a slow broker, as a user sees one.

The latency table is RocketMQ's shape scaled down (options ``latency_thresholds`` /
``latency_penalties``): from 0.3 s between a write and its confirm, a broker is passed over
for 2 s.  The tests never assert on timing: the sends are paced, and what is checked is
where they went.  The sends per broker over time are logged (``-o log_cli=true
--log-cli-level=INFO`` shows them).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any, Optional

from conftest import Deadline, with_netloc, within
from delay_proxy import DelayProxy
from test_producer_faults import declare, nodes  # noqa: F401 - the module-scoped private nodes A and B

from amqwire.client import Producer, aio, connect

log = logging.getLogger("tests.producer_latency")

THRESHOLDS = (0.05, 0.1, 0.3, 2.0)  # RocketMQ's 50 ms, 100 ms, 550 ms, 1 s ... scaled down
PENALTIES = (0.0, 0.0, 2.0, 6.0)
DELAY = 0.5  # B's replies, while slow
SPACING = 0.02  # between two sends
BEFORE, SLOW, END = 60, 150, 40  # sends in each phase (the phase after the delay ends: until B is back)
WINDOW = 0.5  # seconds per line of the report


@dataclasses.dataclass
class Record:
    at: float  # seconds since the first send
    phase: str
    future: Any
    broker: Optional[str] = None


def report(records: list[Record], urls: dict[str, str]) -> str:
    """Sends per broker per WINDOW seconds, with the phase each window started in."""
    lines = [f"{'t (s)':>6} {'phase':<7} " + " ".join(f"{name:>4}" for name in urls.values())]
    windows: dict[int, list[Record]] = {}
    for record in records:
        windows.setdefault(int(record.at / WINDOW), []).append(record)
    for index in sorted(windows):
        chunk = windows[index]
        counts = [sum(1 for r in chunk if r.broker == url) for url in urls]
        bar = "".join(name * count for name, count in zip(urls.values(), counts))
        lines.append(f"{index * WINDOW:6.1f} {chunk[0].phase:<7} " + " ".join(f"{c:4d}" for c in counts) + "  " + bar)
    return "\n".join(lines)


def check(records: list[Record], states: list[str], fast: str, slow: str, transport: str) -> None:
    names = {fast: "A", slow: "B"}
    table = report(records, names)
    log.info("sends per broker every %.1f s (%s; B slowed by %.1f s from the 'slow' phase, back to "
             "normal from 'after'):\n%s", WINDOW, transport, DELAY, table)
    by_phase: dict[str, list[str]] = {}
    for record in records:
        by_phase.setdefault(record.phase, []).append(names[record.broker])
    before, slowed, after, end = (by_phase.get(p, []) for p in ("before", "slow", "after", "end"))
    # both brokers took sends before B was slowed (round robin)
    assert before.count("B") >= BEFORE // 5, table
    # slowed: B is passed over within a bounded number of sends...
    first_run = next((i for i in range(len(slowed) - 20) if "B" not in slowed[i:i + 20]), None)
    assert first_run is not None and first_run <= 40, f"no run of 20 sends to A within the first 40 of the slow phase\n{table}"
    # ...and takes few while slow: a probe after each penalty (round robin alone: half)
    assert slowed.count("B") <= SLOW * 0.3, table
    assert "slow" in states, f"the statistics never showed B slow: {states}"
    # back to normal: B comes back after its penalty and takes its turn again
    assert after.count("B") >= 20, table
    assert end.count("B") >= END // 4, table


def test_sends_move_off_a_slow_broker_and_come_back_after_the_penalty(transport, nodes):  # noqa: F811
    a, b = nodes
    queue = f"latency-{uuid.uuid4().hex[:8]}"
    declare(a.url, queue)
    declare(b.url, queue)
    proxy = DelayProxy("127.0.0.1", b.port)
    urls = [a.url, with_netloc(b.url, "127.0.0.1", proxy.port)]
    options = dict(timeout=30, linger=0, latency_thresholds=THRESHOLDS, latency_penalties=PENALTIES)
    try:
        if transport == "blocking":
            records, states, brokers = _drive_blocking(urls, queue, proxy, options)
        else:
            records, states, brokers = asyncio.run(within(_drive_aio(urls, queue, proxy, options), 150,
                                                          "the asyncio producer's run (and its close)"))
    finally:
        proxy.close()
    log.info("the producer's brokers at the end: %s", brokers)
    assert [s.sent for s in brokers] == [sum(1 for r in records if r.broker == s.url) for s in brokers]
    assert brokers[1].latency is not None and brokers[1].latency_avg is not None
    check(records, states, brokers[0].url, brokers[1].url, transport)


def _drive_blocking(urls: list[str], queue: str, proxy: DelayProxy, options: dict) -> tuple[list[Record], list[str], Any]:
    records: list[Record] = []
    states: list[str] = []
    with Producer(urls, **options) as producer:
        started = time.monotonic()

        def send(phase: str) -> None:
            records.append(Record(time.monotonic() - started, phase, producer.send_async("", queue, b"x")))
            time.sleep(SPACING)

        for _ in range(BEFORE):
            send("before")
        proxy.delay = DELAY
        for i in range(SLOW):
            send("slow")
            if i % 5 == 0:
                states.append(producer.stats().brokers[1].state)
        proxy.delay = 0.0
        slow_url = producer.brokers[1].url
        back = Deadline(60, "the sends to go back to B once it is fast again (20 of them)")
        after: list[Record] = []
        while sum(1 for r in after if r.future.done() and r.future.result().broker == slow_url) < 20:
            if back.expired():
                break  # check() says how far it got, with the report
            send("after")
            after.append(records[-1])
        for _ in range(END):
            send("end")
        settled = Deadline(30, "every send's confirm")
        for record in records:
            record.broker = settled.result(record.future).broker
        brokers = producer.stats().brokers
    return records, states, brokers


async def _drive_aio(urls: list[str], queue: str, proxy: DelayProxy, options: dict) -> tuple[list[Record], list[str], Any]:
    records: list[Record] = []
    states: list[str] = []
    async with aio.Producer(urls, **options) as producer:
        started = time.monotonic()

        async def send(phase: str) -> None:
            records.append(Record(time.monotonic() - started, phase, await producer.send_async("", queue, b"x")))
            await asyncio.sleep(SPACING)

        for _ in range(BEFORE):
            await send("before")
        proxy.delay = DELAY
        for i in range(SLOW):
            await send("slow")
            if i % 5 == 0:
                states.append(producer.stats().brokers[1].state)
        proxy.delay = 0.0
        slow_url = producer.brokers[1].url
        back = Deadline(60, "the sends to go back to B once it is fast again (20 of them)")
        after: list[Record] = []
        while sum(1 for r in after if r.future.done() and r.future.result().broker == slow_url) < 20:
            if back.expired():
                break
            await send("after")
            after.append(records[-1])
        for _ in range(END):
            await send("end")
        for record in records:
            record.broker = (await within(record.future, 30, "a send's confirm")).broker
        brokers = producer.stats().brokers
    return records, states, brokers


def test_a_retry_after_a_nack_goes_to_the_other_broker(transport, nodes):  # noqa: F811
    """B nacks every publish to the queue (full, reject-publish): each send first tried on
    B is retried on A, never on B again, and no send fails (3 attempts would be allowed)."""
    a, b = nodes
    queue = f"nack-{uuid.uuid4().hex[:8]}"
    declare(a.url, queue)
    with connect(b.url) as conn, conn.channel() as ch:
        ch.queue_declare(queue, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    options = dict(timeout=30, retries=2, retry_backoff=0.01, retry_backoff_max=0.05, batch_size=20)
    count = 400

    async def run_aio() -> tuple[list, Any]:
        async with aio.Producer([a.url, b.url], **options) as producer:
            futures = [await producer.send_async("", queue, b"%d" % i) for i in range(count)]
            return [await within(f, 30, "a send's confirm") for f in futures], producer.stats().brokers

    if transport == "blocking":
        with Producer([a.url, b.url], **options) as producer:
            futures = [producer.send_async("", queue, b"%d" % i) for i in range(count)]
            settled = Deadline(30, "every send's confirm")
            results = [settled.result(f) for f in futures]
            brokers = producer.stats().brokers
    else:
        results, brokers = asyncio.run(within(run_aio(), 90, "the asyncio producer's sends"))
    tried = [r.attempts for r in results]
    log.info("attempts per send: %s", {n: tried.count(n) for n in sorted(set(tried))})
    assert {r.broker for r in results} == {brokers[0].url}, "a send was confirmed by B, which nacks everything"
    assert max(tried) <= 2, "a retry went back to B, the broker that nacked it"
    assert tried.count(2) > 0, "no send was tried on B first: nothing was tested"
    assert brokers[1].failed >= tried.count(2) and brokers[1].confirmed == 0
