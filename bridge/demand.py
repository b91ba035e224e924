"""Forwarding on demand, decided free of I/O: a queue is forwarded only while the
destination has consumers on the queue of the same name (as ActiveMQ's
``DemandForwardingBridge`` forwards a destination only while a remote consumer wants it).

The transport tells :class:`Demand` what it learned about the destination's consumers
(``observed(count)``: from a passive ``queue.declare``'s ``consumer_count``, polled or
re-read when the ``rabbitmq_event_exchange`` plugin announces ``consumer.created`` or
``consumer.deleted`` for the queue; None when the queue is missing there) and when the
source consumer it stopped has settled everything it had received (``drained()``); it
answers with what to do: :data:`START` (consume at the source) or :data:`STOP` (cancel
the source consumer, forward what was received, settle it, then call ``drained()``).

A stop always drains before the next start: demand that comes back while draining is
remembered and answered by ``drained()``, so there is never more than one consumer.

Bridges are not demand (ActiveMQ counts only local consumers, never the network's own
subscriptions): otherwise a bridge's consumer on the destination's queue keeps the
bridge forwarding into it after the last real consumer left, and two opposite bridges
keep each other running.  RabbitMQ gives only a queue's consumer count over AMQP, so
every amqwire bridge marks the queues it consumes: before consuming queue Q it consumes
the queue :func:`mark_queue` (Q) (declared with ``x-expires``: it goes a minute after the
last mark), and cancels that consumer after Q's.  The demand for Q is Q's consumer count
less its mark queue's, exact across bridges, processes and hosts, with no plugin.  The
bridges' consumer tags start with ``amqwire.bridge.`` for people reading a consumer list.
"""
from __future__ import annotations

import enum
import hashlib
from typing import Optional

MARK_PREFIX = "amqwire.bridge.consumers."
MARK_EXPIRES_MS = 60_000


def mark_queue(queue: str) -> str:
    """The queue whose consumer count is the number of bridges consuming ``queue``."""
    name = MARK_PREFIX + queue
    if len(name.encode("utf-8")) > 255:
        name = MARK_PREFIX + hashlib.sha256(queue.encode("utf-8")).hexdigest()
    return name


START = "start"
STOP = "stop"


class DemandState(str, enum.Enum):
    IDLE = "idle"  # no demand, no consumer at the source
    CONSUMING = "consuming"
    DRAINING = "draining"  # demand went: the source consumer is cancelled, in-flight deliveries settling


class Demand:
    """The demand for one forwarded queue."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.state = DemandState.IDLE
        self.consumers: Optional[int] = None  # last known at the destination (None: unknown, or no such queue)
        self.looks = 0  # observations so far
        self.starts = 0
        self.stops = 0

    @property
    def wanted(self) -> bool:
        return bool(self.consumers)

    def observed(self, consumers: Optional[int]) -> Optional[str]:
        """The destination's queue has ``consumers`` consumers (None: it does not exist)."""
        self.consumers = consumers
        self.looks += 1
        if self.state is DemandState.IDLE and self.wanted:
            self.state = DemandState.CONSUMING
            self.starts += 1
            return START
        if self.state is DemandState.CONSUMING and not self.wanted:
            self.state = DemandState.DRAINING
            self.stops += 1
            return STOP
        return None

    def drained(self) -> Optional[str]:
        """The stopped source consumer has settled everything it received."""
        if self.state is not DemandState.DRAINING:
            return None
        if self.wanted:
            self.state = DemandState.CONSUMING
            self.starts += 1
            return START
        self.state = DemandState.IDLE
        return None

    def start_failed(self) -> None:
        """The source consumer could not be started: the next observation tries again."""
        if self.state is DemandState.CONSUMING:
            self.state = DemandState.IDLE
            self.consumers = None


def consumer_event_queue(headers: object, vhost: str) -> Optional[str]:
    """The queue a ``consumer.created`` / ``consumer.deleted`` event of the
    ``rabbitmq_event_exchange`` plugin is about, when it is in ``vhost`` (else None)."""
    if not isinstance(headers, dict):
        return None
    queue = _text(headers.get("queue"))
    event_vhost = _text(headers.get("vhost"))
    if queue is None or (event_vhost is not None and event_vhost != vhost):
        return None
    return queue


def _text(value: object) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None
