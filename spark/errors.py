"""Errors of amqwire.spark: bad rows, unsupported column types, failed publishes, bad
source options, streams that cannot be read; all are ``amqwire.codec.AmqwireError``s, with
the builtin each stands for as a second base."""
from __future__ import annotations

import re
from typing import Any, Optional

from amqwire.codec.errors import AMQPSyntaxError, AmqwireError

__all__ = ["ArrowTypeError", "DataLoss", "MessageRowError", "RecordError", "RowEncodeError", "SinkError", "SourceError",
           "SourceOptionError", "StreamUnavailable", "source_error"]


class ArrowTypeError(AmqwireError, TypeError):
    """A column's Arrow type cannot be encoded (or is malformed); the message names it."""


class RowEncodeError(AMQPSyntaxError):
    """A row that cannot become a publish: a null routing key, a short string over 255
    bytes, an out-of-range property.  ``row`` is the row's index in its batch, ``field``
    the column or property at fault and ``problem`` what is wrong with it."""

    def __init__(self, message: Optional[str] = None, *, row: int, field: str, problem: str = "") -> None:
        super().__init__(message if message is not None else f"row {row}: {field}: {problem}")
        self.row = row
        self.field = field
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:  # picklable, so Spark can ship it from a worker
        return (_rebuild_row_error, (str(self), self.row, self.field, self.problem), self.__dict__)


def _rebuild_row_error(message: str, row: int, field: str, problem: str = "") -> RowEncodeError:
    return RowEncodeError(message, row=row, field=field, problem=problem)


class SinkError(AmqwireError, RuntimeError):
    """A write task of the "amqp" data source could not get every row confirmed.

    ``rows_confirmed`` rows of the task were confirmed before the failure; the task's rows
    may be published again when Spark retries it (delivery is at-least-once).
    """

    def __init__(self, message: str, *, rows_confirmed: int = 0, reply_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.rows_confirmed = rows_confirmed
        self.reply_code = reply_code

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_sink_error, (str(self), self.rows_confirmed, self.reply_code), self.__dict__)


def _rebuild_sink_error(message: str, rows_confirmed: int, reply_code: Optional[int]) -> SinkError:
    return SinkError(message, rows_confirmed=rows_confirmed, reply_code=reply_code)


class MessageRowError(AmqwireError, ValueError):
    """A received message that cannot become a row of a stream source's batch: no stream
    offset, or a field of a type no column holds (a message built by hand).  ``index`` is
    the message's position in the sequence given, ``field`` the attribute at fault."""

    def __init__(self, message: Optional[str] = None, *, index: int, field: str, problem: str = "") -> None:
        super().__init__(message if message is not None else f"message {index}: {field}: {problem}")
        self.index = index
        self.field = field
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_message_error, (str(self), self.index, self.field, self.problem), self.__dict__)


def _rebuild_message_error(message: str, index: int, field: str, problem: str = "") -> MessageRowError:
    return MessageRowError(message, index=index, field=field, problem=problem)


class SourceOptionError(AmqwireError, ValueError):
    """An option of ``spark.read`` / ``spark.readStream.format("amqp")`` is missing or
    wrong; raised on the driver before any task runs.  ``option`` is its name (snake_case)."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(option, problem)
        self.option = option
        self.problem = problem

    def __str__(self) -> str:
        return f"amqp source option {self.option}: {self.problem}"


class SourceError(AmqwireError, RuntimeError):
    """Reading a stream with the "amqp" source failed; ``stream`` names it (None when the
    failure is not one stream's)."""

    def __init__(self, message: str, stream: Optional[str] = None) -> None:
        super().__init__(message, stream)
        self.stream = stream

    def __str__(self) -> str:
        return str(self.args[0])


class StreamUnavailable(SourceError):
    """A stream given to the "amqp" source does not exist, or is a classic or quorum queue."""


class DataLoss(SourceError):
    """Offsets Spark still had to read were removed by the stream's retention, and
    ``failOnDataLoss`` is true: ``requested`` was the next offset to read, ``first_offset``
    is the first one the stream still holds."""

    def __init__(self, stream: str, requested: int, first_offset: int) -> None:
        AmqwireError.__init__(self, stream, requested, first_offset)
        self.stream = stream
        self.requested = requested
        self.first_offset = first_offset

    @property
    def lost(self) -> int:
        """How many offsets were removed (at most: some offsets are the stream's own entries)."""
        return self.first_offset - self.requested

    def __str__(self) -> str:
        return (f"stream {self.stream!r}: offsets {self.requested}..{self.first_offset - 1} were removed by "
                f"retention before they were read ({self.lost} offsets lost); set failOnDataLoss=false to "
                f"skip them, or start again from a new checkpoint")


class RecordError(SourceError):
    """A record of a stream, read over the stream protocol, starts like an AMQP 1.0 message
    but is not a well-formed one: ``offset`` is its offset, ``position`` the byte of the
    record where decoding stopped."""

    def __init__(self, stream: str, offset: int, problem: str, position: int) -> None:
        AmqwireError.__init__(self, stream, offset, problem, position)
        self.stream = stream
        self.offset = offset
        self.problem = problem
        self.position = position

    def __str__(self) -> str:
        return (f"amqp source: stream {self.stream!r} offset {self.offset}: not a well-formed AMQP 1.0 message: "
                f"{self.problem} (byte {self.position} of the record)")


# How a Python worker's error reaches the user inside Spark's own exception: the
# traceback's last line, "amqwire.spark.errors.<class>: <message>".
_IN_SPARK = re.compile(r"^(?:amqwire\.spark\.errors\.)?(SourceOptionError|StreamUnavailable|SourceError|DataLoss): (.+)$",
                       re.M)
_OPTION = re.compile(r"amqp source option (\w+): (.*)")
_LOSS = re.compile(r"stream '(.+)': offsets (\d+)\.\.(\d+) were removed")


def source_error(error: BaseException) -> Optional[SourceError | SourceOptionError]:
    """The "amqp" source's own error inside an exception Spark raised (an
    ``AnalysisException`` from ``load()``, a ``StreamingQueryException``, a failed job),
    rebuilt with its class and one-line message; None when the failure is not the source's.

    Spark shows a Python data source's error as text behind its own first line
    (``[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: ...``):
    ``except AnalysisException as exc: raise source_error(exc) or exc``."""
    texts: list[str] = []
    seen: Optional[BaseException] = error
    while seen is not None and len(texts) < 10:
        texts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    for text in texts:
        matches = list(_IN_SPARK.finditer(text))
        if matches:
            found = matches[-1]  # the error the traceback ends with
            break
    else:
        return None
    name, message = found.group(1), found.group(2).strip()
    if name == "SourceOptionError":
        option = _OPTION.match(message)
        return SourceOptionError(option.group(1), option.group(2)) if option else SourceOptionError("options", message)
    if name == "DataLoss":
        loss = _LOSS.match(message)
        if loss:
            return DataLoss(loss.group(1), int(loss.group(2)), int(loss.group(3)) + 1)
        return SourceError(message)
    return StreamUnavailable(message) if name == "StreamUnavailable" else SourceError(message)
