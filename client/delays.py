"""Delayed delivery without a plugin: RocketMQ's delay levels on RabbitMQ's message TTL and
dead-lettering, decided here free of I/O (the Producer and the consumer retry declare and
publish).

A message delayed by ``d`` seconds to exchange ``E`` goes to the fanout exchange of the
*delay route* ``(step, E)``: ``step`` is the first of ``levels`` at or above ``d`` (a delay
above the last level is its own step, rounded up to a whole second), so the message is
served no sooner than asked and at most one step late.  The fanout feeds one durable queue
with ``x-message-ttl`` = the step and ``x-dead-letter-exchange`` = ``E``; a message keeps the
routing key it was published with, so when its TTL runs out RabbitMQ dead-letters it to
``E`` with that key: it arrives where it was sent, ``step`` later.  Every message of a queue
has the same TTL, so they expire in the order they came (a queue's TTL only drops from its
head).  The names are fixed by (step, exchange), so producers and processes share the
routes; the queues are durable, so persistent delayed messages survive a broker restart.

What this does not do: a message that the target exchange cannot route when its delay ends
is dropped by the broker (dead-lettering is not mandatory), and the confirm of a delayed
send means "stored in the delay queue", not "delivered".
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Sequence

#: RocketMQ's default delay levels (messageDelayLevel), in seconds.
ROCKETMQ_LEVELS: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)
PREFIX = "amqwire.delay."
#: RabbitMQ's per-queue message TTL is at most 2^32 - 1 ms (about 49.7 days).
MAX_DELAY = (2**32 - 1) / 1000


class DelayRoute(NamedTuple):
    """Where a message delayed by ``step_ms`` to ``target`` goes: ``exchange`` (fanout), bound
    to the durable ``queue`` whose TTL and dead-letter exchange do the rest."""

    step_ms: int
    target: str
    exchange: str
    queue: str

    @property
    def queue_arguments(self) -> dict[str, Any]:
        return {"x-message-ttl": self.step_ms, "x-dead-letter-exchange": self.target}


def check_levels(levels: Sequence[float]) -> tuple[float, ...]:
    out = tuple(levels)
    if not out or any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= MAX_DELAY
                      or not math.isfinite(v) for v in out):
        raise ValueError(f"delay levels must be numbers of seconds in (0, {MAX_DELAY:.0f}], not {levels!r}")
    if list(out) != sorted(set(out)):
        raise ValueError(f"delay levels must be strictly increasing, not {levels!r}")
    return out


def step_for(delay: float, levels: Sequence[float] = ROCKETMQ_LEVELS) -> int:
    """The delay step (milliseconds) that serves ``delay`` seconds: the first level at or
    above it, or above the last level the delay itself rounded up to a whole second."""
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay <= 0:
        raise ValueError(f"delay must be a positive number of seconds, not {delay!r}")
    if delay > MAX_DELAY:
        raise ValueError(f"delay: {delay} s is over RabbitMQ's longest message TTL ({MAX_DELAY:.0f} s)")
    for level in levels:
        if level >= delay:
            return int(math.ceil(level * 1000))
    return int(math.ceil(delay)) * 1000


def route(target_exchange: str, delay: float, levels: Sequence[float] = ROCKETMQ_LEVELS) -> DelayRoute:
    """The delay route of a message to ``target_exchange`` ("" : the default exchange)."""
    step = step_for(delay, levels)
    name = f"{PREFIX}{step}ms.{target_exchange or 'amq.default'}"
    if len(name.encode("utf-8")) > 255:
        raise ValueError(f"delay: exchange name {target_exchange!r} too long for a delay route ({name!r})")
    return DelayRoute(step, target_exchange, name, name)


def attempt_delay(attempt: int, levels: Sequence[float] = ROCKETMQ_LEVELS, first_level: int = 2) -> float:
    """A consumer retry's delay before attempt ``attempt`` + 1 (``attempt`` = 1 after the first
    failure): RocketMQ's reconsume schedule, level ``first_level + attempt`` (levels counted
    from 0: 10 s, 30 s, 1 min, ... with the default levels), the last level beyond."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, not {attempt!r}")
    index = min(first_level + attempt - 1, len(levels) - 1)
    return float(levels[index])


def declared_key(r: DelayRoute) -> tuple[int, str]:
    return (r.step_ms, r.target)


def describe(r: Optional[DelayRoute]) -> str:
    return "no delay" if r is None else f"{r.step_ms / 1000:g} s to {r.target or 'the default exchange'!r}"
