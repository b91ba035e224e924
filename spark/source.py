"""The "amqp" data source's reading side: RabbitMQ streams into Spark, batch and streaming.

    df = (spark.readStream.format("amqp")
          .option("url", "amqp://guest:guest@127.0.0.1:5672/")
          .option("streams", "orders,payments")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 100000)
          .load())

In the manner of Spark's Kafka source: Spark keeps the offsets.  A micro-batch's end (and
what the checkpoint records) is a JSON map stream -> next offset to read; each task reads
the messages whose offsets are in ``[start, end)`` of one stream and stops there, so a
micro-batch replayed after a failure reads exactly the same records.  Stream offsets are
not dense (the stream's own entries take some), so a range says which offsets, never how
many messages.  The tails are found with ``Channel.stream_offsets``, so a range always
ends at a message the broker has: no task waits for a message that will never come.

Options and the streams are checked where the read is defined, by ``load()`` (the data
source's ``schema()``: ``check_read``), as Spark's Kafka source does: ``SourceOptionError``
naming the option, ``StreamUnavailable`` naming the stream; see ``docs/spark-read.md`` for
the table.  Making a stream reader never raises (Spark's runner would put an
UnboundLocalError of its own in front of the error): what only a stream query refuses is
raised by the reader's first call (``RefusedStreamReader``).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import time
from typing import Any, Iterator, Optional, Sequence

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from amqwire.spark.datasource import (
    _SPARK_OPTIONS, _canonical, connection_options, stream_connection_options, uses_stream_protocol,
)
from amqwire.spark.errors import DataLoss, SourceError, SourceOptionError, StreamUnavailable
from amqwire.spark.stream_batch import build_batch

__all__ = ["AMQPBatchReader", "AMQPStreamReader", "SourceSettings", "StreamRange", "read_range"]

log = logging.getLogger("amqwire.spark")

EARLIEST = -2  # in startingOffsets / endingOffsets JSON, as in the Kafka source
LATEST = -1

# Spark hands option names lower-cased; the camelCase spellings map onto snake_case.
_ALIASES = {
    "startingoffsets": "starting_offsets",
    "endingoffsets": "ending_offsets",
    "startingtimestamp": "starting_timestamp",
    "endingtimestamp": "ending_timestamp",
    "startingoffsetsbytimestamp": "starting_offsets_by_timestamp",
    "endingoffsetsbytimestamp": "ending_offsets_by_timestamp",
    "maxoffsetspertrigger": "max_offsets_per_trigger",
    "failondataloss": "fail_on_data_loss",
    "minpartitions": "min_partitions",
    "readtimeout": "read_timeout",
    "batchrows": "batch_rows",
    "consumername": "consumer_name",
}
_OPTIONS = {
    "url", "streams", "starting_offsets", "ending_offsets", "starting_timestamp", "ending_timestamp",
    "starting_offsets_by_timestamp", "ending_offsets_by_timestamp", "max_offsets_per_trigger",
    "fail_on_data_loss", "min_partitions", "prefetch", "read_timeout", "batch_rows", "credit", "consumer_name",
}
# options that only one protocol has: (option, the protocol it needs)
_PROTOCOL_OPTIONS = {"prefetch": "amqp", "credit": "stream", "consumer_name": "stream"}
_BOOLEANS = {"true": True, "false": False}
_MAX_OFFSET = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a read starts or ends in one stream: ``"earliest"``, ``"latest"``, an offset
    (``"offset"``, value) or a point in time (``"timestamp"``, milliseconds since the epoch)."""

    kind: str
    value: int = 0
    option: str = ""  # the option it came from, for error messages


@dataclasses.dataclass(frozen=True)
class SourceSettings:
    """The options of one read, checked on the driver; pickled to the executors."""

    parameters: tuple[Any, ...]
    connect_kwargs: tuple[tuple[str, Any], ...]
    streams: tuple[str, ...]
    starting: tuple[tuple[str, Position], ...]  # (stream, where it starts)
    ending: tuple[tuple[str, Position], ...]  # batch only
    max_offsets_per_trigger: Optional[int]
    fail_on_data_loss: bool
    min_partitions: Optional[int]
    prefetch: int
    read_timeout: float
    batch_rows: int
    protocol: str = "amqp"  # "amqp" (AMQP 0-9-1) or "stream" (the stream protocol: amqwire.spark.stream_source)
    credit: int = 10  # stream protocol: chunks the broker may send ahead
    consumer_name: Optional[str] = None  # stream protocol: store committed offsets under this name

    @classmethod
    def from_options(cls, options: Any, *, streaming: Optional[bool]) -> "SourceSettings":
        """``streaming`` None: at ``load()``, where Spark does not say whether the read is
        ``spark.read`` or ``readStream``; an end (batch only) or ``maxOffsetsPerTrigger``
        (streaming only) tells, else what only one of them refuses waits for the reader."""
        try:
            options = _canonical(options, _ALIASES)
        except ValueError as exc:
            raise SourceOptionError("options", str(exc)) from None
        for key in options:
            if key not in _OPTIONS and key not in _SPARK_OPTIONS and not key.startswith("amqp."):
                raise SourceOptionError(key, "unknown option for reading (known: " + ", ".join(sorted(_OPTIONS))
                                        + ", their camelCase spellings, and amqp.* connection options)")
        try:
            protocol = "stream" if uses_stream_protocol(options) else "amqp"
            connect_kwargs: tuple[tuple[str, Any], ...] = ()
            if protocol == "stream":
                parameters = stream_connection_options(options)
            else:
                parameters, connect_kwargs = connection_options(options)
        except ValueError as exc:
            raise SourceOptionError("url", str(exc)) from None
        for key, needs in _PROTOCOL_OPTIONS.items():
            if options.get(key) is not None and needs != protocol:
                raise SourceOptionError(key, "applies to the stream protocol only (a rabbitmq-stream:// url)"
                                        if needs == "stream" else "applies to AMQP 0-9-1 only (an amqp:// url); "
                                        "over the stream protocol, credit says how many chunks are sent ahead")
        consumer_name = options.get("consumer_name")
        if consumer_name is not None:
            if streaming is False:  # None: load(), which cannot tell a read from a stream query
                raise SourceOptionError("consumer_name", "applies to spark.readStream only (offsets are stored "
                                                         "as micro-batches commit)")
            if not str(consumer_name).strip() or len(str(consumer_name).encode()) > 256:
                raise SourceOptionError("consumer_name", f"expected a name of 1 .. 256 bytes, got {consumer_name!r}")
        streams = _streams(options.get("streams"))
        ends = [name for name in ("ending_offsets", "ending_timestamp", "ending_offsets_by_timestamp")
                if options.get(name) is not None]
        if streaming is None and ends and options.get("max_offsets_per_trigger") is not None:
            raise SourceOptionError("max_offsets_per_trigger", f"applies to spark.readStream only, and {ends[0]} "
                                                               "to spark.read only: not both")
        if streaming is None:
            streaming = None if not ends and options.get("max_offsets_per_trigger") is None else not ends
        if streaming:
            for name in ("ending_offsets", "ending_timestamp", "ending_offsets_by_timestamp"):
                if options.get(name) is not None:
                    raise SourceOptionError(name, "only a batch read (spark.read) has an end; a stream query "
                                                  "reads on, up to maxOffsetsPerTrigger a micro-batch")
        elif streaming is not None and options.get("max_offsets_per_trigger") is not None:
            raise SourceOptionError("max_offsets_per_trigger", "applies to spark.readStream only (a batch read "
                                                               "reads its whole range)")
        starting = _positions(options, "starting", streams, default="latest" if streaming else "earliest")
        ending = () if streaming else _positions(options, "ending", streams, default="latest")
        for stream, position in starting:
            if streaming is False and position.kind == "latest":
                raise SourceOptionError(position.option, f"a batch read cannot start at latest (stream {stream!r}): "
                                                         "it would read nothing")
        for stream, position in ending:
            if position.kind == "earliest":
                raise SourceOptionError(position.option, f"a batch read cannot end at earliest (stream {stream!r})")
        return cls(
            parameters=parameters,
            connect_kwargs=connect_kwargs,
            streams=streams,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_int(options, "max_offsets_per_trigger", 1, _MAX_OFFSET, None),
            fail_on_data_loss=_bool(options, "fail_on_data_loss", True),
            min_partitions=_int(options, "min_partitions", 1, 100_000, None),
            prefetch=_int(options, "prefetch", 1, 65535, 2000),  # type: ignore[arg-type]
            read_timeout=_seconds(options, "read_timeout", 60.0),
            batch_rows=_int(options, "batch_rows", 1, 10_000_000, 10_000),  # type: ignore[arg-type]
            protocol=protocol,
            credit=_int(options, "credit", 1, 1000, 10),  # type: ignore[arg-type]
            consumer_name=None if consumer_name is None else str(consumer_name),
        )

    def describe(self) -> str:
        return ", ".join(str(p) for p in self.parameters)


def _streams(value: Any) -> tuple[str, ...]:
    if value is None or not str(value).strip():
        raise SourceOptionError("streams", "missing: name the stream queues to read, comma separated "
                                           "(option streams, e.g. \"orders,payments\")")
    names = [part.strip() for part in str(value).split(",")]
    if any(not name for name in names):
        raise SourceOptionError("streams", f"an empty name in {value!r}")
    for name in names:
        if len(name.encode()) > 255:
            raise SourceOptionError("streams", f"{name[:40]!r}...: a queue name is at most 255 bytes")
    if len(set(names)) != len(names):
        raise SourceOptionError("streams", f"a stream is named twice in {value!r}")
    return tuple(names)


def _positions(options: dict[str, Any], side: str, streams: tuple[str, ...], default: str) -> tuple[tuple[str, Position], ...]:
    """Where each stream starts (side "starting") or ends ("ending"): from ``{side}_offsets``,
    ``{side}_timestamp`` or ``{side}_offsets_by_timestamp`` (at most one of them)."""
    names = [f"{side}_offsets", f"{side}_timestamp", f"{side}_offsets_by_timestamp"]
    given = [name for name in names if options.get(name) is not None]
    if len(given) > 1:
        raise SourceOptionError(given[1], f"give one of {', '.join(given)}, not both")
    if not given:
        return tuple((stream, Position(default, option=names[0])) for stream in streams)
    option = given[0]
    value = str(options[option]).strip()
    if option == f"{side}_timestamp":
        millis = _millis(option, value)
        return tuple((stream, Position("timestamp", millis, option)) for stream in streams)
    if option == f"{side}_offsets" and value in ("earliest", "latest"):
        return tuple((stream, Position(value, option=option)) for stream in streams)
    try:
        table = json.loads(value)
    except ValueError:
        words = "'earliest', 'latest' or " if option == f"{side}_offsets" else ""
        raise SourceOptionError(option, f"expected {words}a JSON object such as {{\"orders\": 1234}}, "
                                        f"got {value[:80]!r}") from None
    if not isinstance(table, dict):
        raise SourceOptionError(option, f"expected a JSON object stream -> value, got {value[:80]!r}")
    unknown = [name for name in table if name not in streams]
    if unknown:
        raise SourceOptionError(option, f"names stream(s) not in the streams option: {', '.join(map(repr, unknown))}")
    positions = []
    for stream in streams:
        if stream not in table:
            positions.append((stream, Position(default, option=option)))
            continue
        item = table[stream]
        if isinstance(item, bool) or not isinstance(item, int):
            raise SourceOptionError(option, f"stream {stream!r}: expected an integer, got {item!r}")
        if option.endswith("_by_timestamp"):
            positions.append((stream, Position("timestamp", _millis(option, item, stream), option)))
        elif item == EARLIEST:
            positions.append((stream, Position("earliest", option=option)))
        elif item == LATEST:
            positions.append((stream, Position("latest", option=option)))
        elif 0 <= item <= _MAX_OFFSET:
            positions.append((stream, Position("offset", item, option)))
        else:
            raise SourceOptionError(option, f"stream {stream!r}: an offset is 0 .. 2**63-1 "
                                            f"(or -2 earliest, -1 latest), got {item}")
    return tuple(positions)


def _millis(option: str, value: Any, stream: Optional[str] = None) -> int:
    where = f"stream {stream!r}: " if stream else ""
    try:
        millis = int(value)
    except (TypeError, ValueError):
        raise SourceOptionError(option, f"{where}expected milliseconds since 1970-01-01 UTC, got {value!r}") from None
    if not 0 <= millis <= 253402300799999:  # up to the year 9999
        raise SourceOptionError(option, f"{where}milliseconds since 1970-01-01 UTC out of range: {millis}")
    return millis


def _int(options: dict[str, Any], key: str, low: int, high: int, default: Optional[int]) -> Optional[int]:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise SourceOptionError(key, f"expected an integer, got {value!r}") from None
    if not low <= number <= high:
        raise SourceOptionError(key, f"expected {low} .. {high}, got {number}")
    return number


def _bool(options: dict[str, Any], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    parsed = _BOOLEANS.get(str(value).strip().lower())
    if parsed is None:
        raise SourceOptionError(key, f"expected true or false, got {value!r}")
    return parsed


def _seconds(options: dict[str, Any], key: str, default: float) -> float:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise SourceOptionError(key, f"expected a number of seconds, got {value!r}") from None
    if not 0 < number < 1e9:
        raise SourceOptionError(key, f"expected a number of seconds > 0, got {value!r}")
    return number


def check_schema(schema: Any) -> None:
    """The source's schema is fixed: a user-specified one that differs is an error."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from amqwire.spark.stream_rows import stream_schema

    expected = from_arrow_schema(stream_schema())
    if schema is not None and schema != expected:
        raise SourceOptionError("schema", f"the amqp source's schema is fixed ({expected.simpleString()}); "
                                          "do not give one with .schema(...)")


# ----------------------------------------------------------------------------- the broker


def check_read(options: Any) -> None:
    """What ``load()`` checks, as Spark's Kafka source does when a read is defined: the
    options (``from_options(streaming=None)``) and the broker's side: every stream exists
    and is a stream.  Raises SourceOptionError or StreamUnavailable (SourceError when the
    broker cannot be reached)."""
    settings = SourceSettings.from_options(options, streaming=None)
    tails = driver_tails(settings)
    try:
        for stream in settings.streams:
            tails.offsets(stream)
    finally:
        tails.close()


def _connect(settings: SourceSettings) -> Any:
    from amqwire.client import AMQPError, connect

    try:
        return connect(list(settings.parameters), **{"recovery": False, **dict(settings.connect_kwargs)})
    except (AMQPError, OSError) as exc:
        raise SourceError(f"amqp source: cannot connect to {settings.describe()}: {type(exc).__name__}: {exc}") from exc


class StreamTails:
    """The driver's view of the streams: first and next offsets, and offsets for points in
    time.  Holds one connection, opened on first use and again after a failure."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._connection: Any = None
        self._channel: Any = None

    def _open(self) -> Any:
        if self._connection is None or not self._connection.is_open or not self._channel.is_open:
            self.close()
            self._connection = _connect(self.settings)
            self._channel = self._connection.channel()
        return self._channel

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # closing is best effort: the connection may be gone already
                log.debug("closing the source's driver connection failed", exc_info=True)

    def offsets(self, stream: str) -> tuple[Optional[int], int]:
        """(first offset or None when empty, the next offset to be written)."""
        from amqwire.client import AMQPError, NotAStream, NotFound

        try:
            found = self._open().stream_offsets(stream, wait=0.5)
        except NotFound:
            self.close()
            raise StreamUnavailable(f"amqp source: stream {stream!r} does not exist on {self.settings.describe()}",
                                    stream) from None
        except NotAStream:
            self.close()
            raise StreamUnavailable(f"amqp source: {stream!r} is not a stream queue (a classic or quorum queue); "
                                    "the source reads queues declared with x-queue-type=stream", stream) from None
        except (AMQPError, OSError) as exc:
            self.close()
            raise SourceError(f"amqp source: finding the offsets of stream {stream!r} failed: "
                              f"{type(exc).__name__}: {exc}", stream) from exc
        if found.last is None:
            return None, 0
        return found.first, found.last + 1

    def offset_at(self, stream: str, millis: int, tail: int) -> int:
        """The first offset of the first chunk the stream wrote at or after ``millis``
        (whole seconds: RabbitMQ keeps chunk timestamps to the second); ``tail`` when none."""
        from amqwire.client import AMQPError

        moment = datetime.datetime.fromtimestamp(millis // 1000, tz=datetime.timezone.utc)
        self._open()
        try:
            channel, consumer = consume_stream(self._connection, stream, offset=moment, prefetch=10)
            try:
                message = consumer.get(timeout=0.5)
            finally:
                channel.close()
        except (AMQPError, OSError) as exc:
            self.close()
            raise SourceError(f"amqp source: finding the offset of {millis} ms in stream {stream!r} failed: "
                              f"{type(exc).__name__}: {exc}", stream) from exc
        if message is None or message.stream_offset is None:
            return tail
        return min(int(message.stream_offset), tail)

    def resolve(self, stream: str, position: Position, first: Optional[int], tail: int) -> int:
        if position.kind == "earliest":
            return tail if first is None else first
        if position.kind == "latest":
            return tail
        if position.kind == "timestamp":
            return self.offset_at(stream, position.value, tail)
        return position.value


def driver_tails(settings: SourceSettings) -> StreamTails:
    """The driver's view of the streams, over the protocol of the url."""
    if settings.protocol == "stream":
        from amqwire.spark.stream_source import StreamProtocolTails

        return StreamProtocolTails(settings)
    return StreamTails(settings)


def read_partition(settings: SourceSettings, part: StreamRange) -> Iterator[Any]:
    """One task's batches, over the protocol of the url."""
    if settings.protocol == "stream":
        from amqwire.spark.stream_source import read_stream_range

        return read_stream_range(settings, part)
    return read_range(settings, part)


# ----------------------------------------------------------------------------- partitions


class StreamRange(InputPartition):
    """One task's share: the messages of ``stream`` with offsets in ``[start, end)``."""

    def __init__(self, stream: str, start: int, end: int) -> None:
        super().__init__((stream, start, end))
        self.stream = stream
        self.start = start
        self.end = end

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamRange) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"StreamRange({self.stream!r}, {self.start}, {self.end})"


def split_ranges(ranges: Sequence[tuple[str, int, int]], min_partitions: Optional[int]) -> list[StreamRange]:
    """A StreamRange per non-empty range; with ``min_partitions``, ranges are cut into
    pieces of about equal span until there are at least that many (a large range gets more
    pieces than a small one, as in the Kafka source)."""
    ranges = [(stream, start, end) for stream, start, end in ranges if end > start]
    if not min_partitions or len(ranges) >= min_partitions:
        return [StreamRange(*r) for r in ranges]
    total = sum(end - start for _, start, end in ranges)
    parts: list[StreamRange] = []
    for stream, start, end in ranges:
        span = end - start
        pieces = max(1, min(span, round(min_partitions * span / total)))
        for index in range(pieces):
            low = start + span * index // pieces
            high = start + span * (index + 1) // pieces
            parts.append(StreamRange(stream, low, high))
    return parts


def capped(start: dict[str, int], end: dict[str, int], limit: int) -> dict[str, int]:
    """``end`` moved back so that the micro-batch spans at most ``limit`` offsets over all
    streams, shared in proportion to how far each stream is behind (largest remainders get
    the rounding), so every stream behind moves on."""
    behind = {stream: end[stream] - start[stream] for stream in end if end[stream] > start[stream]}
    total = sum(behind.values())
    if total <= limit:
        return dict(end)
    shares = {stream: limit * lag / total for stream, lag in behind.items()}
    granted = {stream: int(share) for stream, share in shares.items()}
    left = limit - sum(granted.values())
    for stream in sorted(shares, key=lambda s: shares[s] - granted[s], reverse=True)[:left]:
        granted[stream] += 1
    return {stream: start[stream] + granted.get(stream, 0) if stream in behind else end[stream] for stream in end}


# ----------------------------------------------------------------------------- reading


def read_range(settings: SourceSettings, part: StreamRange) -> Iterator[Any]:
    """One task: the messages of ``part`` as Arrow record batches of ``batch_rows`` rows,
    read with a stream consumer from ``part.start`` up to the last offset below ``part.end``.

    At the end, a DEBUG line on the ``amqwire.spark`` logger says where the task's time
    went: the consume loop (waiting for the broker included), building the batches, and
    Spark's own work between two batches (the generator is suspended then)."""
    from amqwire.client import AMQPError

    clock = time.perf_counter
    started = clock()
    connection = _connect(settings)
    stream = part.stream
    read = 0
    reading = building = in_spark = 0.0
    batches = 0
    try:
        channel, consumer = consume_stream(connection, stream, offset=part.start, end=part.end - 1,
                                           prefetch=settings.prefetch)
        get = consumer.get
        timeout = settings.read_timeout
        batch_rows = settings.batch_rows
        pending: list[Any] = []
        append = pending.append
        mark = clock()
        message = get(timeout)
        if consumer.truncated:  # known from the first delivery
            _check_loss(settings, channel, part)
        while message is not None:
            append(message)
            if len(pending) >= batch_rows:
                now = clock()
                reading += now - mark
                batch = build_batch(pending, stream)
                read += len(pending)
                pending.clear()
                batches += 1
                mark = clock()
                building += mark - now
                yield batch
                now = clock()
                in_spark += now - mark
                mark = now
            message = get(timeout)
        reading += clock() - mark
        if consumer.active:
            raise SourceError(f"amqp source: no message from stream {stream!r} for {settings.read_timeout} s "
                              f"after {read + len(pending)} of offsets [{part.start}, {part.end}) (readTimeout)",
                              stream)
        if pending:
            now = clock()
            batch = build_batch(pending, stream)
            read += len(pending)
            batches += 1
            building += clock() - now
            yield batch
        log.debug("amqp source: %d messages of stream %r offsets [%d, %d) in %.3f s: %.3f s in the consume loop "
                  "(waiting for the broker included), %.3f s building %d Arrow batches, %.3f s in Spark between "
                  "batches", read, stream, part.start, part.end, clock() - started, reading, building, batches,
                  in_spark)
    except AMQPError as exc:
        raise SourceError(f"amqp source: reading stream {stream!r} offsets [{part.start}, {part.end}) failed after "
                          f"{read} messages: {type(exc).__name__}: {exc}", stream) from exc
    finally:
        try:
            connection.close()
        except Exception:  # the task's outcome is decided
            log.debug("closing the source's connection failed", exc_info=True)


def consume_stream(connection: Any, stream: str, **options: Any) -> tuple[Any, Any]:
    """(channel, consumer): a stream consumer on a new channel of ``connection``.  A node
    that says it has no running replica of the stream (RabbitMQ 3.10 also says so while the
    replica restarts or its coordinator is slow) is asked again on a new channel, for up to
    ``REPLICA_WAIT`` seconds."""
    from amqwire.client import StreamReplicaUnavailable
    from amqwire.client.streams import ReplicaWait

    replica = ReplicaWait(None)
    while True:
        channel = connection.channel()
        try:
            return channel, channel.consume_stream(stream, **options)
        except StreamReplicaUnavailable as exc:
            time.sleep(replica.next_delay(exc))


def _check_loss(settings: SourceSettings, channel: Any, part: StreamRange) -> None:
    """The first delivery came after the start: retention removed the start, or the start
    is one of the stream's own entries (offsets are not dense).  The stream's first offset
    tells which."""
    first = channel.stream_offsets(part.stream, wait=0.5).first
    if first is None or first <= part.start:
        return
    if settings.fail_on_data_loss:
        raise DataLoss(part.stream, part.start, first)
    lost = min(first, part.end) - part.start
    log.warning("amqp source: stream %r: %d offsets (%d..%d) were removed by retention before they were read; "
                "skipped (failOnDataLoss=false)", part.stream, lost, part.start, part.start + lost - 1)


# ----------------------------------------------------------------------------- readers


class AMQPBatchReader(DataSourceReader):
    """``spark.read.format("amqp")``: the offset ranges are fixed on the driver, when the
    reader is made (``endingOffsets`` latest: the tails at that moment)."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        tails = driver_tails(settings)
        ranges = []
        try:
            ending = dict(settings.ending)
            for stream, start_at in settings.starting:
                first, tail = tails.offsets(stream)
                start = tails.resolve(stream, start_at, first, tail)
                end_at = ending[stream]
                end = tails.resolve(stream, end_at, first, tail)
                if end > tail:
                    log.info("amqp source: stream %r ends at %d, before the end asked for (%d): reading up to %d",
                             stream, tail, end, tail)
                    end = tail
                if start > end and start_at.kind == "offset":
                    raise SourceOptionError(start_at.option, f"stream {stream!r}: start offset {start} is after the "
                                                             f"end {end}")
                ranges.append((stream, start, max(start, end)))
        finally:
            tails.close()
        self.ranges = tuple(ranges)

    def partitions(self) -> list[InputPartition]:
        return list(split_ranges(self.ranges, self.settings.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, StreamRange):  # Spark's stand-in partition for an empty read
            return iter(())
        return read_partition(self.settings, partition)


class AMQPStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("amqp")``: offsets are a JSON map stream -> next offset."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._tails: Optional[StreamTails] = None
        self._target: Optional[dict[str, int]] = None
        self._initial: Optional[dict[str, int]] = None
        # Nothing is asked of the broker here: load() checked the streams, and an error
        # raised while Spark makes the reader reaches the user behind an unrelated one of
        # Spark's (its runner's UnboundLocalError).  The first offsets asked connect.
        self._stored: dict[str, int] = {}  # consumerName: the offsets stored so far

    def __getstate__(self) -> dict[str, Any]:  # read() on the executors needs the settings only
        return {**self.__dict__, "_tails": None}

    def _driver(self) -> StreamTails:
        if self._tails is None:
            self._tails = driver_tails(self.settings)
        return self._tails

    def _latest(self) -> dict[str, int]:
        tails = self._driver()
        return {stream: tails.offsets(stream)[1] for stream in self.settings.streams}

    def initialOffset(self) -> dict[str, int]:
        if self._initial is None:
            tails = self._driver()
            initial = {}
            for stream, position in self.settings.starting:
                first, tail = tails.offsets(stream)
                initial[stream] = tails.resolve(stream, position, first, tail)
            self._initial = initial
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_offsets_per_trigger:
            return ReadMaxRows(self.settings.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()
        log.info("amqp source: Trigger.AvailableNow reads up to %s", self._target)

    def _started(self, start: dict[str, int]) -> dict[str, int]:
        """``start`` for every stream of the option (one added since the checkpoint starts
        where startingOffsets says)."""
        missing = [stream for stream in self.settings.streams if stream not in start]
        if not missing:
            return {stream: int(start[stream]) for stream in self.settings.streams}
        initial = self.initialOffset()
        return {stream: int(start[stream]) if stream in start else initial[stream] for stream in self.settings.streams}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = self._started(start)
        latest = self._target if self._target is not None else self._latest()
        end = {stream: max(begin[stream], latest.get(stream, begin[stream])) for stream in begin}
        if isinstance(limit, ReadMaxRows):
            end = capped(begin, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> Optional[dict[str, int]]:
        return None  # latestOffset already asked the broker; asking twice per trigger costs a probe per stream

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        begin = self._started(start)
        ranges = [(stream, begin.get(stream, int(stop)), int(stop)) for stream, stop in end.items()]
        return list(split_ranges(ranges, self.settings.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.settings, partition)  # type: ignore[arg-type]

    def commit(self, end: dict[str, int]) -> None:
        log.debug("amqp source: committed up to %s", end)
        name = self.settings.consumer_name
        if name is None:
            return
        tails = self._driver()
        for stream, offset in end.items():
            if int(offset) > 0 and self._stored.get(stream) != int(offset):
                tails.store_offset(stream, name, int(offset) - 1)  # type: ignore[attr-defined]
                self._stored[stream] = int(offset)

    def stop(self) -> None:
        if self._tails is not None:
            self._tails.close()


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """What ``streamReader()`` gives for options only a stream query refuses (an end):
    every call Spark makes raises the error, so that it reaches the user as it is, not
    behind the UnboundLocalError that Spark's runner raises when making the reader fails."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, int]:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        raise self.error

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.error

    def stop(self) -> None:
        pass
