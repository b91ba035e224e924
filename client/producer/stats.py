"""The Producer's statistics: a snapshot of its counters, and the latencies of its last
confirmed sends for percentiles.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from .policy import BrokerStats


@dataclasses.dataclass(frozen=True)
class ProducerStats:
    """A snapshot of a Producer's counters; latencies (seconds) of the last confirmed sends."""

    sent: int  # sends accepted (send, send_async, send_oneway)
    confirmed: int
    oneway: int  # one-way sends written
    retried: int  # attempts after the first
    failed: int
    bytes: int  # body bytes confirmed or written one-way (after compression)
    pending: int  # accepted, not settled yet
    buffered_bytes: int
    latency_p50: Optional[float]
    latency_p90: Optional[float]
    latency_p99: Optional[float]
    latency_max: Optional[float]
    #: each broker's state, counts and latency, in the order of the producer's URLs
    brokers: tuple[BrokerStats, ...] = ()


class Latencies:
    """The last ``size`` latencies, for percentiles."""

    def __init__(self, size: int = 65536) -> None:
        self._values = [0.0] * size
        self._size = size
        self._count = 0

    def add(self, value: float) -> None:
        self._values[self._count % self._size] = value
        self._count += 1

    def extend(self, values: list[float]) -> None:
        size = self._size
        if len(values) > size:
            self._count += len(values) - size
            values = values[-size:]
        start = self._count % size
        head = values[:size - start]
        self._values[start:start + len(head)] = head
        if len(head) < len(values):  # wrapped around
            self._values[:len(values) - len(head)] = values[len(head):]
        self._count += len(values)

    def percentiles(self, *ps: float) -> list[Optional[float]]:
        n = min(self._count, self._size)
        if n == 0:
            return [None for _ in ps]
        values = sorted(self._values[:n])
        return [values[min(n - 1, int(p / 100.0 * n))] for p in ps]
