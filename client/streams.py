"""Reading RabbitMQ streams over AMQP 0-9-1: what both transports share and never waits for.

A stream (a queue declared with ``x-queue-type: stream``) is an append-only log: every
message has an offset, 0, 1, 2, ... in the order they were appended, and reading does not
remove anything (retention does, from the oldest end).  A consumer names where to start
with the consumer argument ``x-stream-offset``; each delivery carries its offset in the
header of the same name, which the codec reads into ``Message.stream_offset``.  The broker
requires a prefetch (``basic.qos``) and manual acks, and the acks only give credit.

What RabbitMQ 3.10 does, and what this module makes of it:

- Some bad ``x-stream-offset`` values (an unknown word, a float, a bool) make the broker
  close the whole connection (541 INTERNAL_ERROR): options are checked here first, and
  refused with :class:`StreamOptionError` naming the option.
- ``no_ack`` makes it close the connection (540): a stream consumer always acks.
- A queue that is not a stream refuses ``x-stream-offset`` (406 PRECONDITION_FAILED
  "... of queue type rabbit_classic_queue"): raised as :class:`NotAStream`.
- A start offset below the first one retained starts at the first one retained, silently:
  the consumer compares the first delivered offset with the one asked for (see
  ``StreamConsumerBase._admit``).
- "does not have a replica on the local node" (406) is also what a node answers while its
  replica restarts or its stream coordinator is slow to answer: raised as
  :class:`StreamReplicaUnavailable`; the offset probes wait it out (:class:`ReplicaWait`).
"""
from __future__ import annotations

import datetime
import logging
import re
import time
from typing import Any, Literal, NamedTuple, Optional, Union

from .errors import StreamOptionError, StreamReplicaUnavailable, StreamTruncated
from .message import Message

log = logging.getLogger("amqwire.client")

#: Where a stream consumer starts: ``"first"``, ``"last"`` (the last chunk the broker
#: wrote: some messages before the tail), ``"next"`` (only what is appended from now on),
#: an offset (int), a point in time (an aware or naive-UTC datetime, whole seconds: the
#: first chunk written at or after it), or an interval back from now (``"30m"``, ``"1h"``,
#: ``"7D"``; units ``Y M D h m s``).
StreamOffset = Union[str, int, datetime.datetime]

_WORDS = ("first", "last", "next")
_INTERVAL = re.compile(r"[0-9]+[YMDhms]")
_MAX_OFFSET = 2**63 - 1

# what the consumer does with a delivery (StreamConsumerBase._admit)
HAND_OUT = 0  # give it to the reader
SKIP = 1  # before the start offset: acked, not handed out
LAST = 2  # the message at the end offset: hand it out, then the consumer ends
PAST_END = 3  # after the end offset: the consumer ends without it
TRUNCATED = 4  # the start offset is gone and on_truncated="raise"


#: Seconds a probe on a new channel keeps asking for a replica its node says it lacks.
REPLICA_WAIT = 10.0


class ReplicaWait:
    """How long a caller that owns its channel retries a stream consumer refused with
    StreamReplicaUnavailable: pauses of 0.1 s doubling up to 1 s, while the next try starts
    within ``limit`` seconds of the first refusal and before ``deadline`` (a
    ``time.monotonic()`` value, or None)."""

    __slots__ = ("deadline", "limit", "started", "delay")

    def __init__(self, deadline: Optional[float], limit: float = REPLICA_WAIT) -> None:
        self.deadline = deadline
        self.limit = limit
        self.started: Optional[float] = None
        self.delay = 0.1

    def next_delay(self, error: StreamReplicaUnavailable) -> float:
        """The pause before the next try; raises ``error`` (with ``waited`` set) when the
        wait is over."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        end = self.started + self.limit
        if self.deadline is not None:
            end = min(end, self.deadline)
        delay = self.delay
        if now + delay >= end:  # a try that would start with no time left
            error.waited = now - self.started
            raise error
        self.delay = min(delay * 2, 1.0)
        log.info("stream replica not running on this node (%s): trying again in %.1f s", error.reply_text, delay)
        return delay


class StreamOffsets(NamedTuple):
    """A stream's first and last offsets (``Channel.stream_offsets``); both None when the
    stream holds no message."""

    first: Optional[int]
    last: Optional[int]


def offset_argument(offset: Any) -> Any:
    """The ``x-stream-offset`` consumer argument for ``offset``; StreamOptionError if it is
    not one RabbitMQ takes."""
    if isinstance(offset, bool):
        raise StreamOptionError("offset", f"expected 'first', 'last', 'next', an offset, a datetime or an interval "
                                          f"such as '1h', got the bool {offset!r}")
    if isinstance(offset, int):
        if not 0 <= offset <= _MAX_OFFSET:
            raise StreamOptionError("offset", f"an offset is 0 .. 2**63-1, got {offset}")
        return offset
    if isinstance(offset, datetime.datetime):
        if offset.microsecond:
            raise StreamOptionError("offset", f"{offset.isoformat()}: stream timestamps are whole seconds "
                                              "(use .replace(microsecond=0))")
        if offset.tzinfo is not None and offset.utcoffset() is None:
            raise StreamOptionError("offset", f"{offset!r} has a tzinfo without a UTC offset")
        return offset  # the codec writes it as an AMQP timestamp ('T'), naive meaning UTC
    if isinstance(offset, str):
        if offset in _WORDS or _INTERVAL.fullmatch(offset):
            return offset
        raise StreamOptionError("offset", f"{offset!r} is neither 'first', 'last', 'next' nor an interval such as "
                                          "'30m', '1h', '7D' (a number and one of Y M D h m s)")
    raise StreamOptionError("offset", f"expected 'first', 'last', 'next', an offset, a datetime or an interval, "
                                      f"got {type(offset).__name__}")


def check_options(offset: Any, end: Optional[int], prefetch: int, on_truncated: str) -> None:
    """The options of ``consume_stream`` besides ``offset``: StreamOptionError naming the first wrong one."""
    if end is not None:
        if isinstance(end, bool) or not isinstance(end, int) or not 0 <= end <= _MAX_OFFSET:
            raise StreamOptionError("end", f"expected None or an offset (an int 0 .. 2**63-1), got {end!r}")
        if isinstance(offset, int) and not isinstance(offset, bool) and end < offset:
            raise StreamOptionError("end", f"end offset {end} is before the start offset {offset}")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= 65535:
        raise StreamOptionError("prefetch", f"a stream consumer needs a prefetch of 1 .. 65535, got {prefetch!r}")
    if on_truncated not in ("warn", "raise"):
        raise StreamOptionError("on_truncated", f"expected 'warn' or 'raise', got {on_truncated!r}")


class StreamConsumerBase:
    """A stream consumer's bookkeeping, shared by both transports (mixed into their
    StreamConsumer classes, which declare the slots): which deliveries to hand out, where
    the stream was truncated, and the acks that give the broker credit."""

    channel: Any
    queue: str
    consumer_tag: str
    start: StreamOffset
    end: Optional[int]
    first_offset: Optional[int]
    last_offset: Optional[int]
    truncated: bool
    _skip_below: Optional[int]
    _on_truncated: Literal["warn", "raise"]
    _unacked: list[int]
    _credit_batch: int

    def _init_stream(self, start: StreamOffset, end: Optional[int], prefetch: int, on_truncated: Literal["warn", "raise"]) -> None:
        self.start = start
        self.end = end
        self.first_offset = None
        self.last_offset = None
        self.truncated = False
        self._skip_below = start if type(start) is int else None
        self._on_truncated = on_truncated
        self._unacked = []
        # Ack as messages are read, half a prefetch at a time: the broker never runs out of
        # credit while the reader keeps up, and acks cost one frame per batch.
        self._credit_batch = max(1, prefetch // 2)

    def _admit(self, message: Message) -> int:
        """What to do with the next delivery: HAND_OUT, SKIP, LAST, PAST_END or TRUNCATED."""
        offset = message.stream_offset
        self._unacked.append(message.delivery_tag)
        if offset is None:  # not from a stream; consume_stream refuses other queues
            return HAND_OUT
        if self.first_offset is None:
            self.first_offset = offset
            if type(self.start) is int and offset > self.start:
                self.truncated = True
                log.warning("stream %r: start offset %d was removed by retention; reading starts at %d, the first "
                            "offset retained (%d offsets lost)", self.queue, self.start, offset, offset - self.start)
                if self._on_truncated == "raise":
                    return TRUNCATED
        skip_below = self._skip_below
        if skip_below is not None:
            if offset < skip_below:  # the broker starts at the chunk that holds the start offset
                return SKIP
            self._skip_below = None
        end = self.end
        if end is not None and offset >= end:
            if offset > end:
                return PAST_END
            self.last_offset = offset
            return LAST
        self.last_offset = offset
        if len(self._unacked) >= self._credit_batch:
            self._give_credit()
        return HAND_OUT

    def _truncation(self) -> StreamTruncated:
        return StreamTruncated(self.queue, self.start, self.first_offset)  # type: ignore[arg-type]

    def _give_credit(self) -> None:
        """Ack what was read so far (blocking: from the reading thread, as any ack)."""
        unacked = self._unacked
        if not unacked:
            return
        channel = self.channel
        if not channel.is_open:  # the channel's end is the reader's error: nothing to give
            unacked.clear()
            return
        consumers = channel._consumers
        others = len(consumers) - (self.consumer_tag in consumers)
        if others == 0:  # alone on the channel: one ack covers every delivery up to the last
            channel._answer_delivery("basic_ack", unacked[-1], True)
        else:  # multiple=True would ack other consumers' deliveries too
            for tag in unacked:
                channel._answer_delivery("basic_ack", tag, False)
        unacked.clear()
