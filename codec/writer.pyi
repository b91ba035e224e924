from amqwire.codec.methods import Method
from amqwire.codec.properties import BasicProperties

_Body = bytes | bytearray | memoryview | str

DEFAULT_FRAME_MAX: int
PROTOCOL_HEADER: bytes
HEARTBEAT_FRAME: bytes

def encode_publish(
    channel: int,
    exchange: str,
    routing_key: str,
    body: _Body,
    properties: BasicProperties | None = ...,
    mandatory: bool = ...,
    immediate: bool = ...,
    frame_max: int = ...,
) -> bytes: ...
def encode_publish_iov(
    channel: int,
    exchange: str,
    routing_key: str,
    body: _Body,
    properties: BasicProperties | None = ...,
    mandatory: bool = ...,
    immediate: bool = ...,
    frame_max: int = ...,
) -> list[bytes | memoryview]: ...

class FrameWriter:
    frame_max: int
    @property
    def publishes(self) -> int: ...  # basic.publish written by publish(), ever (take() keeps it)
    # __cinit__ at run time: the arguments go to __new__
    def __new__(cls, frame_max: int = ...) -> FrameWriter: ...
    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: _Body,
        properties: BasicProperties | None = ...,
        mandatory: bool = ...,
        immediate: bool = ...,
    ) -> None: ...
    def method(self, channel: int, method: Method) -> None: ...
    def ack(self, channel: int, delivery_tag: int, multiple: bool = ...) -> None: ...
    def content(self, channel: int, method: Method, properties: BasicProperties | None, body: _Body) -> None: ...
    def heartbeat(self) -> None: ...
    def protocol_header(self) -> None: ...
    def __len__(self) -> int: ...
    def getvalue(self) -> bytes: ...
    def take(self) -> bytes: ...
    def take_view(self) -> bytes | memoryview: ...
    def clear(self) -> None: ...
