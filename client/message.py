"""Messages as the client hands them to users."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Coroutine, Optional, Union

from amqwire.codec import BasicProperties, Delivery

from .ack_path import message_ack
from .encoding import decode_body

#: What a publish takes as its body.
Body = Union[bytes, bytearray, memoryview, str]


_PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id", "reply_to",
    "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id",
)


def replace_properties(properties: BasicProperties, **changes: Any) -> BasicProperties:
    """A copy of ``properties`` with some fields changed (the caller's object stays as it is)."""
    values = {name: getattr(properties, name) for name in _PROPERTY_NAMES}
    values.update(changes)
    return BasicProperties(**values)


def with_headers(properties: Optional[BasicProperties], added: dict[str, Any]) -> BasicProperties:
    """A copy of ``properties`` whose headers are its own plus ``added`` (copy-on-write:
    the caller's object and its headers dict stay as they are)."""
    if properties is None:
        return BasicProperties(headers=added)
    headers = properties.headers
    return replace_properties(properties, headers={**headers, **added} if headers else added)


class DeliveredMessage(Delivery):
    """A delivered message (basic.deliver or basic.get-ok) with its content: what both
    transports' messages have.

    The codec's parser builds these directly (``CommandParser(delivery_type=Message)``):
    one object per delivery. Attributes: ``channel_id``, ``channel`` (the transport's
    Channel object; None in the bare protocol core), ``consumer_tag`` (None for
    basic.get), ``delivery_tag``, ``redelivered``, ``exchange``, ``routing_key``,
    ``message_count`` (basic.get only), ``properties``, ``body``, ``stream_offset`` (its
    offset in a stream queue, read by the parser from the x-stream-offset header; None
    for other queues).
    """

    __slots__ = ()

    def _target(self) -> Any:
        if self.channel is None:
            raise AttributeError("this message is not attached to a channel; ack through the protocol core")
        return self.channel

    def decoded_body(self) -> bytes:
        """The body with the compression its ``content_encoding`` names undone (``zstd``,
        ``deflate``, ``gzip``: what a Producer compresses with); the body as it is otherwise."""
        return decode_body(self.body, self.properties.content_encoding)

    def __repr__(self) -> str:
        return (
            f"<Message channel={self.channel_id} delivery_tag={self.delivery_tag} "
            f"exchange={self.exchange!r} routing_key={self.routing_key!r} body={len(self.body)} bytes>"
        )


# One class at run time for both transports (the parser and the shared layer test
# ``type(item) is Message`` on the hot path): ``ack``/``nack``/``reject`` return what the
# message's channel's ``basic_ack``/... return: None on the blocking transport, a coroutine
# on asyncio.  Type checkers see the two transports' messages as two classes, so that an
# asyncio ``message.ack()`` without ``await`` (the ack is never sent) is an error
# (``unused-coroutine`` under ``mypy --strict``), and a blocking one's result is None.
if TYPE_CHECKING:
    class Message(DeliveredMessage):
        """A message of the blocking transport: ``ack``/``nack``/``reject`` send at once."""

        __slots__ = ()

        def ack(self, multiple: bool = False) -> None: ...

        def nack(self, multiple: bool = False, requeue: bool = True) -> None: ...

        def reject(self, requeue: bool = True) -> None: ...

    class AsyncMessage(DeliveredMessage):
        """A message of the asyncio transport (``amqwire.client.aio.Message``):
        ``await message.ack()``."""

        __slots__ = ()

        def ack(self, multiple: bool = False) -> Coroutine[Any, Any, None]: ...

        def nack(self, multiple: bool = False, requeue: bool = True) -> Coroutine[Any, Any, None]: ...

        def reject(self, requeue: bool = True) -> Coroutine[Any, Any, None]: ...
else:
    class Message(DeliveredMessage):
        """A delivered message; ``ack``/``nack``/``reject`` go through its channel, and are
        coroutines on the asyncio transport (``await message.ack()``)."""

        __slots__ = ()

        # compiled (ack_path.pyx): acking each delivery is a hot path
        ack = message_ack

        def nack(self, multiple=False, requeue=True):
            return self._target().basic_nack(self.delivery_tag, multiple, requeue)

        def reject(self, requeue=True):
            return self._target().basic_reject(self.delivery_tag, requeue)

    AsyncMessage = Message


class ReturnedMessage:
    """A message the broker could not route and sent back (basic.return)."""

    __slots__ = ("channel_id", "reply_code", "reply_text", "exchange", "routing_key", "properties", "body")

    def __init__(
        self,
        channel_id: int,
        reply_code: int,
        reply_text: str,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes,
    ) -> None:
        self.channel_id = channel_id
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body

    def __repr__(self) -> str:
        return (
            f"<ReturnedMessage {self.reply_code} {self.reply_text} exchange={self.exchange!r} "
            f"routing_key={self.routing_key!r} body={len(self.body)} bytes>"
        )
