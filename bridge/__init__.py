"""amqwire.bridge: forward messages from a queue on one RabbitMQ broker to an exchange on
another, without losing one (Shovel's ack modes, mandatory publishes with back-off and
dead-lettering of refused messages, loops refused at start, hop limits, filters, forwarding
on demand, many queues over one pair of connections).

    python -m amqwire.bridge --src amqp://a/ --src-queue orders --dest amqp://b/

or from Python, on asyncio::

    async with Bridge("amqp://a/", "orders", "amqp://b/") as bridge:
        await bridge.wait()
"""
from .errors import (
    BadConfiguration,
    BridgeError,
    BridgeFailed,
    BrokerAccessRefused,
    BrokerUnreachable,
    ConfigurationLoop,
    MissingResource,
)
from .connector import BridgeSpec, Connector, load_config
from .filters import TopicFilter, topic_matches
from .forwarder import AckMode, BackOff, Forwarder, Refused
from .path import PATH_HEADER, read_path
from .runner import Bridge, Direction
from .stats import BridgeStats

__all__ = [
    "Bridge",
    "Connector",
    "BridgeSpec",
    "load_config",
    "Direction",
    "BridgeStats",
    "AckMode",
    "Refused",
    "BackOff",
    "Forwarder",
    "TopicFilter",
    "topic_matches",
    "PATH_HEADER",
    "read_path",
    "BridgeError",
    "BrokerUnreachable",
    "BrokerAccessRefused",
    "MissingResource",
    "BridgeFailed",
    "BadConfiguration",
    "ConfigurationLoop",
]
