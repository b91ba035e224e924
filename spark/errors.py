"""Errors of amqwire.spark: bad rows, unsupported column types, failed publishes; all are
``amqwire.codec.AmqwireError``s, with the builtin each stands for as a second base."""
from __future__ import annotations

from typing import Any, Optional

from amqwire.codec.errors import AMQPSyntaxError, AmqwireError

__all__ = ["ArrowTypeError", "MessageRowError", "RowEncodeError", "SinkError"]


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
