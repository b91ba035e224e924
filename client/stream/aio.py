"""amqwire.client.stream.aio: the stream-protocol client on asyncio.

The same names and meaning as :mod:`amqwire.client.stream` (the blocking client); every call
that waits is a coroutine, ``connect()``, ``producer()`` and ``consumer()`` are awaited or
used with ``async with``, a consumer is iterated with ``async for``, and a send's future is
one of the loop's.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from ..io_asyncio import Opener
from .message import StreamMessage
from .operations_async import AsyncStreamConnection as Connection
from .operations_async import AsyncStreamConsumer as Consumer
from .operations_async import AsyncStreamProducer as Producer
from .operations_async import StreamMetadata, StreamStats
from .url import StreamParameters, stream_parameters_list

__all__ = ["connect", "Connection", "Producer", "Consumer", "StreamMessage", "StreamMetadata", "StreamStats"]

Target = Union[str, StreamParameters, Sequence[Union[str, StreamParameters]], None]


def connect(url: Target = None, *, heartbeat: Optional[int] = None, frame_max: Optional[int] = None,
            connection_timeout: Optional[float] = None, **options: Any) -> Opener[Connection]:
    """Connect (see :func:`amqwire.client.stream.connect`): ``conn = await connect(url)`` or
    ``async with connect(url) as conn``."""
    parameters = stream_parameters_list(url, heartbeat=heartbeat, frame_max=frame_max,
                                        connection_timeout=connection_timeout)

    async def opening() -> Connection:
        connection = Connection(parameters, **options)
        await connection._connect_any()
        return connection

    return Opener(opening())
