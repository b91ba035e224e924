"""The sans-IO protocol core: bytes in -> events out, calls in -> bytes out.

``ConnectionProtocol`` holds no socket and never blocks.  A transport feeds it what it reads
(``receive_data``), acts on the events it returns, and writes what ``data_to_send`` (or
``buffers_to_send``) hands back.  It speaks the client side of AMQP 0-9-1 with RabbitMQ's
extensions: the handshake, channel 0 control, channel lifecycle, one outstanding synchronous
request per channel, content assembly (in the codec's CommandParser), publisher confirms,
returns, consumer cancel notifications and channel.flow.

Illegal calls raise ``InvalidStateError`` before anything is queued.  The connection and
each channel are state machines (``ConnectionState``, ``ChannelStatus``) whose every change is
checked against ``CONNECTION_TRANSITIONS`` / ``CHANNEL_TRANSITIONS``.  Errors of the peer
(a malformed frame, a method out of place) raise the codec's error from ``receive_data``
after queuing a connection.close with its reply code; the connection is then closed.
"""
from __future__ import annotations

import enum
import logging
import platform
from collections import deque
from collections.abc import Mapping
from itertools import repeat
from typing import Any, Callable, Final, Optional, TypeVar, Union

from amqwire.codec import (
    AMQPSyntaxError,
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicDeliver,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicReject,
    BasicReturn,
    ChannelClose,
    ChannelCloseOk,
    ChannelFlow,
    ChannelFlowOk,
    ChannelOpen,
    ChannelOpenOk,
    CodecError,
    CommandParser,
    ConfirmSelect,
    ConnectionBlocked as _ConnectionBlockedMethod,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUnblocked as _ConnectionUnblockedMethod,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    FrameWriter,
    ProtocolHeaderError,
    TxSelect,
    UnexpectedFrame,
    encode_publish_iov,
    encode_table,
)
from amqwire.codec import FRAME_METHOD, __version__
from amqwire.codec.parser import Command, Heartbeat

from .errors import AuthenticationError, InvalidStateError, channel_closed, method_name
from .message import Message, ReturnedMessage

log = logging.getLogger("amqwire.client")

__all__ = [
    "ConnectionProtocol",
    "ConnectionState",
    "ChannelStatus",
    "CONNECTION_TRANSITIONS",
    "CHANNEL_TRANSITIONS",
    "ConfirmTracker",
    "HeartbeatMonitor",
    "ConnectionOpened",
    "ConnectionClosedEvent",
    "ConnectionBlocked",
    "ConnectionUnblocked",
    "SecretUpdated",
    "ChannelOpened",
    "ChannelClosedEvent",
    "MethodReply",
    "GetResult",
    "Confirmed",
    "ConsumerCancelled",
    "ChannelFlowChanged",
    "Message",
    "ReturnedMessage",
    "CLIENT_CAPABILITIES",
]

VERSION = __version__  # pyproject.toml, through the installed metadata

# What this client handles, advertised in connection.start-ok's client properties.
CLIENT_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}

# Bodies at least this big go out as memoryview slices of the caller's buffer (sendmsg).
ZERO_COPY_THRESHOLD = 65536

_REPLY_SUCCESS = 200
_FRAME_ERROR = 501
_UNEXPECTED_FRAME = 505
_COMMAND_INVALID = 503
_CHANNEL_ERROR = 504


# --------------------------------------------------------------------------- events


class _Event:
    __slots__ = ()

    def __repr__(self) -> str:
        names: tuple[str, ...] = self.__slots__
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__name__}({fields})"


class ConnectionOpened(_Event):
    """The handshake finished: connection.open-ok arrived."""

    __slots__ = ("server_properties", "channel_max", "frame_max", "heartbeat")

    def __init__(self, server_properties: dict[str, Any], channel_max: int, frame_max: int, heartbeat: int) -> None:
        self.server_properties = server_properties
        self.channel_max = channel_max
        self.frame_max = frame_max
        self.heartbeat = heartbeat


class ConnectionClosedEvent(_Event):
    """The connection is closed: by the broker's connection.close, or ours was answered.

    ``handshake`` tells that it happened before connection.open-ok (403 there means the
    broker refused the login).
    """

    __slots__ = ("reply_code", "reply_text", "class_id", "method_id", "by_broker", "handshake")

    def __init__(
        self, reply_code: int, reply_text: str, class_id: int, method_id: int, by_broker: bool, handshake: bool = False
    ) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.by_broker = by_broker
        self.handshake = handshake


class ConnectionBlocked(_Event):
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class ConnectionUnblocked(_Event):
    __slots__ = ()


class SecretUpdated(_Event):
    __slots__ = ()


class ChannelOpened(_Event):
    __slots__ = ("channel_id",)

    def __init__(self, channel_id: int) -> None:
        self.channel_id = channel_id


class ChannelClosedEvent(_Event):
    """The channel is closed and its number free again.  ``unconfirmed``: (seqno, token) of
    the publishes the broker never confirmed on it."""

    __slots__ = ("channel_id", "reply_code", "reply_text", "class_id", "method_id", "by_broker", "unconfirmed")

    def __init__(
        self,
        channel_id: int,
        reply_code: int,
        reply_text: str,
        class_id: int,
        method_id: int,
        by_broker: bool,
        unconfirmed: Optional[list[Any]] = None,
    ) -> None:
        self.channel_id = channel_id
        self.unconfirmed = unconfirmed if unconfirmed is not None else []
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.by_broker = by_broker


class MethodReply(_Event):
    """The reply to the channel's outstanding synchronous request."""

    __slots__ = ("channel_id", "method")

    def __init__(self, channel_id: int, method: Any) -> None:
        self.channel_id = channel_id
        self.method = method


class GetResult(_Event):
    """The reply to basic.get: a Message (get-ok) or None (get-empty)."""

    __slots__ = ("channel_id", "message")

    def __init__(self, channel_id: int, message: Optional[Message]) -> None:
        self.channel_id = channel_id
        self.message = message


class Confirmed(_Event):
    """Publisher confirms: the publishes ``seqnos`` (with the tokens given to publish) were
    acked (``ack``) or nacked by the broker.  ``returned`` maps the seqnos among them that
    came back as basic.return first (mandatory, unroutable) to their ReturnedMessage."""

    __slots__ = ("channel_id", "ack", "seqnos", "tokens", "returned", "delivery_tag", "multiple")

    def __init__(
        self, channel_id: int, ack: bool, seqnos: list[Any], tokens: list[Any], returned: Optional[dict[str, Any]],
        delivery_tag: int = 0, multiple: bool = False,
    ) -> None:
        self.channel_id = channel_id
        self.ack = ack
        self.seqnos = seqnos
        self.tokens = tokens
        self.returned = returned
        self.delivery_tag = delivery_tag  # of the broker's ack/nack, as it came
        self.multiple = multiple


class ConsumerCancelled(_Event):
    """The broker cancelled a consumer (basic.cancel from the server); cancel-ok is sent."""

    __slots__ = ("channel_id", "consumer_tag")

    def __init__(self, channel_id: int, consumer_tag: str) -> None:
        self.channel_id = channel_id
        self.consumer_tag = consumer_tag


class ChannelFlowChanged(_Event):
    """channel.flow from the broker; flow-ok is sent.  Inactive: stop publishing."""

    __slots__ = ("channel_id", "active")

    def __init__(self, channel_id: int, active: bool) -> None:
        self.channel_id = channel_id
        self.active = active


Event = Union[
    ConnectionOpened,
    ConnectionClosedEvent,
    ConnectionBlocked,
    ConnectionUnblocked,
    SecretUpdated,
    ChannelOpened,
    ChannelClosedEvent,
    MethodReply,
    GetResult,
    Confirmed,
    ConsumerCancelled,
    ChannelFlowChanged,
    Message,
    ReturnedMessage,
]


# --------------------------------------------------------------------------- helpers


class ConfirmTracker:
    """Publisher-confirm sequence numbers of one channel.

    Seqnos are consecutive from 1; the unresolved ones live in a deque indexed from
    ``base`` (the lowest unresolved), so in-order acks, single or multiple, cost O(1) each
    and an out-of-order single ack just marks its slot.
    """

    __slots__ = ("base", "slots", "mandatory", "returned", "unmatched_return")
    _DONE = object()

    def __init__(self) -> None:
        self.base = 1
        self.slots: deque[Any] = deque()
        # seqno -> (exchange, routing_key, body, properties) of unconfirmed mandatory
        # publishes, in order: a basic.return names none of them, so it is matched on these
        self.mandatory: dict[int, tuple[Any, ...]] = {}
        self.returned: dict[int, ReturnedMessage] = {}
        # A return matching no recorded publish (publish_encoded sends none): RabbitMQ
        # follows a basic.return with the basic.ack of the same message, so it belongs to
        # the delivery tag of the next ack or nack.
        self.unmatched_return: Optional[ReturnedMessage] = None

    @property
    def next_seqno(self) -> int:
        return self.base + len(self.slots)

    def __len__(self) -> int:
        """Unconfirmed publishes."""
        done = self._DONE
        return sum(1 for token in self.slots if token is not done)

    def add(self, token: Any) -> int:
        self.slots.append(token)
        return self.base + len(self.slots) - 1

    def resolve(self, delivery_tag: int, multiple: bool) -> tuple[list[Any], list[Any]]:
        """Seqnos and tokens settled by an ack/nack; unknown tags settle nothing."""
        slots = self.slots
        done = self._DONE
        seqnos: list[Any] = []
        tokens: list[Any] = []
        if multiple:
            base = self.base
            while slots and base <= delivery_tag:
                token = slots.popleft()
                if token is not done:
                    seqnos.append(base)
                    tokens.append(token)
                base += 1
            while slots and slots[0] is done:  # settled out of order before: base stays the lowest unresolved
                slots.popleft()
                base += 1
            self.base = base
            return seqnos, tokens
        index = delivery_tag - self.base
        if index < 0 or index >= len(slots):
            return seqnos, tokens
        token = slots[index]
        if token is done:
            return seqnos, tokens
        seqnos.append(delivery_tag)
        tokens.append(token)
        if index == 0:
            slots.popleft()
            self.base += 1
            while slots and slots[0] is done:
                slots.popleft()
                self.base += 1
        else:
            slots[index] = done
        return seqnos, tokens

    def drain(self) -> tuple[list[Any], list[Any]]:
        """Everything unresolved (the channel or connection is gone)."""
        done = self._DONE
        seqnos = []
        tokens = []
        for offset, token in enumerate(self.slots):
            if token is not done:
                seqnos.append(self.base + offset)
                tokens.append(token)
        self.base += len(self.slots)
        self.slots.clear()
        self.mandatory.clear()
        self.returned.clear()
        self.unmatched_return = None
        return seqnos, tokens


class HeartbeatMonitor:
    """When to send a heartbeat and when the peer counts as dead, given the clock.

    A heartbeat goes out only when nothing else was written for a whole interval (what the
    Java client does): the transport consults ``send_due`` at least every interval/2,
    passing the core's ``bytes_sent``, and any growth of it since the last look counts as
    traffic.  So under steady traffic no heartbeat is sent, and the longest silence the
    broker sees is 1.5 intervals, under its limit of two.  The peer is dead when nothing at
    all arrived for two intervals.  The caller passes ``now`` in.
    """

    __slots__ = ("interval", "last_received", "last_sent", "last_check", "written")

    def __init__(self, interval: float, now: float) -> None:
        self.interval = interval
        self.last_received = now
        self.last_sent = now  # when we last wrote anything, as far as we have looked
        self.last_check = now
        self.written = 0  # the core's bytes_sent at the last look

    def received(self, now: float) -> None:
        self.last_received = now

    def sent(self, now: float, written: Optional[int] = None) -> None:
        self.last_sent = now
        if written is not None:
            self.written = written

    def send_due(self, now: float, written: Optional[int] = None) -> bool:
        """True when nothing was written for an interval.  ``written``: the core's
        ``bytes_sent`` (None: only heartbeats count as writes, as ``sent`` reports them)."""
        if not self.interval:
            return False
        self.last_check = now
        if written is not None and written != self.written:
            self.written = written
            self.last_sent = now
            return False
        return now - self.last_sent >= self.interval

    def timed_out(self, now: float) -> bool:
        return bool(self.interval) and now - self.last_received > 2 * self.interval

    def next_deadline(self, now: float) -> Optional[float]:
        """Seconds until the monitor wants to be consulted (None when heartbeats are off):
        the next look for traffic (every interval/2), a due heartbeat, or the peer's deadline."""
        if not self.interval:
            return None
        due = min(self.last_check + self.interval / 2, self.last_sent + self.interval,
                  self.last_received + 2 * self.interval)
        return max(0.0, due - now)


def _negotiate(client: int, server: int) -> int:
    """The lower non-zero of the two; 0 only when both are 0 (no limit)."""
    if client and server:
        return min(client, server)
    return client or server


_EMPTY_PROPERTIES = BasicProperties()


def _same_body(sent: Any, returned: bytes) -> bool:
    if isinstance(sent, str):
        return sent.encode() == returned
    return bool(sent == returned) if isinstance(sent, (bytes, bytearray)) else bytes(sent) == returned


def _text(value: Union[bytes, str]) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


# --------------------------------------------------------------------------- states


class ConnectionState(str, enum.Enum):
    """Where the connection is.  A str enum: ``core.state == "open"`` holds."""

    NEW = "new"  # before initiate()
    HANDSHAKE = "handshake"  # the protocol header is out; until connection.open-ok
    OPEN = "open"
    CLOSING = "closing"  # connection.close is out; until close-ok (or the broker's close)
    CLOSED = "closed"

    def __str__(self) -> str:
        # "open", not "ConnectionState.OPEN", in messages and f-strings on every Python
        return self.value


class ChannelStatus(enum.IntEnum):
    """Where one channel is (``ChannelState.state``)."""

    CLOSED = 0  # closed and released, or its connection is closing or closed
    OPENING = 1  # channel.open is out; until open-ok
    OPEN = 2
    CLOSING = 3  # our channel.close is out; until close-ok


# Every state change is checked against these: state -> the states it may go to next.
CONNECTION_TRANSITIONS: Final[Mapping[ConnectionState, frozenset[ConnectionState]]] = {
    ConnectionState.NEW: frozenset({ConnectionState.HANDSHAKE, ConnectionState.CLOSED}),
    ConnectionState.HANDSHAKE: frozenset({ConnectionState.OPEN, ConnectionState.CLOSING, ConnectionState.CLOSED}),
    ConnectionState.OPEN: frozenset({ConnectionState.CLOSING, ConnectionState.CLOSED}),
    ConnectionState.CLOSING: frozenset({ConnectionState.CLOSED}),
    ConnectionState.CLOSED: frozenset(),
}
CHANNEL_TRANSITIONS: Final[Mapping[ChannelStatus, frozenset[ChannelStatus]]] = {
    ChannelStatus.OPENING: frozenset({ChannelStatus.OPEN, ChannelStatus.CLOSING, ChannelStatus.CLOSED}),
    ChannelStatus.OPEN: frozenset({ChannelStatus.CLOSING, ChannelStatus.CLOSED}),
    ChannelStatus.CLOSING: frozenset({ChannelStatus.CLOSED}),
    ChannelStatus.CLOSED: frozenset(),
}

_StateT = TypeVar("_StateT", ConnectionState, ChannelStatus)


def _transition(
    transitions: Mapping[_StateT, frozenset[_StateT]], current: _StateT, new: _StateT, subject: str
) -> _StateT:
    """``new`` if the table lets ``current`` go there, else InvalidStateError."""
    if new not in transitions[current]:
        raise InvalidStateError(f"{subject} cannot go from {current.name.lower()} to {new.name.lower()}")
    return new


# The hot paths (publish, deliver, ack) compare against module globals: on Python 3.11
# reading a member off its enum class (ChannelStatus.OPEN) costs several times the comparison.
_CHANNEL_OPEN: Final = ChannelStatus.OPEN
_CHANNEL_CLOSING: Final = ChannelStatus.CLOSING
_CONNECTION_OPEN: Final = ConnectionState.OPEN


# --------------------------------------------------------------------------- the core


class ChannelState:
    """What the core knows about one channel; ``state`` is its ChannelStatus."""

    __slots__ = ("id", "state", "pending", "confirms", "tx", "flow_active", "last_delivery_tag", "tag_base",
                 "close_reason")

    def __init__(self, channel_id: int, tag_base: int = 0) -> None:
        self.id = channel_id
        self.state = ChannelStatus.OPENING
        self.pending: Any = None  # the outstanding synchronous request (a method object)
        self.confirms: Optional[ConfirmTracker] = None
        self.tx = False
        self.flow_active = True
        self.last_delivery_tag = 0  # the broker's, on this connection
        # Added to the broker's delivery tags in what the core hands out and taken off in
        # acks: a channel reopened by a recovery goes on from the tags of its earlier
        # connections, so an ack of an earlier delivery can never settle a new one.
        self.tag_base = tag_base
        self.close_reason: Optional[tuple[Any, ...]] = None

    @property
    def is_open(self) -> bool:
        return self.state is _CHANNEL_OPEN

    def _set_state(self, new: ChannelStatus) -> None:
        self.state = _transition(CHANNEL_TRANSITIONS, self.state, new, f"channel {self.id}")


class ConnectionProtocol:
    """The client side of one AMQP 0-9-1 connection, without I/O."""

    # Slots, on every class of the chain: CPython 3.11 keeps at most 30 attributes of an instance
    # inline; past that the instance gets a dict and calls of its methods are no longer specialized
    # (on a publish that cost ~700 more instructions).
    __slots__ = (
        "_username", "_password", "vhost", "auth_mechanism", "_want_channel_max",
        "_want_frame_max", "_want_heartbeat", "_locale", "_on_secure", "client_properties",
        "state", "server_properties", "channel_max", "frame_max", "heartbeat", "blocked",
        "close_reason", "_parser", "_writer", "_iov", "_channels", "_next_channel",
        "_secret_pending", "_started", "_broker_closed", "channels_released", "_local_close",
        "bytes_sent", "bytes_received", "publishes_acked", "publishes_nacked",
        "publishes_returned", "gets_received", "_publishes_beside_writer", "heartbeats_sent",
        "__weakref__"
    )

    def __init__(
        self,
        username: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        *,
        auth_mechanism: str = "PLAIN",
        channel_max: int = 2047,
        frame_max: int = 131072,
        heartbeat: int = 60,
        client_properties: Optional[dict[str, Any]] = None,
        locale: str = "en_US",
        on_secure: Optional[Callable[[bytes], bytes]] = None,
    ) -> None:
        if frame_max and frame_max < 4096:
            raise ValueError(f"frame_max must be 0 (no limit) or at least 4096, not {frame_max}")
        if auth_mechanism not in ("PLAIN", "AMQPLAIN", "EXTERNAL"):
            raise ValueError(f"auth_mechanism must be PLAIN, AMQPLAIN or EXTERNAL, not {auth_mechanism!r}")
        self._username = username
        self._password = password
        self.vhost = vhost
        self.auth_mechanism = auth_mechanism
        self._want_channel_max = channel_max
        self._want_frame_max = frame_max
        self._want_heartbeat = heartbeat
        self._locale = locale
        self._on_secure = on_secure
        props: dict[str, Any] = {
            "product": "amqwire",
            "version": VERSION,
            "platform": f"Python {platform.python_version()}",
            "information": "https://pypi.org/project/amqwire/",
            "capabilities": dict(CLIENT_CAPABILITIES),
        }
        if client_properties:
            extra = dict(client_properties)
            caps = extra.pop("capabilities", None)
            props.update(extra)
            if caps:
                props["capabilities"].update(caps)
        self.client_properties = props
        self.state = ConnectionState.NEW
        self.server_properties: dict[str, Any] = {}
        self.channel_max = 0
        self.frame_max = 0
        self.heartbeat = 0
        self.blocked: Optional[str] = None
        self.close_reason: Optional[ConnectionClosedEvent] = None
        self._parser = CommandParser(
            max(frame_max or 131072, 4096) if frame_max else 131072, delivery_type=Message
        )
        self._writer = FrameWriter(max(frame_max, 4096) if frame_max else 131072)
        self._iov: list[Any] = []
        self._channels: dict[int, ChannelState] = {}
        self._next_channel = 1
        self._secret_pending = False
        self._started = False  # connection.start seen
        # channel -> (code, text, class, method) of channels the broker closed, until the
        # number is reused: later calls on them raise that error, not a generic one
        self._broker_closed: dict[int, tuple[Any, ...]] = {}
        # Counts ChannelClosedEvents: a transport reads it to skip looking for one.
        self.channels_released = 0
        self._local_close: tuple[Any, ...] = (_REPLY_SUCCESS, "Normal shutdown")
        # Bytes handed to the transport and fed by it; heartbeat frames queued.  Read by the
        # heartbeat monitor (was anything written lately?) and the metrics.
        self.bytes_sent = 0
        self.bytes_received = 0
        # Publishes the broker settled, ever (confirm mode): a collector reads the change per
        # read instead of counting ack frames one by one.  Returned ones count only there.
        self.publishes_acked = 0
        self.publishes_nacked = 0
        self.publishes_returned = 0
        self.gets_received = 0  # basic.get-ok messages, ever (deliveries are the parser's count)
        self._publishes_beside_writer = 0  # big bodies sent without a copy, publish_encoded batches
        self.heartbeats_sent = 0

    @property
    def publishes_queued(self) -> int:
        """basic.publish queued for sending, ever (the writer counts its own in C: a
        collector reads the change per socket write)."""
        return self._writer.publishes + self._publishes_beside_writer

    @property
    def deliveries_received(self) -> int:
        """basic.deliver messages read, ever (counted by the parser, in C: a collector reads
        the change per read).  Those for a channel being closed, dropped, count too."""
        return self._parser.deliveries

    def __repr__(self) -> str:
        return f"<ConnectionProtocol {self.state} user={self._username!r} vhost={self.vhost!r} channels={len(self._channels)}>"

    # ------------------------------------------------------------------ output

    def data_to_send(self) -> bytes:
        """All bytes queued so far, as one bytes object (joins big bodies: a copy)."""
        if self._iov:
            return b"".join(self.buffers_to_send())
        data = self._writer.take()
        self.bytes_sent += len(data)
        return data

    def buffers_to_send(self) -> list[Any]:
        """All output queued so far as a list of buffers for ``socket.sendmsg``: big bodies
        are memoryview slices of the caller's body, not copies."""
        if self._iov:
            self._spill_writer()
            pieces, self._iov = self._iov, []
            self.bytes_sent += sum(len(piece) for piece in pieces)
            return pieces
        data = self._writer.take()
        if not data:
            return []
        self.bytes_sent += len(data)
        return [data]

    @property
    def pending_output(self) -> int:
        """Bytes queued for sending."""
        if self._iov:
            return len(self._writer) + sum(len(piece) for piece in self._iov)
        return len(self._writer)

    def _spill_writer(self) -> None:
        if len(self._writer):
            self._iov.append(self._writer.take())

    # ------------------------------------------------------------------ handshake / connection

    def initiate(self) -> None:
        """Queue the protocol header; the broker answers with connection.start."""
        if self.state is not ConnectionState.NEW:
            raise InvalidStateError(f"the connection was already started (state {self.state})")
        self._writer.protocol_header()
        self._set_state(ConnectionState.HANDSHAKE)

    def _check_open(self) -> None:
        if self.state is not _CONNECTION_OPEN:
            if self.state is ConnectionState.HANDSHAKE or self.state is ConnectionState.NEW:
                raise InvalidStateError("the connection is not open yet (handshake not finished)")
            raise InvalidStateError(f"the connection is {self.state}")

    def close(self, reply_code: int = _REPLY_SUCCESS, reply_text: str = "Normal shutdown") -> None:
        """Queue connection.close; ConnectionClosedEvent follows when close-ok arrives.  Closing
        a connection that is closing or closed already raises InvalidStateError."""
        if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            raise InvalidStateError(f"the connection is already {self.state}")
        if self.state is ConnectionState.NEW:
            self._set_state(ConnectionState.CLOSED)
            return
        self._writer.method(0, ConnectionClose(reply_code, reply_text, 0, 0))
        self._local_close = (reply_code, reply_text)
        self._set_state(ConnectionState.CLOSING)

    def close_reason_sent(self) -> tuple[int, str]:
        """Reply code and text of the connection.close we sent (200 until one was)."""
        code, text = self._local_close
        return int(code), str(text)

    def _set_state(self, new: ConnectionState) -> None:
        """The one place the connection state changes; once closing, no channel takes calls any more."""
        self.state = _transition(CONNECTION_TRANSITIONS, self.state, new, "the connection")
        if new is ConnectionState.CLOSING or new is ConnectionState.CLOSED:
            for channel in self._channels.values():
                if channel.state is not ChannelStatus.CLOSED:
                    channel._set_state(ChannelStatus.CLOSED)

    def _ensure_closed(self) -> None:
        """The connection is unusable (a protocol error): closed, whatever it was."""
        if self.state is not ConnectionState.CLOSED:
            self._set_state(ConnectionState.CLOSED)

    def send_heartbeat(self) -> None:
        if self.state in (ConnectionState.OPEN, ConnectionState.HANDSHAKE, ConnectionState.CLOSING):
            self._writer.heartbeat()
            self.heartbeats_sent += 1

    def update_secret(self, new_secret: Union[str, bytes], reason: str) -> None:
        self._check_open()
        if self._secret_pending:
            raise InvalidStateError("an update-secret is already waiting for its reply")
        self._writer.method(0, ConnectionUpdateSecret(new_secret, reason))
        self._secret_pending = True

    def _start_ok(self, start: Any) -> None:
        if (start.version_major, start.version_minor) != (0, 9):
            self._protocol_error(
                _COMMAND_INVALID, f"the broker speaks AMQP {start.version_major}-{start.version_minor}, not 0-9", start
            )
        self.server_properties = dict(start.server_properties)
        offered = _text(start.mechanisms).split()
        if self.auth_mechanism not in offered:
            self._set_state(ConnectionState.CLOSED)
            raise AuthenticationError(
                f"the broker does not offer the {self.auth_mechanism} mechanism (it offers {', '.join(offered) or 'none'})"
                + ("; RabbitMQ offers EXTERNAL only to a client that presented a TLS certificate"
                   if self.auth_mechanism == "EXTERNAL" else "")
            )
        self._writer.method(
            0,
            ConnectionStartOk(self.client_properties, self.auth_mechanism, self._auth_response(), self._locale),
        )

    def _auth_response(self) -> bytes:
        if self.auth_mechanism == "PLAIN":
            return b"\x00" + self._username.encode() + b"\x00" + self._password.encode()
        if self.auth_mechanism == "AMQPLAIN":
            # A field table without its length prefix, as RabbitMQ reads it.
            return encode_table({"LOGIN": self._username, "PASSWORD": self._password})[4:]
        return b""

    def _tune_ok(self, tune: Any) -> None:
        channel_max = _negotiate(self._want_channel_max, tune.channel_max) or 65535
        frame_max = _negotiate(self._want_frame_max, tune.frame_max) or 131072
        heartbeat = _negotiate(self._want_heartbeat, tune.heartbeat)
        if frame_max < 4096:
            self._protocol_error(
                _COMMAND_INVALID, f"the broker proposed frame_max {tune.frame_max}, below the minimum 4096", tune
            )
        self.channel_max = min(channel_max, 65535)
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self._parser.frame_max = frame_max
        self._writer.frame_max = frame_max
        self._writer.method(0, ConnectionTuneOk(self.channel_max, frame_max, heartbeat))
        self._writer.method(0, ConnectionOpen(self.vhost))

    def _on_connection_method(self, method: Any, events: list[Any]) -> None:
        cls = type(method)
        if self.state is ConnectionState.CLOSED:
            return  # closed earlier in the same read: the rest is moot
        if self.state is ConnectionState.CLOSING:
            if cls is ConnectionCloseOk:
                self._finish_close(events, self._local_close_event())
            elif cls is ConnectionClose:
                self._writer.method(0, ConnectionCloseOk())
                self._finish_close(events, self._broker_close_event(method))
            return  # everything else is discarded while closing, as the spec says
        if cls is ConnectionClose:
            self._writer.method(0, ConnectionCloseOk())
            self._finish_close(events, self._broker_close_event(method))
        elif self.state is ConnectionState.HANDSHAKE:
            if cls is ConnectionStart and not self._started:
                self._started = True
                self._start_ok(method)
            elif cls is ConnectionSecure:
                if self._on_secure is None:
                    self._set_state(ConnectionState.CLOSED)
                    raise AuthenticationError(
                        f"the broker sent a {self.auth_mechanism} challenge and no on_secure handler was given"
                    )
                self._writer.method(0, ConnectionSecureOk(self._on_secure(method.challenge)))
            elif cls is ConnectionTune and self._started:
                self._tune_ok(method)
            elif cls is ConnectionOpenOk and self.frame_max:
                self._set_state(ConnectionState.OPEN)
                events.append(ConnectionOpened(self.server_properties, self.channel_max, self.frame_max, self.heartbeat))
            else:
                self._protocol_error(_COMMAND_INVALID, f"unexpected {method.NAME} during the handshake", method)
        elif cls is _ConnectionBlockedMethod:
            self.blocked = method.reason
            events.append(ConnectionBlocked(method.reason))
        elif cls is _ConnectionUnblockedMethod:
            self.blocked = None
            events.append(ConnectionUnblocked())
        elif cls is ConnectionUpdateSecretOk and self._secret_pending:
            self._secret_pending = False
            events.append(SecretUpdated())
        else:
            self._protocol_error(_COMMAND_INVALID, f"unexpected {method.NAME} on channel 0", method)

    def _broker_close_event(self, method: Any) -> ConnectionClosedEvent:
        handshake = self.frame_max == 0 or self.state is ConnectionState.HANDSHAKE
        return ConnectionClosedEvent(
            method.reply_code, method.reply_text, method.class_id, method.method_id, True, handshake
        )

    def _local_close_event(self) -> ConnectionClosedEvent:
        return ConnectionClosedEvent(self._local_close[0], self._local_close[1], 0, 0, False)

    def _finish_close(self, events: list[Any], event: ConnectionClosedEvent) -> None:
        handshake = self.state is ConnectionState.HANDSHAKE
        event.handshake = event.handshake or handshake
        self._set_state(ConnectionState.CLOSED)
        self.close_reason = event
        events.append(event)

    def _protocol_error(self, reply_code: int, text: str, method: Any = None) -> None:
        """The broker broke the protocol: close the connection with reply_code, then raise."""
        class_id = method.CLASS_ID if method is not None else 0
        method_id = method.METHOD_ID if method is not None else 0
        if self.state in (ConnectionState.HANDSHAKE, ConnectionState.OPEN):
            self._writer.method(0, ConnectionClose(reply_code, text[:255], class_id, method_id))
        self._ensure_closed()
        error = UnexpectedFrame(text, offset=0) if reply_code == _UNEXPECTED_FRAME else AMQPSyntaxError(text, offset=0)
        error.reply_code = reply_code
        raise error

    # ------------------------------------------------------------------ input

    def receive_data(self, data: Any) -> list[Any]:
        """Feed bytes from the broker; returns the events they complete, in order."""
        if self.state is ConnectionState.CLOSED:
            return []
        self.bytes_received += len(data)
        try:
            items = self._parser.feed(data)
        except CodecError as exc:
            events: list[Any] = []
            try:
                self._handle(exc.parsed or [], events)
            except CodecError:
                pass  # the parse error below is reported; the connection closes either way
            closing_already = self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED)
            if not closing_already and not isinstance(exc, ProtocolHeaderError):
                self._writer.method(0, ConnectionClose(exc.reply_code, str(exc)[:255], 0, 0))
            self._ensure_closed()
            exc.events = events  # type: ignore[attr-defined]
            raise
        events = []
        try:
            self._handle(items, events)
        except CodecError as exc:
            exc.events = events  # type: ignore[attr-defined]  # what came before the bad frame
            raise
        return events

    def _handle(self, items: list[Any], events: list[Any]) -> None:
        channels = self._channels
        for item in items:
            kind = type(item)
            if kind is Message:
                state = channels.get(item.channel_id)
                if state is None or state.state is not _CHANNEL_OPEN:
                    if item.channel_id == 0:
                        self._channel_zero(BasicDeliver)
                    continue  # late delivery to a channel we are closing
                state.last_delivery_tag = item.delivery_tag
                if state.tag_base:
                    item.delivery_tag += state.tag_base
                events.append(item)
                continue
            if kind is not Command:
                if kind is Heartbeat:
                    continue
                self._protocol_error(_UNEXPECTED_FRAME, f"unexpected {item!r} from the broker")
            method = item.method
            channel = item.channel
            if channel == 0:
                if method.CLASS_ID != 10:
                    self._channel_zero(method)
                self._on_connection_method(method, events)
            elif self.state is not _CONNECTION_OPEN:
                if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
                    continue  # discarded while closing, and moot once closed earlier in this read
                self._protocol_error(_COMMAND_INVALID, f"{method.NAME} on channel {channel} before the connection is open", method)
            else:
                self._on_channel_method(channel, method, item, events)

    def _channel_zero(self, method: Any) -> None:
        """Channel 0 carries the connection's methods only: a channel-class method there, with
        or without content, is a 504 CHANNEL_ERROR (RabbitMQ closes the connection for it too).
        A content frame that follows no content method is the parser's 505 on any channel."""
        self._protocol_error(
            _CHANNEL_ERROR,
            f"{method.NAME} on channel 0, which carries connection methods only"
            + (" (with content)" if method.HAS_CONTENT else ""),
            method,
        )

    def _on_channel_method(self, channel: int, method: Any, command: Any, events: list[Any]) -> None:
        state = self._channels.get(channel)
        cls = type(method)
        if state is None:
            self._protocol_error(_CHANNEL_ERROR, f"{method.NAME} on channel {channel}, which is not open", method)
            return
        if state.state is _CHANNEL_CLOSING:
            if cls is ChannelCloseOk:
                unconfirmed = self._release(channel)
                code, text, class_id, method_id, by_broker = state.close_reason or (
                    _REPLY_SUCCESS, "Normal shutdown", 0, 0, False
                )
                events.append(ChannelClosedEvent(channel, code, text, class_id, method_id, by_broker, unconfirmed))
            elif cls is ChannelClose:
                self._writer.method(channel, ChannelCloseOk())
                state.close_reason = (method.reply_code, method.reply_text, method.class_id, method.method_id, True)
            return  # the rest is discarded while closing
        if cls is BasicAck or cls is BasicNack:
            self._on_confirm(state, method, cls is BasicAck, events)
            return
        if cls is BasicReturn:
            returned = ReturnedMessage(
                channel,
                method.reply_code,
                method.reply_text,
                method.exchange,
                method.routing_key,
                command.properties,
                command.body,
            )
            confirms = state.confirms
            if confirms is not None:
                for seqno, (exchange, routing_key, body, properties) in confirms.mandatory.items():
                    if (
                        seqno not in confirms.returned
                        and exchange == returned.exchange
                        and routing_key == returned.routing_key
                        and _same_body(body, returned.body)
                        and (properties or _EMPTY_PROPERTIES) == returned.properties
                    ):
                        confirms.returned[seqno] = returned
                        break
                else:
                    confirms.unmatched_return = returned
            events.append(returned)
            return
        if cls is ChannelClose:
            self._writer.method(channel, ChannelCloseOk())
            unconfirmed = self._release(channel)
            self._broker_closed[channel] = (method.reply_code, method.reply_text, method.class_id, method.method_id)
            events.append(
                ChannelClosedEvent(
                    channel, method.reply_code, method.reply_text, method.class_id, method.method_id, True, unconfirmed
                )
            )
            return
        if cls is BasicCancel:
            if not method.nowait:
                self._writer.method(channel, BasicCancelOk(method.consumer_tag))
            events.append(ConsumerCancelled(channel, method.consumer_tag))
            return
        if cls is ChannelFlow:
            state.flow_active = method.active
            self._writer.method(channel, ChannelFlowOk(method.active))
            events.append(ChannelFlowChanged(channel, method.active))
            return
        pending = state.pending
        if pending is None or method.INDEX not in pending.RESPONSES:
            waiting = f" (waiting for the reply to {pending.NAME})" if pending is not None else ""
            self._protocol_error(_COMMAND_INVALID, f"unexpected {method.NAME} on channel {channel}{waiting}", method)
            return
        state.pending = None
        if cls is ChannelOpenOk:
            state._set_state(ChannelStatus.OPEN)
            events.append(ChannelOpened(channel))
        elif cls is BasicGetOk:
            state.last_delivery_tag = method.delivery_tag
            message = Message(
                channel,
                method.delivery_tag + state.tag_base,
                method.redelivered,
                method.exchange,
                method.routing_key,
                command.properties,
                command.body,
                None,
                method.message_count,
            )
            events.append(GetResult(channel, message))
            self.gets_received += 1
        elif cls is BasicGetEmpty:
            events.append(GetResult(channel, None))
        else:
            events.append(MethodReply(channel, method))

    def _on_confirm(self, state: ChannelState, method: Any, ack: bool, events: list[Any]) -> None:
        confirms = state.confirms
        if confirms is None:
            self._protocol_error(
                _COMMAND_INVALID, f"{method.NAME} on channel {state.id}, which is not in confirm mode", method
            )
            return
        tag = method.delivery_tag
        seqnos, tokens = confirms.resolve(tag, method.multiple)
        if not seqnos:
            if method.multiple and 0 < tag < confirms.next_seqno:
                return  # everything up to tag was confirmed one by one already
            self._protocol_error(
                406,
                f"{method.NAME} for delivery tag {tag} on channel {state.id}, which is not an unconfirmed publish",
                method,
            )
            return
        returned = None
        if confirms.unmatched_return is not None:
            if tag in seqnos:
                returned = {tag: confirms.unmatched_return}
            confirms.unmatched_return = None
        if confirms.mandatory:
            mandatory = confirms.mandatory
            for seqno in seqnos:
                if mandatory.pop(seqno, None) is not None and seqno in confirms.returned:
                    if returned is None:
                        returned = {}
                    returned[seqno] = confirms.returned.pop(seqno)
        settled = len(seqnos)
        if returned is not None:
            self.publishes_returned += len(returned)
            settled -= len(returned)
        if ack:
            self.publishes_acked += settled
        else:
            self.publishes_nacked += settled
        events.append(Confirmed(state.id, ack, seqnos, tokens, returned, tag, method.multiple))

    # ------------------------------------------------------------------ channels

    def channel_state(self, channel: int) -> Optional[ChannelState]:
        return self._channels.get(channel)

    @property
    def channels(self) -> list[int]:
        return sorted(self._channels)

    def open_channel(self, channel_id: Optional[int] = None, tag_base: int = 0) -> int:
        """Allocate a channel number (the lowest free one unless given) and queue channel.open.
        ``tag_base``: the delivery tags this channel hands out start after it (a channel
        reopened on a new connection goes on from its old tags; see ChannelState)."""
        self._check_open()
        if channel_id is None:
            channel_id = self._allocate()
        elif not isinstance(channel_id, int) or isinstance(channel_id, bool) or not 1 <= channel_id <= self.channel_max:
            raise InvalidStateError(f"channel number must be between 1 and {self.channel_max}, not {channel_id!r}")
        elif channel_id in self._channels:
            raise InvalidStateError(f"channel {channel_id} is already in use")
        self._broker_closed.pop(channel_id, None)
        state = ChannelState(channel_id, tag_base)
        state.pending = ChannelOpen()
        self._channels[channel_id] = state
        self._writer.method(channel_id, state.pending)
        return channel_id

    def _allocate(self) -> int:
        channels = self._channels
        if len(channels) >= self.channel_max:
            raise InvalidStateError(f"all {self.channel_max} channels are in use (channel_max)")
        candidate = self._next_channel
        while candidate in channels:
            candidate = candidate + 1 if candidate < self.channel_max else 1
        self._next_channel = candidate + 1 if candidate < self.channel_max else 1
        return candidate

    def _release(self, channel: int) -> list[Any]:
        """Free the channel number; returns (seqno, token) of its unconfirmed publishes."""
        self.channels_released += 1
        state = self._channels.pop(channel, None)
        if channel < self._next_channel:
            self._next_channel = channel
        if state is None:
            return []
        state._set_state(ChannelStatus.CLOSED)
        if state.confirms is None:
            return []
        return list(zip(*state.confirms.drain()))

    def close_channel(self, channel: int, reply_code: int = _REPLY_SUCCESS, reply_text: str = "Normal shutdown") -> None:
        """Queue channel.close; ChannelClosedEvent follows when close-ok arrives.  A channel the
        broker closed already is left as it is; closing one that is closing raises InvalidStateError."""
        if channel in self._broker_closed and channel not in self._channels:
            return
        state = self._open_state(channel, allow_opening=True)
        state._set_state(ChannelStatus.CLOSING)
        state.pending = None
        state.close_reason = (reply_code, reply_text, 0, 0, False)
        self._writer.method(channel, ChannelClose(reply_code, reply_text, 0, 0))

    def _open_state(self, channel: int, allow_opening: bool = False) -> ChannelState:
        state = self._channels.get(channel)
        if state is not None and (
            state.state is _CHANNEL_OPEN or (allow_opening and state.state is ChannelStatus.OPENING)
        ):
            return state
        if self.state is not _CONNECTION_OPEN:
            self._check_open()
        if state is None:
            reason = self._broker_closed.get(channel)
            if reason is not None:
                raise channel_closed(*reason, by_broker=True, channel=channel)
            raise InvalidStateError(f"channel {channel} is not open")
        if state.state is _CHANNEL_CLOSING:
            raise InvalidStateError(f"channel {channel} is closing")
        raise InvalidStateError(f"channel {channel} is still opening (wait for channel.open-ok)")

    def send_method(self, channel: int, method: Any) -> None:
        """Queue a method without content on an open channel.

        A synchronous request (one with replies, and no nowait) becomes the channel's
        outstanding request; a second one before the reply raises InvalidStateError.
        """
        state = self._open_state(channel)
        cls = type(method)
        if method.HAS_CONTENT:
            raise InvalidStateError(f"{method.NAME} carries content: use publish()")
        if cls is ChannelClose or cls is ChannelOpen:
            raise InvalidStateError(f"use {'close_channel' if cls is ChannelClose else 'open_channel'}() for {method.NAME}")
        if method.CLASS_ID == 10:
            raise InvalidStateError(f"{method.NAME} is a connection method; it cannot go on channel {channel}")
        if method.RESPONSES and not getattr(method, "nowait", False):
            if state.pending is not None:
                raise InvalidStateError(
                    f"channel {channel} is waiting for the reply to {state.pending.NAME}; "
                    f"one synchronous request at a time per channel"
                )
            reply_expected = True
        else:
            reply_expected = False
        if cls is ConfirmSelect:
            if state.tx:
                raise InvalidStateError(f"channel {channel} is transactional; it cannot also be in confirm mode")
            if state.confirms is None:
                state.confirms = ConfirmTracker()
        elif cls is TxSelect and state.confirms is not None:
            raise InvalidStateError(f"channel {channel} is in confirm mode; it cannot also be transactional")
        elif cls is BasicAck or cls is BasicNack or cls is BasicReject:
            self._check_delivery_tag(state, method.delivery_tag)
        self._writer.method(channel, method)
        if reply_expected:
            state.pending = method
        if cls is TxSelect:
            state.tx = True

    def _check_delivery_tag(self, state: ChannelState, delivery_tag: int) -> None:
        if delivery_tag > state.last_delivery_tag:
            raise InvalidStateError(
                f"delivery tag {delivery_tag} was never delivered on channel {state.id} "
                f"(the last one is {state.last_delivery_tag})"
            )

    # fast paths of the hot calls ----------------------------------------------------------

    def publish(
        self,
        channel: int,
        exchange: str,
        routing_key: str,
        body: Any,
        properties: Optional[BasicProperties] = None,
        mandatory: bool = False,
        immediate: bool = False,
        token: Any = None,
    ) -> int:
        """Queue basic.publish with its content; returns its confirm seqno (0 without confirms)."""
        state = self._channels.get(channel)
        if state is None or state.state is not _CHANNEL_OPEN:
            self._open_state(channel)
        if type(body) is bytes and len(body) >= ZERO_COPY_THRESHOLD:
            pieces = encode_publish_iov(
                channel, exchange, routing_key, body, properties, mandatory, immediate, self._writer.frame_max
            )
            self._publishes_beside_writer += 1
            self._spill_writer()
            self._iov.extend(pieces)
        else:
            self._writer.publish(channel, exchange, routing_key, body, properties, mandatory, immediate)
        confirms = state.confirms  # type: ignore[union-attr]
        if confirms is None:
            return 0
        confirms.slots.append(token)
        seqno = confirms.base + len(confirms.slots) - 1
        if mandatory:
            confirms.mandatory[seqno] = (exchange, routing_key, body, properties)
        return seqno

    def publish_encoded(self, channel: int, frames: Any, count: int, token: Any = None) -> int:
        """Queue ``count`` publishes already encoded as frames for ``channel`` (by
        ``amqwire.spark``'s encoder, say), as they are; returns the confirm seqno of the
        first (0 without confirms).  Every one of them is confirmed against ``token``."""
        state = self._channels.get(channel)
        if state is None or state.state is not _CHANNEL_OPEN:
            self._open_state(channel)
        view = memoryview(frames).cast("B")
        if count < 0 or (count > 0) != (len(view) > 0):
            raise ValueError(f"{count} publishes in {len(view)} bytes of frames")
        if count:
            if view[0] != FRAME_METHOD or (view[1] << 8 | view[2]) != channel:
                raise ValueError(
                    f"the frames do not start with a method frame for channel {channel} "
                    f"(type {view[0]}, channel {view[1] << 8 | view[2]})"
                )
            self._spill_writer()
            self._iov.append(view)
            self._publishes_beside_writer += count
        confirms = state.confirms  # type: ignore[union-attr]
        if confirms is None or not count:
            return 0
        first = confirms.base + len(confirms.slots)
        confirms.slots.extend(repeat(token, count))
        return first

    def basic_ack(self, channel: int, delivery_tag: int, multiple: bool = False) -> bool:
        """Queue basic.ack; False (nothing queued) for a delivery of an earlier connection:
        the broker requeued it when that connection was lost."""
        state = self._channels.get(channel)
        if state is None or state.state is not _CHANNEL_OPEN:
            self._open_state(channel)
        tag = self._broker_tag(state, delivery_tag)  # type: ignore[arg-type]
        if tag < 0:
            return False
        self._writer.method(channel, BasicAck(tag, multiple))
        return True

    def basic_nack(self, channel: int, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> bool:
        """Queue basic.nack; False as ``basic_ack``."""
        tag = self._broker_tag(self._open_state(channel), delivery_tag)
        if tag < 0:
            return False
        self.send_method(channel, BasicNack(tag, multiple, requeue))
        return True

    def basic_reject(self, channel: int, delivery_tag: int, requeue: bool = True) -> bool:
        """Queue basic.reject; False as ``basic_ack``."""
        tag = self._broker_tag(self._open_state(channel), delivery_tag)
        if tag < 0:
            return False
        self.send_method(channel, BasicReject(tag, requeue))
        return True

    def _broker_tag(self, state: ChannelState, delivery_tag: int) -> int:
        """The broker's tag for one the core handed out (0 stays 0: "every one so far" with
        ``multiple``); -1 for a delivery of an earlier connection; InvalidStateError for a
        tag never delivered."""
        if not delivery_tag:
            return 0
        tag = delivery_tag - state.tag_base
        if tag <= 0:
            return -1
        if tag > state.last_delivery_tag:
            raise InvalidStateError(
                f"delivery tag {delivery_tag} was never delivered on channel {state.id} "
                f"(the last one is {state.last_delivery_tag + state.tag_base})"
            )
        return tag

    def drain_unconfirmed(self) -> dict[int, list[Any]]:
        """Once the connection is gone: channel -> (seqno, token) of the publishes never confirmed."""
        result = {}
        for channel, state in self._channels.items():
            if state.confirms is not None and state.confirms.slots:
                pairs = list(zip(*state.confirms.drain()))
                if pairs:
                    result[channel] = pairs
        return result


def method_label(method: Any) -> str:
    return method_name(method.CLASS_ID, method.METHOD_ID)
