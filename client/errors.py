"""Exceptions of the client.

Broker closes carry the AMQP reply code, the reply text and the method that failed, and are
raised as the class that names the code (``NotFound`` for 404 on a channel, ...).  No
exception text ever contains a password: URLs are only ever shown through
``ConnectionParameters``, whose repr masks it.
"""
from __future__ import annotations

from typing import Any, Optional

from amqwire.codec import METHODS, AmqwireError


def method_name(class_id: int, method_id: int) -> str:
    """'queue.declare' for (50, 10); '' when the broker names no method (0, 0)."""
    if not class_id:
        return ""
    method = METHODS.get(class_id << 16 | method_id)
    return method.NAME if method is not None else f"{class_id}.{method_id}"


class AMQPError(AmqwireError):
    """Base class of every error the client raises (an :class:`AmqwireError`, the root of
    every exception amqwire raises, re-exported here from ``amqwire.codec``)."""


class InvalidStateError(AMQPError, RuntimeError):
    """A call that is illegal in the current state, refused locally before anything is sent."""


class AMQPConnectionError(AMQPError):
    """The connection could not be made, or is no longer usable."""


class AuthenticationError(AMQPConnectionError):
    """The broker refused the credentials (or the mechanism) during the handshake."""


class ConnectionLost(AMQPConnectionError):
    """The socket closed or failed without a connection.close from the broker."""


class HeartbeatTimeout(ConnectionLost):
    """Nothing arrived from the broker for two heartbeat intervals."""


class _Closed(AMQPError):
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int
    by_broker: bool

    def __init__(
        self,
        reply_code: int,
        reply_text: str = "",
        class_id: int = 0,
        method_id: int = 0,
        *,
        by_broker: bool = True,
        channel: Optional[int] = None,
    ) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.by_broker = by_broker
        self.channel = channel
        super().__init__(reply_code, reply_text, class_id, method_id)

    @property
    def method_name(self) -> str:
        return method_name(self.class_id, self.method_id)

    def __str__(self) -> str:
        what = "connection" if self.channel is None else f"channel {self.channel}"
        who = "broker" if self.by_broker else "client"
        text = f"{what} closed by the {who}: {self.reply_code} {self.reply_text}"
        if self.class_id:
            text += f" (on {self.method_name})"
        return text

    def __reduce__(self) -> Any:
        return (
            _rebuild_closed,
            (type(self), self.reply_code, self.reply_text, self.class_id, self.method_id, self.by_broker, self.channel),
        )


def _rebuild_closed(cls: type, code: int, text: str, class_id: int, method_id: int, by_broker: bool, channel: Any) -> Any:
    return cls(code, text, class_id, method_id, by_broker=by_broker, channel=channel)


class ConnectionClosed(_Closed, AMQPConnectionError):
    """connection.close, from the broker (``by_broker``) or by this client."""


class ChannelClosed(_Closed):
    """The channel was closed: by the broker with an error, or by this client."""


class AccessRefused(ChannelClosed):
    """403 ACCESS_REFUSED."""


class NotFound(ChannelClosed):
    """404 NOT_FOUND, e.g. a passive declare of something that does not exist."""


class ResourceLocked(ChannelClosed):
    """405 RESOURCE_LOCKED, e.g. an exclusive queue of another connection."""


class PreconditionFailed(ChannelClosed):
    """406 PRECONDITION_FAILED, e.g. a re-declare with other arguments, an unknown delivery tag."""


_CHANNEL_ERRORS = {403: AccessRefused, 404: NotFound, 405: ResourceLocked, 406: PreconditionFailed}


def channel_closed(
    reply_code: int, reply_text: str, class_id: int, method_id: int, *, by_broker: bool, channel: int
) -> ChannelClosed:
    cls = _CHANNEL_ERRORS.get(reply_code, ChannelClosed) if by_broker else ChannelClosed
    return cls(reply_code, reply_text, class_id, method_id, by_broker=by_broker, channel=channel)


class PublishError(AMQPError):
    """A confirmed publish did not make it: nacked, returned, or never confirmed."""


class PublishNacked(PublishError):
    def __init__(self, delivery_tag: int, failures: Optional[list[Any]] = None) -> None:
        self.delivery_tag = delivery_tag
        self.failures = failures if failures is not None else []
        super().__init__(delivery_tag)

    def __str__(self) -> str:
        text = f"the broker nacked the publish with delivery tag {self.delivery_tag}"
        if len(self.failures) > 1:
            text += f" ({len(self.failures)} publishes failed)"
        return text


class MessageReturned(PublishError):
    """A mandatory publish could not be routed (312 NO_ROUTE) and came back."""

    def __init__(self, message: Any, delivery_tag: int = 0, failures: Optional[list[Any]] = None) -> None:
        self.message = message
        self.reply_code = message.reply_code
        self.reply_text = message.reply_text
        self.exchange = message.exchange
        self.routing_key = message.routing_key
        self.delivery_tag = delivery_tag
        self.failures = failures if failures is not None else []
        super().__init__(message)

    def __str__(self) -> str:
        return (
            f"the broker returned the message: {self.reply_code} {self.reply_text} "
            f"(exchange {self.exchange!r}, routing key {self.routing_key!r})"
        )


class PublishUnconfirmed(PublishError):
    """The connection or channel went away before the broker confirmed the publish.

    When the broker closed the channel (``cause`` a :class:`ChannelClosed` with ``by_broker``:
    404 for a missing exchange, 403, 406, ...), ``PublishUnconfirmed(tag, cause)`` is an
    instance of a subclass that is also the close's class, with its ``reply_code``,
    ``reply_text``, ``class_id``, ``method_id``, ``by_broker`` and ``channel``: ``except
    NotFound`` catches it as ``except PublishUnconfirmed`` does."""

    delivery_tag: int
    cause: Optional[BaseException]
    #: The close class (NotFound, ...) on the subclass made for it, None here.
    _for_close: Optional[type] = None

    def __new__(cls, delivery_tag: int, cause: Optional[BaseException] = None) -> "PublishUnconfirmed":
        kind = cls
        if cls is PublishUnconfirmed and isinstance(cause, ChannelClosed) and cause.by_broker:
            kind = _unconfirmed_by(type(cause))
        return super().__new__(kind, delivery_tag)

    def __init__(self, delivery_tag: int, cause: Optional[BaseException] = None) -> None:
        self.delivery_tag = delivery_tag
        self.cause = cause
        # Not super().__init__: in the class made for a channel close the next __init__ in
        # line is _Closed's, which takes the close's fields (see _init_by_close).
        PublishError.__init__(self, delivery_tag)

    def __str__(self) -> str:
        text = f"publish with delivery tag {self.delivery_tag} was never confirmed"
        if self.cause is not None:
            text += f": {self.cause}"
        return text

    def __reduce__(self) -> Any:
        if self._for_close is not None:
            # Rebuilt through PublishUnconfirmed(tag, cause), which picks the class made for
            # the close again: made at run time, it cannot be pickled by reference.
            return (PublishUnconfirmed, (self.delivery_tag, self.cause), self.__dict__)
        return super().__reduce__()


def _init_by_close(self: Any, delivery_tag: int, cause: Optional[BaseException] = None) -> None:
    PublishUnconfirmed.__init__(self, delivery_tag, cause)
    close = cause if isinstance(cause, _Closed) else None  # always one, unless built by hand
    self.reply_code = close.reply_code if close is not None else 0
    self.reply_text = close.reply_text if close is not None else ""
    self.class_id = close.class_id if close is not None else 0
    self.method_id = close.method_id if close is not None else 0
    self.by_broker = close.by_broker if close is not None else True
    self.channel = close.channel if close is not None else None


# close class (NotFound, ...) -> the subclass of PublishUnconfirmed that is also that class
_UNCONFIRMED_BY: dict[type, type] = {}


def _unconfirmed_by(close_class: type) -> type:
    kind = _UNCONFIRMED_BY.get(close_class)
    if kind is None:
        made = type("PublishUnconfirmed", (PublishUnconfirmed, close_class), {
            "__module__": __name__,
            "__qualname__": "PublishUnconfirmed",
            "__doc__": f"PublishUnconfirmed because the broker closed the channel: also a {close_class.__name__}.",
            "__init__": _init_by_close,
            "_for_close": close_class,
        })
        kind = _UNCONFIRMED_BY.setdefault(close_class, made)  # one class per close class, even in a race
    return kind


def format_seconds(seconds: Optional[float]) -> str:
    """A duration for an error text, to the millisecond: 0.49998088 -> "0.5", 1.0 -> "1.0"
    (the exact value stays in the exception's attribute)."""
    if seconds is None:
        return "unbounded"
    return str(round(seconds, 3))


class OperationTimeout(AMQPError, TimeoutError):
    """A wait with a ``timeout`` ran out: the reply to a request, a confirm, room in the
    confirm window, channel.flow.  The channel stays usable (see docs/client.md, "Timeouts and cancellation")."""

    def __init__(self, operation: str, timeout: Optional[float], channel: Optional[int] = None,
                 *, earlier: bool = False) -> None:
        self.operation = operation
        self.timeout = timeout
        self.channel = channel
        self.earlier = earlier
        super().__init__(operation, timeout, channel)

    def __str__(self) -> str:
        where = f" on channel {self.channel}" if self.channel is not None else ""
        if self.earlier:
            return (f"{self.operation}{where} not sent: the reply to an earlier request that timed "
                    f"out or was cancelled did not arrive within {format_seconds(self.timeout)} s")
        if " " in self.operation:  # a wait, not a request
            return f"waited {format_seconds(self.timeout)} s{where} for {self.operation}"
        return f"no reply to {self.operation}{where} within {format_seconds(self.timeout)} s"

    def __reduce__(self) -> Any:
        return (_rebuild_timeout, (self.operation, self.timeout, self.channel, self.earlier))


def _rebuild_timeout(operation: str, timeout: Optional[float], channel: Optional[int], earlier: bool) -> "OperationTimeout":
    return OperationTimeout(operation, timeout, channel, earlier=earlier)


class ConsumerCancelled(AMQPError):
    """The broker cancelled the consumer (its queue was deleted, or the node failed)."""

    def __init__(self, consumer_tag: str) -> None:
        self.consumer_tag = consumer_tag
        super().__init__(consumer_tag)

    def __str__(self) -> str:
        return f"the broker cancelled consumer {self.consumer_tag!r}"


class ConnectionBlockedError(AMQPError):
    """Publishing while the broker blocks the connection: at once with
    blocked_action='raise', or after ``waited`` seconds (blocked_timeout or the publish's
    timeout) with blocked_action='wait'.  ``reason`` is the broker's."""

    def __init__(self, reason: str, waited: Optional[float] = None) -> None:
        self.reason = reason
        self.waited = waited
        super().__init__(reason, waited)

    def __str__(self) -> str:
        text = f"the broker blocked the connection: {self.reason}"
        if self.waited is not None:
            text += f" (still blocked after {format_seconds(self.waited)} s)"
        return text


class StreamError(AMQPError):
    """Base class of the errors of stream consumers (``Channel.consume_stream``)."""


class StreamOptionError(StreamError, ValueError):
    """A stream consumer's option is wrong (``offset``, ``end``, ``prefetch``, ...); raised
    before anything is sent: RabbitMQ answers some bad ``x-stream-offset`` values by
    closing the whole connection (541 INTERNAL_ERROR)."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(option, problem)

    def __str__(self) -> str:
        return f"{self.option}: {self.problem}"


class NotAStream(PreconditionFailed, StreamError):
    """``consume_stream`` on a queue that is not a stream (a classic or quorum queue): the
    broker refused ``x-stream-offset`` with 406 PRECONDITION_FAILED, which closed the channel."""

    def __str__(self) -> str:
        return f"not a stream queue (the broker refused x-stream-offset): {super().__str__()}"


class StreamReplicaUnavailable(PreconditionFailed, StreamError):
    """The node refused a stream consumer with 406 PRECONDITION_FAILED "does not have a
    replica on the local node", which closed the channel.  Over AMQP 0-9-1 a stream is read
    on a node that holds a replica of it; RabbitMQ 3.10 also answers this while the node's
    replica restarts, or when its stream coordinator does not answer within 5 s (a loaded
    node): then it passes.  ``stream_offsets`` (and the Spark source) wait for it up to
    ``waited`` seconds; after a ``consume_stream`` refused so, open a new channel and try
    again, or connect to a node that holds a replica."""

    waited: Optional[float] = None  # set by a caller that retried for this long

    def __str__(self) -> str:
        text = f"the node has no running replica of the stream: {super().__str__()}"
        if self.waited is not None:
            text += f" (still after {format_seconds(self.waited)} s)"
        return text


class StreamTruncated(StreamError):
    """The start offset of a stream consumer was removed by the stream's retention: the
    broker started at the first offset it still has (``first_offset``), and the offsets
    from ``requested`` up to it are lost.  Raised with ``on_truncated="raise"``."""

    def __init__(self, queue: str, requested: int, first_offset: int) -> None:
        self.queue = queue
        self.requested = requested
        self.first_offset = first_offset
        super().__init__(queue, requested, first_offset)

    @property
    def lost(self) -> int:
        """How many offsets were asked for but are gone."""
        return self.first_offset - self.requested

    def __str__(self) -> str:
        return (f"stream {self.queue!r}: offset {self.requested} was removed by retention; the first offset "
                f"retained is {self.first_offset} ({self.lost} offsets lost)")


__all__ = [
    "AmqwireError",
    "AMQPError",
    "InvalidStateError",
    "AMQPConnectionError",
    "AuthenticationError",
    "ConnectionLost",
    "HeartbeatTimeout",
    "ConnectionClosed",
    "ChannelClosed",
    "AccessRefused",
    "NotFound",
    "ResourceLocked",
    "PreconditionFailed",
    "PublishError",
    "PublishNacked",
    "MessageReturned",
    "PublishUnconfirmed",
    "ConsumerCancelled",
    "ConnectionBlockedError",
    "OperationTimeout",
    "StreamError",
    "StreamOptionError",
    "NotAStream",
    "StreamTruncated",
]
