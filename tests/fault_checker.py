"""A queue checker in the manner of Jepsen's: every message carries a unique id, the test
records what each send reported, and after the fault is healed the queue is drained and
compared with those reports.

    check = FaultChecker("a partition client|node1", "aio")
    body = check.body(n)                 # unique id of send n, the message's body
    check.confirmed(n) / check.failed(n, exc) / check.unsettled(n)
    check.fault_started(); ...; check.resumed()     # the first success after the fault
    report = check.report(drained_bodies)
    report.line()       # one line: the scenario's counts
    report.verify()     # AssertionError naming what broke the guarantees

What the counts mean: ``missing``: reported confirmed but not in the queue (must be 0:
the one thing a confirm promises); ``failed_present``: reported failed but stored anyway
(allowed: a confirm lost with the connection); ``duplicates``: stored more than once
(allowed: at-least-once); ``unsettled``: sends whose outcome never came (must be 0:
nothing hangs); ``unknown``: stored bodies no send produced (must be 0); ``resume_s``:
from the fault to the first send confirmed after it.
"""
from __future__ import annotations

import collections
import dataclasses
import time
import uuid
from typing import Iterable, Optional

__all__ = ["FaultChecker", "Report"]


@dataclasses.dataclass
class Report:
    scenario: str
    transport: str
    sent: int
    confirmed: int
    failed: int
    unsettled: int
    stored: int
    missing: int
    failed_present: int
    duplicates: int
    unknown: int
    resume_s: Optional[float]
    extra: dict = dataclasses.field(default_factory=dict)
    missing_ids: list = dataclasses.field(default_factory=list, repr=False)
    failure_kinds: dict = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        resume = "n/a" if self.resume_s is None else f"{self.resume_s:.2f}"
        fields = [
            f"sent={self.sent}", f"confirmed={self.confirmed}", f"failed={self.failed}",
            f"unsettled={self.unsettled}", f"stored={self.stored}", f"missing={self.missing}",
            f"failed_present={self.failed_present}", f"duplicates={self.duplicates}",
            f"unknown={self.unknown}", f"resume_s={resume}",
        ]
        fields += [f"{k}={v}" for k, v in self.extra.items()]
        if self.failure_kinds:
            fields.append("failures=" + ",".join(f"{k}:{v}" for k, v in sorted(self.failure_kinds.items())))
        return f"[net-fault] {self.scenario} / {self.transport}: " + " ".join(fields)

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("missing_ids")
        return out

    def verify(self) -> None:
        problems = []
        if self.missing:
            problems.append(f"{self.missing} sends reported confirmed are not in the queue "
                            f"(first ids: {self.missing_ids[:10]})")
        if self.unsettled:
            problems.append(f"{self.unsettled} sends never reported an outcome")
        if self.unknown:
            problems.append(f"{self.unknown} stored messages match no send")
        if self.confirmed + self.failed + self.unsettled != self.sent:
            problems.append(f"outcomes ({self.confirmed} + {self.failed} + {self.unsettled}) do not add up to "
                            f"{self.sent} sends")
        if problems:
            raise AssertionError(f"{self.scenario} / {self.transport}: " + "; ".join(problems) + f"\n{self.line()}")


class FaultChecker:
    def __init__(self, scenario: str, transport: str) -> None:
        self.scenario = scenario
        self.transport = transport
        self.run_id = uuid.uuid4().hex[:8]
        self._prefix = f"{self.run_id}:".encode()
        self.outcome: dict[int, str] = {}
        self.sends = 0
        self.failure_kinds: collections.Counter = collections.Counter()
        self._fault_at: Optional[float] = None
        self._resumed_at: Optional[float] = None
        self.extra: dict = {}

    # ------------------------------------------------------------------ sends

    def body(self, n: int) -> bytes:
        """The body of send ``n``: its unique id (``<run>:<n>``)."""
        self.sends = max(self.sends, n + 1)
        return self._prefix + b"%d" % n

    def ident(self, body: bytes) -> Optional[int]:
        """The send a stored body came from, or None if it is not of this run."""
        body = bytes(body)
        if not body.startswith(self._prefix):
            return None
        try:
            return int(body[len(self._prefix):])
        except ValueError:
            return None

    def confirmed(self, n: int) -> None:
        self.outcome[n] = "confirmed"
        if self._fault_at is not None and self._resumed_at is None:
            self._resumed_at = time.monotonic()

    def failed(self, n: int, error: BaseException) -> None:
        self.outcome[n] = "failed"
        self.failure_kinds[type(error).__name__] += 1

    def unsettled(self, n: int) -> None:
        self.outcome[n] = "unsettled"

    # ------------------------------------------------------------------ timing

    def fault_started(self) -> None:
        if self._fault_at is None:
            self._fault_at = time.monotonic()

    def resumed(self) -> None:
        """The client works again (first success after the fault), if not known yet."""
        if self._fault_at is not None and self._resumed_at is None:
            self._resumed_at = time.monotonic()

    @property
    def resume_s(self) -> Optional[float]:
        if self._fault_at is None or self._resumed_at is None:
            return None
        return self._resumed_at - self._fault_at

    # ------------------------------------------------------------------ the verdict

    def report(self, stored_bodies: Iterable[bytes]) -> Report:
        counts: collections.Counter = collections.Counter()
        unknown = 0
        for body in stored_bodies:
            n = self.ident(body)
            if n is None:
                unknown += 1
            else:
                counts[n] += 1
        by_outcome: dict[str, set] = {"confirmed": set(), "failed": set(), "unsettled": set()}
        for n, what in self.outcome.items():
            by_outcome[what].add(n)
        # a send without a recorded outcome never reported one: unsettled
        silent = set(range(self.sends)) - set(self.outcome)
        by_outcome["unsettled"] |= silent
        missing = sorted(n for n in by_outcome["confirmed"] if n not in counts)
        return Report(
            scenario=self.scenario,
            transport=self.transport,
            sent=self.sends,
            confirmed=len(by_outcome["confirmed"]),
            failed=len(by_outcome["failed"]),
            unsettled=len(by_outcome["unsettled"]),
            stored=sum(counts.values()),
            missing=len(missing),
            failed_present=sum(1 for n in by_outcome["failed"] if n in counts),
            duplicates=sum(c - 1 for c in counts.values() if c > 1),
            unknown=unknown,
            resume_s=self.resume_s,
            extra=dict(self.extra),
            missing_ids=missing[:50],
            failure_kinds=dict(self.failure_kinds),
        )
