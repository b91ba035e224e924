"""amqwire.client.stream: a client of RabbitMQ's stream protocol (port 5552), blocking.

The asyncio twin is :mod:`amqwire.client.stream.aio` (same names, every call that waits a
coroutine).  See docs/streams.md::

    from amqwire.client import stream

    with stream.connect("rabbitmq-stream://guest:guest@localhost:5552/") as conn:
        conn.create_stream("events", max_age="7D", exist_ok=True)
        with conn.producer("events", reference="importer-1") as producer:
            futures = [producer.send(b"event %d" % i) for i in range(1000)]
            producer.flush()
        with conn.consumer("events", offset="first", end=999) as consumer:
            for message in consumer:
                print(message.offset, message.body)
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from ..recovery import RecoveryPolicy
from .errors import (
    AuthenticationFailureLoopback,
    FrameTooLarge,
    InvalidStreamUrl,
    MessageTooLarge,
    NoOffset,
    PublisherDoesNotExist,
    SaslChallenge,
    SaslError,
    SaslMechanismNotSupported,
    StreamAccessRefused,
    StreamAlreadyExists,
    StreamAuthenticationFailure,
    StreamClientError,
    StreamConnectionClosed,
    StreamDeleted,
    StreamDoesNotExist,
    StreamInternalError,
    StreamNotAvailable,
    StreamPreconditionFailed,
    StreamPublishFailed,
    StreamResponseError,
    SubscriptionIdAlreadyExists,
    SubscriptionIdDoesNotExist,
    UnknownFrame,
    VirtualHostAccessFailure,
)
from .lifecycle import ConsumerPhase, ProducerPhase
from .message import StreamMessage
from .operations_sync import StreamMetadata, StreamStats
from .operations_sync import SyncStreamConnection as Connection
from .operations_sync import SyncStreamConsumer as Consumer
from .operations_sync import SyncStreamProducer as Producer
from .url import StreamParameters, parse_stream_url, stream_parameters_list
from .waiting_threads import StreamFuture

__all__ = [
    "connect", "Connection", "Producer", "Consumer", "StreamMessage", "StreamFuture", "StreamMetadata",
    "StreamStats", "StreamParameters", "parse_stream_url", "RecoveryPolicy", "ProducerPhase", "ConsumerPhase",
    "StreamClientError", "InvalidStreamUrl", "StreamResponseError", "StreamDoesNotExist",
    "SubscriptionIdAlreadyExists", "SubscriptionIdDoesNotExist", "StreamAlreadyExists", "StreamNotAvailable",
    "SaslMechanismNotSupported", "StreamAuthenticationFailure", "SaslError", "SaslChallenge",
    "AuthenticationFailureLoopback", "VirtualHostAccessFailure", "UnknownFrame", "FrameTooLarge",
    "StreamInternalError", "StreamAccessRefused", "StreamPreconditionFailed", "PublisherDoesNotExist", "NoOffset",
    "StreamConnectionClosed", "StreamPublishFailed", "StreamDeleted", "MessageTooLarge",
]

Target = Union[str, StreamParameters, Sequence[Union[str, StreamParameters]], None]


def connect(url: Target = None, *, heartbeat: Optional[int] = None, frame_max: Optional[int] = None,
            connection_timeout: Optional[float] = None, **options: Any) -> Connection:
    """Connect to RabbitMQ's stream protocol: ``url`` is a ``rabbitmq-stream://`` (or
    ``rabbitmq-stream+tls://``) URL, StreamParameters, or a list of them tried in order.
    ``heartbeat``, ``frame_max``, ``connection_timeout`` override the URL's; ``options``:
    ``ssl_context``, ``client_properties`` (shown by the management UI), ``recovery``
    (True: a RecoveryPolicy's defaults; False: none; or a RecoveryPolicy), ``rpc_timeout``
    (seconds a request waits for its response), ``exception_handler`` (for callbacks)."""
    parameters = stream_parameters_list(url, heartbeat=heartbeat, frame_max=frame_max,
                                        connection_timeout=connection_timeout)
    connection = Connection(parameters, **options)
    connection._connect_any()
    return connection
