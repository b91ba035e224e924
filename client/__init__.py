"""amqwire.client: a thin AMQP 0-9-1 client over the amqwire codec.

A sans-IO protocol core (``amqwire.client.protocol``) with two transports of the same
names and meaning: blocking (``amqwire.client.connect``, a socket and an I/O thread) and
asyncio (``amqwire.client.aio.connect``).
"""
from amqwire.codec import BasicProperties

from . import aio
from .blocking import Channel, Connection, Consumer, PublishFuture, StreamConsumer, StreamOffsets, connect
from .lifecycle import ConnectionStatus
from .recovery import RecoveryPolicy
from .encoding import decode_body
from .errors import (
    AmqwireError,
    AMQPError,
    InvalidStateError,
    AMQPConnectionError,
    AuthenticationError,
    ConnectionLost,
    HeartbeatTimeout,
    ConnectionClosed,
    ChannelClosed,
    AccessRefused,
    NotFound,
    ResourceLocked,
    PreconditionFailed,
    PublishError,
    PublishNacked,
    MessageReturned,
    PublishUnconfirmed,
    ConsumerCancelled,
    ConnectionBlockedError,
    OperationTimeout,
    StreamError,
    StreamOptionError,
    StreamReplicaUnavailable,
    NotAStream,
    StreamTruncated,
)
from .listeners import (
    BlockedEvent,
    CallbackError,
    ConfirmEvent,
    ConsumerEvent,
    ConsumerEventKind,
    FlowEvent,
    RecoveryEvent,
    ShutdownEvent,
    UnblockedEvent,
    close_channel_on_consumer_error,
    log_callback_error,
)
from .message import Message, ReturnedMessage
from .metrics import InMemoryMetrics, MetricsCollector, PrometheusMetrics
from .producer.blocking import Producer, SendFuture
from .producer.errors import BufferFullError, SendFailed, SendTimeout
from .producer.message import OutgoingMessage, SendResult
from .producer.policy import Attempt, BrokerStats
from .producer.stats import ProducerStats
from .retry import RetryStats
from .retry_sync import ConsumerRetry
from .url import ConnectionParameters, mask_url_passwords, parse_url

__all__ = [
    "ConsumerRetry",
    "RetryStats",
    "aio",
    "connect",
    "Connection",
    "Channel",
    "Consumer",
    "StreamConsumer",
    "StreamOffsets",
    "PublishFuture",
    "Message",
    "ReturnedMessage",
    "BasicProperties",
    "ConnectionParameters",
    "parse_url",
    "mask_url_passwords",
    "RecoveryPolicy",
    "ConnectionStatus",
    "AmqwireError",
    "AMQPError",
    "InvalidStateError",
    "AMQPConnectionError",
    "AuthenticationError",
    "ConnectionLost",
    "HeartbeatTimeout",
    "ConnectionClosed",
    "ChannelClosed",
    "AccessRefused",
    "NotFound",
    "ResourceLocked",
    "PreconditionFailed",
    "PublishError",
    "PublishNacked",
    "MessageReturned",
    "PublishUnconfirmed",
    "ConsumerCancelled",
    "ConnectionBlockedError",
    "OperationTimeout",
    "StreamError",
    "StreamOptionError",
    "StreamReplicaUnavailable",
    "NotAStream",
    "StreamTruncated",
    "ShutdownEvent",
    "BlockedEvent",
    "UnblockedEvent",
    "RecoveryEvent",
    "FlowEvent",
    "ConfirmEvent",
    "ConsumerEvent",
    "ConsumerEventKind",
    "CallbackError",
    "log_callback_error",
    "close_channel_on_consumer_error",
    "MetricsCollector",
    "InMemoryMetrics",
    "PrometheusMetrics",
    "Producer",
    "SendFuture",
    "SendResult",
    "SendFailed",
    "SendTimeout",
    "BufferFullError",
    "ProducerStats",
    "BrokerStats",
    "OutgoingMessage",
    "Attempt",
    "decode_body",
]
