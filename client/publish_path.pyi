import asyncio
from typing import Any, Callable, Final, Optional, final, overload

from amqwire.codec import BasicProperties

from .message import Body
from .thread_future import PublishFuture

ZERO_COPY_THRESHOLD: Final[int]
FLUSH_AT: Final[int]

class NoLock:
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...
    def acquire(self) -> bool: ...
    def release(self) -> None: ...

def core_publish(
    core: Any,
    channel: int,
    exchange: str,
    routing_key: str,
    body: Any,
    properties: Optional[BasicProperties] = None,
    mandatory: bool = False,
    immediate: bool = False,
    token: Any = None,
) -> int: ...
def core_on_confirm(core: Any, state: Any, method: Any, command: Any, events: list[Any]) -> None: ...
def core_confirm_run(core: Any, items: list[Any], events: list[Any]) -> int: ...

@final
class ChannelPublisher:
    confirm_window: int
    max_in_flight: int
    unsettled: int
    progress_below: int
    def __init__(self, channel: Any, connection: Any, waits: Any, progress_below: int) -> None: ...
    def publish(
        self, exchange: str, routing_key: str, body: Any, properties: Optional[BasicProperties], mandatory: bool,
        callback: Any,
    ) -> Any: ...
    def on_confirmed(self, event: Any) -> None: ...

@final
class WindowCount:
    @property
    def field(self) -> str: ...
    def __init__(self, field: str) -> None: ...
    @overload
    def __get__(self, instance: None, owner: Any = None, /) -> WindowCount: ...
    @overload
    def __get__(self, instance: object, owner: Any = None, /) -> int: ...
    def __set__(self, instance: object, value: int, /) -> None: ...

def channel_on_confirmed(self: Any, event: Any) -> None: ...

def blocking_publish_async(
    self: Any,
    exchange: str,
    routing_key: str,
    body: Body,
    properties: Optional[BasicProperties] = None,
    *,
    mandatory: bool = False,
    callback: Optional[Callable[[PublishFuture], Any]] = None,
    timeout: Optional[float] = None,
) -> PublishFuture: ...
async def aio_publish_async(
    self: Any,
    exchange: str,
    routing_key: str,
    body: Body,
    properties: Optional[BasicProperties] = None,
    *,
    mandatory: bool = False,
    callback: Optional[Callable[["asyncio.Future[None]"], Any]] = None,
    timeout: Optional[float] = None,
) -> "asyncio.Future[None]": ...
