"""The Producer's policy: which broker takes the next batch, which errors a retry may cure,
how long to back off before it; the record of each attempt.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Optional

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


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One try of a send: the broker (URL without password) and how it ended."""

    broker: str
    error: BaseException
    at: float  # time.monotonic()


class Broker:
    """One URL of the Producer: its connection and channels once open, and its avoidance."""

    def __init__(self, index: int, params: ConnectionParameters) -> None:
        self.index = index
        self.params = params
        self.url = params.display_url
        self.connection: Any = None
        self.channel: Any = None  # confirm mode
        self.oneway_channel: Any = None
        self.failures = 0  # consecutive
        self.avoid_until = 0.0
        self.last_error: Optional[BaseException] = None

    def usable(self) -> bool:
        return self.connection is not None and self.connection.is_open

    def blocked_reason(self) -> str:
        """Why the broker blocks the connection (connection.blocked's reason)."""
        core = getattr(self.connection, "_core", None)
        return str(getattr(core, "blocked", None) or "blocked")

    def __repr__(self) -> str:
        return f"<Broker {self.url} failures={self.failures}>"


class BrokerSelector:
    """Picks the broker for the next batch.

    ``round_robin``: the usable brokers in turn; ``pinned``: the first usable broker in the
    order given, the next ones only while it is avoided (failover), back to it once its
    avoidance is over.  A broker that failed is avoided for ``avoid_backoff`` seconds,
    doubled at each consecutive failure up to ``avoid_backoff_max``; a broker whose
    connection is blocked (connection.blocked) is used only when every other one is
    blocked or avoided too.
    """

    def __init__(self, brokers: list[Broker], policy: str, avoid_backoff: float, avoid_backoff_max: float) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.brokers = brokers
        self.policy = policy
        self.avoid_backoff = avoid_backoff
        self.avoid_backoff_max = avoid_backoff_max
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

    def choose(self, now: float, is_blocked: Callable[[Broker], bool]) -> tuple[Optional[Broker], float]:
        """(broker, 0) or (None, seconds until one may be tried again)."""
        n = len(self.brokers)
        if self.policy == ROUND_ROBIN:
            order = [self.brokers[(self._next + i) % n] for i in range(n)]
        else:
            order = self.brokers
        allowed = [b for b in order if b.avoid_until <= now]
        if not allowed:
            return None, min(b.avoid_until for b in self.brokers) - now
        chosen = next((b for b in allowed if not is_blocked(b)), allowed[0])
        if self.policy == ROUND_ROBIN:
            self._next = (chosen.index + 1) % n
        return chosen, 0.0


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
