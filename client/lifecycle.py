"""A connection's lifecycle: one state from an explicit set, one table of transitions.

Everything a connection decides about itself (may a call go ahead, may an ack, is there a
socket to write to, does a loss start a recovery, has the user closed it) is read from
``Lifecycle.state``, and only ``Lifecycle.fire`` changes it, by looking up (state, event)
in ``TRANSITIONS``.  An event that the table does not allow in a state is a bug of the
client, not of the user: it raises ``InvalidStateError`` naming both.  Every change is
logged at DEBUG on ``amqwire.client.lifecycle``.

The state carries one datum with it: ``error``, why calls fail (the loss, the broker's
close, or the user's close), set by the events that mean it and cleared by the ones that
end it.
"""
from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Optional

from .errors import InvalidStateError

log = logging.getLogger("amqwire.client.lifecycle")

__all__ = [
    "ConnectionStatus", "ConnectionSignal", "TRANSITIONS", "Lifecycle",
    "ChannelPhase", "ChannelSignal", "CHANNEL_PHASES", "CHANNEL_OPEN_PHASES",
    "ConsumerPhase", "ConsumerSignal", "CONSUMER_PHASES", "Machine",
]


class ConnectionStatus(enum.Enum):
    """Where a logical connection is (it outlives the sockets a recovery replaces)."""

    NEW = "new"                            # no socket yet: connect() is trying the brokers
    CONNECTING = "connecting"              # a socket, the handshake under way (connect())
    OPEN = "open"
    BLOCKED = "blocked"                    # open; the broker blocked publishing (connection.blocked)
    CLOSED_BY_BROKER = "closed by broker"  # the broker's connection.close is read; its loss comes next
    DOWN = "down"                          # the socket is lost and a recovery will reconnect
    RECONNECTING = "reconnecting"          # a recovery attempt: a socket, the handshake under way
    RESTORING = "restoring"                # reconnected: channels, topology and consumers coming back
    CLOSING = "closing"                    # close(): the close handshake under way
    CLOSED = "closed"                      # closed by the user, for good
    FAILED = "failed"                      # lost and not recovered, for good

    def __str__(self) -> str:
        return self.value


class ConnectionSignal(enum.Enum):
    SOCKET_UP = "socket up"
    HANDSHAKE_DONE = "handshake done"
    CONNECT_FAILED = "connect failed"      # connect() tried every broker
    BLOCK = "connection.blocked"
    UNBLOCK = "connection.unblocked"
    BROKER_CLOSE = "connection.close from the broker"
    LOST = "lost"                          # the socket is gone; no recovery wanted
    LOST_RECOVERABLE = "lost, recoverable"  # the socket is gone; recovery is on and the fault allows it
    RESTORED = "restored"
    GIVE_UP = "recovery given up"
    CLOSE = "close()"

    def __str__(self) -> str:
        return self.value


S = ConnectionStatus
E = ConnectionSignal

#: States with a socket: I/O may go on.
SOCKET_STATES = frozenset({S.CONNECTING, S.OPEN, S.BLOCKED, S.CLOSED_BY_BROKER, S.RECONNECTING, S.RESTORING, S.CLOSING})
#: States whose socket finished its handshake.
OPENED_STATES = frozenset({S.OPEN, S.BLOCKED, S.CLOSED_BY_BROKER, S.RESTORING, S.CLOSING})
#: A recovery is under way.
RECOVERING_STATES = frozenset({S.DOWN, S.RECONNECTING, S.RESTORING})
#: Callers may send (requests, publishes).
USABLE_STATES = frozenset({S.OPEN, S.BLOCKED})
#: Deliveries of the current socket may be acked, nacked, rejected: a recovering
#: connection's re-subscribed consumers get deliveries before the recovery ends.
ANSWERABLE_STATES = frozenset({S.OPEN, S.BLOCKED, S.RESTORING})
FINAL_STATES = frozenset({S.CLOSED, S.FAILED})

# (state, event) -> state.  Losses and gives-up may be reported twice (the reader and a
# writer, a recovery thread and close()): the second finds a state that maps to itself.
TRANSITIONS: dict[tuple[ConnectionStatus, ConnectionSignal], ConnectionStatus] = {
    (S.NEW, E.SOCKET_UP): S.CONNECTING,
    (S.NEW, E.CONNECT_FAILED): S.FAILED,
    (S.NEW, E.LOST): S.NEW,
    (S.NEW, E.LOST_RECOVERABLE): S.NEW,
    (S.NEW, E.CLOSE): S.CLOSED,
    (S.CONNECTING, E.HANDSHAKE_DONE): S.OPEN,
    (S.CONNECTING, E.BROKER_CLOSE): S.CONNECTING,  # a refused login: the loss follows
    (S.CONNECTING, E.LOST): S.NEW,  # the next broker, or connect() raises
    (S.CONNECTING, E.LOST_RECOVERABLE): S.NEW,
    (S.CONNECTING, E.CLOSE): S.CLOSED,
    (S.OPEN, E.BLOCK): S.BLOCKED,
    (S.OPEN, E.UNBLOCK): S.OPEN,
    (S.OPEN, E.BROKER_CLOSE): S.CLOSED_BY_BROKER,
    (S.OPEN, E.LOST): S.FAILED,
    (S.OPEN, E.LOST_RECOVERABLE): S.DOWN,
    (S.OPEN, E.CLOSE): S.CLOSING,
    (S.BLOCKED, E.BLOCK): S.BLOCKED,
    (S.BLOCKED, E.UNBLOCK): S.OPEN,
    (S.BLOCKED, E.BROKER_CLOSE): S.CLOSED_BY_BROKER,
    (S.BLOCKED, E.LOST): S.FAILED,
    (S.BLOCKED, E.LOST_RECOVERABLE): S.DOWN,
    (S.BLOCKED, E.CLOSE): S.CLOSING,
    (S.CLOSED_BY_BROKER, E.BLOCK): S.CLOSED_BY_BROKER,
    (S.CLOSED_BY_BROKER, E.UNBLOCK): S.CLOSED_BY_BROKER,
    (S.CLOSED_BY_BROKER, E.BROKER_CLOSE): S.CLOSED_BY_BROKER,
    (S.CLOSED_BY_BROKER, E.LOST): S.FAILED,
    (S.CLOSED_BY_BROKER, E.LOST_RECOVERABLE): S.DOWN,
    (S.CLOSED_BY_BROKER, E.CLOSE): S.CLOSING,
    (S.DOWN, E.SOCKET_UP): S.RECONNECTING,
    (S.DOWN, E.LOST): S.DOWN,
    (S.DOWN, E.LOST_RECOVERABLE): S.DOWN,
    (S.DOWN, E.GIVE_UP): S.FAILED,
    (S.DOWN, E.CLOSE): S.CLOSED,
    (S.RECONNECTING, E.HANDSHAKE_DONE): S.RESTORING,
    (S.RECONNECTING, E.BROKER_CLOSE): S.RECONNECTING,
    (S.RECONNECTING, E.LOST): S.DOWN,  # a failed attempt: the recovery decides what next
    (S.RECONNECTING, E.LOST_RECOVERABLE): S.DOWN,
    (S.RECONNECTING, E.CLOSE): S.CLOSING,  # no close handshake: the socket is aborted
    (S.RESTORING, E.BLOCK): S.RESTORING,  # the core keeps it: RESTORED reads it
    (S.RESTORING, E.UNBLOCK): S.RESTORING,
    (S.RESTORING, E.BROKER_CLOSE): S.RESTORING,
    (S.RESTORING, E.LOST): S.DOWN,
    (S.RESTORING, E.LOST_RECOVERABLE): S.DOWN,
    (S.RESTORING, E.RESTORED): S.OPEN,
    (S.RESTORING, E.CLOSE): S.CLOSING,
    (S.CLOSING, E.BLOCK): S.CLOSING,
    (S.CLOSING, E.UNBLOCK): S.CLOSING,
    (S.CLOSING, E.BROKER_CLOSE): S.CLOSING,
    (S.CLOSING, E.LOST): S.CLOSED,
    (S.CLOSING, E.LOST_RECOVERABLE): S.CLOSED,
    (S.CLOSING, E.CLOSE): S.CLOSING,
    (S.CLOSED, E.LOST): S.CLOSED,
    (S.CLOSED, E.LOST_RECOVERABLE): S.CLOSED,
    (S.CLOSED, E.GIVE_UP): S.CLOSED,
    (S.CLOSED, E.CLOSE): S.CLOSED,
    (S.FAILED, E.LOST): S.FAILED,
    (S.FAILED, E.LOST_RECOVERABLE): S.FAILED,
    (S.FAILED, E.GIVE_UP): S.FAILED,
    (S.FAILED, E.CLOSE): S.CLOSED,
}

# What the broker sent may be read just before its socket is lost and handled just after (the
# reader and the loss are on different threads, or in one read): for a socket that is gone,
# or a connection being closed, those wire events change nothing.
for _state in (S.NEW, S.DOWN, S.CLOSING, S.CLOSED, S.FAILED):
    for _event in (E.HANDSHAKE_DONE, E.BLOCK, E.UNBLOCK, E.BROKER_CLOSE):
        TRANSITIONS.setdefault((_state, _event), _state)
for _event in (E.BLOCK, E.UNBLOCK):
    TRANSITIONS.setdefault((S.CONNECTING, _event), S.CONNECTING)
    TRANSITIONS.setdefault((S.RECONNECTING, _event), S.RECONNECTING)
del _state, _event


class Lifecycle:
    """One connection's state and why calls fail (``error``); see the module's text.

    ``usable``, ``answerable``, ``has_socket``, ``opened``, ``recovering`` and
    ``closed_by_user`` say whether the state is in the sets above: read-only views of
    ``state``, written by ``fire`` alone, so a hot path reads one attribute."""

    __slots__ = ("state", "error", "name", "usable", "answerable", "has_socket", "opened", "recovering",
                 "closed_by_user", "watch")

    def __init__(self, name: str = "connection") -> None:
        self.name = name
        self.error: Optional[BaseException] = None
        #: ``watch(old, new)`` after every change of state (the metrics' gauges); None: nobody
        self.watch: Optional[Callable[[ConnectionStatus, ConnectionStatus], None]] = None
        self._enter(S.NEW)

    def _enter(self, state: ConnectionStatus) -> None:
        self.state = state
        self.usable = state in USABLE_STATES
        self.answerable = state in ANSWERABLE_STATES
        self.has_socket = state in SOCKET_STATES
        self.opened = state in OPENED_STATES
        self.recovering = state in RECOVERING_STATES
        self.closed_by_user = state is S.CLOSING or state is S.CLOSED

    def fire(self, event: ConnectionSignal, error: Optional[BaseException] = None) -> ConnectionStatus:
        """Take the transition of ``event``; returns the state it left.  ``error``: why
        calls fail from now on, for the events that bring one (kept if one is set)."""
        old = self.state
        new = TRANSITIONS.get((old, event))
        if new is None:
            raise InvalidStateError(f"{self.name}: {event} is not possible while {old}")
        self._enter(new)
        if new is S.OPEN:
            self.error = None  # connected, or recovered
        elif error is not None and self.error is None:
            self.error = error  # the first reason stays: a loss is not hidden by the close after it
        if new is not old:
            log.debug("%s: %s -> %s (%s)", self.name, old, new, event)
            if self.watch is not None:
                self.watch(old, new)
        return old

    def __repr__(self) -> str:
        return f"<Lifecycle {self.name} {self.state}>"


# --------------------------------------------------------------------------- channels and consumers


class ChannelPhase(enum.Enum):
    OPENING = "opening"  # channel.open sent, its open-ok not read yet
    OPEN = "open"
    # Reopened by a recovery (or renewed, below), and none of its publishes acked since.
    # Open like OPEN; a run of nacks here makes it STALLED.
    RESTORED = "restored"
    # Restored, then only nacks (RecoveryPolicy.renew_after_nacks in a row): its next
    # publish first renews it.  Open; publishes wait while it is RENEWING.
    STALLED = "stalled"
    RENEWING = "renewing"  # being replaced by a fresh channel on the same connection
    DOWN = "down"        # its connection is lost and recovering: reopened when it is back
    CLOSED = "closed"    # by close(), by the broker, or with its connection, for good

    def __str__(self) -> str:
        return self.value


class ChannelSignal(enum.Enum):
    OPENED = "channel.open-ok"
    CONNECTION_DOWN = "connection lost, recovering"
    REOPENED = "reopened by the recovery"
    CONNECTION_GONE = "connection closed or lost for good"
    CLOSED = "channel closed"  # close-ok read, the broker's channel.close, or close() while down
    ACKED = "a publish acked"
    NACKED_RUN = "publishes nacked in a row since the recovery"
    RENEW = "renewal started"
    RENEWED = "renewed: a fresh channel in its place"
    RENEW_GIVEN_UP = "renewal given up"  # the policy's bound reached, or the renewal failed
    RENEW_CANCELLED = "renewal cancelled"  # with the publish that ran it: the next publish tries again

    def __str__(self) -> str:
        return self.value


CS, CE = ChannelPhase, ChannelSignal
#: The phases in which a channel is open (calls go ahead, except publishes while RENEWING).
CHANNEL_OPEN_PHASES = frozenset({CS.OPEN, CS.RESTORED, CS.STALLED, CS.RENEWING})
CHANNEL_PHASES: dict[tuple[ChannelPhase, ChannelSignal], ChannelPhase] = {
    (CS.OPENING, CE.OPENED): CS.OPEN,
    (CS.OPENING, CE.CONNECTION_DOWN): CS.CLOSED,  # its open fails: the caller gets the error
    (CS.OPENING, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.OPENING, CE.CLOSED): CS.CLOSED,
    (CS.OPEN, CE.CONNECTION_DOWN): CS.DOWN,
    (CS.OPEN, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.OPEN, CE.CLOSED): CS.CLOSED,
    (CS.DOWN, CE.CONNECTION_DOWN): CS.DOWN,  # a failed recovery attempt
    (CS.DOWN, CE.REOPENED): CS.RESTORED,
    (CS.DOWN, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.DOWN, CE.CLOSED): CS.CLOSED,
    # A channel restored by a recovery: an ack ends the watch; only nacks stall it
    (CS.RESTORED, CE.ACKED): CS.OPEN,
    (CS.RESTORED, CE.NACKED_RUN): CS.STALLED,
    (CS.RESTORED, CE.RENEW_GIVEN_UP): CS.OPEN,
    (CS.STALLED, CE.ACKED): CS.OPEN,  # a late ack: it publishes after all
    (CS.STALLED, CE.RENEW): CS.RENEWING,
    (CS.STALLED, CE.RENEW_GIVEN_UP): CS.OPEN,
    (CS.RENEWING, CE.ACKED): CS.RENEWING,  # of the channel being replaced
    (CS.RENEWING, CE.RENEWED): CS.RESTORED,  # watched again: the fresh one may stall too
    (CS.RENEWING, CE.RENEW_GIVEN_UP): CS.OPEN,
    (CS.RENEWING, CE.RENEW_CANCELLED): CS.STALLED,
    # closed while its open-ok was on the way (the loss, the user): the waiting flow sees it
    (CS.CLOSED, CE.OPENED): CS.CLOSED,
    (CS.CLOSED, CE.REOPENED): CS.CLOSED,
    (CS.CLOSED, CE.CONNECTION_DOWN): CS.CLOSED,
    (CS.CLOSED, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.CLOSED, CE.CLOSED): CS.CLOSED,
}
for _phase in (CS.RESTORED, CS.STALLED, CS.RENEWING):  # open: they go down and close as OPEN does
    CHANNEL_PHASES[(_phase, CE.CONNECTION_DOWN)] = CS.DOWN
    CHANNEL_PHASES[(_phase, CE.CONNECTION_GONE)] = CS.CLOSED
    CHANNEL_PHASES[(_phase, CE.CLOSED)] = CS.CLOSED
for _phase in (CS.OPEN, CS.DOWN, CS.CLOSED):
    # A verdict read just before an ack ended the watch, a loss, or a close: nothing changes.
    for _signal in (CE.ACKED, CE.RENEW_GIVEN_UP):
        CHANNEL_PHASES[(_phase, _signal)] = _phase
# A renewal that a loss or a close overtook: it ends where they left the channel.
for _signal in (CE.RENEWED, CE.RENEW, CE.RENEW_CANCELLED):
    CHANNEL_PHASES[(CS.DOWN, _signal)] = CS.DOWN
    CHANNEL_PHASES[(CS.CLOSED, _signal)] = CS.CLOSED
del _phase, _signal


class ConsumerPhase(enum.Enum):
    ACTIVE = "active"  # subscribed, or being subscribed again by a recovery
    ENDED = "ended"    # cancelled (by the user or the broker), or its channel or connection gone

    def __str__(self) -> str:
        return self.value


class ConsumerSignal(enum.Enum):
    END = "end"

    def __str__(self) -> str:
        return self.value


CONSUMER_PHASES: dict[tuple[ConsumerPhase, ConsumerSignal], ConsumerPhase] = {
    (ConsumerPhase.ACTIVE, ConsumerSignal.END): ConsumerPhase.ENDED,
    (ConsumerPhase.ENDED, ConsumerSignal.END): ConsumerPhase.ENDED,  # only the first reason counts
}


class Machine:
    """A channel's or a consumer's state, its table, and why it ended (``reason``: given
    with the event that takes it to its ``final`` state)."""

    __slots__ = ("state", "reason", "name", "_table", "_final", "watch")

    def __init__(self, table: dict[Any, Any], initial: Any, final: Any, name: str) -> None:
        self.state = initial
        self.reason: Any = None
        self.name = name
        self._table = table
        self._final = final
        #: ``watch(old, new)`` after every change of state (the metrics' gauges); None: nobody
        self.watch: Optional[Callable[[Any, Any], None]] = None

    def fire(self, event: Any, reason: Any = None) -> Any:
        """Take the transition of ``event``; returns the state it left."""
        old = self.state
        new = self._table.get((old, event))
        if new is None:
            raise InvalidStateError(f"{self.name}: {event} is not possible while {old}")
        self.state = new
        if new is self._final and old is not new:
            self.reason = reason
        if new is not old:
            log.debug("%s: %s -> %s (%s)", self.name, old, new, event)
            if self.watch is not None:
                self.watch(old, new)
        return old

    def __repr__(self) -> str:
        return f"<Machine {self.name} {self.state}>"
