"""The asyncio transport: ``connect()`` and the classes it gives.

Users import it as ``amqwire.client.aio``, which adds the asyncio Producer: this module
imports nothing of the producer, so the producer can build on it.

Same names and meaning as the blocking transport; every call that waits is a coroutine.
The connection, its channels and consumers are written once, in ``operations_async.py``,
each owning the asyncio I/O of ``io_asyncio.py``.

Cancellation: a cancelled request (``asyncio.wait_for(ch.queue_declare(...), 1)``) leaves
the channel usable; its late reply is discarded.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Union

from .io_asyncio import Opener
from .message import AsyncMessage as Message
from .operations_async import AsyncChannel as Channel
from .operations_async import AsyncConnection as Connection
from .operations_async import AsyncConsumer as Consumer
from .operations_async import AsyncStreamConsumer as StreamConsumer
from .streams import StreamOffsets
from .session import ConnectOptions, connection_arguments
from .url import ParametersLike

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["connect", "Connection", "Channel", "Consumer", "StreamConsumer", "StreamOffsets", "Message"]


def connect(
    url: Union[ParametersLike, Sequence[ParametersLike], None] = None, **options: Unpack[ConnectOptions]
) -> Opener[Connection]:
    """Open a connection: ``conn = await connect(url)`` or ``async with connect(url) as conn``."""
    parameters, connection_options = connection_arguments(url, options)

    async def opening() -> Connection:
        connection = Connection(parameters, **connection_options)
        await connection._connect_any()
        return connection

    return Opener(opening())
