"""The "amqp" source over RabbitMQ's stream protocol (a ``rabbitmq-stream://`` url).

Everything Spark sees is as over AMQP 0-9-1 (amqwire.spark.source: the options, the
offsets in the checkpoint, the schema, the replay guarantee); what differs is how the
broker is asked and read:

- the driver (:class:`StreamProtocolTails`) finds a stream's first and next offsets, and
  the offset of a point in time (to the millisecond, where 0-9-1 has whole seconds), with
  the stream client (``amqwire.client.stream``), and with ``consumerName`` stores the
  committed offsets in the broker (StoreOffset) after each micro-batch;
- each task (:func:`read_stream_range`) subscribes at its range's start on a replica when
  one is reachable (else the leader) over a :class:`~amqwire.spark.stream_link.TaskLink`
  and turns each delivered chunk into Arrow rows in Cython
  (:class:`~amqwire.spark.stream_chunks.ChunkBatchBuilder`), stopping once the chunks
  have passed the range's end.  Rows also carry the chunk's timestamp (``timestamp``)
  and the AMQP 1.0 application properties (``headers``).
"""
from __future__ import annotations

import datetime
import logging
import time
from typing import Any, Iterator, Optional

from amqwire.spark.errors import DataLoss, SourceError, StreamUnavailable
from amqwire.spark.source import SourceSettings, StreamRange, StreamTails

__all__ = ["StreamProtocolTails", "read_stream_range"]

log = logging.getLogger("amqwire.spark")

_SUBSCRIPTION = 0
_OFFSET = 4  # Subscribe's offset type: an offset


def _connect(settings: SourceSettings) -> Any:
    from amqwire.client import AMQPError
    from amqwire.client import stream

    try:
        return stream.connect(list(settings.parameters), recovery=False)
    except (AMQPError, OSError) as exc:
        raise SourceError(f"amqp source: cannot connect to {settings.describe()}: {type(exc).__name__}: {exc}") from exc


class StreamProtocolTails(StreamTails):
    """The driver's view of the streams over the stream protocol (see StreamTails)."""

    def _open(self) -> Any:
        if self._connection is None or not self._connection.is_open:
            self.close()
            self._connection = _connect(self.settings)
        return self._connection

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close(2.0)
            except Exception:  # closing is best effort: the connection may be gone already
                log.debug("closing the source's driver connection failed", exc_info=True)

    def _failed(self, stream: str, what: str, exc: BaseException) -> SourceError:
        from amqwire.client.stream import StreamDoesNotExist

        self.close()
        if isinstance(exc, StreamDoesNotExist):
            return StreamUnavailable(f"amqp source: stream {stream!r} does not exist on {self.settings.describe()} "
                                     "(or it is a classic or quorum queue, which the stream protocol does not "
                                     "read)", stream)
        return SourceError(f"amqp source: {what} of stream {stream!r} failed: {type(exc).__name__}: {exc}", stream)

    def offsets(self, stream: str) -> tuple[Optional[int], int]:
        from amqwire.client import AMQPError

        try:
            found = self._open().stream_stats(stream, quiet=0.5)
        except (AMQPError, OSError) as exc:
            raise self._failed(stream, "finding the offsets", exc) from exc
        if found.last_offset is None:
            return None, 0
        return found.first_offset, found.last_offset + 1

    def offset_at(self, stream: str, millis: int, tail: int) -> int:
        """The first offset of the first chunk the stream wrote at or after ``millis`` (to
        the millisecond: the stream protocol's Subscribe takes a time in ms); ``tail``
        when none.  The last chunk's own timestamp says whether there is one, so the answer
        never rests on how soon a busy broker delivers."""
        from amqwire.client import AMQPError

        moment = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.timezone.utc)
        if tail == 0:  # empty
            return tail
        try:
            connection = self._open()
            with connection.consumer(stream, offset="last", credit=1) as consumer:
                last = consumer.get(self.settings.read_timeout)
            if last is None or last.chunk_timestamp_ms < millis:
                return tail
            with connection.consumer(stream, offset=moment, credit=1) as consumer:
                message = consumer.get(self.settings.read_timeout)
        except (AMQPError, OSError) as exc:
            raise self._failed(stream, f"finding the offset of {millis} ms", exc) from exc
        if message is None:
            raise SourceError(f"amqp source: stream {stream!r} holds a chunk written at or after {millis} ms but sent "
                              f"none within readTimeout {self.settings.read_timeout} s", stream)
        return min(int(message.offset), tail)

    def store_offset(self, stream: str, name: str, offset: int) -> None:
        """StoreOffset: ``offset`` (the last one a committed micro-batch read) under ``name``."""
        from amqwire.client import AMQPError

        try:
            self._open().store_offset(stream, name, offset)
        except (AMQPError, OSError) as exc:
            raise self._failed(stream, f"storing offset {offset} as {name!r}", exc) from exc


def read_stream_range(settings: SourceSettings, part: StreamRange) -> Iterator[Any]:
    """One task over the stream protocol: the messages of ``part`` as Arrow record batches
    of about ``batch_rows`` rows (a chunk is never split between two batches)."""
    from amqwire.client import AMQPError
    from amqwire.client.stream import protocol as proto
    from amqwire.codec import CodecError
    from amqwire.spark.stream_chunks import ChunkBatchBuilder
    from amqwire.spark.stream_link import TaskLink

    clock = time.perf_counter
    started = clock()
    stream = part.stream
    builder = ChunkBatchBuilder(stream, part.start, part.end)
    reading = building = in_spark = 0.0
    read = batches = chunks = 0
    link = None
    try:
        link = TaskLink.open(settings.parameters, stream, leader=False, timeout=settings.read_timeout)
        link.request(lambda core: core.subscribe(_SUBSCRIPTION, stream, _OFFSET, part.start, settings.credit, {}),
                     "subscribe", stream)
        checked = False
        last_chunk = time.monotonic()
        mark = clock()
        while not builder.done:
            events = link.poll(min(settings.read_timeout, 1.0))
            now = clock()
            reading += now - mark
            mark = now
            for event in events:
                kind = type(event)
                if kind is proto.Delivered:
                    builder.add_chunk(event.chunk)
                    link.credit(_SUBSCRIPTION, 1)
                    chunks += 1
                    last_chunk = time.monotonic()
                elif kind is proto.MetadataChanged and event.stream == stream:
                    raise SourceError(f"amqp source: stream {stream!r} moved or was deleted while offsets "
                                      f"[{part.start}, {part.end}) were read (MetadataUpdate {event.code:#x})", stream)
                elif kind is proto.CreditRefused:
                    raise SourceError(f"amqp source: the broker refused credit for stream {stream!r} "
                                      f"(code {event.code:#x})", stream)
            if not checked and builder.first_chunk_offset >= 0:
                checked = True
                if builder.first_chunk_offset > part.start:
                    _check_loss(settings, part)
            now = clock()
            building += now - mark
            mark = now
            if builder.rows >= settings.batch_rows:
                read += builder.rows
                batches += 1
                yield builder.take()
                now = clock()
                in_spark += now - mark
                mark = now
            elif not events and time.monotonic() - last_chunk > settings.read_timeout:
                raise SourceError(f"amqp source: no chunk from stream {stream!r} for {settings.read_timeout} s after "
                                  f"{read + builder.rows} messages of offsets [{part.start}, {part.end}) "
                                  f"(readTimeout)", stream)
        if builder.rows:
            read += builder.rows
            batches += 1
            yield builder.take()
        log.debug("amqp source: %d messages of stream %r offsets [%d, %d) in %.3f s over the stream protocol "
                  "(%d chunks from %s): %.3f s reading (waiting for the broker included), %.3f s building %d Arrow "
                  "batches, %.3f s in Spark between batches", read, stream, part.start, part.end, clock() - started,
                  chunks, link.node, reading, building, batches, in_spark)
    except (AMQPError, CodecError, OSError) as exc:
        raise SourceError(f"amqp source: reading stream {stream!r} offsets [{part.start}, {part.end}) failed after "
                          f"{read + builder.rows} messages: {type(exc).__name__}: {exc}", stream) from exc
    finally:
        if link is not None:
            link.close()


def _check_loss(settings: SourceSettings, part: StreamRange) -> None:
    """The first chunk came after the start: retention removed the start, or the offsets
    before it are the stream's own entries (offsets are not dense).  The stream's first
    offset tells which."""
    tails = StreamProtocolTails(settings)
    try:
        first, _ = tails.offsets(part.stream)
    finally:
        tails.close()
    if first is None or first <= part.start:
        return
    if settings.fail_on_data_loss:
        raise DataLoss(part.stream, part.start, first)
    lost = min(first, part.end) - part.start
    log.warning("amqp source: stream %r: %d offsets (%d..%d) were removed by retention before they were read; "
                "skipped (failOnDataLoss=false)", part.stream, lost, part.start, part.start + lost - 1)
