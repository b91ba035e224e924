"""amqwire.client.aio: the asyncio transport and the asyncio Producer.

``connect``, ``Connection``, ``Channel``, ``Consumer`` and ``Message`` (whose ``ack`` is a
coroutine) come from ``aio_connection.py``, ``Producer`` from ``producer/aio.py``, whose
backend builds on that connection; this module only gathers them, so that neither imports
the other through it.
"""
from .aio_connection import Channel, Connection, Consumer, Message, StreamConsumer, StreamOffsets, connect
from .producer.aio import Producer
from .retry_async import ConsumerRetry

__all__ = ["connect", "Connection", "Channel", "Consumer", "Message", "StreamConsumer", "StreamOffsets", "Producer",
           "ConsumerRetry"]
