"""amqwire.client.aio: the asyncio transport and the asyncio Producer.

``connect``, ``Connection``, ``Channel`` and ``Consumer`` come from ``aio_connection.py``,
``Producer`` from ``producer/aio.py``, whose backend builds on that connection; this module only
gathers them, so that neither imports the other through it.
"""
from .aio_connection import Channel, Connection, Consumer, StreamConsumer, StreamOffsets, connect
from .producer.aio import Producer
from .retry_async import ConsumerRetry

__all__ = ["connect", "Connection", "Channel", "Consumer", "StreamConsumer", "StreamOffsets", "Producer", "ConsumerRetry"]
