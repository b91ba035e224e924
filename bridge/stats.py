"""The bridge's counters, and the rate of forwarding over the last few seconds."""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from typing import Optional

_RATE_WINDOW = 5.0  # seconds of samples behind msg/s


@dataclasses.dataclass(frozen=True)
class BridgeStats:
    """A snapshot of one direction of a bridge (or the sum of both, see ``Bridge.stats``).

    ``received``: deliveries from the source (redeliveries included); ``forwarded``:
    published to the destination and, in on-confirm mode, confirmed by it; ``acked``:
    acks sent to the source (filtered, suppressed and hop-dropped ones included; an ack
    for a delivery from before a lost source connection is void and the message comes
    again; in no-ack mode the broker acks on delivery and this stays 0); ``suppressed``: not
    forwarded because the path already names the destination (a loop); ``hops_dropped``:
    not forwarded because they crossed ``max_hops`` bridges; ``filtered``: not forwarded
    because of include/exclude; ``redelivered``: deliveries the source flagged as
    redelivered (a message that may be at the destination already: a possible
    duplicate); ``requeued``: sent back to the source because the destination did not
    confirm them (a refusal after its back-off, or its connection was lost);
    ``returned``: basic.returns from the destination (unroutable: stored nowhere);
    ``nacked``: publishes the destination refused with basic.nack (``reject-publish``);
    ``dead_lettered``: refused too often, dead-lettered at the source; ``dropped``:
    refused too often, acked without forwarding (only with ``refused="drop"``);
    ``backed_off``: refused deliveries held back before going back to the source;
    ``paused``: times the direction stopped publishing for a while after a refusal;
    ``in_flight``: received, not yet settled at the source (held ones included);
    ``msg_per_s``: forwarded per second over the last seconds; ``without_demand``: with
    ``demand``, the queues not consumed now because the destination has no consumer on
    them (draining ones included).
    """

    received: int = 0
    forwarded: int = 0
    acked: int = 0
    suppressed: int = 0
    looped: int = 0
    hops_dropped: int = 0
    filtered: int = 0
    redelivered: int = 0
    requeued: int = 0
    returned: int = 0
    nacked: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    backed_off: int = 0
    paused: int = 0
    in_flight: int = 0
    msg_per_s: float = 0.0
    without_demand: int = 0

    def __add__(self, other: "BridgeStats") -> "BridgeStats":
        return BridgeStats(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def line(self) -> str:
        """One line for logs and the command's display."""
        looped = f"looped {self.looped}  " if self.looped else ""
        return (
            f"forwarded {self.forwarded}  acked {self.acked}  in flight {self.in_flight}  "
            f"suppressed {self.suppressed}  {looped}hops-dropped {self.hops_dropped}  filtered {self.filtered}  "
            f"redelivered {self.redelivered}  requeued {self.requeued}  returned {self.returned}  "
            f"nacked {self.nacked}  dead-lettered {self.dead_lettered}  dropped {self.dropped}  "
            f"backed-off {self.backed_off}  {self.msg_per_s:,.0f} msg/s"
            + (f"  without demand {self.without_demand}" if self.without_demand else "")
        )


class Counters:
    """Mutable counters of one direction, updated by the forwarder."""

    __slots__ = ("received", "forwarded", "acked", "suppressed", "looped", "hops_dropped", "filtered", "redelivered",
                 "requeued", "returned", "nacked", "dead_lettered", "dropped", "backed_off", "paused", "settled",
                 "_samples")

    def __init__(self) -> None:
        self.received = self.forwarded = self.acked = 0
        self.suppressed = self.looped = self.hops_dropped = self.filtered = 0
        self.redelivered = self.requeued = self.settled = 0
        self.returned = self.nacked = self.dead_lettered = self.dropped = self.backed_off = self.paused = 0
        self._samples: deque[tuple[float, int]] = deque()

    def rate(self, now: Optional[float] = None) -> float:
        now = time.monotonic() if now is None else now
        samples = self._samples
        samples.append((now, self.forwarded))
        while len(samples) > 2 and now - samples[1][0] >= _RATE_WINDOW:
            samples.popleft()
        first_t, first_n = samples[0]
        if now - first_t <= 0:
            return 0.0
        return (self.forwarded - first_n) / (now - first_t)

    def snapshot(self) -> BridgeStats:
        return BridgeStats(
            received=self.received,
            forwarded=self.forwarded,
            acked=self.acked,
            suppressed=self.suppressed,
            looped=self.looped,
            hops_dropped=self.hops_dropped,
            filtered=self.filtered,
            redelivered=self.redelivered,
            requeued=self.requeued,
            returned=self.returned,
            nacked=self.nacked,
            dead_lettered=self.dead_lettered,
            dropped=self.dropped,
            backed_off=self.backed_off,
            paused=self.paused,
            in_flight=self.received - self.settled,
            msg_per_s=self.rate(),
        )
