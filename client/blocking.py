"""The blocking transport: ``connect()`` and the classes it gives.

The connection, its channels and consumers are written once (``operations_async.py``);
this transport's are the generated twins in ``operations_sync.py``, each owning the
blocking I/O of ``io_threads.py`` (a socket, an I/O thread, threads that wait).  Read
``io_threads.py`` for who reads the socket and where callbacks run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Union

from .io_threads import PublishFuture
from .operations_sync import SyncChannel as Channel
from .operations_sync import SyncConnection as Connection
from .operations_sync import SyncConsumer as Consumer
from .operations_sync import SyncStreamConsumer as StreamConsumer
from .session import ConnectOptions, connection_arguments
from .streams import StreamOffsets
from .url import ParametersLike

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["connect", "Connection", "Channel", "Consumer", "StreamConsumer", "StreamOffsets", "PublishFuture"]


def connect(
    url: Union[ParametersLike, Sequence[ParametersLike], None] = None, **options: Unpack[ConnectOptions]
) -> Connection:
    """Open a connection (the first URL that works, in order) and finish the handshake."""
    parameters, connection_options = connection_arguments(url, options)
    connection = Connection(parameters, **connection_options)
    try:
        connection._connect_any()
    except BaseException:
        connection._io.discard()
        raise
    return connection
