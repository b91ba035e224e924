"""The "amqp" sink over RabbitMQ's stream protocol: each row stored once, by deduplication.

    (df.write.format("amqp").mode("append")
       .option("url", "rabbitmq-stream://guest:guest@127.0.0.1:5552/")
       .option("stream", "orders")
       .option("producerName", "orders-import-2024-06-01")   # optional
       .save())

Each task publishes its rows, encoded from the Arrow batches in Cython
(:class:`~amqwire.spark.stream_encode.StreamPublishEncoder`), to the stream's leader, with
publisher confirms, under a **producer reference** and **publishing ids** that depend only
on what the rows are, never on the attempt:

- reference: ``<base>-<partition id>``, the base being the ``producerName`` option, else
  (streaming) the query's id, which its checkpoint keeps, else (a batch write) an id made
  once per write on the driver;
- publishing id of the row at position ``i`` of the task (0, 1, ...) in epoch ``e``:
  ``e * 2**32 + i + 1``, the epoch being the micro-batch id (streaming) or 0 (a batch write).

RabbitMQ stores a message only if its publishing id is above the last one it stored for the
reference.  A task asks the broker for that last id first and skips the rows at or below it,
so a task Spark runs again, a micro-batch replayed after a driver restart, or the same
write run again with the same ``producerName``, stores each row once.  This holds as long
as each partition gets the same rows in the same order each time (a deterministic plan over
a replayable source, no repartitioning between runs), and only then; see docs/spark.md.
"""
from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any, Iterator, List, Optional

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from amqwire.spark.errors import SinkError

__all__ = ["StreamSinkSettings", "StreamCommitMessage", "publish_stream_batches", "producer_reference"]

log = logging.getLogger("amqwire.spark")

COLUMNS = ("body", "headers", "properties", "exchange", "routing_key")
_OPTIONS = {"url", "stream", "producer_name", "body_format", "confirm_window", "confirm_timeout"}
_ALIASES = {"producername": "producer_name", "bodyformat": "body_format", "confirmwindow": "confirm_window",
            "confirmtimeout": "confirm_timeout"}
#: Options of the 0-9-1 sink that mean nothing over the stream protocol.
_AMQP_ONLY = {"exchange", "routing_key", "mandatory", "frame_max", "traceparent_column"}
_PUBLISHER = 0
_EPOCH_ROWS = 2**32  # rows a task may write in one epoch: the low 32 bits of a publishing id
_MAX_EPOCH = 2**31 - 1
_MAX_REFERENCE = 256


@dataclasses.dataclass
class StreamCommitMessage(WriterCommitMessage):
    """What one task did: ``rows`` it was given, ``stored`` of them it published (each
    confirmed), ``skipped`` the broker had stored already under its reference."""

    rows: int
    stored: int
    skipped: int
    seconds: float
    reference: str


@dataclasses.dataclass(frozen=True)
class StreamSinkSettings:
    """The options of one write over the stream protocol, checked on the driver."""

    parameters: tuple[Any, ...]
    stream: str
    producer_name: Optional[str]
    write_id: str  # a batch write's reference base when no producerName is given
    body_format: str
    confirm_window: int
    confirm_timeout: float
    columns: tuple[str, ...]

    @classmethod
    def from_options(cls, options: Any, schema: StructType) -> "StreamSinkSettings":
        from amqwire.spark.datasource import _ALIASES as _AMQP_ALIASES
        from amqwire.spark.datasource import _SPARK_OPTIONS, _canonical, _float_option, _int_option
        from amqwire.spark.datasource import stream_connection_options
        from amqwire.spark.stream_encode import StreamPublishEncoder

        options = _canonical(options, _ALIASES)
        for key in options:
            if _AMQP_ALIASES.get(key, key) in _AMQP_ONLY:
                raise ValueError(f"option {_AMQP_ALIASES.get(key, key)}: an AMQP 0-9-1 option; over the stream protocol the stream option "
                                 "names where rows go (and amqp.frame_max the frame size)")
            if key not in _OPTIONS and key not in _SPARK_OPTIONS and not key.startswith("amqp."):
                raise ValueError(f"unknown option {key!r} for the amqp data source over the stream protocol (known: "
                                 f"{', '.join(sorted(_OPTIONS))} (or producerName, bodyFormat, confirmWindow, "
                                 f"confirmTimeout), and amqp.* connection options)")
        parameters = stream_connection_options(options)
        stream = options.get("stream")
        if stream is None or not str(stream).strip():
            raise ValueError("option stream: missing: name the stream to write to (a rabbitmq-stream:// url writes "
                             "to a stream, not through an exchange)")
        if len(str(stream).encode()) > 255:
            raise ValueError(f"option stream: {str(stream)[:40]!r}... is over 255 bytes")
        producer_name = options.get("producer_name")
        if producer_name is not None:
            producer_name = str(producer_name)
            # room for "-<partition id>" within the 256 bytes of a reference
            if not producer_name.strip() or len(producer_name.encode()) > _MAX_REFERENCE - 12:
                raise ValueError(f"option producer_name: expected 1 .. {_MAX_REFERENCE - 12} bytes, got "
                                 f"{producer_name[:40]!r}")
        names = tuple(field.name for field in schema.fields)
        unknown = [name for name in names if name not in COLUMNS]
        if unknown:
            raise ValueError(f"the amqp data source does not know the column(s) {', '.join(map(repr, unknown))}; over "
                             f"the stream protocol it writes {', '.join(COLUMNS)} (select or rename before writing)")
        if "body" not in names:
            raise ValueError("the amqp data source needs a 'body' column (binary, string, or a struct with "
                             "body_format json/table)")
        body_format = options.get("body_format", "raw")
        StreamPublishEncoder(body_format=body_format)  # a bad body_format fails here, on the driver
        return cls(
            parameters=parameters,
            stream=str(stream),
            producer_name=producer_name,
            write_id=f"spark-write-{uuid.uuid4()}",
            body_format=body_format,
            confirm_window=_int_option(options, "confirm_window", 1, 10_000_000, 100_000),
            confirm_timeout=_float_option(options, "confirm_timeout", 120.0),
            columns=names,
        )

    def describe(self) -> str:
        return f"{', '.join(str(p) for p in self.parameters)} stream {self.stream!r}"


def producer_reference(base: str, partition: int) -> str:
    """The producer reference of a task: the write's base and the task's partition id."""
    return f"{base}-{partition}"


def _task() -> tuple[int, Optional[str], Optional[str]]:
    """(partition id, streaming query id, micro-batch id) of the running task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, None, None
    return (context.partitionId(), context.getLocalProperty("sql.streaming.queryId"),
            context.getLocalProperty("streaming.sql.batchId"))


def publish_stream_batches(settings: StreamSinkSettings, batches: Iterator[Any],
                           streaming: bool) -> StreamCommitMessage:
    """One task: its rows published under its reference with their publishing ids (see the
    module's text), the ones the broker already has skipped; returns once every row sent is
    confirmed."""
    from amqwire.client import AMQPError
    from amqwire.client.stream import protocol as proto
    from amqwire.spark.stream_encode import StreamPublishEncoder
    from amqwire.spark.stream_link import TaskLink

    started = time.monotonic()
    partition, query_id, batch_id = _task()
    if streaming:
        if batch_id is None:
            raise SinkError("amqp sink: a streaming write task without a micro-batch id (the local property "
                            "streaming.sql.batchId): cannot derive its publishing ids")
        epoch = int(batch_id)
        base = settings.producer_name or query_id
        if base is None:
            raise SinkError("amqp sink: a streaming write task without a query id: give producerName")
    else:
        epoch = 0
        base = settings.producer_name or settings.write_id
    if not 0 <= epoch <= _MAX_EPOCH:
        raise SinkError(f"amqp sink: micro-batch {epoch} is past the {_MAX_EPOCH} a publishing id can number")
    reference = producer_reference(base, partition)
    epoch_base = epoch * _EPOCH_ROWS
    rows = sent = confirmed = skipped = 0
    last_stored = 0
    link: Optional[TaskLink] = None
    encoder: Optional[StreamPublishEncoder] = None
    window = settings.confirm_window

    def settle(events: list[Any]) -> int:
        count = 0
        for event in events:
            kind = type(event)
            if kind is proto.Confirmed and event.publisher_id == _PUBLISHER:
                count += len(event.publishing_ids)
            elif kind is proto.PublishErrors and event.publisher_id == _PUBLISHER:
                from amqwire.client.stream.errors import code_text

                publishing_id, code = event.errors[0]
                raise SinkError(f"amqp sink: the broker refused {len(event.errors)} rows of reference {reference!r} "
                                f"(publishing id {publishing_id}: {code_text(code)}) after {confirmed} of {sent} "
                                f"sent were confirmed, by {settings.describe()}", rows_confirmed=confirmed)
            elif kind is proto.MetadataChanged and event.stream == settings.stream:
                raise SinkError(f"amqp sink: stream {settings.stream!r} moved or was deleted after {confirmed} of "
                                f"{sent} rows were confirmed (MetadataUpdate {event.code:#x})", rows_confirmed=confirmed)
        return count

    def wait_confirms(until: int) -> int:
        """Read confirms until at most ``until`` rows are unconfirmed."""
        nonlocal confirmed
        deadline = time.monotonic() + settings.confirm_timeout
        if link is None:  # nothing was sent
            return confirmed
        while sent - confirmed > until:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SinkError(f"amqp sink: {sent - confirmed} of {sent} rows not confirmed within confirm_timeout "
                                f"{settings.confirm_timeout} s by {settings.describe()}", rows_confirmed=confirmed)
            confirmed += settle(link.poll(min(left, 1.0)))
        return confirmed

    try:
        for batch in batches:
            count = batch.num_rows
            if not count:
                continue
            if rows + count >= _EPOCH_ROWS:
                raise SinkError(f"amqp sink: a task writes at most {_EPOCH_ROWS - 1} rows a micro-batch; repartition "
                                "into more tasks", rows_confirmed=confirmed)
            if link is None:
                link = TaskLink.open(settings.parameters, settings.stream, leader=True,
                                     timeout=settings.confirm_timeout)
                link.request(lambda core: core.declare_publisher(_PUBLISHER, reference, settings.stream),
                             "declare_publisher", settings.stream)
                last_stored = link.request(lambda core: core.query_publisher_sequence(reference, settings.stream),
                                           "query_publisher_sequence", reference).sequence
                encoder = StreamPublishEncoder(publisher_id=_PUBLISHER, frame_max=link.frame_max,
                                               body_format=settings.body_format)
                if last_stored > epoch_base:
                    log.info("amqp sink: reference %r has publishing ids up to %d stored: rows at or below it are "
                             "skipped", reference, last_stored)
            first_id = epoch_base + rows + 1
            skip = min(max(last_stored - first_id + 1, 0), count)
            if skip < count:
                columns = {name: batch.column(index) for index, name in enumerate(batch.schema.names)}
                if encoder is None:  # made with the link, above
                    raise SinkError("amqp sink: no publish encoder (the task's link was not opened)",
                                    rows_confirmed=confirmed)
                data, encoded = encoder.encode(first_id, skip=skip, **columns)
                if sent - confirmed + encoded > window:
                    wait_confirms(max(window - encoded, 0))
                link.send(data)
                sent += encoded
                confirmed += settle(link.poll(0.0))
            skipped += skip
            rows += count
        if link is not None:
            wait_confirms(0)
            try:
                link.request(lambda core: core.delete_publisher(_PUBLISHER), "delete_publisher", settings.stream)
            except AMQPError as exc:  # every row is confirmed: the task's outcome is decided
                log.debug("deleting the publisher of %r: %r", reference, exc)
    except AMQPError as exc:
        raise SinkError(f"amqp sink: publishing to {settings.describe()} failed after {confirmed} of {sent} rows were "
                        f"confirmed: {type(exc).__name__}: {exc}", rows_confirmed=confirmed) from exc
    finally:
        if link is not None:
            link.close()
    if skipped:
        log.info("amqp sink: reference %r: %d of %d rows were stored already and skipped", reference, skipped, rows)
    return StreamCommitMessage(rows=rows, stored=sent, skipped=skipped, seconds=time.monotonic() - started,
                               reference=reference)


def summary(messages: List[Optional[WriterCommitMessage]]) -> tuple[int, int, int, int]:
    """(rows, stored, skipped, tasks) of the commit messages of a write."""
    done = [m for m in messages if isinstance(m, StreamCommitMessage)]
    return sum(m.rows for m in done), sum(m.stored for m in done), sum(m.skipped for m in done), len(done)
