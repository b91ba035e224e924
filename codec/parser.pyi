from collections import deque
from typing import Any, Callable, Optional, final

from amqwire.codec.methods import Method
from amqwire.codec.properties import BasicProperties

_Buffer = bytes | bytearray | memoryview

class MethodFrame:
    channel: int
    method: Method
    def __init__(self, channel: int, method: Method) -> None: ...

class HeaderFrame:
    channel: int
    class_id: int
    body_size: int
    properties: BasicProperties
    def __init__(self, channel: int, class_id: int, body_size: int, properties: BasicProperties) -> None: ...

class BodyFrame:
    channel: int
    data: bytes
    def __init__(self, channel: int, data: bytes) -> None: ...

class Heartbeat:
    @property
    def channel(self) -> int: ...

class ProtocolHeader:
    major: int
    minor: int
    revision: int
    def __init__(self, major: int, minor: int, revision: int) -> None: ...

class Command:
    channel: int
    method: Method
    properties: BasicProperties | None
    body: bytes | None
    def __init__(
        self, channel: int, method: Method, properties: BasicProperties | None = ..., body: bytes | None = ...
    ) -> None: ...

class Delivery:
    channel_id: int
    channel: Any
    consumer_tag: Optional[str]
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    message_count: Optional[int]
    properties: BasicProperties
    body: bytes
    stream_offset: Optional[int]
    def __init__(
        self,
        channel_id: int,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes,
        consumer_tag: Optional[str] = None,
        message_count: Optional[int] = None,
        channel: Any = None,
        stream_offset: Optional[int] = None,
    ) -> None: ...

_Frame = MethodFrame | HeaderFrame | BodyFrame | Heartbeat | ProtocolHeader

class FrameParser:
    frame_max: int
    @property
    def buffered(self) -> int: ...
    def __init__(self, frame_max: int = ..., *, expect_protocol_header: bool = ...) -> None: ...
    def feed(self, data: _Buffer) -> list[_Frame]: ...

class CommandParser:
    frame_max: int
    max_body_size: int
    @property
    def delivery_type(self) -> type[Delivery] | None: ...
    @property
    def deliveries(self) -> int: ...  # Delivery objects returned so far (with delivery_type)
    @property
    def buffered(self) -> int: ...
    def __init__(
        self,
        frame_max: int = ...,
        *,
        max_body_size: int = ...,
        expect_protocol_header: bool = ...,
        delivery_type: type[Delivery] | None = ...,
    ) -> None: ...
    def feed(self, data: _Buffer) -> list[Command | Delivery | Heartbeat | ProtocolHeader]: ...

def one_run(items: list[Any]) -> bool: ...
def set_channel(deliveries: list[Any], channel: Any) -> None: ...

@final
class DeliveryIterator:
    def __init__(self, buffer: deque[Any], slow: Callable[[], Any]) -> None: ...
    def __iter__(self) -> DeliveryIterator: ...
    def __next__(self) -> Any: ...
    def __aiter__(self) -> DeliveryIterator: ...
    def __anext__(self) -> Any: ...
