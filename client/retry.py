"""RocketMQ's consumer retry in AMQP terms, decided free of I/O (``retry_async.py`` does the
publishing and the acks, on both transports).

A delivery whose handler failed is not requeued (that would retry it at once, for ever, and
block the queue behind it): it is republished, with its attempts counted in
``x-amqwire-attempts`` (RocketMQ's reconsumeTimes), through a delay route (``delays.py``)
that brings it back to its queue after a delay growing with the attempts (RocketMQ's
schedule: 10 s, 30 s, 1 min, 2 min, ... with the default levels), and only once that
republish is confirmed is the delivery acked.  After ``max_attempts`` failures it goes to a
dead-letter queue instead (RocketMQ's %DLQ% topic), with the reason in its headers.

Nothing is lost: the delivery is acked only after its copy is stored.  A connection lost
between that confirm and the ack brings the delivery back (redelivered): its copy is
already on its way, so when the same delivery fails again in this process with the same
attempts, it is acked without a second copy and counted ``duplicates``; in another process
(the first one died) the copy is made again: at least once, never lost.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Optional, Sequence

from . import delays
from .message import DeliveredMessage

ATTEMPTS = "x-amqwire-attempts"
LAST_ERROR = "x-amqwire-last-error"
ORIGINAL_QUEUE = "x-amqwire-original-queue"
REASON = "x-amqwire-dead-letter-reason"
_ERROR_TEXT_MAX = 1024
_REMEMBERED = 65536


@dataclasses.dataclass(frozen=True)
class RetryStats:
    """``retried``: republished for a later attempt; ``dead_lettered``: sent to the
    dead-letter queue after ``max_attempts``; ``duplicates``: deliveries that came back after
    their copy was stored (their ack was lost with the connection), acked without a second
    copy."""

    retried: int = 0
    dead_lettered: int = 0
    duplicates: int = 0


@dataclasses.dataclass(frozen=True)
class Republish:
    """What to do with a failed delivery: publish ``headers`` added to it to ``exchange``
    with ``routing_key`` (``route``: a delay route to declare first; None: the dead-letter
    queue), then ack it.  ``duplicate``: its copy exists already: only ack it."""

    exchange: str
    routing_key: str
    headers: dict[str, Any]
    attempts: int
    route: Optional[delays.DelayRoute]
    duplicate: bool = False

    @property
    def dead_letter(self) -> bool:
        return self.route is None


def attempts_of(message: DeliveredMessage) -> int:
    """The failures a delivery had before this one (0 for a first delivery)."""
    headers = message.properties.headers if message.properties is not None else None
    value = headers.get(ATTEMPTS) if headers else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= _ERROR_TEXT_MAX else text[:_ERROR_TEXT_MAX - 3] + "..."


class RetryPlan:
    """The decisions of one queue's retry: where each failed delivery goes, and the counts."""

    def __init__(self, queue: str, *, max_attempts: int = 16, levels: Sequence[float] = delays.ROCKETMQ_LEVELS,
                 first_level: int = 2, dead_letter_queue: Optional[str] = None) -> None:
        if not isinstance(queue, str) or not queue:
            raise ValueError("queue must name the queue the retried messages come back to")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive int, not {max_attempts!r}")
        self.queue = queue
        self.max_attempts = max_attempts
        self.levels = delays.check_levels(levels)
        if isinstance(first_level, bool) or not isinstance(first_level, int) or not 0 <= first_level < len(self.levels):
            raise ValueError(f"first_level must index delay_levels (0 to {len(self.levels) - 1}), not {first_level!r}")
        self.first_level = first_level
        self.dead_letter_queue = dead_letter_queue or f"{queue}.dlq"
        self.retried = self.dead_lettered = self.duplicates = 0
        self._copied: "OrderedDict[tuple[Any, ...], None]" = OrderedDict()

    def decide(self, message: DeliveredMessage, error: BaseException) -> Republish:
        before = attempts_of(message)
        attempts = before + 1
        identity = _identity(message, before)
        if message.redelivered and identity in self._copied:
            self.duplicates += 1
            return Republish("", "", {}, attempts, None, duplicate=True)
        text = error_text(error)
        if attempts >= self.max_attempts:
            return Republish("", self.dead_letter_queue, {
                ATTEMPTS: attempts, LAST_ERROR: text, ORIGINAL_QUEUE: self.queue,
                REASON: f"failed {attempts} times (max_attempts {self.max_attempts})"}, attempts, None)
        delay = delays.attempt_delay(attempts, self.levels, self.first_level)
        route = delays.route("", delay, self.levels)
        return Republish(route.exchange, self.queue, {ATTEMPTS: attempts, LAST_ERROR: text}, attempts, route)

    def done(self, message: DeliveredMessage, plan: Republish) -> None:
        """``plan``'s copy is stored (and the delivery about to be acked)."""
        if plan.duplicate:
            return
        if plan.dead_letter:
            self.dead_lettered += 1
        else:
            self.retried += 1
        self._copied[_identity(message, plan.attempts - 1)] = None
        if len(self._copied) > _REMEMBERED:
            self._copied.popitem(last=False)

    def stats(self) -> RetryStats:
        return RetryStats(self.retried, self.dead_lettered, self.duplicates)


def _identity(message: DeliveredMessage, attempts: int) -> tuple[Any, ...]:
    props = message.properties
    message_id = props.message_id if props is not None else None
    return (message_id, attempts) if message_id is not None else (hash(message.body), message.routing_key, attempts)
