"""The events the sans-IO core returns from ``receive_data`` (bytes in -> events out).

Each is a small slotted record; a transport dispatches on ``type(event)``.  Deliveries and
returns come as ``Message`` and ``ReturnedMessage`` (from ``message.py``) and are events too.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from .message import Message, ReturnedMessage

__all__ = [
    "Event",
    "ConnectionOpened",
    "ConnectionClosedEvent",
    "ConnectionBlocked",
    "ConnectionUnblocked",
    "SecretUpdated",
    "ChannelOpened",
    "ChannelClosedEvent",
    "MethodReply",
    "GetResult",
    "Confirmed",
    "ConsumerCancelled",
    "ChannelFlowChanged",
    "Message",
    "ReturnedMessage",
]


class _Event:
    __slots__ = ()

    def __repr__(self) -> str:
        names: tuple[str, ...] = self.__slots__
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__name__}({fields})"


class ConnectionOpened(_Event):
    """The handshake finished: connection.open-ok arrived."""

    __slots__ = ("server_properties", "channel_max", "frame_max", "heartbeat")

    def __init__(self, server_properties: dict[str, Any], channel_max: int, frame_max: int, heartbeat: int) -> None:
        self.server_properties = server_properties
        self.channel_max = channel_max
        self.frame_max = frame_max
        self.heartbeat = heartbeat


class ConnectionClosedEvent(_Event):
    """The connection is closed: by the broker's connection.close, or ours was answered.

    ``handshake`` tells that it happened before connection.open-ok (403 there means the
    broker refused the login).
    """

    __slots__ = ("reply_code", "reply_text", "class_id", "method_id", "by_broker", "handshake")

    def __init__(
        self, reply_code: int, reply_text: str, class_id: int, method_id: int, by_broker: bool, handshake: bool = False
    ) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.by_broker = by_broker
        self.handshake = handshake


class ConnectionBlocked(_Event):
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class ConnectionUnblocked(_Event):
    __slots__ = ()


class SecretUpdated(_Event):
    __slots__ = ()


class ChannelOpened(_Event):
    __slots__ = ("channel_id",)

    def __init__(self, channel_id: int) -> None:
        self.channel_id = channel_id


class ChannelClosedEvent(_Event):
    """The channel is closed and its number free again.  ``unconfirmed``: (seqno, token) of
    the publishes the broker never confirmed on it."""

    __slots__ = ("channel_id", "reply_code", "reply_text", "class_id", "method_id", "by_broker", "unconfirmed")

    def __init__(
        self,
        channel_id: int,
        reply_code: int,
        reply_text: str,
        class_id: int,
        method_id: int,
        by_broker: bool,
        unconfirmed: Optional[list[Any]] = None,
    ) -> None:
        self.channel_id = channel_id
        self.unconfirmed = unconfirmed if unconfirmed is not None else []
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.by_broker = by_broker


class MethodReply(_Event):
    """The reply to the channel's outstanding synchronous request."""

    __slots__ = ("channel_id", "method")

    def __init__(self, channel_id: int, method: Any) -> None:
        self.channel_id = channel_id
        self.method = method


class GetResult(_Event):
    """The reply to basic.get: a Message (get-ok) or None (get-empty)."""

    __slots__ = ("channel_id", "message")

    def __init__(self, channel_id: int, message: Optional[Message]) -> None:
        self.channel_id = channel_id
        self.message = message


class Confirmed(_Event):
    """Publisher confirms: the publishes ``seqnos`` (with the tokens given to publish) were
    acked (``ack``) or nacked by the broker (a ``SeqnoRun``, a sequence equal to their
    range, while they are consecutive, as they are unless single acks came out of order).  ``returned`` maps the seqnos among them that
    came back as basic.return first (mandatory, unroutable) to their ReturnedMessage.

    The basic.acks of one read on one channel, one after the other, come as one event
    (folded by the core, publish_path.core_on_confirm): ``acks`` then lists each as it came,
    ``(delivery_tag, multiple, end)`` (an ``AckFrames``, equal to the list of those tuples),
    where its publishes are ``seqnos[previous end:end]``;
    it is None for a single frame, whose ``delivery_tag`` and ``multiple`` are the event's (a
    folded event's are its last)."""

    __slots__ = ("channel_id", "ack", "seqnos", "tokens", "returned", "delivery_tag", "multiple", "acks")

    def __init__(
        self, channel_id: int, ack: bool, seqnos: Sequence[int], tokens: list[Any], returned: Optional[dict[int, ReturnedMessage]],
        delivery_tag: int = 0, multiple: bool = False,
    ) -> None:
        self.channel_id = channel_id
        self.ack = ack
        self.seqnos = seqnos
        self.tokens = tokens
        self.returned = returned
        self.delivery_tag = delivery_tag  # of the broker's ack/nack, as it came
        self.multiple = multiple
        self.acks: Optional[Sequence[tuple[int, bool, int]]] = None


class ConsumerCancelled(_Event):
    """The broker cancelled a consumer (basic.cancel from the server); cancel-ok is sent."""

    __slots__ = ("channel_id", "consumer_tag")

    def __init__(self, channel_id: int, consumer_tag: str) -> None:
        self.channel_id = channel_id
        self.consumer_tag = consumer_tag


class ChannelFlowChanged(_Event):
    """channel.flow from the broker; flow-ok is sent.  Inactive: stop publishing."""

    __slots__ = ("channel_id", "active")

    def __init__(self, channel_id: int, active: bool) -> None:
        self.channel_id = channel_id
        self.active = active


Event = Union[
    ConnectionOpened,
    ConnectionClosedEvent,
    ConnectionBlocked,
    ConnectionUnblocked,
    SecretUpdated,
    ChannelOpened,
    ChannelClosedEvent,
    MethodReply,
    GetResult,
    Confirmed,
    ConsumerCancelled,
    ChannelFlowChanged,
    Message,
    ReturnedMessage,
]
