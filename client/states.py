"""The state machines of the sans-IO core: states, what can happen to them, and their tables.

As in h11, each machine has one table mapping (state, event) -> new state, where the event
is what happened (``ConnectionEvent.RECV_CLOSE``: the broker's connection.close arrived).
``transition`` is the only way a state changes: it looks the pair up, logs the change at
DEBUG, and raises ``InvalidStateError`` naming both when the table has no such pair.

The events here are the inputs of the tables, not the events the core returns
(``events.py``: ConnectionOpened, ChannelClosedEvent, ...).
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Final, TypeVar

from .errors import InvalidStateError

log = logging.getLogger("amqwire.client.protocol")

__all__ = [
    "ConnectionState",
    "ConnectionEvent",
    "ChannelStatus",
    "ChannelEvent",
    "CONNECTION_TRANSITIONS",
    "CHANNEL_TRANSITIONS",
    "transition",
]


class ConnectionState(str, enum.Enum):
    """Where the connection is.  A str enum: ``core.state == "open"`` holds."""

    NEW = "new"  # before initiate()
    HANDSHAKE = "handshake"  # the protocol header is out; until connection.open-ok
    OPEN = "open"
    CLOSING = "closing"  # connection.close is out; until close-ok (or the broker's close)
    CLOSED = "closed"
    # The broker broke the protocol (a malformed frame, a method out of place): our
    # connection.close with the reply code is queued; only its answer can come next.
    ERROR = "error"

    def __str__(self) -> str:
        # "open", not "ConnectionState.OPEN", in messages and f-strings on every Python
        return self.value


class ConnectionEvent(enum.Enum):
    """What can happen to the connection: the keys of CONNECTION_TRANSITIONS."""

    SEND_PROTOCOL_HEADER = "send protocol header"  # initiate()
    RECV_OPEN_OK = "recv open-ok"
    SEND_CLOSE = "send close"  # close(); before initiate() there is nothing to close
    RECV_CLOSE = "recv close"  # the broker's connection.close (answered with close-ok)
    RECV_CLOSE_OK = "recv close-ok"
    AUTH_FAILED = "auth failed"  # no mechanism in common, or a challenge nobody answers
    PROTOCOL_ERROR = "protocol error"  # a malformed frame or a method out of place
    LOST = "lost"  # the transport lost the socket (connection_lost())


class ChannelStatus(enum.IntEnum):
    """Where one channel is (``ChannelState.state``)."""

    CLOSED = 0  # closed and released, or its connection is closing, closed or in error
    OPENING = 1  # channel.open is out; until open-ok
    OPEN = 2
    CLOSING = 3  # our channel.close is out; until close-ok


class ChannelEvent(enum.Enum):
    """What can happen to a channel: the keys of CHANNEL_TRANSITIONS.  A channel starts in
    OPENING when channel.open is queued."""

    RECV_OPEN_OK = "recv open-ok"
    SEND_CLOSE = "send close"
    RECV_CLOSE = "recv close"  # the broker's channel.close (answered with close-ok)
    RECV_CLOSE_OK = "recv close-ok"
    CONNECTION_DOWN = "connection down"  # the connection went closing, closed or error


_C = ConnectionState
_CE = ConnectionEvent
CONNECTION_TRANSITIONS: Final[Mapping[tuple[ConnectionState, ConnectionEvent], ConnectionState]] = {
    (_C.NEW, _CE.SEND_PROTOCOL_HEADER): _C.HANDSHAKE,
    (_C.NEW, _CE.SEND_CLOSE): _C.CLOSED,
    (_C.HANDSHAKE, _CE.RECV_OPEN_OK): _C.OPEN,
    (_C.HANDSHAKE, _CE.SEND_CLOSE): _C.CLOSING,
    (_C.HANDSHAKE, _CE.RECV_CLOSE): _C.CLOSED,
    (_C.HANDSHAKE, _CE.AUTH_FAILED): _C.CLOSED,
    (_C.HANDSHAKE, _CE.PROTOCOL_ERROR): _C.ERROR,
    (_C.OPEN, _CE.SEND_CLOSE): _C.CLOSING,
    (_C.OPEN, _CE.RECV_CLOSE): _C.CLOSED,
    (_C.OPEN, _CE.PROTOCOL_ERROR): _C.ERROR,
    (_C.CLOSING, _CE.RECV_CLOSE_OK): _C.CLOSED,
    (_C.CLOSING, _CE.RECV_CLOSE): _C.CLOSED,
    (_C.CLOSING, _CE.PROTOCOL_ERROR): _C.ERROR,
    (_C.ERROR, _CE.RECV_CLOSE_OK): _C.CLOSED,
    (_C.ERROR, _CE.RECV_CLOSE): _C.CLOSED,
    **{(state, _CE.LOST): _C.CLOSED for state in (_C.NEW, _C.HANDSHAKE, _C.OPEN, _C.CLOSING, _C.ERROR)},
}

_S = ChannelStatus
_SE = ChannelEvent
CHANNEL_TRANSITIONS: Final[Mapping[tuple[ChannelStatus, ChannelEvent], ChannelStatus]] = {
    (_S.OPENING, _SE.RECV_OPEN_OK): _S.OPEN,
    (_S.OPENING, _SE.SEND_CLOSE): _S.CLOSING,
    (_S.OPENING, _SE.RECV_CLOSE): _S.CLOSED,
    (_S.OPENING, _SE.CONNECTION_DOWN): _S.CLOSED,
    (_S.OPEN, _SE.SEND_CLOSE): _S.CLOSING,
    (_S.OPEN, _SE.RECV_CLOSE): _S.CLOSED,
    (_S.OPEN, _SE.CONNECTION_DOWN): _S.CLOSED,
    (_S.CLOSING, _SE.RECV_CLOSE_OK): _S.CLOSED,
    (_S.CLOSING, _SE.CONNECTION_DOWN): _S.CLOSED,
}
del _C, _CE, _S, _SE

_StateT = TypeVar("_StateT", ConnectionState, ChannelStatus)
_EventT = TypeVar("_EventT", ConnectionEvent, ChannelEvent)


def transition(table: Mapping[tuple[_StateT, _EventT], _StateT], subject: str, current: _StateT, event: _EventT) -> _StateT:
    """The state ``table`` gives ``current`` on ``event``; InvalidStateError naming both
    when it gives none.  ``subject`` ("the connection", "channel 3") is for the message and
    the DEBUG log line."""
    new = table.get((current, event))
    if new is None:
        raise InvalidStateError(f"{subject} cannot take {event.value} in state {current.name.lower()}")
    log.debug("%s: %s -> %s on %s", subject, current.name.lower(), new.name.lower(), event.value)
    return new
