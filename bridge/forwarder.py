"""What a bridge does with each delivery, written once and free of I/O.

A transport (``runner.py``) hands the :class:`Forwarder` the deliveries of one source
consumer in the order they arrived and applies what it answers; the forwarder decides
per message (filter, loop guard, hop limit), builds the frames to publish and keeps the
ack bookkeeping of the ack mode:

- ``on-confirm``: a message is acked at the source only once the destination confirmed
  it.  Deliveries are kept in a ledger in delivery-tag order, one entry per batch
  published together; settled entries at its head are acked with one ``multiple`` ack
  up to the last of them.  A batch the destination did not confirm (nacked, or its
  connection was lost) is nacked back to the source with requeue: the source delivers it
  again (flagged redelivered: it may be a duplicate at the destination), never lost.
- ``on-publish``: acked (``multiple``) as soon as the batch is written to the
  destination's connection.  A destination lost before it stored them loses them.
- ``no-ack``: the source acks on delivery; nothing to do.

Messages that are not forwarded (filtered, suppressed by the loop guard, dropped by the
hop limit) are acked with the others: they leave the source queue.
"""
from __future__ import annotations

import enum
from typing import Any, Optional, Sequence

from .filters import TopicFilter
from .frames import PublishFrames
from .path import PATH_HEADER, PathWriter, read_path
from .stats import Counters


class AckMode(str, enum.Enum):
    """Shovel's ack modes."""

    ON_CONFIRM = "on-confirm"
    ON_PUBLISH = "on-publish"
    NO_ACK = "no-ack"


# Actions for the transport, applied in order on the source channel.
ACK = "ack"  # (ACK, delivery_tag, multiple)
NACK = "nack"  # (NACK, delivery_tag, False): requeue


class Batch:
    """Deliveries handled together: ``frames`` publishes ``count`` of them."""

    __slots__ = ("frames", "count", "forwarded_tags", "skipped_tags", "last_tag", "done", "failed")

    def __init__(self) -> None:
        self.frames: bytes = b""
        self.count = 0
        self.forwarded_tags: list[int] = []
        self.skipped_tags: list[int] = []
        self.last_tag = 0
        self.done = False
        self.failed = False

    def __repr__(self) -> str:
        return f"<Batch {self.count} to forward, {len(self.skipped_tags)} skipped, last tag {self.last_tag}>"


class Forwarder:
    """One direction of a bridge: source queue -> destination exchange.

    ``routing_key`` None forwards with each message's own routing key.  ``source_name``
    and ``destination_name`` name the two brokers in ``x-amqwire-path``.
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
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.source_name = source_name
        self.destination_name = destination_name
        self.ack_mode = AckMode(ack_mode)
        self.max_hops = max_hops
        self.filter = topic_filter if topic_filter is not None and topic_filter.active else None
        self.frames = PublishFrames(channel_id, frame_max)
        self.paths = PathWriter(source_name)
        self.counters = Counters()
        self._ledger: list[Batch] = []  # on-confirm: published, not yet settled, in tag order
        self._head = 0

    @property
    def unsettled(self) -> int:
        """Deliveries received and not yet settled at the source."""
        return self.counters.received - self.counters.settled

    def prepare(self, messages: Sequence[Any]) -> Batch:
        """Decide for each delivery (in arrival order) and build the frames to publish."""
        batch = Batch()
        counters = self.counters
        counters.received += len(messages)
        parts: list[Any] = []
        forwarded = batch.forwarded_tags
        skipped = batch.skipped_tags
        flt = self.filter
        destination = self.destination_name
        max_hops = self.max_hops
        fixed_key = self.routing_key
        exchange = self.exchange
        append = self.frames.append
        add_hop = self.paths.add_hop
        for message in messages:
            tag = message.delivery_tag
            if message.redelivered:
                counters.redelivered += 1
            key = message.routing_key
            if flt is not None and not flt.allows(key):
                counters.filtered += 1
                skipped.append(tag)
                continue
            properties = message.properties
            headers = properties.headers
            path: tuple[str, ...] = ()
            if headers and PATH_HEADER in headers:
                path = tuple(read_path(properties))
                if destination in path:
                    counters.suppressed += 1
                    skipped.append(tag)
                    continue
                if max_hops is not None and len(path) >= max_hops:
                    counters.hops_dropped += 1
                    skipped.append(tag)
                    continue
            elif max_hops is not None and max_hops <= 0:
                counters.hops_dropped += 1
                skipped.append(tag)
                continue
            append(parts, exchange, key if fixed_key is None else fixed_key, add_hop(properties, path), message.body)
            forwarded.append(tag)
        if messages:
            batch.last_tag = messages[-1].delivery_tag
        batch.count = len(forwarded)
        batch.frames = b"".join(parts)
        return batch

    def sent(self, batch: Batch) -> list[tuple[str, int, bool]]:
        """The batch was written to the destination (or had nothing to write).
        on-confirm: it waits in the ledger for ``confirmed``; the others settle now."""
        mode = self.ack_mode
        counters = self.counters
        if mode is AckMode.ON_CONFIRM:
            if not batch.count:
                batch.done = True
            self._ledger.append(batch)
            return self._release() if batch.done else []
        counters.forwarded += batch.count
        settled = batch.count + len(batch.skipped_tags)
        counters.settled += settled
        if mode is AckMode.NO_ACK or not settled:
            return []
        counters.acked += settled
        return [(ACK, batch.last_tag, True)]

    def confirmed(self, batch: Batch, ok: bool) -> list[tuple[str, int, bool]]:
        """on-confirm: the destination answered for the whole batch (``ok``: acked every
        message; else a nack or a lost connection)."""
        batch.done = True
        batch.failed = not ok
        if ok:
            self.counters.forwarded += batch.count
        return self._release()

    def _release(self) -> list[tuple[str, int, bool]]:
        """Acks (and requeues) for the settled batches at the head of the ledger."""
        ledger = self._ledger
        counters = self.counters
        actions: list[tuple[str, int, bool]] = []
        ack_upto = 0
        i = self._head
        while i < len(ledger) and ledger[i].done:
            batch = ledger[i]
            i += 1
            if not batch.failed:
                ack_upto = batch.last_tag
                counters.acked += batch.count + len(batch.skipped_tags)
                counters.settled += batch.count + len(batch.skipped_tags)
                continue
            if ack_upto:
                actions.append((ACK, ack_upto, True))
                ack_upto = 0
            for tag in batch.forwarded_tags:
                actions.append((NACK, tag, False))
            for tag in batch.skipped_tags:
                actions.append((ACK, tag, False))
            counters.requeued += batch.count
            counters.acked += len(batch.skipped_tags)
            counters.settled += batch.count + len(batch.skipped_tags)
        if ack_upto:
            actions.append((ACK, ack_upto, True))
        if i > 256 and i * 2 > len(ledger):
            del ledger[:i]
            i = 0
        self._head = i
        return actions
