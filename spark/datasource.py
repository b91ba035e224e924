"""The "amqp" Spark data source: DataFrames published to RabbitMQ, batch and streaming
(reading RabbitMQ streams: amqwire.spark.source).

    import amqwire.spark
    amqwire.spark.register(spark)
    (df.write.format("amqp").mode("append")
       .option("url", "amqp://guest:guest@127.0.0.1:5672/")
       .option("routing_key", "orders")
       .save())

Columns, as in Spark's Kafka sink: ``body`` (binary or string; a struct with
``body_format`` json/table) is required; ``routing_key``, ``exchange`` (the options of the
same names override the columns), ``headers`` (map) and ``properties`` (struct of basic
properties) are optional.  Any other column is an error, but the one the
``traceparentColumn`` option names: a string column of W3C trace contexts, each written
into its row's headers as ``traceparent`` (see docs/tracing.md).

Each task opens its own connection in ``write()``, encodes every Arrow batch into publish
frames in one pass and sends them with pipelined publisher confirms; its commit message
(rows, bytes, seconds) goes back only once the broker has confirmed every row.  A nack, a
return (``mandatory``) or a lost connection fails the task.  Delivery is at-least-once: a
task that fails after some of its rows were confirmed, and is retried by Spark, publishes
those rows again; a query that fails leaves the rows of its finished tasks published.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Iterator, List, Optional

from pyspark.sql import datasource as _ds
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from amqwire.client.url import parameters_list, parse_option
from amqwire.spark.encode import PublishEncoder
from amqwire.codec.errors import AmqwireError
from amqwire.spark.errors import SinkError
from amqwire.spark.workers import workers_run_this_python

if TYPE_CHECKING:
    from amqwire.client.blocking import Channel, Connection, PublishFuture

__all__ = ["AMQPDataSource", "AMQPCommitMessage", "SinkSettings", "publish_batches", "register"]

log = logging.getLogger("amqwire.spark")

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
COLUMNS = ("body", "routing_key", "exchange", "headers", "properties")
_BOOLEANS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
# amqp.* options that are not URL options but arguments of connect()
_CONNECT_OPTIONS = {"blocked_action": str, "blocked_timeout": float}
_SINK_OPTIONS = {
    "url", "exchange", "routing_key", "mandatory", "confirm_window", "confirm_timeout",
    "frame_max", "body_format", "traceparent_column",
}
# Spark's camelCase spellings (options arrive lower-cased: Spark's options are
# case-insensitive) of the snake_case names.
_ALIASES = {
    "routingkey": "routing_key", "confirmwindow": "confirm_window", "confirmtimeout": "confirm_timeout",
    "bodyformat": "body_format", "framemax": "frame_max", "traceparentcolumn": "traceparent_column",
}
# Options Spark itself hands every data source (the save() path, streaming bookkeeping).
_SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}


@dataclasses.dataclass
class AMQPCommitMessage(WriterCommitMessage):
    """What one task published, sent to the driver once every row was confirmed."""

    rows: int
    bytes: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class SinkSettings:
    """The options of one write, checked on the driver; pickled to the executors."""

    parameters: tuple[Any, ...]  # ConnectionParameters to try in order
    exchange: Optional[str]
    routing_key: Optional[str]
    mandatory: bool
    confirm_window: int
    confirm_timeout: float
    frame_max: Optional[int]
    body_format: str
    connect_kwargs: tuple[tuple[str, Any], ...]  # (name, value) pairs for connect()
    columns: tuple[str, ...]  # the DataFrame's column names, in order
    traceparent_column: Optional[str] = None  # a column of W3C traceparents, written into the headers

    @classmethod
    def from_options(cls, options: Any, schema: StructType) -> "SinkSettings":
        options = _canonical(options)
        for key in options:
            if key not in _SINK_OPTIONS and key not in _SPARK_OPTIONS and not key.startswith("amqp."):
                raise ValueError(
                    f"unknown option {key!r} for the amqp data source (known: "
                    f"{', '.join(sorted(_SINK_OPTIONS))} (or routingKey, confirmWindow, confirmTimeout, "
                    f"bodyFormat, frameMax, traceparentColumn), and amqp.* connection options)"
                )
        frame_max = None
        if options.get("frame_max") is not None:
            frame_max = _int_option(options, "frame_max", 4096, 0xFFFFFFFF)
        parameters, connect_kwargs = connection_options(options, frame_max=frame_max)
        names = tuple(field.name for field in schema.fields)
        traceparent_column = options.get("traceparent_column")
        if traceparent_column is not None:
            if traceparent_column not in names:
                raise ValueError(f"traceparentColumn: the DataFrame has no column {traceparent_column!r}")
            if traceparent_column in COLUMNS:
                raise ValueError(f"traceparentColumn: {traceparent_column!r} is one of the sink's own columns")
            from .trace_headers import check_types

            check_types(schema[traceparent_column].dataType,
                        schema["headers"].dataType if "headers" in names else None)
        unknown = [name for name in names if name not in COLUMNS and name != traceparent_column]
        if unknown:
            raise ValueError(
                f"the amqp data source does not know the column(s) {', '.join(map(repr, unknown))}; "
                f"it writes {', '.join(COLUMNS)} (select or rename before writing)"
            )
        if "body" not in names:
            raise ValueError("the amqp data source needs a 'body' column (binary, string, or a struct "
                             "with body_format json/table)")
        routing_key = options.get("routing_key")
        if routing_key is None and "routing_key" not in names:
            raise ValueError("no routing key: give a routing_key column or the routing_key option")
        body_format = options.get("body_format", "raw")
        settings = cls(
            parameters=parameters,
            exchange=options.get("exchange"),
            routing_key=routing_key,
            mandatory=_bool_option(options, "mandatory", False),
            confirm_window=_int_option(options, "confirm_window", 1, 10_000_000, 20000),
            confirm_timeout=_float_option(options, "confirm_timeout", 120.0),
            frame_max=frame_max,
            body_format=body_format,
            connect_kwargs=connect_kwargs,
            columns=names,
            traceparent_column=traceparent_column,
        )
        settings.encoder(1, frame_max or 131072)  # bad encoder settings fail here, on the driver
        return settings

    def encoder(self, channel: int, frame_max: int) -> PublishEncoder:
        return PublishEncoder(
            channel=channel,
            frame_max=frame_max,
            mandatory=self.mandatory,
            body_format=self.body_format,
            exchange=self.exchange,
            routing_key=self.routing_key,
        )

    def describe(self) -> str:
        target = self.exchange if self.exchange is not None else ("column" if "exchange" in self.columns else "''")
        return f"{', '.join(str(p) for p in self.parameters)} exchange={target}"


def connection_options(options: dict[str, Any], **overrides: Any) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]:
    """The connection settings of a read or a write, from its canonical options: the
    ConnectionParameters to try in order (``url``, a list, or ``path`` as in
    ``save(url)``/``load(url)``, with the ``amqp.*`` URL options and ``overrides`` applied)
    and the (name, value) pairs for connect().  ValueError naming the option."""
    url_list = _url_list(options)
    url_overrides: dict[str, Any] = {}
    connect_kwargs: dict[str, Any] = {}
    for key, value in options.items():
        if not key.startswith("amqp."):
            continue
        name = key[len("amqp."):]
        if name in _CONNECT_OPTIONS:
            try:
                connect_kwargs[name] = _CONNECT_OPTIONS[name](value)
            except ValueError:
                raise ValueError(f"option {key}: {value!r} is not a {_CONNECT_OPTIONS[name].__name__}") from None
        else:
            try:
                url_overrides[name] = parse_option(name, value)
            except ValueError as exc:
                raise ValueError(f"option {key}: {exc}") from None
    url_overrides.update((name, value) for name, value in overrides.items() if value is not None)
    return tuple(parameters_list(url_list, **url_overrides)), tuple(sorted(connect_kwargs.items()))


STREAM_SCHEMES = ("rabbitmq-stream://", "rabbitmq-stream+tls://")


def _url_list(options: dict[str, Any]) -> list[str]:
    urls = options.get("url") or options.get("path") or DEFAULT_URL
    return [part.strip() for part in urls.replace(",", " ").split()] if isinstance(urls, str) else list(urls)


def uses_stream_protocol(options: dict[str, Any]) -> bool:
    """Whether the ``url`` option names the stream protocol (``rabbitmq-stream://``) rather
    than AMQP 0-9-1; ValueError for a list that mixes the two."""
    urls = _url_list(options)
    stream = [str(url).lower().startswith(STREAM_SCHEMES) for url in urls]
    if any(stream) and not all(stream):
        raise ValueError("the url list mixes rabbitmq-stream:// and amqp:// URLs: give one protocol")
    return bool(stream) and all(stream)


def stream_connection_options(options: dict[str, Any]) -> tuple[Any, ...]:
    """The StreamParameters of a read or a write over the stream protocol, from its canonical
    options: the ``url`` list, with the ``amqp.*`` connection options (``amqp.heartbeat``,
    ``amqp.frame_max``, ``amqp.connection_timeout``, TLS's ``amqp.cafile`` ...) applied.
    ValueError naming the option."""
    from amqwire.client.stream.url import _QUERY_OPTIONS, stream_parameters_list

    overrides: dict[str, Any] = {}
    for key, value in options.items():
        if not key.startswith("amqp."):
            continue
        name = key[len("amqp."):]
        parser = _QUERY_OPTIONS.get(name)
        if parser is None:
            raise ValueError(f"option {key}: not a stream-protocol connection option (known: "
                             f"{', '.join('amqp.' + known for known in _QUERY_OPTIONS)})")
        try:
            overrides[name] = parser(name, str(value))
        except ValueError as exc:
            raise ValueError(f"option {key}: {exc}") from None
    return tuple(stream_parameters_list(_url_list(options), **overrides))


def _canonical(options: Any, aliases: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Lower-cased option names with the camelCase spellings (``aliases``, the sink's by
    default) mapped onto the snake_case ones; the same option given under both names is an
    error."""
    aliases = _ALIASES if aliases is None else aliases
    canonical: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for key, value in dict(options).items():
        lowered = str(key).lower()
        name = aliases.get(lowered, lowered)
        if name in canonical:
            raise ValueError(f"option {name} is given twice (as {given[name]!r} and {key!r}): keep one")
        canonical[name] = value
        given[name] = key
    return canonical


def _int_option(options: dict[str, Any], key: str, low: int, high: int, default: Optional[int] = None) -> int:
    value = options.get(key)
    if value is None:
        return default  # type: ignore[return-value]
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"option {key} must be in {low}..{high}, not {number}")
    return number


def _float_option(options: dict[str, Any], key: str, default: float) -> float:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"option {key} must be a number of seconds, not {value!r}") from None
    if not number > 0:
        raise ValueError(f"option {key} must be > 0, not {value!r}")
    return number


def _bool_option(options: dict[str, Any], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    parsed = _BOOLEANS.get(str(value).strip().lower())
    if parsed is None:
        raise ValueError(f"option {key} must be true or false, not {value!r}")
    return parsed


# ------------------------------------------------------------------------------- publishing

def publish_batches(settings: SinkSettings, batches: Iterator[Any]) -> AMQPCommitMessage:
    """One task's rows: connect on the first non-empty batch, publish each batch as one
    write with pipelined confirms, return once every row is confirmed."""
    from amqwire.client import AMQPError, ConnectionBlockedError, connect

    started = time.monotonic()
    rows = confirmed = sent_bytes = 0
    conn: Optional[Connection] = None
    channel: Optional[Channel] = None
    encoder: Optional[PublishEncoder] = None
    pending: deque[PublishFuture] = deque()
    try:
        for batch in batches:
            count = batch.num_rows
            if not count:
                continue
            if conn is None or channel is None or encoder is None:
                # No recovery: a lost connection fails the task (its unconfirmed rows with
                # it) and Spark runs the task again, rather than the task waiting here.
                conn = connect(list(settings.parameters), **{"recovery": False, **dict(settings.connect_kwargs)})
                channel = conn.channel()
                channel.confirm_select(max_in_flight=settings.confirm_window)
                encoder = settings.encoder(channel.channel_id, conn.frame_max)
            columns = {name: batch.column(index) for index, name in enumerate(batch.schema.names)}
            if settings.traceparent_column is not None:
                from .trace_headers import with_traceparent

                columns["headers"] = with_traceparent(columns.get("headers"), columns.pop(settings.traceparent_column))
            frames = encoder.encode_frames(**columns)
            # a broker that stops confirming, blocks the connection or pauses the channel
            # fails the task after confirm_timeout instead of hanging it
            future = channel.publish_encoded(frames, count, timeout=settings.confirm_timeout)
            if future is None:  # only without confirm mode, which confirm_select above rules out
                raise SinkError("the channel is not in confirm mode", rows_confirmed=confirmed)
            pending.append(future)
            rows += count
            sent_bytes += len(frames)
            while pending and pending[0].done():
                future = pending.popleft()
                future.result()
                confirmed += future.count
        deadline = time.monotonic() + settings.confirm_timeout
        while pending:
            future = pending[0]
            future.result(timeout=max(deadline - time.monotonic(), 0.001))
            pending.popleft()
            confirmed += future.count
    except (TimeoutError, ConnectionBlockedError) as exc:
        if isinstance(exc, ConnectionBlockedError):
            raise SinkError(
                f"amqp sink: the broker blocked publishing ({exc}) after {confirmed} of {rows} rows "
                f"were confirmed, by {settings.describe()}",
                rows_confirmed=confirmed,
            ) from exc
        raise SinkError(
            f"amqp sink: {rows - confirmed} of {rows} rows not confirmed within confirm_timeout "
            f"{settings.confirm_timeout} s by {settings.describe()}",
            rows_confirmed=confirmed,
        ) from None
    except AMQPError as exc:
        raise SinkError(
            f"amqp sink: publishing to {settings.describe()} failed after {confirmed} of {rows} "
            f"rows were confirmed: {type(exc).__name__}: {exc}",
            rows_confirmed=confirmed,
            reply_code=_reply_code(exc),
        ) from exc
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:  # the task's outcome is decided; a failing close adds nothing
                log.debug("closing the sink's connection failed", exc_info=True)
    return AMQPCommitMessage(rows=rows, bytes=sent_bytes, seconds=time.monotonic() - started)


def _reply_code(error: Optional[BaseException]) -> Optional[int]:
    """The broker's reply code behind an error (a PublishUnconfirmed carries its cause)."""
    while error is not None:
        code = getattr(error, "reply_code", None)
        if code is not None:
            return int(code)
        error = getattr(error, "cause", None)
    return None


def _summary(messages: List[Optional[WriterCommitMessage]]) -> tuple[int, int, int]:
    done = [m for m in messages if isinstance(m, AMQPCommitMessage)]
    return sum(m.rows for m in done), sum(m.bytes for m in done), len(done)


class AMQPBatchWriter(DataSourceArrowWriter):
    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> AMQPCommitMessage:
        return publish_batches(self.settings, iterator)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, nbytes, tasks = _summary(messages)
        log.info("amqp sink: %d rows (%d bytes) confirmed by %s from %d tasks",
                 rows, nbytes, self.settings.describe(), tasks)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, _, tasks = _summary(messages)
        log.warning("amqp sink: write failed; %d rows of %d finished tasks stay published "
                    "(at-least-once: nothing is taken back)", rows, tasks)


_StreamArrowWriter = getattr(_ds, "DataSourceStreamArrowWriter", None)


class _StreamWriterBase:
    def __init__(self, settings: SinkSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, nbytes, tasks = _summary(messages)
        log.info("amqp sink: micro-batch %d: %d rows (%d bytes) confirmed from %d tasks",
                 batchId, rows, nbytes, tasks)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, _, tasks = _summary(messages)
        log.warning("amqp sink: micro-batch %d failed; %d rows of %d finished tasks stay "
                    "published (at-least-once)", batchId, rows, tasks)


class AMQPStreamRowWriter(_StreamWriterBase, DataSourceStreamWriter):
    """Streaming on Spark 4.0 (no DataSourceStreamArrowWriter): rows come as Row objects
    and are regrouped into Arrow batches of 10,000 before encoding."""

    def write(self, iterator: Iterator[Any]) -> AMQPCommitMessage:
        return publish_batches(self.settings, _rows_to_batches(iterator, self.schema))


if _StreamArrowWriter is not None:

    class AMQPStreamWriter(_StreamWriterBase, _StreamArrowWriter):  # type: ignore[valid-type,misc]
        """Streaming on Spark 4.1+: each micro-batch's partitions come as Arrow batches."""

        def write(self, iterator: Iterator[Any]) -> AMQPCommitMessage:
            return publish_batches(self.settings, iterator)

else:
    AMQPStreamWriter = AMQPStreamRowWriter  # type: ignore[misc,assignment]


def _aware(value: Any) -> Any:
    """Spark hands timestamps to Python as naive local times: make them aware, so Arrow
    stores the right instant."""
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.timezone.utc) if value.tzinfo is None else value
    if isinstance(value, dict):
        return {key: _aware(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_aware(item) for item in value]
    return value


def _rows_to_batches(rows: Iterator[Any], schema: StructType, size: int = 10000) -> Iterator[Any]:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    chunk: list[Any] = []
    for row in rows:
        chunk.append(_aware(row.asDict(recursive=True)))
        if len(chunk) >= size:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)


class AMQPDataSource(DataSource):
    """``format("amqp")``: publishes rows (``df.write`` / ``writeStream``) and reads
    RabbitMQ streams (``spark.read`` / ``readStream``: see amqwire.spark.source)."""

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> str:
        """A read's schema, asked by ``load()`` (writes use the DataFrame's): where the
        options and the streams are checked, so that a bad read fails where it is defined."""
        from amqwire.spark.source import check_read
        from amqwire.spark.stream_rows import STREAM_DDL

        check_read(self.options)
        return STREAM_DDL

    def reader(self, schema: StructType) -> Any:
        from amqwire.spark.source import AMQPBatchReader, SourceSettings, check_schema

        check_schema(schema)
        return AMQPBatchReader(SourceSettings.from_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> Any:
        from amqwire.spark.source import AMQPStreamReader, RefusedStreamReader, SourceSettings, check_schema

        try:
            check_schema(schema)
            return AMQPStreamReader(SourceSettings.from_options(self.options, streaming=True))
        except AmqwireError as error:  # raised here, it would reach the user behind Spark's UnboundLocalError
            return RefusedStreamReader(error)

    #: spark.speculation is on in the session it was registered in (see register())
    speculation = False

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        if overwrite:
            raise ValueError("the amqp data source only appends (a queue cannot be overwritten): "
                             "use .mode('append')")
        if self._stream_protocol():
            from amqwire.spark.stream_sink import StreamSinkSettings

            return StreamBatchWriter(StreamSinkSettings.from_options(self.options, schema))
        return AMQPBatchWriter(SinkSettings.from_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        if self._stream_protocol():
            from amqwire.spark.stream_sink import StreamSinkSettings

            return StreamStreamWriter(StreamSinkSettings.from_options(self.options, schema), schema)
        return AMQPStreamWriter(SinkSettings.from_options(self.options, schema), schema)

    def _stream_protocol(self) -> bool:
        """A write over the stream protocol (a rabbitmq-stream:// url); refused when
        speculative execution could run a task twice at once."""
        if not uses_stream_protocol(_canonical(self.options)):
            return False
        if self.speculation:
            raise ValueError("the amqp sink over the stream protocol stores each row once by deduplication, which "
                             "needs every task of a partition to write the same rows: spark.speculation is on in "
                             "this session, and a speculative copy of a task may read other rows (a "
                             "non-deterministic plan); turn spark.speculation off, or write over amqp://")
        return True


class AMQPDataSourceWithSpeculation(AMQPDataSource):
    """The data source as registered in a session with spark.speculation on (register()):
    writes over the stream protocol are refused there."""

    speculation = True


class StreamBatchWriter(DataSourceArrowWriter):
    """``df.write`` over the stream protocol (amqwire.spark.stream_sink)."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[Any]) -> Any:
        from amqwire.spark.stream_sink import publish_stream_batches

        return publish_stream_batches(self.settings, iterator, streaming=False)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        from amqwire.spark.stream_sink import summary

        rows, stored, skipped, tasks = summary(messages)
        log.info("amqp sink: %d rows to %s from %d tasks: %d stored and confirmed, %d stored before (skipped)",
                 rows, self.settings.describe(), tasks, stored, skipped)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        from amqwire.spark.stream_sink import summary

        rows, _, _, tasks = summary(messages)
        log.warning("amqp sink: write failed; %d rows of %d finished tasks stay stored in the stream: the same "
                    "write run again with the same producerName stores only the others", rows, tasks)


class _StreamProtocolStreamWriter:
    def __init__(self, settings: Any, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        from amqwire.spark.stream_sink import summary

        rows, stored, skipped, tasks = summary(messages)
        log.info("amqp sink: micro-batch %d: %d rows from %d tasks: %d stored and confirmed, %d stored before "
                 "(skipped)", batchId, rows, tasks, stored, skipped)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        log.warning("amqp sink: micro-batch %d failed; when it runs again, the rows already stored are skipped",
                    batchId)


class StreamStreamRowWriter(_StreamProtocolStreamWriter, DataSourceStreamWriter):
    """``writeStream`` over the stream protocol on Spark 4.0: rows regrouped into Arrow batches."""

    def write(self, iterator: Iterator[Any]) -> Any:
        from amqwire.spark.stream_sink import publish_stream_batches

        return publish_stream_batches(self.settings, _rows_to_batches(iterator, self.schema), streaming=True)


if _StreamArrowWriter is not None:

    class StreamStreamWriter(_StreamProtocolStreamWriter, _StreamArrowWriter):  # type: ignore[valid-type,misc]
        """``writeStream`` over the stream protocol, Spark 4.1+: Arrow batches."""

        def write(self, iterator: Iterator[Any]) -> Any:
            from amqwire.spark.stream_sink import publish_stream_batches

            return publish_stream_batches(self.settings, iterator, streaming=True)

else:
    StreamStreamWriter = StreamStreamRowWriter  # type: ignore[misc,assignment]


def register(spark: Any = None) -> None:
    """Make ``format("amqp")`` available in ``spark`` (the active session by default).
    Calling it again for the same session does nothing.

    On a local master with ``PYSPARK_PYTHON`` unset, the session's Python workers are made
    to run this interpreter, so a script started with a venv's python works without
    activating the venv.  Works on Spark Connect sessions too."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("no active SparkSession: pass the session to register(spark)")
    if getattr(spark, "_amqwire_amqp_registered", False):
        return
    workers_run_this_python(spark)
    spark.dataSource.register(AMQPDataSourceWithSpeculation if _speculation(spark) else AMQPDataSource)
    spark._amqwire_amqp_registered = True


def _speculation(spark: Any) -> bool:
    """Whether spark.speculation is on (a setting of the SparkContext: it cannot change
    while the session lives)."""
    try:
        value = spark.conf.get("spark.speculation", "false")
    except Exception:  # a Spark Connect server that does not show it: off, Spark's default
        value = "false"
    return str(value).strip().lower() == "true"
