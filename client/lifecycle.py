"""Every state of the client, in one module: what can be, what can happen, and the tables.

One vocabulary for every machine: a **state** enum, a **signal** enum (what happened: the
input of the table; the events the core returns are something else, ``events.py``), and a
**table** mapping (state, signal) -> state, written out pair by pair.  ``fire`` is the one
way a state changes: it looks the pair up, logs the change at DEBUG on
``amqwire.client.lifecycle``, and raises ``InvalidStateError`` naming both when the table has
no such pair: a signal that a state does not allow is a bug of the client, not of the user.
What else the client knows about a state (may a call go ahead, is there a socket) is a
read-only view of it, set by the transition, never a flag kept by hand.

The machines, from the wire up:

- the sans-IO core's connection (``ConnectionState``: one socket's handshake and close) and
  channels (``ChannelStatus``), run by ``protocol.ConnectionProtocol``;
- a logical connection (``ConnectionStatus``: it outlives the sockets a recovery replaces),
  run by ``Lifecycle``; the stream client's links and connections use it too;
- a channel (``ChannelPhase``), a consumer (``ConsumerPhase``), a channel's synchronous
  request (``RequestPhase``), run by ``Machine`` (as the stream client's producers and
  consumers are, ``stream/lifecycle.py``);
- a Producer (``ProducerPhase``) and its sender (``SenderPhase``).
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import Any, Callable, Final, Optional, TypeVar

from .errors import InvalidStateError

log = logging.getLogger("amqwire.client.lifecycle")

__all__ = [
    "fire", "Named",
    "ConnectionState", "WireSignal", "CONNECTION_TRANSITIONS",
    "ChannelStatus", "WireChannelSignal", "CHANNEL_TRANSITIONS",
    "HandshakeStep", "HandshakeSignal", "HANDSHAKE_STEPS",
    "ConnectionStatus", "ConnectionSignal", "TRANSITIONS", "Lifecycle",
    "ChannelPhase", "ChannelSignal", "CHANNEL_PHASES", "CHANNEL_OPEN_PHASES",
    "ConsumerPhase", "ConsumerSignal", "CONSUMER_PHASES", "Machine",
    "RequestPhase", "RequestSignal", "REQUEST_PHASES",
    "ProducerPhase", "ProducerSignal", "PRODUCER_PHASES", "SenderPhase", "SenderSignal", "SENDER_PHASES",
]

_State = TypeVar("_State")


def fire(table: Mapping[tuple[_State, Any], _State], subject: str, current: _State, signal: Any) -> _State:
    """The state ``table`` gives ``current`` on ``signal``; InvalidStateError naming both
    when it gives none.  ``subject`` ("the connection", "channel 3") names the machine in
    the message and the DEBUG line (written for a change only)."""
    new = table.get((current, signal))
    if new is None:
        raise InvalidStateError(f"{subject}: {signal} is not possible while {current}")
    if new is not current:
        log.debug("%s: %s -> %s (%s)", subject, current, new, signal)
    return new


class Named(enum.Enum):
    """A state or signal that reads as its value: "open", not "ConnectionStatus.OPEN", in
    messages and f-strings on every Python."""

    def __str__(self) -> str:
        return str(self.value)


# --------------------------------------------------------------------------- the core: one socket


class ConnectionState(str, Named):
    """Where the core's connection is.  A str enum: ``core.state == "open"`` holds."""

    NEW = "new"  # before initiate()
    HANDSHAKE = "handshake"  # the protocol header is out; until connection.open-ok
    OPEN = "open"
    CLOSING = "closing"  # connection.close is out; until close-ok (or the broker's close)
    CLOSED = "closed"
    # The broker broke the protocol (a malformed frame, a method out of place): our
    # connection.close with the reply code is queued; only its answer can come next.
    ERROR = "error"


class WireSignal(Named):
    """What can happen to the core's connection: the keys of CONNECTION_TRANSITIONS."""

    SEND_PROTOCOL_HEADER = "send protocol header"  # initiate()
    RECV_OPEN_OK = "recv open-ok"
    SEND_CLOSE = "send close"  # close(); before initiate() there is nothing to close
    RECV_CLOSE = "recv close"  # the broker's connection.close (answered with close-ok)
    RECV_CLOSE_OK = "recv close-ok"
    AUTH_FAILED = "auth failed"  # no mechanism in common, or a challenge nobody answers
    PROTOCOL_ERROR = "protocol error"  # a malformed frame or a method out of place
    LOST = "lost"  # the transport lost the socket (connection_lost())


class ChannelStatus(enum.IntEnum):
    """Where one of the core's channels is (``ChannelState.state``)."""

    CLOSED = 0  # closed and released, or its connection is closing, closed or in error
    OPENING = 1  # channel.open is out; until open-ok
    OPEN = 2
    CLOSING = 3  # our channel.close is out; until close-ok

    def __str__(self) -> str:
        return self.name.lower()


class WireChannelSignal(Named):
    """What can happen to one of the core's channels: the keys of CHANNEL_TRANSITIONS.  A
    channel starts in OPENING when channel.open is queued."""

    RECV_OPEN_OK = "recv open-ok"
    SEND_CLOSE = "send close"
    RECV_CLOSE = "recv close"  # the broker's channel.close (answered with close-ok)
    RECV_CLOSE_OK = "recv close-ok"
    CONNECTION_DOWN = "connection down"  # the connection went closing, closed or error


_W, _WS = ConnectionState, WireSignal
CONNECTION_TRANSITIONS: Final[Mapping[tuple[ConnectionState, WireSignal], ConnectionState]] = {
    (_W.NEW, _WS.SEND_PROTOCOL_HEADER): _W.HANDSHAKE,
    (_W.NEW, _WS.SEND_CLOSE): _W.CLOSED,
    (_W.NEW, _WS.LOST): _W.CLOSED,

    (_W.HANDSHAKE, _WS.RECV_OPEN_OK): _W.OPEN,
    (_W.HANDSHAKE, _WS.SEND_CLOSE): _W.CLOSING,
    (_W.HANDSHAKE, _WS.RECV_CLOSE): _W.CLOSED,
    (_W.HANDSHAKE, _WS.AUTH_FAILED): _W.CLOSED,
    (_W.HANDSHAKE, _WS.PROTOCOL_ERROR): _W.ERROR,
    (_W.HANDSHAKE, _WS.LOST): _W.CLOSED,

    (_W.OPEN, _WS.SEND_CLOSE): _W.CLOSING,
    (_W.OPEN, _WS.RECV_CLOSE): _W.CLOSED,
    (_W.OPEN, _WS.PROTOCOL_ERROR): _W.ERROR,
    (_W.OPEN, _WS.LOST): _W.CLOSED,

    (_W.CLOSING, _WS.RECV_CLOSE_OK): _W.CLOSED,
    (_W.CLOSING, _WS.RECV_CLOSE): _W.CLOSED,
    (_W.CLOSING, _WS.PROTOCOL_ERROR): _W.ERROR,
    (_W.CLOSING, _WS.LOST): _W.CLOSED,

    (_W.ERROR, _WS.RECV_CLOSE_OK): _W.CLOSED,
    (_W.ERROR, _WS.RECV_CLOSE): _W.CLOSED,
    (_W.ERROR, _WS.LOST): _W.CLOSED,
}

_CS, _CWS = ChannelStatus, WireChannelSignal
CHANNEL_TRANSITIONS: Final[Mapping[tuple[ChannelStatus, WireChannelSignal], ChannelStatus]] = {
    (_CS.OPENING, _CWS.RECV_OPEN_OK): _CS.OPEN,
    (_CS.OPENING, _CWS.SEND_CLOSE): _CS.CLOSING,
    (_CS.OPENING, _CWS.RECV_CLOSE): _CS.CLOSED,
    (_CS.OPENING, _CWS.CONNECTION_DOWN): _CS.CLOSED,

    (_CS.OPEN, _CWS.SEND_CLOSE): _CS.CLOSING,
    (_CS.OPEN, _CWS.RECV_CLOSE): _CS.CLOSED,
    (_CS.OPEN, _CWS.CONNECTION_DOWN): _CS.CLOSED,

    (_CS.CLOSING, _CWS.RECV_CLOSE_OK): _CS.CLOSED,
    (_CS.CLOSING, _CWS.CONNECTION_DOWN): _CS.CLOSED,
}
del _W, _WS, _CS, _CWS


class HandshakeStep(Named):
    """Which method of the broker the core's handshake waits for (in HANDSHAKE); any other
    one on channel 0 is a protocol error."""

    START = "connection.start"
    TUNE = "connection.tune"  # start-ok is out (connection.secure challenges may come first)
    OPEN_OK = "connection.open-ok"  # tune-ok and connection.open are out
    DONE = "done"


class HandshakeSignal(Named):
    RECV_START = "recv start"
    RECV_TUNE = "recv tune"
    RECV_OPEN_OK = "recv open-ok"


HANDSHAKE_STEPS: Final[Mapping[tuple[HandshakeStep, HandshakeSignal], HandshakeStep]] = {
    (HandshakeStep.START, HandshakeSignal.RECV_START): HandshakeStep.TUNE,
    (HandshakeStep.TUNE, HandshakeSignal.RECV_TUNE): HandshakeStep.OPEN_OK,
    (HandshakeStep.OPEN_OK, HandshakeSignal.RECV_OPEN_OK): HandshakeStep.DONE,
}


# --------------------------------------------------------------------------- a logical connection


class ConnectionStatus(Named):
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


class ConnectionSignal(Named):
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

# (state, signal) -> state.  Losses and gives-up may be reported twice (the reader and a
# writer, a recovery thread and close()): the second finds a state that maps to itself.  What
# the broker sent may be read just before its socket is lost and handled just after (the
# reader and the loss are on different threads, or in one read): for a socket that is gone,
# or a connection being closed, those wire signals change nothing.
TRANSITIONS: Final[Mapping[tuple[ConnectionStatus, ConnectionSignal], ConnectionStatus]] = {
    (S.NEW, E.SOCKET_UP): S.CONNECTING,
    (S.NEW, E.HANDSHAKE_DONE): S.NEW,
    (S.NEW, E.CONNECT_FAILED): S.FAILED,
    (S.NEW, E.BLOCK): S.NEW,
    (S.NEW, E.UNBLOCK): S.NEW,
    (S.NEW, E.BROKER_CLOSE): S.NEW,
    (S.NEW, E.LOST): S.NEW,
    (S.NEW, E.LOST_RECOVERABLE): S.NEW,
    (S.NEW, E.CLOSE): S.CLOSED,

    (S.CONNECTING, E.HANDSHAKE_DONE): S.OPEN,
    (S.CONNECTING, E.BLOCK): S.CONNECTING,
    (S.CONNECTING, E.UNBLOCK): S.CONNECTING,
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
    (S.DOWN, E.HANDSHAKE_DONE): S.DOWN,  # read before the loss, handled after it: moot
    (S.DOWN, E.BLOCK): S.DOWN,
    (S.DOWN, E.UNBLOCK): S.DOWN,
    (S.DOWN, E.BROKER_CLOSE): S.DOWN,
    (S.DOWN, E.LOST): S.DOWN,
    (S.DOWN, E.LOST_RECOVERABLE): S.DOWN,
    (S.DOWN, E.GIVE_UP): S.FAILED,
    (S.DOWN, E.CLOSE): S.CLOSED,

    (S.RECONNECTING, E.HANDSHAKE_DONE): S.RESTORING,
    (S.RECONNECTING, E.BLOCK): S.RECONNECTING,
    (S.RECONNECTING, E.UNBLOCK): S.RECONNECTING,
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

    (S.CLOSING, E.HANDSHAKE_DONE): S.CLOSING,  # what the broker sent, handled after close(): moot
    (S.CLOSING, E.BLOCK): S.CLOSING,
    (S.CLOSING, E.UNBLOCK): S.CLOSING,
    (S.CLOSING, E.BROKER_CLOSE): S.CLOSING,
    (S.CLOSING, E.LOST): S.CLOSED,
    (S.CLOSING, E.LOST_RECOVERABLE): S.CLOSED,
    (S.CLOSING, E.CLOSE): S.CLOSING,

    (S.CLOSED, E.HANDSHAKE_DONE): S.CLOSED,
    (S.CLOSED, E.BLOCK): S.CLOSED,
    (S.CLOSED, E.UNBLOCK): S.CLOSED,
    (S.CLOSED, E.BROKER_CLOSE): S.CLOSED,
    (S.CLOSED, E.LOST): S.CLOSED,
    (S.CLOSED, E.LOST_RECOVERABLE): S.CLOSED,
    (S.CLOSED, E.GIVE_UP): S.CLOSED,
    (S.CLOSED, E.CLOSE): S.CLOSED,

    (S.FAILED, E.HANDSHAKE_DONE): S.FAILED,
    (S.FAILED, E.BLOCK): S.FAILED,
    (S.FAILED, E.UNBLOCK): S.FAILED,
    (S.FAILED, E.BROKER_CLOSE): S.FAILED,
    (S.FAILED, E.LOST): S.FAILED,
    (S.FAILED, E.LOST_RECOVERABLE): S.FAILED,
    (S.FAILED, E.GIVE_UP): S.FAILED,
    (S.FAILED, E.CLOSE): S.CLOSED,
}


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
        new = fire(TRANSITIONS, self.name, old, event)
        self._enter(new)
        if new is S.OPEN:
            self.error = None  # connected, or recovered
        elif error is not None and self.error is None:
            self.error = error  # the first reason stays: a loss is not hidden by the close after it
        if new is not old and self.watch is not None:
            self.watch(old, new)
        return old

    def __repr__(self) -> str:
        return f"<Lifecycle {self.name} {self.state}>"


# --------------------------------------------------------------------------- channels and consumers


class ChannelPhase(Named):
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


class ChannelSignal(Named):
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


CS, CE = ChannelPhase, ChannelSignal
#: The phases in which a channel is open (calls go ahead, except publishes while RENEWING).
CHANNEL_OPEN_PHASES = frozenset({CS.OPEN, CS.RESTORED, CS.STALLED, CS.RENEWING})
CHANNEL_PHASES: Final[Mapping[tuple[ChannelPhase, ChannelSignal], ChannelPhase]] = {
    (CS.OPENING, CE.OPENED): CS.OPEN,
    (CS.OPENING, CE.CONNECTION_DOWN): CS.CLOSED,  # its open fails: the caller gets the error
    (CS.OPENING, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.OPENING, CE.CLOSED): CS.CLOSED,

    (CS.OPEN, CE.CONNECTION_DOWN): CS.DOWN,
    (CS.OPEN, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.OPEN, CE.CLOSED): CS.CLOSED,
    (CS.OPEN, CE.ACKED): CS.OPEN,  # a verdict read just before an ack ended the watch: nothing changes
    (CS.OPEN, CE.RENEW_GIVEN_UP): CS.OPEN,

    (CS.RESTORED, CE.CONNECTION_DOWN): CS.DOWN,
    (CS.RESTORED, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.RESTORED, CE.CLOSED): CS.CLOSED,
    (CS.RESTORED, CE.ACKED): CS.OPEN,  # an ack ends the watch; only nacks stall it
    (CS.RESTORED, CE.NACKED_RUN): CS.STALLED,
    (CS.RESTORED, CE.RENEW_GIVEN_UP): CS.OPEN,

    (CS.STALLED, CE.CONNECTION_DOWN): CS.DOWN,
    (CS.STALLED, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.STALLED, CE.CLOSED): CS.CLOSED,
    (CS.STALLED, CE.ACKED): CS.OPEN,  # a late ack: it publishes after all
    (CS.STALLED, CE.RENEW): CS.RENEWING,
    (CS.STALLED, CE.RENEW_GIVEN_UP): CS.OPEN,

    (CS.RENEWING, CE.CONNECTION_DOWN): CS.DOWN,
    (CS.RENEWING, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.RENEWING, CE.CLOSED): CS.CLOSED,
    (CS.RENEWING, CE.ACKED): CS.RENEWING,  # of the channel being replaced
    (CS.RENEWING, CE.RENEWED): CS.RESTORED,  # watched again: the fresh one may stall too
    (CS.RENEWING, CE.RENEW_GIVEN_UP): CS.OPEN,
    (CS.RENEWING, CE.RENEW_CANCELLED): CS.STALLED,

    (CS.DOWN, CE.CONNECTION_DOWN): CS.DOWN,  # a failed recovery attempt
    (CS.DOWN, CE.REOPENED): CS.RESTORED,
    (CS.DOWN, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.DOWN, CE.CLOSED): CS.CLOSED,
    (CS.DOWN, CE.ACKED): CS.DOWN,  # a verdict or a renewal that a loss overtook: nothing changes
    (CS.DOWN, CE.RENEW): CS.DOWN,
    (CS.DOWN, CE.RENEWED): CS.DOWN,
    (CS.DOWN, CE.RENEW_GIVEN_UP): CS.DOWN,
    (CS.DOWN, CE.RENEW_CANCELLED): CS.DOWN,

    (CS.CLOSED, CE.OPENED): CS.CLOSED,  # closed while its open-ok was on the way: the waiting flow sees it
    (CS.CLOSED, CE.CONNECTION_DOWN): CS.CLOSED,
    (CS.CLOSED, CE.REOPENED): CS.CLOSED,
    (CS.CLOSED, CE.CONNECTION_GONE): CS.CLOSED,
    (CS.CLOSED, CE.CLOSED): CS.CLOSED,
    (CS.CLOSED, CE.ACKED): CS.CLOSED,  # a verdict or a renewal that a close overtook: nothing changes
    (CS.CLOSED, CE.RENEW): CS.CLOSED,
    (CS.CLOSED, CE.RENEWED): CS.CLOSED,
    (CS.CLOSED, CE.RENEW_GIVEN_UP): CS.CLOSED,
    (CS.CLOSED, CE.RENEW_CANCELLED): CS.CLOSED,
}


class ConsumerPhase(Named):
    ACTIVE = "active"  # subscribed, or being subscribed again by a recovery
    ENDED = "ended"    # cancelled (by the user or the broker), or its channel or connection gone


class ConsumerSignal(Named):
    END = "end"


CONSUMER_PHASES: Final[Mapping[tuple[ConsumerPhase, ConsumerSignal], ConsumerPhase]] = {
    (ConsumerPhase.ACTIVE, ConsumerSignal.END): ConsumerPhase.ENDED,
    (ConsumerPhase.ENDED, ConsumerSignal.END): ConsumerPhase.ENDED,  # only the first reason counts
}


class RequestPhase(Named):
    """Where a channel's synchronous request is (one at a time per channel)."""

    IDLE = "idle"            # none out
    WAITING = "waiting"      # out; its caller waits for the reply
    # Its caller stopped waiting (a timeout, a cancellation): the reply still comes, is
    # undone (a message got goes back, a consumer is cancelled), and the next request waits for it.
    ABANDONED = "abandoned"


class RequestSignal(Named):
    SEND = "request sent"
    REPLY = "reply read"
    ABANDON = "its caller gave up"
    END = "the channel closed or was lost"  # the waiter fails, or answers the close


_R, _RS = RequestPhase, RequestSignal
REQUEST_PHASES: Final[Mapping[tuple[RequestPhase, RequestSignal], RequestPhase]] = {
    (_R.IDLE, _RS.SEND): _R.WAITING,
    (_R.IDLE, _RS.REPLY): _R.IDLE,  # read after a close or a loss ended the request
    (_R.IDLE, _RS.END): _R.IDLE,

    (_R.WAITING, _RS.SEND): _R.WAITING,  # a reopen's or renewal's request whose wait failed: replaced
    (_R.WAITING, _RS.REPLY): _R.IDLE,
    (_R.WAITING, _RS.ABANDON): _R.ABANDONED,
    (_R.WAITING, _RS.END): _R.IDLE,

    (_R.ABANDONED, _RS.REPLY): _R.IDLE,
    (_R.ABANDONED, _RS.END): _R.IDLE,
}
del _R, _RS


class Machine:
    """A channel's or a consumer's state, its table, and why it ended (``reason``: given
    with the event that takes it to its ``final`` state)."""

    __slots__ = ("state", "reason", "name", "_table", "_final", "watch")

    def __init__(self, table: Mapping[Any, Any], initial: Any, final: Any, name: str) -> None:
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
        new = self.state = fire(self._table, self.name, old, event)
        if new is not old:
            if new is self._final:
                self.reason = reason
            if self.watch is not None:
                self.watch(old, new)
        return old

    def __repr__(self) -> str:
        return f"<Machine {self.name} {self.state}>"


# --------------------------------------------------------------------------- the Producer (client/producer)


class ProducerPhase(Named):
    """Where a Producer (``amqwire.client.Producer``, over AMQP 0-9-1 brokers) is."""

    NEW = "new"            # made; asyncio: not awaited yet (sends are queued meanwhile)
    OPEN = "open"          # connecting or connected, its sender running
    CLOSING = "closing"    # close(), or its sender failed: sends are refused, what is held is flushed
    STOPPING = "stopping"  # flushed (or out of time): the sender ends once everything is settled
    FAILED = "failed"      # its sender failed and so did what it held; close() still closes the connections
    CLOSED = "closed"      # what was left failed, the connections are closing: nothing is drained any more


class ProducerSignal(Named):
    START = "start"
    CLOSE = "close()"
    STOP = "flushed: stop the sender"
    SENDER_FAILED = "the sender failed"
    FINISH = "what was left failed"


_P, _PS = ProducerPhase, ProducerSignal
#: Sends are refused.
PRODUCER_REFUSING_PHASES: Final = frozenset({_P.CLOSING, _P.STOPPING, _P.FAILED, _P.CLOSED})
#: The sender ends once nothing is pending; no broker is connected to any more.
PRODUCER_STOPPING_PHASES: Final = frozenset({_P.STOPPING, _P.CLOSED})
#: Nothing offered is drained into the queue any more: it is failed where it is.
PRODUCER_FINISHED_PHASES: Final = frozenset({_P.FAILED, _P.CLOSED})
PRODUCER_PHASES: Final[Mapping[tuple[ProducerPhase, ProducerSignal], ProducerPhase]] = {
    (_P.NEW, _PS.START): _P.OPEN,
    (_P.NEW, _PS.CLOSE): _P.CLOSING,

    (_P.OPEN, _PS.CLOSE): _P.CLOSING,
    (_P.OPEN, _PS.SENDER_FAILED): _P.CLOSING,

    (_P.CLOSING, _PS.CLOSE): _P.CLOSING,  # a second close() while the first flushes
    (_P.CLOSING, _PS.SENDER_FAILED): _P.CLOSING,
    (_P.CLOSING, _PS.STOP): _P.STOPPING,
    (_P.CLOSING, _PS.FINISH): _P.FAILED,  # the sender failed: what it held fails with it

    (_P.STOPPING, _PS.CLOSE): _P.STOPPING,  # a close() racing another one
    (_P.STOPPING, _PS.STOP): _P.STOPPING,
    (_P.STOPPING, _PS.SENDER_FAILED): _P.STOPPING,
    (_P.STOPPING, _PS.FINISH): _P.CLOSED,

    (_P.FAILED, _PS.CLOSE): _P.FAILED,
    (_P.FAILED, _PS.STOP): _P.CLOSED,

    (_P.CLOSED, _PS.CLOSE): _P.CLOSED,
    (_P.CLOSED, _PS.STOP): _P.CLOSED,
    (_P.CLOSED, _PS.SENDER_FAILED): _P.CLOSED,  # a sender close() stopped waiting for, failing late
    (_P.CLOSED, _PS.FINISH): _P.CLOSED,
}
del _P, _PS


class SenderPhase(Named):
    """Whether a Producer's sender (its thread or task) works or waits for work."""

    BUSY = "busy"
    IDLE = "idle"  # nothing to write: an offer that finds it so wakes it


class SenderSignal(Named):
    WAIT = "nothing to write"
    WAKE = "work for it"  # racing callers may wake it twice: harmless


SENDER_PHASES: Final[Mapping[tuple[SenderPhase, SenderSignal], SenderPhase]] = {
    (SenderPhase.BUSY, SenderSignal.WAIT): SenderPhase.IDLE,
    (SenderPhase.BUSY, SenderSignal.WAKE): SenderPhase.BUSY,
    (SenderPhase.IDLE, SenderSignal.WAIT): SenderPhase.IDLE,  # round again without a wake (a timeout, a race)
    (SenderPhase.IDLE, SenderSignal.WAKE): SenderPhase.BUSY,
}
