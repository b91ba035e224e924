"""Exceptions of the stream-protocol client.

Every response code of RabbitMQ's stream protocol has its class (``StreamDoesNotExist`` for
0x02, ...), raised by the request the broker answered with it, each with one clear line
naming the request and what it was about.  All derive from :class:`StreamClientError`, an
``AMQPError`` and so an ``AmqwireError`` (the root of every exception amqwire raises).  What
means "the connection is gone or going" is an ``AMQPConnectionError`` on both protocols
(``ConnectionLost`` and ``OperationTimeout`` are the 0-9-1 client's own classes); the codes
of a refused login are also ``AuthenticationError``.  No text ever holds a password.
"""
from __future__ import annotations

from typing import Optional

from ..errors import AMQPConnectionError, AMQPError, AuthenticationError

__all__ = [
    "StreamClientError", "InvalidStreamUrl", "StreamResponseError", "StreamDoesNotExist",
    "SubscriptionIdAlreadyExists", "SubscriptionIdDoesNotExist", "StreamAlreadyExists", "StreamNotAvailable",
    "SaslMechanismNotSupported", "StreamAuthenticationFailure", "SaslError", "SaslChallenge",
    "AuthenticationFailureLoopback", "VirtualHostAccessFailure", "UnknownFrame", "FrameTooLarge",
    "StreamInternalError", "StreamAccessRefused", "StreamPreconditionFailed", "PublisherDoesNotExist", "NoOffset",
    "StreamConnectionClosed", "StreamPublishFailed", "StreamDeleted", "MessageTooLarge",
    "RESPONSE_CODE_NAMES", "response_error",
]

#: The stream protocol's response codes (rabbit_stream.hrl of RabbitMQ 3.10), code -> name.
RESPONSE_CODE_NAMES = {
    0x01: "ok",
    0x02: "stream does not exist",
    0x03: "subscription id already exists",
    0x04: "subscription id does not exist",
    0x05: "stream already exists",
    0x06: "stream not available",
    0x07: "SASL mechanism not supported",
    0x08: "authentication failure",
    0x09: "SASL error",
    0x0A: "SASL challenge",
    0x0B: "SASL authentication failure loopback",
    0x0C: "virtual host access failure",
    0x0D: "unknown frame",
    0x0E: "frame too large",
    0x0F: "internal error",
    0x10: "access refused",
    0x11: "precondition failed",
    0x12: "publisher does not exist",
    0x13: "no offset",
}


def code_text(code: int) -> str:
    """'stream does not exist (0x02)'."""
    return f"{RESPONSE_CODE_NAMES.get(code, 'unknown response code')} (0x{code:02x})"


class StreamClientError(AMQPError):
    """Base class of the errors of the stream-protocol client (``amqwire.client.stream``)."""


class InvalidStreamUrl(StreamClientError, ValueError):
    """A stream URL (or StreamParameters) that cannot be used; the text names the part
    that is wrong and never echoes the password."""


class StreamResponseError(StreamClientError):
    """The broker answered a request with an error code: ``code`` (the stream protocol's
    response code), ``request`` (the command, e.g. ``'create_stream'``), ``subject`` (the
    stream, reference or id it was about; '' when none).  Raised as the class of the code."""

    code: int
    request: str
    subject: str

    def __init__(self, code: int, request: str = "", subject: str = "") -> None:
        self.code = code
        self.request = request
        self.subject = subject
        super().__init__(code, request, subject)

    @property
    def code_name(self) -> str:
        return RESPONSE_CODE_NAMES.get(self.code, "unknown response code")

    def __str__(self) -> str:
        about = f" {self.subject!r}" if self.subject else ""
        what = f"{self.request}{about}: " if self.request else ""
        return f"{what}the broker answered {code_text(self.code)}"


class StreamDoesNotExist(StreamResponseError, LookupError):
    """0x02: no stream of that name in the virtual host."""


class SubscriptionIdAlreadyExists(StreamResponseError):
    """0x03: the connection has a subscription with that id already."""


class SubscriptionIdDoesNotExist(StreamResponseError):
    """0x04: no subscription with that id on the connection (e.g. credit for one that ended)."""


class StreamAlreadyExists(StreamResponseError):
    """0x05: create_stream of a stream that exists (``exist_ok=True`` accepts it)."""


class StreamNotAvailable(StreamResponseError):
    """0x06: the stream exists but has no leader (or no member on this node) right now."""


class SaslMechanismNotSupported(StreamResponseError, AuthenticationError):
    """0x07: the broker does not offer the SASL mechanism asked for."""


class StreamAuthenticationFailure(StreamResponseError, AuthenticationError):
    """0x08: the broker refused the user name or password."""


class SaslError(StreamResponseError, AuthenticationError):
    """0x09: the SASL exchange failed (e.g. EXTERNAL without a client certificate)."""


class SaslChallenge(StreamResponseError, AuthenticationError):
    """0x0a: the broker sent a SASL challenge, which PLAIN and EXTERNAL never expect."""


class AuthenticationFailureLoopback(StreamResponseError, AuthenticationError):
    """0x0b: the user may log in from localhost only (RabbitMQ's ``loopback_users``)."""


class VirtualHostAccessFailure(StreamResponseError, AuthenticationError):
    """0x0c: the virtual host does not exist, or the user has no access to it."""


class UnknownFrame(StreamResponseError):
    """0x0d: the broker did not know a command this client sent."""


class FrameTooLarge(StreamResponseError):
    """0x0e: a frame was over the negotiated maximum frame size."""


class StreamInternalError(StreamResponseError):
    """0x0f: the broker failed internally (e.g. creating a stream on a broken node)."""


class StreamAccessRefused(StreamResponseError):
    """0x10: the user has no permission for this on the stream (configure, write or read)."""


class StreamPreconditionFailed(StreamResponseError):
    """0x11: e.g. create_stream with arguments the broker refuses, a publisher id or
    reference in use, or a publisher declared while a resource alarm blocks publishing."""


class PublisherDoesNotExist(StreamResponseError):
    """0x12: no publisher with that id on the connection."""


class NoOffset(StreamResponseError, LookupError):
    """0x13: no offset is stored for that consumer name on the stream."""


_BY_CODE: dict[int, type[StreamResponseError]] = {
    0x02: StreamDoesNotExist,
    0x03: SubscriptionIdAlreadyExists,
    0x04: SubscriptionIdDoesNotExist,
    0x05: StreamAlreadyExists,
    0x06: StreamNotAvailable,
    0x07: SaslMechanismNotSupported,
    0x08: StreamAuthenticationFailure,
    0x09: SaslError,
    0x0A: SaslChallenge,
    0x0B: AuthenticationFailureLoopback,
    0x0C: VirtualHostAccessFailure,
    0x0D: UnknownFrame,
    0x0E: FrameTooLarge,
    0x0F: StreamInternalError,
    0x10: StreamAccessRefused,
    0x11: StreamPreconditionFailed,
    0x12: PublisherDoesNotExist,
    0x13: NoOffset,
}


def response_error(code: int, request: str = "", subject: str = "") -> StreamResponseError:
    """The exception of a response code, as the class of the code."""
    return _BY_CODE.get(code, StreamResponseError)(code, request, subject)


class StreamConnectionClosed(StreamClientError, AMQPConnectionError):
    """The broker closed the connection with a Close command (``code``: a response code,
    ``reason``: its text), e.g. 0x0d after a command it does not know."""

    def __init__(self, code: int, reason: str = "", broker: str = "") -> None:
        self.code = code
        self.reason = reason
        self.broker = broker
        super().__init__(code, reason, broker)

    def __str__(self) -> str:
        where = f" at {self.broker}" if self.broker else ""
        reason = f": {self.reason}" if self.reason else ""
        return f"the broker{where} closed the connection with {code_text(self.code)}{reason}"


class StreamPublishFailed(StreamClientError):
    """A message sent by a producer was not stored: the broker refused it (``code``, a
    response code: ``error`` is then the code's class), or it was in flight when the
    connection was lost and cannot be known stored (``error``: the loss; a producer with a
    ``reference`` resends those instead, and the broker drops what it stored already).
    ``publishing_id``: the message's id; ``stream``: where it was sent."""

    def __init__(self, publishing_id: int, stream: str, error: Optional[BaseException] = None, code: int = 0) -> None:
        self.publishing_id = publishing_id
        self.stream = stream
        self.error = error
        self.code = code
        super().__init__(publishing_id, stream, error, code)

    def __str__(self) -> str:
        if self.code:
            why = f"the broker answered {code_text(self.code)}"
        else:
            why = (f"unconfirmed when the connection was lost or closed ({self.error}): it may or may not be stored"
                   if self.error is not None else "not confirmed")
        return f"message {self.publishing_id} to stream {self.stream!r} failed: {why}"


class StreamDeleted(StreamClientError):
    """The stream of a producer or consumer was deleted (the broker's MetadataUpdate said it
    is gone, and it no longer exists): the producer or consumer has ended."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(stream)

    def __str__(self) -> str:
        return f"stream {self.stream!r} was deleted"


class MessageTooLarge(StreamClientError, ValueError):
    """A message (``size`` bytes in a Publish frame) that no frame the broker takes can
    hold (``frame_max``: the connection's, from Tune): refused at the send, before
    anything is written (the broker would close the connection with 0x0e)."""

    def __init__(self, size: int, frame_max: int) -> None:
        self.size = size
        self.frame_max = frame_max
        super().__init__(size, frame_max)

    def __str__(self) -> str:
        return (f"a message of {self.size} bytes in a Publish frame does not fit the broker's frame_max of "
                f"{self.frame_max} bytes (connect(..., frame_max=) asks for more, up to the broker's own)")
