"""Errors raised by the codec, and the root of every exception amqwire raises.

:class:`AmqwireError` is defined here, in the lowest layer, so that the client, the bridge
and the Spark integration can all derive from it while importing only downward.

Every codec error is a ``ValueError`` carrying the AMQP reply code a peer would send for it,
so a connection can close with the right code: 501 for framing, 502 for malformed
method arguments, properties or tables, 505 for a frame where another was due.
"""
from __future__ import annotations

from typing import Any

__all__ = [
    "AmqwireError",
    "CodecError",
    "FrameError",
    "AMQPSyntaxError",
    "UnsupportedValueError",
    "UnexpectedFrame",
    "ProtocolHeaderError",
    # the stream protocol (amqwire.codec.stream)
    "StreamFrameError",
    "ChunkError",
]

FRAME_ERROR = 501
SYNTAX_ERROR = 502
UNEXPECTED_FRAME = 505


class AmqwireError(Exception):
    """The root of every exception amqwire raises (codec, client, Producer, bridge, spark).

    Each subclass also keeps the builtin it stands for (``ValueError``, ``TimeoutError``,
    ``TypeError``, ``RuntimeError``, ...), so ``except AmqwireError`` catches everything of
    ours and ``except ValueError`` still catches what it did before."""


class CodecError(AmqwireError, ValueError):
    """Base class: malformed or unencodable AMQP data."""

    reply_code: int = SYNTAX_ERROR

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        #: Frames or commands completely parsed before the bad input, in order.
        #: Set by the parsers so that nothing received before the error is lost.
        self.parsed: list[Any] = []


class FrameError(CodecError):
    """Bad framing: end octet, unknown frame type, size over frame_max (501)."""

    reply_code = FRAME_ERROR


class AMQPSyntaxError(CodecError):
    """Malformed method arguments, properties or field tables, or values that
    cannot be encoded in their AMQP domain (502)."""

    reply_code = SYNTAX_ERROR


class UnsupportedValueError(AMQPSyntaxError, TypeError):
    """A Python value with no AMQP field type (also a ``TypeError``)."""


class UnexpectedFrame(CodecError):
    """A frame arrived where the protocol expects another kind (505)."""

    reply_code = UNEXPECTED_FRAME


class ProtocolHeaderError(FrameError):
    """The peer answered with a protocol header: it does not speak AMQP 0-9-1,
    or it rejected ours.  ``offered`` is the header it sent, as bytes."""

    def __init__(self, message: str, offered: bytes) -> None:
        super().__init__(message, offset=0)
        self.offered = offered

    def __reduce__(self) -> tuple[Any, ...]:
        # BaseException pickles as cls(*self.args): ``offered`` is not among the args.
        return (type(self), (str(self), self.offered), self.__dict__)


# --- the stream protocol (amqwire.codec.stream) ------------------------------------------

#: The stream protocol's response codes for the two ways a frame can be refused.
STREAM_UNKNOWN_FRAME = 0x0D
STREAM_FRAME_TOO_LARGE = 0x0E


class StreamFrameError(CodecError):
    """A stream-protocol frame that cannot be parsed or a command that cannot be encoded:
    unknown key or version, a size over ``max_frame_size``, a truncated or over-long
    command, a field out of its range.  ``key`` and ``version`` name the command when they
    were read; ``offset`` is the byte offset in what the parser was fed (or in the frame);
    ``response_code`` is the stream protocol's code for closing a connection over it
    (0x0d unknown frame, 0x0e frame too large)."""

    reply_code = FRAME_ERROR

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        key: int | None = None,
        version: int | None = None,
        response_code: int = STREAM_UNKNOWN_FRAME,
    ) -> None:
        super().__init__(message, offset=offset)
        self.key = key
        self.version = version
        self.response_code = response_code


class ChunkError(CodecError):
    """An Osiris chunk (what a stream-protocol deliver carries) that cannot be read: bad
    magic or version, sizes that do not add up, a CRC32 that does not match its data, a
    sub-entry compressed with a codec this process lacks.  ``first_offset`` is the chunk's
    first offset (None when its header could not be read); ``offset`` the byte offset in
    the chunk."""

    def __init__(self, message: str, *, offset: int | None = None, first_offset: int | None = None) -> None:
        super().__init__(message, offset=offset)
        self.first_offset = first_offset
