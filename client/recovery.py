"""Automatic recovery, shared by both transports: when to retry, and what to declare again.

``Topology`` records the exchanges, queues and bindings a connection declared (and forgets
what it deleted).  After a reconnect, ``replay()`` yields the methods to send again, in
order, and is sent each reply back, so one plan serves the blocking loop and the asyncio
one.  A queue the broker named gets a new name on the new connection; ``renamed`` maps
old names to new ones so bindings and consumers follow it.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Generator, Optional

from amqwire.codec import (
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    QueueBind,
    QueueDeclare,
    QueueDelete,
    QueueUnbind,
)

from .errors import ConnectionClosed, ConnectionLost

# Sentinel a consumer's queue ends with when the client cancelled it (not the broker).
END = object()


@dataclasses.dataclass(frozen=True)
class RecoveryPolicy:
    """Exponential back-off with jitter between attempts; ``max_attempts`` 0 means keep
    trying until ``close()``.

    ``renew_after_nacks``: a channel the recovery reopened whose publishes are then nacked
    that many times in a row, with no ack since the recovery, is renewed: replaced by a
    fresh channel (a new channel number) on the same connection, its confirm mode, qos and
    consumers restored, before its next publish.  RabbitMQ 3.10 nacks every publish of a
    channel whose first publish to a quorum queue came while the queue's leader was
    dead and no new one was known yet, for as long as that channel lives (see
    docs/faults.md).  At most ``max_renewals`` renewals per recovery, renewal ``k``
    (0, 1, ...) after ``renew_delay * 2**k`` seconds (at most ``max_delay``, with jitter):
    the queue needs a moment to have a new leader, and a queue that nacks by design
    (``x-overflow: reject-publish``) costs a few renewals, then the channel stays as it
    is (logged once, at WARNING).  ``renew_after_nacks=0`` turns renewals off."""

    initial_delay: float = 0.5
    max_delay: float = 30.0
    multiplier: float = 2.0
    max_attempts: int = 0
    renew_after_nacks: int = 20
    max_renewals: int = 8
    renew_delay: float = 0.25

    def __post_init__(self) -> None:
        if self.renew_after_nacks < 0:
            raise ValueError(f"renew_after_nacks must be >= 0, not {self.renew_after_nacks}")
        if self.max_renewals < 0:
            raise ValueError(f"max_renewals must be >= 0, not {self.max_renewals}")
        if self.renew_delay < 0:
            raise ValueError(f"renew_delay must be >= 0, not {self.renew_delay}")

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier**attempt)
        return base * (0.5 + random.random() / 2)


class NackWatch:
    """When a restored channel is renewed (the decision alone, no I/O; see RecoveryPolicy).

    ``nacked(count)`` after each nack frame of the channel: True once the run of nacks
    since the recovery (or the last renewal) reaches ``renew_after_nacks``; an ack ends
    the watch (the channel's lifecycle leaves RESTORED), so a nack after an ack never
    counts.  ``next_renewal()``: the back-off before the next renewal, or None when the
    renewals of this recovery are used up.  ``restored()`` starts a recovery's count."""

    __slots__ = ("policy", "run", "renewals")

    def __init__(self, policy: Optional[RecoveryPolicy]) -> None:
        self.policy = policy
        self.run = 0  # nacks in a row since the recovery or the last renewal
        self.renewals = 0  # renewals since the recovery

    def restored(self) -> None:
        self.run = 0
        self.renewals = 0

    def renewed(self) -> None:
        self.run = 0

    def nacked(self, count: int) -> bool:
        policy = self.policy
        if policy is None or not policy.renew_after_nacks:
            return False
        self.run += count
        return self.run >= policy.renew_after_nacks

    def next_renewal(self) -> Optional[float]:
        policy = self.policy
        if policy is None or self.renewals >= policy.max_renewals:
            return None
        base = min(policy.max_delay, policy.renew_delay * 2.0 ** min(self.renewals, 60))
        self.renewals += 1
        return base * (0.5 + random.random() / 2)


def recoverable(error: BaseException) -> bool:
    """A lost socket, or the broker closing us as an operator or a failing node would."""
    if isinstance(error, ConnectionClosed):
        return error.reply_code in (320, 541)  # CONNECTION_FORCED, INTERNAL_ERROR
    return isinstance(error, ConnectionLost)


def _frozen(arguments: Optional[dict[str, Any]]) -> Any:
    return tuple(sorted(arguments.items(), key=lambda kv: kv[0])) if arguments else None


class Topology:
    """What a connection declared, to declare again after recovery."""

    def __init__(self) -> None:
        self.exchanges: dict[str, ExchangeDeclare] = {}
        self.queues: dict[str, tuple[QueueDeclare, bool]] = {}  # name -> (declare, server-named)
        self.bindings: dict[tuple[Any, ...], None] = {}  # (kind, destination, source, key, arguments), in order
        self.renamed: dict[str, str] = {}  # server-named queues: old name -> new name

    def record(self, method: Any, reply: Any) -> None:
        """Note a synchronous method the broker accepted."""
        cls = type(method)
        if cls is ExchangeDeclare and not method.passive:
            self.exchanges[method.exchange] = method
        elif cls is ExchangeDelete:
            self.exchanges.pop(method.exchange, None)
            self.bindings = {k: None for k in self.bindings if method.exchange not in (k[1], k[2])}
        elif cls is QueueDeclare and not method.passive:
            self.queues[reply.queue] = (method, method.queue == "")
        elif cls is QueueDelete:
            self.queues.pop(method.queue, None)
            self.bindings = {k: None for k in self.bindings if not (k[0] == "queue" and k[1] == method.queue)}
        elif cls is QueueBind:
            self.bindings[("queue", method.queue, method.exchange, method.routing_key, _frozen(method.arguments))] = None
        elif cls is QueueUnbind:
            self.bindings.pop(("queue", method.queue, method.exchange, method.routing_key, _frozen(method.arguments)), None)
        elif cls is ExchangeBind:
            key = ("exchange", method.destination, method.source, method.routing_key, _frozen(method.arguments))
            self.bindings[key] = None
        elif cls is ExchangeUnbind:
            key = ("exchange", method.destination, method.source, method.routing_key, _frozen(method.arguments))
            self.bindings.pop(key, None)

    def replay(self) -> Generator[Any, Any, None]:
        """Yield each method to send again; send its reply back in."""
        for exchange in list(self.exchanges.values()):
            yield exchange
        renamed = {}
        for name, (queue, server_named) in list(self.queues.items()):
            if server_named:
                reply = yield QueueDeclare(
                    0, "", False, queue.durable, queue.exclusive, queue.auto_delete, False, queue.arguments
                )
                renamed[name] = reply.queue
            else:
                yield queue
        for name, new in renamed.items():
            self.queues[new] = self.queues.pop(name)
        self.renamed.update(renamed)
        bindings: dict[tuple[Any, ...], None] = {}
        for kind, destination, source, key, arguments in list(self.bindings):
            destination = renamed.get(destination, destination)
            args = dict(arguments) if arguments else None
            if kind == "queue":
                yield QueueBind(0, destination, source, key, False, args)
            else:
                yield ExchangeBind(0, destination, source, key, False, args)
            bindings[(kind, destination, source, key, arguments)] = None
        self.bindings = bindings
