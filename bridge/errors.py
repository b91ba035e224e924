"""Why a bridge could not start, or stopped: one line each, and the command's exit code."""
from __future__ import annotations

from amqwire.client.errors import AmqwireError

__all__ = ["BridgeError", "BrokerUnreachable", "BrokerAccessRefused", "MissingResource", "BridgeFailed", "BadConfiguration",
           "ConfigurationLoop"]


class BridgeError(AmqwireError):
    """Base class; ``exit_code`` is what ``python -m amqwire.bridge`` exits with."""

    exit_code = 1


class BrokerUnreachable(BridgeError):
    """A broker could not be reached (refused, timed out, not a broker)."""

    exit_code = 3


class BrokerAccessRefused(BridgeError):
    """A broker refused the credentials, the vhost or the access to a queue or exchange.

    Not the client's ``amqwire.client.AccessRefused`` (a 403 channel close), which it
    usually wraps as ``__cause__``: one name, one class across amqwire."""

    exit_code = 4


class MissingResource(BridgeError):
    """The source queue or the destination exchange does not exist."""

    exit_code = 5


class BridgeFailed(BridgeError):
    """The bridge stopped while running (a recovery gave up, a channel was closed)."""

    exit_code = 1


class BadConfiguration(BridgeError, ValueError):
    """An option, a URL or a secret the bridge cannot use: the command exits 2, as for
    bad arguments."""

    exit_code = 2


class ConfigurationLoop(BadConfiguration):
    """The destination routes what the bridge publishes back into a queue it consumes
    (same broker and vhost): refused at start, before anything is consumed."""

    exit_code = 2
