"""Why a bridge could not start, or stopped: one line each, and the command's exit code."""
from __future__ import annotations

from amqwire.client.errors import AmqwireError

__all__ = ["BridgeError", "BrokerUnreachable", "BrokerAccessRefused", "MissingResource", "BridgeFailed"]


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
