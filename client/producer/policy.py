"""The Producer's policy: which broker takes the next batch, which errors a retry may cure,
how long to back off before it; the record of each attempt.

Broker choice avoids two kinds of trouble, as RocketMQ's producer does (``MQFaultStrategy``
with ``LatencyFaultTolerance``): a broker whose connection or channel *failed* is not used
for ``avoid_backoff`` seconds (doubling while it keeps failing); a broker that was *slow*,
whose last send took ``LATENCY_THRESHOLDS[i]`` seconds or more from the write to the
broker's verdict, is passed over for ``LATENCY_PENALTIES[i]`` seconds (RocketMQ's defaults:
nothing under 550 ms, 30 s from 550 ms up to 10 min from 15 s).  A send still unconfirmed
after the first penalized threshold makes its broker slow at once, without waiting for the
verdict.  A slow broker is still used when every broker is slow (the one back soonest),
never left idle for nothing; a failed one is not.
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
from typing import Any, Callable, Collection, Optional, Sequence

from ..errors import (
    AMQPConnectionError,
    ChannelClosed,
    InvalidStateError,
    MessageReturned,
    PublishNacked,
    PublishUnconfirmed,
)
from ..url import ConnectionParameters

ROUND_ROBIN = "round_robin"
PINNED = "pinned"
POLICIES = (ROUND_ROBIN, PINNED)

# Channel closes that a retry cannot cure: the same publish fails the same way again.
_FINAL_CODES = (403, 404, 406)

#: A broker whose channel answered this many publishes in a row with a nack, and none with an
#: ack, gets a fresh channel before the next batch (RabbitMQ 3.10 nacks every publish of a
#: channel whose first publish to a quorum queue came while the queue had no known leader,
#: for as long as that channel lives: a channel opened in the moment after a node died).
RENEW_AFTER_NACKS = 20
#: ...at most this many times in a row (an ack, or a new connection, starts the count again),
#: each after the retry back-off: a queue that nacks by design (x-overflow reject-publish)
#: costs a few channels, not one per batch.
MAX_RENEWALS = 8

#: RocketMQ's ``latencyMax`` (ms), in seconds: send-to-confirm latencies from which a broker is slow...
LATENCY_THRESHOLDS: tuple[float, ...] = (0.05, 0.1, 0.55, 1.0, 2.0, 3.0, 15.0)
#: ...and RocketMQ's ``notAvailableDuration`` (ms), in seconds: for how long it is passed over.
LATENCY_PENALTIES: tuple[float, ...] = (0.0, 0.0, 30.0, 60.0, 120.0, 180.0, 600.0)
# How much of a new latency the moving average takes in (shown in the statistics).
_AVERAGE_WEIGHT = 0.2


class LatencyTable:
    """Send-to-confirm latency -> how long its broker is passed over: the penalty of the
    highest threshold the latency reaches (0 below the first)."""

    __slots__ = ("thresholds", "penalties", "first_penalized")

    def __init__(self, thresholds: Sequence[float] = LATENCY_THRESHOLDS,
                 penalties: Sequence[float] = LATENCY_PENALTIES) -> None:
        thresholds, penalties = tuple(thresholds), tuple(penalties)
        if not thresholds or len(thresholds) != len(penalties):
            raise ValueError(f"latency_thresholds and latency_penalties must be as long as each other and not "
                             f"empty, not {len(thresholds)} and {len(penalties)} values")
        if any(t < 0 for t in thresholds) or any(b <= a for a, b in zip(thresholds, thresholds[1:])):
            raise ValueError(f"latency_thresholds must be >= 0 and increasing, not {thresholds!r}")
        if any(p < 0 for p in penalties):
            raise ValueError(f"latency_penalties must be >= 0, not {penalties!r}")
        self.thresholds = thresholds
        self.penalties = penalties
        #: the lowest latency that brings a penalty (inf: none does)
        self.first_penalized = next((t for t, p in zip(thresholds, penalties) if p > 0), float("inf"))

    def penalty(self, latency: float) -> float:
        for threshold, penalty in zip(reversed(self.thresholds), reversed(self.penalties)):
            if latency >= threshold:
                return penalty
        return 0.0

    def __repr__(self) -> str:
        return f"<LatencyTable {list(zip(self.thresholds, self.penalties))}>"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One try of a send: the broker (URL without password) and how it ended."""

    broker: str
    error: BaseException
    at: float  # time.monotonic()


@dataclasses.dataclass(frozen=True)
class BrokerStats:
    """One broker as ``Producer.stats().brokers`` shows it.

    ``state``: ``"available"``; ``"slow"`` (passed over for ``avoided_for`` more seconds,
    or a send unconfirmed past the first penalized latency); ``"failed"`` (its connection
    or channel failed: not used for ``avoided_for`` more seconds); ``"blocked"``
    (connection.blocked).  ``sent``: messages written to it; ``confirmed`` / ``failed``:
    verdicts and failed attempts there (nacks, returns, losses); ``latency``: the last
    send-to-confirm latency (seconds), ``latency_avg`` a moving average of them."""

    url: str
    state: str
    connected: bool
    sent: int
    confirmed: int
    failed: int
    latency: Optional[float]
    latency_avg: Optional[float]
    avoided_for: float
    consecutive_failures: int
    last_error: Optional[str]


class Broker:
    """One URL of the Producer: its connection and channels once open, its avoidance, and
    the record of its sends (counts, latencies, the writes waiting for their verdict)."""

    def __init__(self, index: int, params: ConnectionParameters) -> None:
        self.index = index
        self.params = params
        self.url = params.display_url
        self.connection: Any = None
        self.channel: Any = None  # confirm mode
        self.oneway_channel: Any = None
        self.failures = 0  # consecutive
        self.delay_routes: set[Any] = set()  # the delay routes declared over this connection (delays.py)
        self.avoid_until = 0.0
        self.nacked_in_row = 0  # messages nacked since the channel's last ack (or its opening)
        self.renewals = 0  # channels renewed since the last ack or connection
        self.renew_at = 0.0  # not renewed again before this time.monotonic()
        self.last_error: Optional[BaseException] = None
        self.slow_until = 0.0
        self.latency: Optional[float] = None
        self.latency_avg: Optional[float] = None
        self.sent = 0
        self.confirmed = 0
        self.failed = 0
        # write number -> when it was written, oldest first: the writes awaiting a verdict
        self._unsettled: dict[int, float] = {}
        self._writes = 0

    def written(self, count: int, now: float) -> int:
        """``count`` confirm-mode messages written in one write; the number of that write."""
        self.sent += count
        self._writes += 1
        self._unsettled[self._writes] = now
        return self._writes

    def settled(self, write: int, now: float) -> Optional[float]:
        """The verdict of ``write`` came (or it was lost): its latency (None if counted already)."""
        written_at = self._unsettled.pop(write, None)
        return None if written_at is None else now - written_at

    def oldest_unsettled(self, now: float) -> float:
        """How long the oldest write still awaiting its verdict has waited (0: none)."""
        for written_at in self._unsettled.values():
            return now - written_at
        return 0.0

    def unwritten(self, write: int, count: int) -> None:
        """Write ``write`` (numbered before it was tried) did not happen after all."""
        if self._unsettled.pop(write, None) is not None:
            self.sent -= count

    def forget_unsettled(self) -> None:
        """The connection is gone: its writes will have no verdict."""
        self._unsettled.clear()

    def usable(self) -> bool:
        return self.connection is not None and self.connection.is_open

    def verdict(self, ok: bool, nacked: int) -> None:
        """A write's verdict came: ``ok`` (acked), or ``nacked`` of its messages were nacked."""
        if ok:
            self.nacked_in_row = 0
            self.renewals = 0
        elif nacked:
            self.nacked_in_row += nacked

    def stale_channel(self, now: float) -> bool:
        """Whether its channel is to be renewed before the next batch (see RENEW_AFTER_NACKS)."""
        return self.nacked_in_row >= RENEW_AFTER_NACKS and self.renewals < MAX_RENEWALS and now >= self.renew_at

    def connected(self) -> None:
        """A new connection and channel: no verdict yet."""
        self.nacked_in_row = 0
        self.renewals = 0
        self.renew_at = 0.0

    def blocked_reason(self) -> str:
        """Why the broker blocks the connection (connection.blocked's reason)."""
        core = getattr(self.connection, "_core", None)
        return str(getattr(core, "blocked", None) or "blocked")

    def __repr__(self) -> str:
        return f"<Broker {self.url} failures={self.failures} latency={self.latency}>"


class BrokerSelector:
    """Picks the broker for the next batch.

    ``round_robin``: the usable brokers in turn, preferring, in this order, one whose
    connection is not blocked (connection.blocked), one that is not slow (``latency``, a
    LatencyTable; None: latency is not looked at), and for a retry one other than the
    broker its last attempt failed on.  ``pinned``: the first usable broker in the order
    given, the next ones only while it is avoided after a failure (failover), back to it
    once that avoidance is over; neither slowness nor a retry moves it (the order of the
    sends is kept).  A broker that failed is avoided for ``avoid_backoff`` seconds,
    doubled at each consecutive failure up to ``avoid_backoff_max``.
    """

    def __init__(self, brokers: list[Broker], policy: str, avoid_backoff: float, avoid_backoff_max: float,
                 latency: Optional[LatencyTable] = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.brokers = brokers
        self.policy = policy
        self.avoid_backoff = avoid_backoff
        self.avoid_backoff_max = avoid_backoff_max
        self.latency = latency if policy == ROUND_ROBIN else None
        self._next = 0

    def avoid(self, broker: Broker, error: BaseException, now: float) -> float:
        broker.failures += 1
        broker.last_error = error
        # The exponent is capped: 2.0 ** 1024 overflows (an outage of hours at the 30 s cap),
        # and an OverflowError here killed the sender.
        period = min(self.avoid_backoff * 2.0 ** min(broker.failures - 1, 60), self.avoid_backoff_max)
        broker.avoid_until = now + period
        return period

    def succeeded(self, broker: Broker) -> None:
        broker.failures = 0

    def observe(self, broker: Broker, write: int, now: float, answered: bool, count: int, ok: bool) -> None:
        """The verdict on ``write`` (``count`` messages) came: ``ok`` all confirmed, else
        they failed there; ``answered``: the broker answered (an ack, a nack, a return),
        so the latency counts; a loss only ends the wait."""
        latency = broker.settled(write, now)
        if latency is None:  # counted already (a future's callback may run twice)
            return
        if ok:
            broker.confirmed += count
        else:
            broker.failed += count
        if not answered:
            return
        broker.latency = latency
        average = broker.latency_avg
        broker.latency_avg = latency if average is None else average + _AVERAGE_WEIGHT * (latency - average)
        if self.latency is not None:
            # the last verdict decides, as in RocketMQ: a fast one ends the penalty
            broker.slow_until = now + self.latency.penalty(latency)

    def is_slow(self, broker: Broker, now: float) -> bool:
        table = self.latency
        if table is None:
            return False
        return broker.slow_until > now or broker.oldest_unsettled(now) >= table.first_penalized

    def choose(self, now: float, is_blocked: Callable[[Broker], bool],
               retry_of: Collection[Broker] = ()) -> tuple[Optional[Broker], float]:
        """(broker, 0) or (None, seconds until one may be tried again).  ``retry_of``: the
        brokers the batch's retried sends failed on (round_robin goes elsewhere if it can)."""
        n = len(self.brokers)
        if self.policy != ROUND_ROBIN:
            allowed = [b for b in self.brokers if b.avoid_until <= now]
            if not allowed:
                return None, min(b.avoid_until for b in self.brokers) - now
            return next((b for b in allowed if not is_blocked(b)), allowed[0]), 0.0
        order = [self.brokers[(self._next + i) % n] for i in range(n)]
        allowed = [b for b in order if b.avoid_until <= now]
        if not allowed:
            return None, min(b.avoid_until for b in self.brokers) - now
        chosen = allowed[0]
        if len(allowed) > 1:
            best: Any = None
            for broker in allowed:
                slow = self.is_slow(broker, now)
                # blocked is worse than slow, slow worse than where a retry failed; among
                # slow ones, the one back soonest; then the round-robin order
                rank = (is_blocked(broker), slow, broker in retry_of, broker.slow_until if slow else 0.0)
                if best is None or rank < best:
                    best, chosen = rank, broker
        self._next = (chosen.index + 1) % n
        return chosen, 0.0

    def for_key(self, key: str, now: float) -> Optional[Broker]:
        """The broker of an ordered send's ``key`` (RocketMQ's MessageQueueSelector by hash):
        rendezvous hashing over the brokers not avoided, so a key stays on its broker while
        that broker lives, and when it fails only its keys move (to the next best broker),
        back when it returns.  None when every broker is avoided."""
        best: Optional[Broker] = None
        best_weight = b""
        encoded = key.encode("utf-8", "surrogatepass")
        for broker in self.brokers:
            if broker.avoid_until > now:
                continue
            weight = hashlib.blake2b(encoded, digest_size=8, key=broker.url.encode("utf-8")[:64]).digest()
            if best is None or weight > best_weight:
                best, best_weight = broker, weight
        return best

    def broker_stats(self, now: float, is_blocked: Callable[[Broker], bool]) -> tuple[BrokerStats, ...]:
        stats = []
        for broker in self.brokers:
            avoided_for = 0.0
            if broker.avoid_until > now:
                state, avoided_for = "failed", broker.avoid_until - now
            elif is_blocked(broker):
                state = "blocked"
            elif self.is_slow(broker, now):
                state, avoided_for = "slow", max(broker.slow_until - now, 0.0)
            else:
                state = "available"
            error = broker.last_error
            stats.append(BrokerStats(
                broker.url, state, broker.connection is not None and broker.usable(), broker.sent,
                broker.confirmed, broker.failed, broker.latency, broker.latency_avg, avoided_for,
                broker.failures, None if error is None else f"{type(error).__name__}: {error}",
            ))
        return tuple(stats)


def retryable(error: BaseException, retry_on_return: bool) -> bool:
    if isinstance(error, MessageReturned):
        return retry_on_return
    if isinstance(error, PublishUnconfirmed):
        cause = error.cause
        if isinstance(cause, ChannelClosed) and cause.by_broker and cause.reply_code in _FINAL_CODES:
            return False
        return True
    return isinstance(error, (PublishNacked, AMQPConnectionError, ChannelClosed, InvalidStateError, OSError))


def backoff(attempt: int, first: float, cap: float, rand: random.Random) -> float:
    """The back-off before retry ``attempt`` (1, 2, ...): exponential from ``first``, capped
    at ``cap``, with full jitter in its upper half."""
    base = min(first * 2.0 ** (attempt - 1), cap)
    return base * (0.5 + 0.5 * rand.random())
