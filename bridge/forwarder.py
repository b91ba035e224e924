"""What a bridge does with each delivery, written once and free of I/O.

A transport (``runner.py``) hands the :class:`Forwarder` the deliveries of one source
consumer in the order they arrived, and the destination's answers (confirms, returns) in
the order they came, and applies the actions it answers; the forwarder decides per
message (filter, loop guard, hop limit), builds the frames to publish and keeps the ack
bookkeeping of the ack mode:

- ``on-confirm``: a message is acked at the source only once the destination stored it:
  confirmed (basic.ack) and not returned.  Every publish is ``mandatory``, because a
  broker confirms a message it could not route (it stores it nowhere) and says so only
  with a basic.return.  The forwarder numbers the publishes as the destination's channel
  does (confirm seqnos from 1, restarted with ``restart_seqnos`` when the channel is
  reopened), matches each basic.return to the publish it returns (by routing key,
  properties and body: a return names no seqno) and settles each delivery from the
  verdict of its own publish.  Deliveries are kept in a ledger in delivery-tag order,
  one entry per batch published together; settled entries at its head are acked with
  one ``multiple`` ack up to the last of them.
- ``on-publish``: acked (``multiple``) as soon as the batch is written to the
  destination's connection.  A destination lost before it stored them, a refusal or a
  return loses them (returns are still counted and logged).
- ``no-ack``: the source acks on delivery; nothing to do.
- ``auto`` (as ActiveMQ forwards): per message, persistent ones (``delivery_mode`` 2) as
  on-confirm, the others as on-publish.  The destination's channel confirms them all
  (confirms are per channel), so every publish keeps its seqno; the transient ones (and
  those not forwarded) are acked one by one as soon as the batch is written, the
  persistent ones wait in the ledger.  A ``multiple`` ack is used for a transient batch
  only when nothing before it is unsettled.

A message the destination refused (returned: no route; nacked: a full queue with
``reject-publish``, or any other refusal) is a *refusal*; what follows is the
:class:`Refused` policy: ``requeue`` (the default) sends it back to the source after a
back-off that grows with the message's attempts, for ever; ``dead-letter`` and ``drop``
do the same up to ``max_attempts`` attempts, then dead-letter it at the source (to a
named exchange, or with ``basic.nack(requeue=False)`` to the source queue's own
dead-letter exchange) or ack it without forwarding (counted ``dropped``).  While a
message waits out its back-off it stays unacked at the source (it counts against the
prefetch, which is what keeps a refusing destination from becoming a hot loop).
Refusals also pause the whole direction: ``paused_until`` grows with the destination's
consecutive refusals and is cleared by its next clean confirm.  A publish the destination
never answered (its connection was lost) is not a refusal: it goes back to the source at
once, as before.

Messages that are not forwarded because the user said so (filtered, dropped by the hop
limit) are acked with the others: they leave the source queue.

A message whose path already names the destination has been there: forwarding it would
make a loop.  From a queue the bridge owns (an exchange source: a subscription queue that
only feeds the bridge) it is an echo of what the bridge forwarded, acked and counted
``suppressed``.  From any other queue it is never acked away: the forwarder counts it
``looped``, requeues it (``basic.nack`` with requeue) and from then on forwards nothing:
every later delivery goes back too, what was already published settles as usual, and
:attr:`Forwarder.loop` says why, so that the transport stops the bridge.  (In no-ack
mode the broker dropped the message when it delivered it: it is counted and reported,
not recovered.)  The same happens when a probe this bridge published at start
(``probe_token``, see ``runner.py``) comes back into its source; a probe of another
bridge is acked (it is nobody's message) and logged.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from itertools import repeat
from typing import Any, Optional, Sequence, Union

from amqwire.codec import BasicProperties

from .filters import TopicFilter
from .frames import PublishFrames
from .path import PATH_HEADER, PROBE_HEADER, PathWriter, read_path
from .stats import Counters

log = logging.getLogger("amqwire.bridge")

class AckMode(str, enum.Enum):
    """Shovel's ack modes."""

    ON_CONFIRM = "on-confirm"
    ON_PUBLISH = "on-publish"
    NO_ACK = "no-ack"
    AUTO = "auto"  # persistent messages on-confirm, transient ones on-publish

    @property
    def confirms(self) -> bool:
        """Whether the destination's confirms settle (some) deliveries."""
        return self is AckMode.ON_CONFIRM or self is AckMode.AUTO


class Refused(str, enum.Enum):
    """What happens to a message the destination refused (returned or nacked)."""

    REQUEUE = "requeue"
    DEAD_LETTER = "dead-letter"
    DROP = "drop"


@dataclasses.dataclass(frozen=True)
class BackOff:
    """Delays after refusals: ``initial`` seconds after the first, doubling, at most
    ``maximum``."""

    initial: float = 0.5
    maximum: float = 30.0

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.maximum >= self.initial):
            raise ValueError(f"back-off needs 0 < initial <= maximum, not {self.initial!r} and {self.maximum!r}")

    def delay(self, attempt: int) -> float:
        """The wait after the ``attempt``-th refusal in a row (1, 2, ...)."""
        if attempt > 62:
            return self.maximum
        return float(min(self.maximum, self.initial * (1 << max(attempt - 1, 0))))


#: Why a message was dead-lettered, in the headers of what the bridge publishes to the
#: dead-letter exchange: its refusals, the last one's reply code and text, the bridge.
ATTEMPTS_HEADER = "x-amqwire-attempts"
REPLY_CODE_HEADER = "x-amqwire-reply-code"
REPLY_TEXT_HEADER = "x-amqwire-reply-text"
BRIDGE_HEADER = "x-amqwire-bridge"


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A refused delivery to publish to the dead-letter exchange, with ``headers`` added."""

    message: Any
    headers: dict[str, Any]


# Actions for the transport, applied in order on the source channel: (op, delivery tag, arg).
ACK = "ack"  # arg: multiple
NACK = "nack"  # requeue; arg False
REJECT = "reject"  # basic.nack(requeue=False): to the source queue's dead-letter exchange; arg False
DEAD_LETTER = "dead-letter"  # publish arg (a DeadLetter) to the dead-letter exchange at the source, then call
# dead_lettered(tag, ok)
Action = tuple[str, int, Any]

RETURNED = "returned"
NACKED = "nacked"
LOST = "lost"  # the destination's connection went before it answered: not a refusal


class Batch:
    """Deliveries handled together: ``frames`` publishes ``count`` of them."""

    __slots__ = ("frames", "count", "forwarded_tags", "skipped_tags", "left_tags", "last_tag", "done", "messages",
                 "properties", "first_seqno", "unresolved", "refused", "early", "ack_tag")

    def __init__(self) -> None:
        self.frames: bytes = b""
        self.count = 0
        self.forwarded_tags: list[int] = []
        self.skipped_tags: list[int] = []
        self.left_tags: list[int] = []  # not forwarded and not acked: back to the source (a loop)
        self.last_tag = 0
        self.done = False
        self.messages: list[Any] = []  # the forwarded deliveries, in publish order
        self.properties: list[bytes] = []  # the property bytes each was published with
        self.first_seqno = 0
        self.unresolved = 0
        self.refused: dict[int, tuple[str, int, str]] = {}  # index -> (RETURNED/NACKED/LOST, reply code, text)
        self.early: frozenset[int] = frozenset()  # auto: indexes of the transient ones, acked once written
        self.ack_tag = 0  # the highest tag the ledger still has to ack for this batch (0: none)

    def __repr__(self) -> str:
        return f"<Batch {self.count} to forward, {len(self.skipped_tags)} skipped, last tag {self.last_tag}>"


class _Held:
    __slots__ = ("due", "message")

    def __init__(self, due: float, message: Any) -> None:
        self.due = due
        self.message = message


@dataclasses.dataclass(frozen=True)
class LoopFound:
    """Why the forwarder stopped: a delivery that came back (``path``: the brokers it
    left through bridges) or this bridge's probe (``probe``)."""

    delivery_tag: int
    message_id: Optional[str]
    path: tuple[str, ...]
    probe: bool = False


_DONE = object()
_ATTEMPTS_KEPT = 65536
RETURN_LOG_INTERVAL = 10.0  # seconds between two warnings for the same kind of return


class Forwarder:
    """One direction of a bridge: source queue -> destination exchange.

    ``routing_key`` None forwards with each message's own routing key.  ``source_name``
    and ``destination_name`` name the two brokers in ``x-amqwire-path``.  ``refused``,
    ``max_attempts``, ``dead_letter_exchange`` and ``backoff``: what to do with a message
    the destination refused (see the module's docstring); ``dead_letter_exchange`` None
    dead-letters with ``basic.nack(requeue=False)``.
    """

    def __init__(
        self,
        *,
        exchange: str,
        routing_key: Optional[str],
        source_name: str,
        destination_name: str,
        ack_mode: AckMode,
        max_hops: Optional[int] = None,
        topic_filter: Optional[TopicFilter] = None,
        channel_id: int = 1,
        frame_max: int = 131072,
        refused: Union[Refused, str] = Refused.REQUEUE,
        max_attempts: int = 5,
        dead_letter_exchange: Optional[str] = None,
        backoff: BackOff = BackOff(),
        label: str = "bridge",
        owned_source: bool = False,
        probe_token: Optional[str] = None,
        name: str = "amqwire.bridge",
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.source_name = source_name
        self.destination_name = destination_name
        self.ack_mode = AckMode(ack_mode)
        self.max_hops = max_hops
        self.filter = topic_filter if topic_filter is not None and topic_filter.active else None
        self.frames = PublishFrames(channel_id, frame_max, mandatory=True)
        self.paths = PathWriter(source_name)
        self.counters = Counters()
        self.refused_policy = Refused(refused)
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive int, not {max_attempts!r}")
        self.max_attempts = max_attempts
        self.dead_letter_exchange = dead_letter_exchange
        self.backoff = backoff
        self.label = label
        self.owned_source = owned_source
        self.name = name
        self.probe_token = probe_token
        self.loop: Optional[LoopFound] = None  # set once: nothing is forwarded after it
        self.paused_until = 0.0  # no publishing before (time.monotonic()): the destination refuses
        self._refusal_streak = 0
        self._ledger: list[Batch] = []  # on-confirm: published, not yet settled, in tag order
        self._head = 0
        self._slots: "list[Any]" = []  # on-confirm: the batch of each unresolved seqno, from _base
        self._slot_head = 0
        self._base = 1  # the seqno of _slots[_slot_head]
        self._held: dict[int, _Held] = {}  # refused, waiting out their back-off, unacked at the source
        self._dead_lettering: dict[int, Any] = {}  # tag -> message, published to the dead-letter exchange
        self._attempts: dict[int, int] = {}  # refusals so far, by the message's content
        self._unmatched_return: Optional[tuple[int, str]] = None
        self._return_log: dict[tuple[int, str, str], tuple[Optional[float], int]] = {}

    @property
    def unsettled(self) -> int:
        """Deliveries received and not yet settled at the source."""
        return self.counters.received - self.counters.settled

    @property
    def held(self) -> int:
        """Refused deliveries waiting out their back-off."""
        return len(self._held)

    @property
    def next_due(self) -> Optional[float]:
        """When the first held delivery is due to go back to the source."""
        return min((h.due for h in self._held.values()), default=None)

    def prepare(self, messages: Sequence[Any]) -> Batch:
        """Decide for each delivery (in arrival order) and build the frames to publish."""
        batch = Batch()
        counters = self.counters
        counters.received += len(messages)
        parts: list[Any] = []
        forwarded = batch.forwarded_tags
        skipped = batch.skipped_tags
        kept = batch.messages
        kept_properties = batch.properties
        flt = self.filter
        destination = self.destination_name
        max_hops = self.max_hops
        fixed_key = self.routing_key
        exchange = self.exchange
        append = self.frames.append
        add_hop = self.paths.add_hop
        per_message = self.ack_mode is AckMode.AUTO
        transient: list[int] = []
        left = batch.left_tags
        for message in messages:
            tag = message.delivery_tag
            if message.redelivered:
                counters.redelivered += 1
            properties = message.properties
            headers = properties.headers
            if headers and PROBE_HEADER in headers:
                self._probe(message, headers[PROBE_HEADER])
                skipped.append(tag)  # a probe is nobody's message: removed
                continue
            if self.loop is not None:
                left.append(tag)
                continue
            key = message.routing_key
            if flt is not None and not flt.allows(key):
                counters.filtered += 1
                skipped.append(tag)
                continue
            path: tuple[str, ...] = ()
            if headers and PATH_HEADER in headers:
                path = tuple(read_path(properties))
                if destination in path:
                    if self.owned_source:
                        counters.suppressed += 1
                        skipped.append(tag)
                    else:
                        self._looped(message, path)
                        left.append(tag)
                    continue
                if max_hops is not None and len(path) >= max_hops:
                    counters.hops_dropped += 1
                    skipped.append(tag)
                    continue
            elif max_hops is not None and max_hops <= 0:
                counters.hops_dropped += 1
                skipped.append(tag)
                continue
            wire = add_hop(properties, path)
            append(parts, exchange, key if fixed_key is None else fixed_key, wire, message.body)
            if per_message and properties.delivery_mode != 2:
                transient.append(len(forwarded))
            forwarded.append(tag)
            kept.append(message)
            kept_properties.append(wire)
        # The highest tag this forwarder acks: never a requeued one (a ``multiple`` ack
        # naming a tag no longer unacked closes the channel: 406 unknown delivery tag).
        batch.last_tag = max(forwarded[-1] if forwarded else 0, skipped[-1] if skipped else 0)
        batch.ack_tag = batch.last_tag
        if transient:
            batch.early = frozenset(transient)
        batch.count = len(forwarded)
        batch.frames = b"".join(parts)
        return batch

    def _looped(self, message: Any, path: tuple[str, ...]) -> None:
        self.counters.looped += 1
        if self.loop is None:
            self.loop = LoopFound(message.delivery_tag, message.properties.message_id, path)
            log.info("%s: delivery %d (message id %r) has been on the destination %s already (path %s): forwarding "
                      "it would loop; it stays in the source queue and the bridge stops", self.label,
                      message.delivery_tag, message.properties.message_id, self.destination_name, " -> ".join(path))

    def _probe(self, message: Any, token: Any) -> None:
        if isinstance(token, bytes):
            token = token.decode("utf-8", "replace")
        if self.probe_token is not None and token == self.probe_token:
            if self.loop is None:
                self.loop = LoopFound(message.delivery_tag, None, tuple(read_path(message.properties)), probe=True)
                log.info("%s: the probe this bridge published to its destination came back into its source queue: "
                          "a loop; the bridge stops", self.label)
            return
        log.warning("%s: removed a loop probe of another bridge (%r) from the source queue: that bridge's destination "
                    "routes into this queue", self.label, token)

    def _requeue_left(self, batch: Batch) -> list[Action]:
        """Requeues for what a loop leaves at the source, before any ``multiple`` ack that
        would cover their tags."""
        left = batch.left_tags
        if not left:
            return []
        counters = self.counters
        counters.settled += len(left)
        counters.requeued += len(left)
        if self.ack_mode is AckMode.NO_ACK:
            log.error("%s: no-ack mode: the broker dropped %d deliveries it gave this bridge that cannot be forwarded "
                      "(a loop): they are lost", self.label, len(left))
            return []
        return [(NACK, tag, False) for tag in left]

    def sent(self, batch: Batch) -> list[Action]:
        """The batch was written to the destination (or had nothing to write).
        on-confirm: it waits in the ledger for its confirms; the others settle now."""
        if batch.left_tags:
            return self._requeue_left(batch) + self._sent(batch)
        return self._sent(batch)

    def _sent(self, batch: Batch) -> list[Action]:
        mode = self.ack_mode
        counters = self.counters
        if mode.confirms:
            actions = self._ack_early(batch) if mode is AckMode.AUTO else []
            if batch.count:
                batch.first_seqno = self._base + len(self._slots) - self._slot_head
                batch.unresolved = batch.count
                self._slots.extend(repeat(batch, batch.count))
            else:
                batch.done = True
            self._ledger.append(batch)
            return actions + self._release(0.0) if batch.done else actions
        counters.forwarded += batch.count
        batch.messages = []
        batch.properties = []
        settled = batch.count + len(batch.skipped_tags)
        counters.settled += settled
        if mode is AckMode.NO_ACK or not settled:
            return []
        counters.acked += settled
        return [(ACK, batch.last_tag, True)]

    def _ack_early(self, batch: Batch) -> list[Action]:
        """auto: ack the transient deliveries of a batch just written, and those not forwarded."""
        early = batch.early
        tags = [tag for index, tag in enumerate(batch.forwarded_tags) if index in early] if early else []
        tags += batch.skipped_tags
        batch.skipped_tags = []
        persistent = [tag for index, tag in enumerate(batch.forwarded_tags) if index not in early]
        batch.ack_tag = persistent[-1] if persistent else 0
        if not tags:
            return []
        counters = self.counters
        counters.forwarded += len(early)
        counters.acked += len(tags)
        counters.settled += len(tags)
        if not persistent and self._head == len(self._ledger) and not self._held and not self._dead_lettering:
            return [(ACK, batch.last_tag, True)]  # nothing before it is unacked
        return [(ACK, tag, False) for tag in sorted(tags)]

    # ------------------------------------------------------------------ the destination's answers

    def returned(self, routing_key: str, properties: Any, body: bytes, reply_code: int, reply_text: str,
                 now: float = 0.0) -> bool:
        """A basic.return from the destination.  on-confirm: marks the publish it returns
        (its confirm follows); False when it matches no unconfirmed publish.  Logged with
        the broker's reason: the first of each reason and routing key, then once every
        ``RETURN_LOG_INTERVAL`` seconds with the count since."""
        self.counters.returned += 1
        reason = (reply_code, reply_text, routing_key)
        last, since = self._return_log.get(reason, (None, 0))
        if last is None or now - last >= RETURN_LOG_INTERVAL:
            more = f" ({since} more since the last report)" if since else ""
            log.warning("%s: the destination returned a message: %d %s (routing key %r)%s", self.label, reply_code,
                        reply_text, routing_key, more)
            if len(self._return_log) >= 1024:
                self._return_log.clear()
            self._return_log[reason] = (now, 0)
        else:
            self._return_log[reason] = (last, since + 1)
        if not self.ack_mode.confirms:
            return False
        wire = getattr(properties, "wire", None)
        fixed_key = self.routing_key
        slots = self._slots
        seqno = self._base
        for i in range(self._slot_head, len(slots)):
            batch = slots[i]
            if batch is not _DONE:
                index = seqno - batch.first_seqno
                message = batch.messages[index]
                if (index not in batch.refused and message.body == body
                        and (message.routing_key if fixed_key is None else fixed_key) == routing_key):
                    sent = batch.properties[index]
                    if sent == wire or BasicProperties.decode(sent) == properties:
                        batch.refused[index] = (RETURNED, reply_code, reply_text)
                        return True
            seqno += 1
        # RabbitMQ sends a message's basic.return just before its basic.ack: the next
        # confirm's tag is that message.
        self._unmatched_return = (reply_code, reply_text)
        return False

    def confirm(self, ack: bool, tag: int, multiple: bool, now: float) -> list[Action]:
        """on-confirm: a basic.ack (``ack``) or basic.nack of the destination, as it came."""
        slots = self._slots
        head = self._slot_head
        base = self._base
        unmatched = self._unmatched_return
        self._unmatched_return = None
        clean = True
        touched = False
        if multiple:
            upto = min(tag - base + head + 1, len(slots))
            for i in range(head, upto):
                batch = slots[i]
                if batch is _DONE:
                    continue
                touched = True
                seqno = base + i - head
                clean &= self._resolve(batch, seqno, ack, unmatched if seqno == tag else None)
            if upto > head:
                self._base = base + upto - head
                self._slot_head = head = upto
        else:
            i = head + tag - base
            if head <= i < len(slots) and slots[i] is not _DONE:
                touched = True
                clean = self._resolve(slots[i], tag, ack, unmatched)
                slots[i] = _DONE
        while head < len(slots) and slots[head] is _DONE:
            head += 1
            self._base += 1
        self._slot_head = head
        if head > 4096 and head * 2 > len(slots):
            del slots[:head]
            self._slot_head = 0
        if not touched:
            return []
        if clean:
            self._refusal_streak = 0
        elif now >= self.paused_until:  # refusals of what was published before the pause count once
            self._refusal_streak += 1
            self.paused_until = now + self.backoff.delay(self._refusal_streak)
            self.counters.paused += 1
        return self._release(now)

    def _resolve(self, batch: Batch, seqno: int, ack: bool, unmatched: Optional[tuple[int, str]]) -> bool:
        index = seqno - batch.first_seqno
        clean = True
        if unmatched is not None and index not in batch.refused:
            batch.refused[index] = (RETURNED, unmatched[0], unmatched[1])
        if not ack:
            self.counters.nacked += 1
            batch.refused.setdefault(index, (NACKED, 0, "nacked by the destination"))
            clean = False
        elif index in batch.refused:
            clean = False
        batch.unresolved -= 1
        if not batch.unresolved:
            batch.done = True
        return clean

    def lost(self, batch: Batch) -> list[Action]:
        """on-confirm: the destination's channel or connection went before it answered
        for the whole batch: what it did not answer goes back to the source at once."""
        if batch.done or not batch.count:
            return []
        slots = self._slots
        start = self._slot_head + batch.first_seqno - self._base
        for i in range(max(start, self._slot_head), min(start + batch.count, len(slots))):
            if slots[i] is batch:
                batch.refused.setdefault(i - start, (LOST, 0, "the destination's connection was lost"))
                slots[i] = _DONE
        batch.unresolved = 0
        batch.done = True
        return self._release(0.0)

    def restart_seqnos(self) -> list[Action]:
        """The destination's channel was reopened: its seqnos start again at 1.  Whatever
        it had not answered is lost (and goes back to the source)."""
        actions: list[Action] = []
        for batch in {id(b): b for b in self._slots[self._slot_head:] if b is not _DONE}.values():
            actions += self.lost(batch)
        self._slots = []
        self._slot_head = 0
        self._base = 1
        self._unmatched_return = None
        return actions

    # ------------------------------------------------------------------ settling at the source

    def _release(self, now: float) -> list[Action]:
        """Acks (and requeues, holds, dead-letters) for the settled batches at the head of
        the ledger, in delivery order."""
        ledger = self._ledger
        counters = self.counters
        actions: list[Action] = []
        clean: list[Batch] = []
        i = self._head
        while i < len(ledger) and ledger[i].done:
            batch = ledger[i]
            i += 1
            if not batch.refused:
                clean.append(batch)
                counters.forwarded += batch.count - len(batch.early)
                if self._attempts:
                    for message in batch.messages:
                        self._attempts.pop(_content_key(message), None)
                batch.messages = []
                batch.properties = []
                continue
            self._ack_clean(clean, actions)
            clean = []
            refused = batch.refused
            for index, tag in enumerate(batch.forwarded_tags):
                if index in batch.early:
                    continue  # acked when written, whatever the destination said
                verdict = refused.get(index)
                if verdict is None:
                    counters.forwarded += 1
                    actions.append((ACK, tag, False))
                    counters.acked += 1
                    counters.settled += 1
                else:
                    self._refused(tag, batch.messages[index], verdict, now, actions)
            for tag in batch.skipped_tags:
                actions.append((ACK, tag, False))
            counters.acked += len(batch.skipped_tags)
            counters.settled += len(batch.skipped_tags)
            batch.messages = []
            batch.properties = []
        self._ack_clean(clean, actions)
        if i > 256 and i * 2 > len(ledger):
            del ledger[:i]
            i = 0
        self._head = i
        return actions

    def _ack_clean(self, batches: list[Batch], actions: list[Action]) -> None:
        """Ack batches settled without a refusal: one ``multiple`` ack, unless it would
        also ack a held delivery (then one ack each)."""
        if not batches:
            return
        counters = self.counters
        settled = sum(b.count - len(b.early) + len(b.skipped_tags) for b in batches)
        if not settled:
            return
        counters.acked += settled
        counters.settled += settled
        upto = max(b.ack_tag for b in batches)
        if not self._held and not self._dead_lettering:
            actions.append((ACK, upto, True))
            return
        lowest = min((*self._held, *self._dead_lettering))
        if lowest > upto:
            actions.append((ACK, upto, True))
            return
        for batch in batches:
            early = batch.early
            forwarded = [tag for index, tag in enumerate(batch.forwarded_tags) if index not in early]
            for tag in sorted((*forwarded, *batch.skipped_tags)):
                actions.append((ACK, tag, False))

    def _refused(self, tag: int, message: Any, verdict: tuple[str, int, str], now: float, actions: list[Action]) -> None:
        kind, code, text = verdict
        counters = self.counters
        if kind is LOST:
            actions.append((NACK, tag, False))
            counters.requeued += 1
            counters.settled += 1
            return
        key = _content_key(message)
        attempts = self._attempts.pop(key, 0) + 1
        policy = self.refused_policy
        reason = f"{code} {text}" if code else text
        if policy is not Refused.REQUEUE and attempts >= self.max_attempts:
            if policy is Refused.DROP:
                log.warning("%s: dropping delivery %d after %d refusals (last: %s)", self.label, tag, attempts, reason)
                actions.append((ACK, tag, False))
                counters.dropped += 1
                counters.acked += 1
                counters.settled += 1
            elif self.dead_letter_exchange is None:
                log.warning("%s: dead-lettering delivery %d at the source (the queue's dead-letter exchange) after "
                            "%d refusals (last: %s)", self.label, tag, attempts, reason)
                actions.append((REJECT, tag, False))
                counters.dead_lettered += 1
                counters.settled += 1
            else:
                log.warning("%s: dead-lettering delivery %d to exchange %r at the source after %d refusals "
                            "(last: %s)", self.label, tag, self.dead_letter_exchange, attempts, reason)
                self._dead_lettering[tag] = message
                actions.append((DEAD_LETTER, tag, DeadLetter(message, {
                    ATTEMPTS_HEADER: attempts, REPLY_CODE_HEADER: code, REPLY_TEXT_HEADER: text,
                    BRIDGE_HEADER: self.name})))
            return
        if len(self._attempts) >= _ATTEMPTS_KEPT:
            del self._attempts[next(iter(self._attempts))]
        self._attempts[key] = attempts
        delay = self.backoff.delay(attempts)
        log.info("%s: delivery %d refused (%s), attempt %d: back to the source in %.1f s", self.label, tag, reason,
                 attempts, delay)
        self._held[tag] = _Held(now + delay, message)
        counters.backed_off += 1

    def due(self, now: float) -> list[Action]:
        """Requeues for the held deliveries whose back-off is over."""
        if not self._held:
            return []
        ready = sorted(tag for tag, held in self._held.items() if held.due <= now)
        for tag in ready:
            del self._held[tag]
        self.counters.requeued += len(ready)
        self.counters.settled += len(ready)
        return [(NACK, tag, False) for tag in ready]

    def release_held(self) -> list[Action]:
        """Requeue every held delivery now (the bridge is stopping)."""
        return self.due(float("inf"))

    def dead_lettered(self, tag: int, ok: bool, now: float) -> list[Action]:
        """The publish of delivery ``tag`` to the dead-letter exchange was confirmed
        (``ok``) or not: then it goes back to the source after the longest back-off of
        its attempts (it has used them all: without the wait, a dead-letter exchange
        that refuses too would make a hot loop)."""
        message = self._dead_lettering.pop(tag, None)
        if message is None:
            return []
        counters = self.counters
        if ok:
            counters.dead_lettered += 1
            counters.acked += 1
            counters.settled += 1
            return [(ACK, tag, False)]
        delay = self.backoff.delay(self.max_attempts)
        log.warning("%s: the dead-letter exchange %r did not take delivery %d: back to the source in %.1f s",
                    self.label, self.dead_letter_exchange, tag, delay)
        self._held[tag] = _Held(now + delay, message)
        counters.backed_off += 1
        return []


def _content_key(message: Any) -> int:
    """A delivery's identity across its redeliveries (the source gives it a new tag)."""
    properties = message.properties
    wire = getattr(properties, "wire", None)
    return hash((message.routing_key, wire if wire is not None else repr(properties), message.body))
