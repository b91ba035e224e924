"""What connections and channels tell their listeners, and the exception handler.

Listeners are registered with ``add_*_listener(fn)`` and removed with
``remove_*_listener(fn)``, with the same names and meaning on both transports (they
follow the Java client's ShutdownListener, BlockedListener, RecoveryListener,
FlowListener, ConfirmListener and the lifecycle methods of its Consumer).  Every listener
takes one argument, an event object of this module.

Where they run: on the blocking transport, in the thread where the event happens (mostly
the connection's I/O thread; the recovery thread for recovery events; the caller's thread
for a ``close()``): keep them short and never wait on the connection there, as for
publish-future callbacks.  On asyncio, in the event loop; a coroutine function's coroutine
runs as a task the connection keeps until it finishes.  An exception a listener raises
(or its task ends with) goes to the connection's exception handler, never lost and never
raised into the client's own machinery.

The exception handler (``connect(..., exception_handler=fn)``) gets a
:class:`CallbackError` for every exception raised by user code the client calls:
consumer callbacks, the default consumer, return callbacks, publish-future callbacks and
listeners.  The default, :func:`log_callback_error`, logs it with its traceback on the
``amqwire.client`` logger and closes nothing: the delivery stays unacknowledged, so with
prefetch it holds a slot until the channel closes (or the code acks it).  The Java
client's default (its StrictExceptionHandler) closes the channel of a failing consumer
instead; :func:`close_channel_on_consumer_error` does that here.  An exception raised by
the handler itself is logged and dropped.
"""
from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Optional

log = logging.getLogger("amqwire.client")

__all__ = [
    "ShutdownEvent",
    "BlockedEvent",
    "UnblockedEvent",
    "RecoveryEvent",
    "FlowEvent",
    "ConfirmEvent",
    "ConsumerEventKind",
    "ConsumerEvent",
    "CallbackError",
    "ExceptionHandler",
    "log_callback_error",
    "close_channel_on_consumer_error",
]


class _Event:
    __slots__ = ()

    def __repr__(self) -> str:
        names: tuple[str, ...] = self.__slots__
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__name__}({fields})"


class ShutdownEvent(_Event):
    """A connection (``channel_id`` 0) or a channel closed (Java's ShutdownSignal).

    ``by_application``: our own ``close()``; ``by_broker``: the broker's connection.close or
    channel.close (both False: the socket failed, heartbeats stopped, or a protocol error);
    ``reply_code``/``reply_text``: of the close that was exchanged (0 and the error's text
    when none was); ``cause``: the exception calls raise from now on (None after a normal
    ``close()``); ``recovering``: a recovery follows (the connection, or the channel with it,
    comes back).
    """

    __slots__ = ("channel_id", "by_application", "by_broker", "reply_code", "reply_text", "cause", "recovering")

    def __init__(
        self,
        channel_id: int,
        by_application: bool,
        by_broker: bool,
        reply_code: int,
        reply_text: str,
        cause: Optional[BaseException],
        recovering: bool = False,
    ) -> None:
        self.channel_id = channel_id
        self.by_application = by_application
        self.by_broker = by_broker
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.cause = cause
        self.recovering = recovering


class BlockedEvent(_Event):
    """The broker blocked publishing on the connection (connection.blocked: an alarm)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class UnblockedEvent(_Event):
    """The broker lifted its block (connection.unblocked)."""

    __slots__ = ()


class RecoveryEvent(_Event):
    """A recovery started (``attempt`` 0, ``error``: what was lost), an attempt failed
    (``attempt`` n, ``error``: why; ``final``: the policy gives up), or it succeeded
    (``attempt``: the one that worked)."""

    __slots__ = ("attempt", "error", "final")

    def __init__(self, attempt: int, error: Optional[BaseException] = None, final: bool = False) -> None:
        self.attempt = attempt
        self.error = error
        self.final = final


class FlowEvent(_Event):
    """channel.flow from the broker: ``active`` False pauses publishing on the channel."""

    __slots__ = ("channel_id", "active")

    def __init__(self, channel_id: int, active: bool) -> None:
        self.channel_id = channel_id
        self.active = active


class ConfirmEvent(_Event):
    """A basic.ack (``ack``) or basic.nack from the broker for publishes in confirm mode,
    as it came: ``delivery_tag`` and ``multiple`` (every tag up to it).  The per-publish
    futures are settled as well."""

    __slots__ = ("channel_id", "ack", "delivery_tag", "multiple")

    def __init__(self, channel_id: int, ack: bool, delivery_tag: int, multiple: bool) -> None:
        self.channel_id = channel_id
        self.ack = ack
        self.delivery_tag = delivery_tag
        self.multiple = multiple


class ConsumerEventKind(str, enum.Enum):
    CONSUME_OK = "consume_ok"  # subscribed (also each resubscription after a recovery)
    CANCEL_OK = "cancel_ok"  # our basic_cancel / Consumer.cancel() was confirmed
    CANCELLED = "cancelled"  # the broker cancelled it (queue deleted, node down, ...)
    CHANNEL_CLOSED = "channel_closed"  # its channel closed: no more deliveries
    CONNECTION_LOST = "connection_lost"  # the connection went (``recovering``: resubscribed later)
    RECOVER_OK = "recover_ok"  # basic.recover-ok on its channel: unacked deliveries come again

    def __str__(self) -> str:
        return self.value


class ConsumerEvent(_Event):
    """A consumer's lifecycle (Java's Consumer.handleConsumeOk/CancelOk/Cancel/
    ShutdownSignal/RecoverOk)."""

    __slots__ = ("kind", "channel_id", "consumer_tag", "queue", "error", "recovering")

    def __init__(
        self,
        kind: ConsumerEventKind,
        channel_id: int,
        consumer_tag: str,
        queue: str,
        error: Optional[BaseException] = None,
        recovering: bool = False,
    ) -> None:
        self.kind = kind
        self.channel_id = channel_id
        self.consumer_tag = consumer_tag
        self.queue = queue
        self.error = error
        self.recovering = recovering


class CallbackError(_Event):
    """An exception raised by user code the client called: ``where`` is ``"consumer"``,
    ``"default_consumer"``, ``"return"``, ``"publish"`` (a publish-future callback) or
    ``"listener"``; ``channel`` the channel object (None for connection listeners);
    ``arg``: what the callback was given (the Message, the event, ...)."""

    __slots__ = ("error", "callback", "where", "connection", "channel", "arg")

    def __init__(self, error: BaseException, callback: Any, where: str, connection: Any, channel: Any, arg: Any) -> None:
        self.error = error
        self.callback = callback
        self.where = where
        self.connection = connection
        self.channel = channel
        self.arg = arg


ExceptionHandler = Callable[[CallbackError], Any]


def log_callback_error(failure: CallbackError) -> None:
    """The default exception handler: log with the traceback, close nothing."""
    log.error("%s callback %r failed", failure.where, failure.callback, exc_info=failure.error)


def close_channel_on_consumer_error(failure: CallbackError) -> None:
    """Log like the default, and close the channel of a failing consumer (the Java client's
    StrictExceptionHandler): its unacknowledged deliveries go back to their queues.  The
    close is queued, not waited for (this runs on the connection's own threads)."""
    log_callback_error(failure)
    channel = failure.channel
    if failure.where in ("consumer", "default_consumer") and channel is not None and channel.is_open:
        channel._close_soon(200, f"closed: consumer callback raised {type(failure.error).__name__}")
