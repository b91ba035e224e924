"""What ``amqwire perf`` measures in a run, over either protocol: the counters, the latency
sample, the percentiles, the line printed each interval, and the supervision of the
producer and consumer tasks (the first failure ends the run)."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import contextlib
import logging
import random
import struct
import time
import uuid
from typing import Any, Optional, Sequence, TextIO

from .settings import Settings

log = logging.getLogger("amqwire.cli.perf")
STAMP = struct.Struct(">Q")
PERCENTILES = (("min", 0.0), ("median", 0.5), ("75th", 0.75), ("95th", 0.95), ("99th", 0.99), ("max", 1.0))
# The summary's percentiles come from a uniform sample of this many latencies: a long run
# at a high rate would otherwise keep every one of them.
SUMMARY_SAMPLE = 200_000
CONFIRM_DRAIN_SECONDS = 10.0
STOP_CHECK_SECONDS = 1.0
SHUTDOWN_GRACE_SECONDS = CONFIRM_DRAIN_SECONDS + 5.0


@dataclasses.dataclass
class Counters:
    sent: int = 0
    confirmed: int = 0
    nacked: int = 0
    received: int = 0
    latencies_us: list[int] = dataclasses.field(default_factory=list)  # of the current interval

    def on_confirm(self, future: Any) -> None:
        if not future.cancelled() and future.exception() is None:
            self.confirmed += 1
        else:
            self.nacked += 1


class LatencySample:
    """A uniform sample of every latency seen (reservoir sampling), for the summary."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.seen = 0
        self.values: list[int] = []
        self.random = random.Random(27)

    def add_all(self, values: list[int]) -> None:
        for value in values:
            self.seen += 1
            if len(self.values) < self.size:
                self.values.append(value)
            else:
                slot = self.random.randrange(self.seen)
                if slot < self.size:
                    self.values[slot] = value


def percentiles(values: list[int]) -> dict[str, int]:
    if not values:
        return {}
    ordered = sorted(values)
    last = len(ordered) - 1
    return {name: ordered[round(q * last)] for name, q in PERCENTILES}


@dataclasses.dataclass
class Run:
    args: argparse.Namespace
    settings: Settings
    queue: str
    out: TextIO
    counters: Counters = dataclasses.field(default_factory=Counters)
    stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    stop_reason: str = "interrupted"
    marker: str = dataclasses.field(default_factory=lambda: f"amqwire-perf {uuid.uuid4().hex[:12]}")  # app_id
    stopped_at: Optional[float] = None
    producers_done: int = 0

    @property
    def expected(self) -> Optional[int]:
        """Messages the consumers wait for, with -C."""
        count: Optional[int] = self.args.count
        return None if count is None or not self.args.producers else count * self.args.producers

    def finish(self, reason: str) -> None:
        if not self.stop.is_set():
            self.stop_reason = reason
            self.stopped_at = time.monotonic()
            self.stop.set()


def rate_line(elapsed: float, sample: dict[str, Any]) -> str:
    parts = [f"time {elapsed:.3f} s", f"sent: {sample['sent']:.0f} msg/s"]
    if "confirmed" in sample:
        parts += [f"confirmed: {sample['confirmed']:.0f} msg/s", f"nacked: {sample['nacked']:.0f} msg/s"]
    parts.append(f"received: {sample['received']:.0f} msg/s")
    latency = sample.get("latency_us")
    if latency:
        names = [name for name, _ in PERCENTILES if name != "max"]
        parts.append(f"{'/'.join(names)} consumer latency: {'/'.join(str(latency[n]) for n in names)} µs")
    return ", ".join(parts)


async def report(run: Run, started: float, samples: list[dict[str, Any]], everything: LatencySample) -> None:
    counters = run.counters
    previous = (0, 0, 0, 0)
    last = started
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(run.stop.wait(), timeout=max(last + run.args.interval - time.monotonic(), 0))
        now = time.monotonic() if run.stopped_at is None else run.stopped_at
        latencies, counters.latencies_us = counters.latencies_us, []
        everything.add_all(latencies)
        if run.stop.is_set() and now - last < run.args.interval / 2:
            return  # a fraction of a second at the end would print a misleading rate
        seconds = max(now - last, 1e-9)
        current = (counters.sent, counters.confirmed, counters.nacked, counters.received)
        sample: dict[str, Any] = {"time": round(now - started, 3), "sent": (current[0] - previous[0]) / seconds}
        if run.args.confirm:
            sample["confirmed"] = (current[1] - previous[1]) / seconds
            sample["nacked"] = (current[2] - previous[2]) / seconds
        sample["received"] = (current[3] - previous[3]) / seconds
        sample["latency_us"] = percentiles(latencies)
        samples.append(sample)
        run.out.write(rate_line(now - started, sample) + "\n")
        run.out.flush()
        previous, last = current, now
        if run.stop.is_set():
            return


async def supervise(run: Run, workers: Sequence[asyncio.Future[None]]) -> None:
    """Wait for the workers: the first failure ends the run and is raised; once the run
    stops, they have SHUTDOWN_GRACE_SECONDS to drain and close (a broker that went silent
    would hold a close forever), then are abandoned with a warning."""
    stopped: asyncio.Future[Any] = asyncio.ensure_future(run.stop.wait())
    pending: set[asyncio.Future[Any]] = set(workers)
    grace_ends: Optional[float] = None
    try:
        while pending:
            if grace_ends is None and run.stop.is_set():
                grace_ends = time.monotonic() + SHUTDOWN_GRACE_SECONDS
            timeout = None if grace_ends is None else grace_ends - time.monotonic()
            if timeout is not None and timeout <= 0:
                log.warning("%d connections did not close within %s s of the end: abandoned",
                            len(pending), SHUTDOWN_GRACE_SECONDS)
                for worker in pending:
                    worker.cancel()
                return
            waiting: set[asyncio.Future[Any]] = set(pending) if grace_ends is not None else {*pending, stopped}
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
            for worker in done - {stopped}:
                error = worker.exception()
                if error is not None:
                    run.finish("failed")
                    for other in pending:
                        other.cancel()
                    if pending:
                        await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_SECONDS)
                    raise error
    finally:
        stopped.cancel()
