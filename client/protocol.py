"""The sans-IO protocol core: bytes in -> events out, calls in -> bytes out.

``ConnectionProtocol`` holds no socket and never blocks.  A transport feeds it what it reads
(``receive_data``), acts on the events it returns, and writes what ``data_to_send`` (or
``buffers_to_send``) hands back.  It speaks the client side of AMQP 0-9-1 with RabbitMQ's
extensions: the handshake, channel 0 control, channel lifecycle, one outstanding synchronous
request per channel, content assembly (in the codec's CommandParser), publisher confirms,
returns, consumer cancel notifications and channel.flow.

Illegal calls raise ``InvalidStateError`` before anything is queued.  The connection and
each channel are state machines (``lifecycle.py``: ``ConnectionState``, ``ChannelStatus``) whose
every change is a signal looked up in ``CONNECTION_TRANSITIONS`` / ``CHANNEL_TRANSITIONS``.
Errors of the peer (a malformed frame, a method out of place) raise the codec's error from
``receive_data`` after queuing a connection.close with its reply code; the connection is then
in the ERROR state, where only the close handshake goes on and every call raises.  Methods
from the broker are dispatched by class to one small handler each (the tables after the class).

The events it returns live in ``events.py``; every public name of the core imports from here.
"""
from __future__ import annotations

import platform
from typing import Any, Callable, Final, Optional, Union

from amqwire.codec import (
    AMQPSyntaxError,
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicDeliver,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
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
    encode_table,
)
from amqwire.codec import FRAME_METHOD, __version__
from amqwire.codec.parser import Command, Heartbeat, one_run

from .errors import AuthenticationError, InvalidStateError, channel_closed, method_name
# The core's public names, whichever module defines them, import from here as they always did.
from .events import (
    ChannelClosedEvent,
    ChannelFlowChanged,
    ChannelOpened,
    Confirmed,
    ConnectionBlocked,
    ConnectionClosedEvent,
    ConnectionOpened,
    ConnectionUnblocked,
    ConsumerCancelled,
    Event,
    GetResult,
    MethodReply,
    SecretUpdated,
)
from .confirm_tracker import ConfirmTracker
from .publish_path import FLUSH_AT, ZERO_COPY_THRESHOLD, core_confirm_run, core_on_confirm, core_publish
from .ack_path import core_basic_ack
from .write_path import core_buffers_to_send
from .message import Message, ReturnedMessage
from .lifecycle import (
    CHANNEL_TRANSITIONS,
    CONNECTION_TRANSITIONS,
    HANDSHAKE_STEPS,
    ChannelStatus,
    ConnectionState,
    HandshakeSignal,
    HandshakeStep,
    WireChannelSignal,
    WireSignal,
    fire,
)

__all__ = [
    "ConnectionProtocol",
    "ZERO_COPY_THRESHOLD",
    "ConnectionState",
    "WireSignal",
    "ChannelStatus",
    "WireChannelSignal",
    "CONNECTION_TRANSITIONS",
    "CHANNEL_TRANSITIONS",
    "Event",
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

_REPLY_SUCCESS = 200
_FRAME_ERROR = 501
_UNEXPECTED_FRAME = 505
_COMMAND_INVALID = 503
_CHANNEL_ERROR = 504


# --------------------------------------------------------------------------- helpers


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
        self.last_received = now  # set by the transport at each read (an attribute: no call a read)
        self.last_sent = now  # when we last wrote anything, as far as we have looked
        self.last_check = now
        self.written = 0  # the core's bytes_sent at the last look

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


def _client_properties(extra: Optional[dict[str, Any]]) -> dict[str, Any]:
    """connection.start-ok's client properties: ours, updated with the caller's (whose
    capabilities are added to ours)."""
    props: dict[str, Any] = {
        "product": "amqwire",
        "version": VERSION,
        "platform": f"Python {platform.python_version()}",
        "information": "https://pypi.org/project/amqwire/",
        "capabilities": dict(CLIENT_CAPABILITIES),
    }
    if extra:
        extra = dict(extra)
        caps = extra.pop("capabilities", None)
        props.update(extra)
        if caps:
            props["capabilities"].update(caps)
    return props


def _negotiate(client: int, server: int) -> int:
    """The lower non-zero of the two; 0 only when both are 0 (no limit)."""
    if client and server:
        return min(client, server)
    return client or server


def _text(value: Union[bytes, str]) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else value


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

    def _fire(self, event: WireChannelSignal) -> None:
        """The one place a channel's state changes (by the core only)."""
        self.state = fire(CHANNEL_TRANSITIONS, f"channel {self.id}", self.state, event)


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
        "_secret_request", "_handshake", "_broker_closed", "channels_released", "_local_close",
        "bytes_sent", "bytes_received", "publishes_acked", "publishes_nacked",
        "publishes_returned", "gets_received", "_publishes_beside_writer", "heartbeats_sent",
        "protocol_error", "_error_close", "_parse_error", "flush_due",
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
        self.client_properties = _client_properties(client_properties)
        self.state = ConnectionState.NEW
        self.server_properties: dict[str, Any] = {}
        self.channel_max = 0
        self.frame_max = 0
        self.heartbeat = 0
        self.blocked: Optional[str] = None
        self.close_reason: Optional[ConnectionClosedEvent] = None
        self.protocol_error: Optional[str] = None  # what the broker did wrong (the error state)
        self._error_close: Optional[tuple[int, str]] = None  # the connection.close it made us send
        # Why the parser failed: the bytes after the bad frame mean nothing
        self._parse_error: Optional[CodecError] = None
        self._parser = CommandParser(
            max(frame_max or 131072, 4096) if frame_max else 131072, delivery_type=Message
        )
        self._writer = FrameWriter(max(frame_max, 4096) if frame_max else 131072)
        self._iov: list[Any] = []
        self._channels: dict[int, ChannelState] = {}
        self._next_channel = 1
        # connection.update-secret while its ok is awaited: channel 0's one request
        self._secret_request: Optional[ConnectionUpdateSecret] = None
        self._handshake = HandshakeStep.START
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
        # FLUSH_AT bytes were queued by a publish and not taken yet: read by publishers
        # after each publish, where the pending_output property costs ~700 instructions
        self.flush_due = False

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
        self.flush_due = False
        data = self._writer.take()
        self.bytes_sent += len(data)
        return data

    # All output queued so far as a list of buffers for ``socket.sendmsg``: big bodies are
    # memoryview slices of the caller's body and a big run of frames the writer's own
    # memory (``FrameWriter.take_view``), not copies.  Compiled (write_path.pyx): a flush
    # per ack takes the output with it.
    buffers_to_send = core_buffers_to_send

    @property
    def pending_output(self) -> int:
        """Bytes queued for sending."""
        if self._iov:
            return len(self._writer) + sum(len(piece) for piece in self._iov)
        return len(self._writer)

    def _spill_writer(self) -> None:
        if len(self._writer):
            self._iov.append(self._writer.take_view())

    # ------------------------------------------------------------------ handshake / connection

    def initiate(self) -> None:
        """Queue the protocol header; the broker answers with connection.start."""
        if self.state is not ConnectionState.NEW:
            raise InvalidStateError(f"the connection was already started (state {self.state})")
        self._writer.protocol_header()
        self._fire(WireSignal.SEND_PROTOCOL_HEADER)

    def _check_open(self) -> None:
        if self.state is not _CONNECTION_OPEN:
            raise self._not_open()

    def _not_open(self) -> InvalidStateError:
        """Why a call that needs an open connection cannot be made now, naming the state."""
        state = self.state
        if state is ConnectionState.HANDSHAKE or state is ConnectionState.NEW:
            return InvalidStateError("the connection is not open yet (handshake not finished)")
        if state is ConnectionState.ERROR:
            return InvalidStateError(f"the connection is in the error state: {self.protocol_error}")
        return InvalidStateError(f"the connection is {state}")

    def close(self, reply_code: int = _REPLY_SUCCESS, reply_text: str = "Normal shutdown") -> None:
        """Queue connection.close; ConnectionClosedEvent follows when close-ok arrives.  Closing
        a connection that is closing or closed already raises InvalidStateError, and so does
        one in the error state (its connection.close is out already)."""
        if self.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
            raise InvalidStateError(f"the connection is already {self.state}")
        if self.state is ConnectionState.ERROR:
            raise self._not_open()
        if self.state is not ConnectionState.NEW:
            self._writer.method(0, ConnectionClose(reply_code, reply_text, 0, 0))
            self._local_close = (reply_code, reply_text)
        self._fire(WireSignal.SEND_CLOSE)

    def connection_lost(self) -> None:
        """The transport lost the socket: the connection is closed, whatever it was (its
        channels with it; ``drain_unconfirmed`` still reports their publishes).  Once
        closed, nothing changes."""
        if self.state is not ConnectionState.CLOSED:
            self._fire(WireSignal.LOST)

    def close_reason_sent(self) -> tuple[int, str]:
        """Reply code and text of the connection.close we sent (200 until one was)."""
        code, text = self._local_close
        return int(code), str(text)

    def _fire(self, event: WireSignal) -> None:
        """The one place the connection state changes; once it is not open (or opening), no
        channel takes calls any more."""
        new = fire(CONNECTION_TRANSITIONS, "the connection", self.state, event)
        self.state = new
        if new is not _CONNECTION_OPEN and new is not ConnectionState.HANDSHAKE:
            for channel in self._channels.values():
                if channel.state is not ChannelStatus.CLOSED:
                    channel._fire(WireChannelSignal.CONNECTION_DOWN)

    def send_heartbeat(self) -> None:
        if self.state in (ConnectionState.OPEN, ConnectionState.HANDSHAKE, ConnectionState.CLOSING):
            self._writer.heartbeat()
            self.heartbeats_sent += 1

    def update_secret(self, new_secret: Union[str, bytes], reason: str) -> None:
        self._check_open()
        if self._secret_request is not None:
            raise InvalidStateError("an update-secret is already waiting for its reply")
        self._secret_request = ConnectionUpdateSecret(new_secret, reason)
        self._writer.method(0, self._secret_request)

    def _handshake_step(self, signal: HandshakeSignal) -> None:
        self._handshake = fire(HANDSHAKE_STEPS, "the handshake", self._handshake, signal)

    def _auth_failed(self, text: str) -> AuthenticationError:
        self._fire(WireSignal.AUTH_FAILED)
        return AuthenticationError(text)

    def _auth_response(self) -> bytes:
        if self.auth_mechanism == "PLAIN":
            return b"\x00" + self._username.encode() + b"\x00" + self._password.encode()
        if self.auth_mechanism == "AMQPLAIN":
            # A field table without its length prefix, as RabbitMQ reads it.
            return encode_table({"LOGIN": self._username, "PASSWORD": self._password})[4:]
        return b""

    # channel 0: one small handler per method class (the tables follow the class) ---------------

    def _on_connection_method(self, method: Any, events: list[Any]) -> None:
        state = self.state
        if state is ConnectionState.CLOSED:
            return  # closed earlier in the same read: the rest is moot
        cls = type(method)
        if cls is ConnectionClose:
            self._writer.method(0, ConnectionCloseOk())
            self._finish_close(events, WireSignal.RECV_CLOSE, self._broker_close_event(method))
        elif state is ConnectionState.CLOSING or state is ConnectionState.ERROR:
            if cls is ConnectionCloseOk:
                self._finish_close(events, WireSignal.RECV_CLOSE_OK, self._local_close_event())
            # everything else is discarded while closing, as the spec says
        else:
            handlers = _HANDSHAKE_METHODS if state is ConnectionState.HANDSHAKE else _OPEN_METHODS
            handler = handlers.get(cls)
            if handler is None:
                self._unexpected_on_zero(method)
            else:
                handler(self, method, events)

    def _unexpected_on_zero(self, method: Any) -> None:
        where = "during the handshake" if self.state is ConnectionState.HANDSHAKE else "on channel 0"
        self._protocol_error(_COMMAND_INVALID, f"unexpected {method.NAME} {where}", method)

    def _on_start(self, start: Any, events: list[Any]) -> None:
        if self._handshake is not HandshakeStep.START:
            self._unexpected_on_zero(start)
            return
        self._handshake_step(HandshakeSignal.RECV_START)
        if (start.version_major, start.version_minor) != (0, 9):
            self._protocol_error(
                _COMMAND_INVALID, f"the broker speaks AMQP {start.version_major}-{start.version_minor}, not 0-9", start
            )
        self.server_properties = dict(start.server_properties)
        offered = _text(start.mechanisms).split()
        if self.auth_mechanism not in offered:
            raise self._auth_failed(
                f"the broker does not offer the {self.auth_mechanism} mechanism (it offers {', '.join(offered) or 'none'})"
                + ("; RabbitMQ offers EXTERNAL only to a client that presented a TLS certificate"
                   if self.auth_mechanism == "EXTERNAL" else "")
            )
        self._writer.method(
            0,
            ConnectionStartOk(self.client_properties, self.auth_mechanism, self._auth_response(), self._locale),
        )

    def _on_secure_challenge(self, secure: Any, events: list[Any]) -> None:
        if self._on_secure is None:
            raise self._auth_failed(
                f"the broker sent a {self.auth_mechanism} challenge and no on_secure handler was given"
            )
        self._writer.method(0, ConnectionSecureOk(self._on_secure(secure.challenge)))

    def _on_tune(self, tune: Any, events: list[Any]) -> None:
        if self._handshake is not HandshakeStep.TUNE:
            self._unexpected_on_zero(tune)
            return
        self._handshake_step(HandshakeSignal.RECV_TUNE)
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

    def _on_open_ok(self, method: Any, events: list[Any]) -> None:
        if self._handshake is not HandshakeStep.OPEN_OK:
            self._unexpected_on_zero(method)
            return
        self._handshake_step(HandshakeSignal.RECV_OPEN_OK)
        self._fire(WireSignal.RECV_OPEN_OK)
        events.append(ConnectionOpened(self.server_properties, self.channel_max, self.frame_max, self.heartbeat))

    def _on_blocked(self, method: Any, events: list[Any]) -> None:
        self.blocked = method.reason
        events.append(ConnectionBlocked(method.reason))

    def _on_unblocked(self, method: Any, events: list[Any]) -> None:
        self.blocked = None
        events.append(ConnectionUnblocked())

    def _on_update_secret_ok(self, method: Any, events: list[Any]) -> None:
        if self._secret_request is None:
            self._unexpected_on_zero(method)
            return
        self._secret_request = None
        events.append(SecretUpdated())

    def _broker_close_event(self, method: Any) -> ConnectionClosedEvent:
        handshake = self.frame_max == 0 or self.state is ConnectionState.HANDSHAKE
        return ConnectionClosedEvent(
            method.reply_code, method.reply_text, method.class_id, method.method_id, True, handshake
        )

    def _local_close_event(self) -> ConnectionClosedEvent:
        code, text = self._error_close or self._local_close
        return ConnectionClosedEvent(code, text, 0, 0, False)

    def _finish_close(self, events: list[Any], how: WireSignal, event: ConnectionClosedEvent) -> None:
        event.handshake = event.handshake or self.state is ConnectionState.HANDSHAKE
        self._fire(how)
        self.close_reason = event
        events.append(event)

    def _protocol_error(self, reply_code: int, text: str, method: Any = None) -> None:
        """The broker broke the protocol: close the connection with reply_code, then raise."""
        class_id = method.CLASS_ID if method is not None else 0
        method_id = method.METHOD_ID if method is not None else 0
        self._enter_error(reply_code, text, class_id, method_id)
        error = UnexpectedFrame(text, offset=0) if reply_code == _UNEXPECTED_FRAME else AMQPSyntaxError(text, offset=0)
        error.reply_code = reply_code
        raise error

    def _enter_error(self, reply_code: Optional[int], text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Queue connection.close with ``reply_code`` (None: send none; the peer does not
        speak AMQP frames) unless ours is out already, and go to the error state.  Once in
        error or closed, a further violation changes nothing."""
        state = self.state
        if state is ConnectionState.ERROR or state is ConnectionState.CLOSED:
            return
        if reply_code is not None and (state is ConnectionState.HANDSHAKE or state is _CONNECTION_OPEN):
            self._writer.method(0, ConnectionClose(reply_code, text[:255], class_id, method_id))
            self._error_close = (reply_code, text[:255])
        self.protocol_error = text
        self._fire(WireSignal.PROTOCOL_ERROR)

    # ------------------------------------------------------------------ input

    def receive_data(self, data: Any) -> list[Any]:
        """Feed bytes from the broker; returns the events they complete, in order."""
        state = self.state
        if state is not _CONNECTION_OPEN:
            if state is ConnectionState.CLOSED or self._parse_error is not None:
                return []
            if state is ConnectionState.NEW:
                raise InvalidStateError("the connection is new: call initiate() before feeding it data")
        self.bytes_received += len(data)
        try:
            items = self._parser.feed(data)
        except CodecError as exc:
            events: list[Any] = []
            try:
                self._handle(exc.parsed or [], events)
            except CodecError:
                pass  # the parse error below is reported; the connection closes either way
            self._parse_error = exc
            reply_code = None if isinstance(exc, ProtocolHeaderError) else exc.reply_code
            self._enter_error(reply_code, str(exc))
            exc.events = events  # type: ignore[attr-defined]
            raise
        if one_run(items):
            first: Any = items[0]
            run_state = self._channels.get(first.channel_id)
            if run_state is not None and run_state.state is _CHANNEL_OPEN and not run_state.tag_base:
                # The hot path of consuming: a read of deliveries to one consumer on an open
                # channel, which _handle would pass on one by one, unchanged.
                last: Any = items[-1]
                run_state.last_delivery_tag = last.delivery_tag
                return items
        events = []
        # The read's leading acks and nacks (of a read of publisher confirms: all of it), in C
        done = core_confirm_run(self, items, events)
        try:
            if done != len(items):
                self._handle(items[done:] if done else items, events)
        except CodecError as exc:
            exc.events = events  # type: ignore[attr-defined]  # what came before the bad frame
            raise
        return events

    def _handle(self, items: list[Any], events: list[Any]) -> None:
        channels = self._channels
        # Consecutive deliveries on one open channel (the hot path of consuming): the
        # channel is looked up and checked once per run, and its last delivery tag set once,
        # when the run ends (before anything else of the read is handled, and at the end).
        run_channel = -1
        run_state: Any = None
        run_base = 0
        last_tag = 0
        for item in items:
            kind = type(item)
            if kind is Message:
                if item.channel_id != run_channel:
                    if run_state is not None:
                        run_state.last_delivery_tag = last_tag
                        run_state = None
                        run_channel = -1
                    state = channels.get(item.channel_id)
                    if state is None or state.state is not _CHANNEL_OPEN:
                        if item.channel_id == 0:
                            self._channel_zero(BasicDeliver)
                        continue  # late delivery to a channel we are closing
                    run_state = state
                    run_channel = item.channel_id
                    run_base = state.tag_base
                last_tag = item.delivery_tag
                if run_base:
                    item.delivery_tag = last_tag + run_base
                events.append(item)
                continue
            if run_state is not None:
                run_state.last_delivery_tag = last_tag
                run_state = None
                run_channel = -1
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
                if self.state is not ConnectionState.HANDSHAKE:
                    continue  # discarded while closing or in error, and moot once closed earlier in this read
                self._protocol_error(_COMMAND_INVALID, f"{method.NAME} on channel {channel} before the connection is open", method)
            elif type(method) in _CONFIRMS and (state := channels.get(channel)) is not None \
                    and state.state is _CHANNEL_OPEN:
                core_on_confirm(self, state, method, item, events)  # the hot path of confirms
            else:
                self._on_channel_method(channel, method, item, events)
        if run_state is not None:
            run_state.last_delivery_tag = last_tag

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

    # channels 1..: one small handler per method class (the tables follow the class) ----------

    def _on_channel_method(self, channel: int, method: Any, command: Any, events: list[Any]) -> None:
        state = self._channels.get(channel)
        if state is None:
            self._protocol_error(_CHANNEL_ERROR, f"{method.NAME} on channel {channel}, which is not open", method)
            return
        if state.state is _CHANNEL_CLOSING:
            handler = _CLOSING_CHANNEL_METHODS.get(type(method))
            if handler is not None:
                handler(self, state, method, command, events)
            return  # the rest is discarded while closing
        _CHANNEL_METHODS.get(type(method), _on_reply)(self, state, method, command, events)

    def _on_close_ok_while_closing(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        unconfirmed = self._release(state.id, WireChannelSignal.RECV_CLOSE_OK)
        code, text, class_id, method_id, by_broker = state.close_reason or (
            _REPLY_SUCCESS, "Normal shutdown", 0, 0, False
        )
        events.append(ChannelClosedEvent(state.id, code, text, class_id, method_id, by_broker, unconfirmed))

    def _on_close_while_closing(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        # Both sides closed at once: answer, and report the broker's reason once our close-ok comes.
        self._writer.method(state.id, ChannelCloseOk())
        state.close_reason = (method.reply_code, method.reply_text, method.class_id, method.method_id, True)

    def _on_channel_close(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        channel = state.id
        self._writer.method(channel, ChannelCloseOk())
        unconfirmed = self._release(channel, WireChannelSignal.RECV_CLOSE)
        self._broker_closed[channel] = (method.reply_code, method.reply_text, method.class_id, method.method_id)
        events.append(
            ChannelClosedEvent(
                channel, method.reply_code, method.reply_text, method.class_id, method.method_id, True, unconfirmed
            )
        )

    def _on_return(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        returned = ReturnedMessage(
            state.id, method.reply_code, method.reply_text, method.exchange, method.routing_key,
            command.properties, command.body,
        )
        if state.confirms is not None:
            state.confirms.match_return(returned)
        events.append(returned)

    def _on_cancel(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        if not method.nowait:
            self._writer.method(state.id, BasicCancelOk(method.consumer_tag))
        events.append(ConsumerCancelled(state.id, method.consumer_tag))

    def _on_flow(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        state.flow_active = method.active
        self._writer.method(state.id, ChannelFlowOk(method.active))
        events.append(ChannelFlowChanged(state.id, method.active))

    def _on_reply(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        """A method that answers the channel's outstanding synchronous request, or a violation."""
        pending = state.pending
        if pending is None or method.INDEX not in pending.RESPONSES:
            waiting = f" (waiting for the reply to {pending.NAME})" if pending is not None else ""
            self._protocol_error(_COMMAND_INVALID, f"unexpected {method.NAME} on channel {state.id}{waiting}", method)
            return
        state.pending = None
        handler = _REPLY_METHODS.get(type(method))
        if handler is None:
            events.append(MethodReply(state.id, method))
        else:
            handler(self, state, method, command, events)

    def _on_channel_open_ok(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        state._fire(WireChannelSignal.RECV_OPEN_OK)
        events.append(ChannelOpened(state.id))

    def _on_get_ok(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        state.last_delivery_tag = method.delivery_tag
        message = Message(
            state.id,
            method.delivery_tag + state.tag_base,
            method.redelivered,
            method.exchange,
            method.routing_key,
            command.properties,
            command.body,
            None,
            method.message_count,
        )
        events.append(GetResult(state.id, message))
        self.gets_received += 1

    def _on_get_empty(self, state: ChannelState, method: Any, command: Any, events: list[Any]) -> None:
        events.append(GetResult(state.id, None))

    _on_confirm = core_on_confirm  # compiled (publish_path.pyx): once per ack frame

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

    def _release(self, channel: int, how: WireChannelSignal) -> list[Any]:
        """Free the channel number; returns (seqno, token) of its unconfirmed publishes."""
        self.channels_released += 1
        state = self._channels.pop(channel, None)
        if channel < self._next_channel:
            self._next_channel = channel
        if state is None:
            return []
        state._fire(how)
        if state.confirms is None:
            return []
        return list(zip(*state.confirms.drain()))

    def close_channel(self, channel: int, reply_code: int = _REPLY_SUCCESS, reply_text: str = "Normal shutdown") -> None:
        """Queue channel.close; ChannelClosedEvent follows when close-ok arrives.  A channel the
        broker closed already is left as it is; closing one that is closing raises InvalidStateError."""
        if channel in self._broker_closed and channel not in self._channels:
            return
        state = self._open_state(channel, allow_opening=True)
        state._fire(WireChannelSignal.SEND_CLOSE)
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

    publish = core_publish  # compiled (publish_path.pyx): the hottest call of all

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
            if self.pending_output >= FLUSH_AT:
                self.flush_due = True
        confirms = state.confirms  # type: ignore[union-attr]
        if confirms is None or not count:
            return 0
        return confirms.add_run(token, count)

    # Queue basic.ack; False (nothing queued) for a delivery of an earlier connection: the
    # broker requeued it when that connection was lost.  Compiled (ack_path.pyx): acking
    # each delivery is a hot path of consuming.
    basic_ack = core_basic_ack

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
            if state.confirms:
                pairs = list(zip(*state.confirms.drain()))
                if pairs:
                    result[channel] = pairs
        return result


# Dispatch by method class: each handler takes (core, method, events) on channel 0 and
# (core, channel state, method, command, events) on the others.
_HANDSHAKE_METHODS: Final[dict[type, Callable[[ConnectionProtocol, Any, list[Any]], None]]] = {
    ConnectionStart: ConnectionProtocol._on_start,
    ConnectionSecure: ConnectionProtocol._on_secure_challenge,
    ConnectionTune: ConnectionProtocol._on_tune,
    ConnectionOpenOk: ConnectionProtocol._on_open_ok,
}
_OPEN_METHODS: Final[dict[type, Callable[[ConnectionProtocol, Any, list[Any]], None]]] = {
    _ConnectionBlockedMethod: ConnectionProtocol._on_blocked,
    _ConnectionUnblockedMethod: ConnectionProtocol._on_unblocked,
    ConnectionUpdateSecretOk: ConnectionProtocol._on_update_secret_ok,
}
_ChannelHandler = Callable[[ConnectionProtocol, ChannelState, Any, Any, list[Any]], None]
# On a channel we are closing, everything else is discarded.
_CLOSING_CHANNEL_METHODS: Final[dict[type, _ChannelHandler]] = {
    ChannelCloseOk: ConnectionProtocol._on_close_ok_while_closing,
    ChannelClose: ConnectionProtocol._on_close_while_closing,
}
# Methods the broker may send at any time; any other must answer the pending request (_on_reply).
_CHANNEL_METHODS: Final[dict[type, _ChannelHandler]] = {
    BasicAck: ConnectionProtocol._on_confirm,
    BasicNack: ConnectionProtocol._on_confirm,
    BasicReturn: ConnectionProtocol._on_return,
    ChannelClose: ConnectionProtocol._on_channel_close,
    BasicCancel: ConnectionProtocol._on_cancel,
    ChannelFlow: ConnectionProtocol._on_flow,
}
_on_reply: Final = ConnectionProtocol._on_reply
_CONFIRMS: Final = frozenset((BasicAck, BasicNack))  # what _handle gives an open channel's tracker itself
# Replies that are more than a MethodReply.
_REPLY_METHODS: Final[dict[type, _ChannelHandler]] = {
    ChannelOpenOk: ConnectionProtocol._on_channel_open_ok,
    BasicGetOk: ConnectionProtocol._on_get_ok,
    BasicGetEmpty: ConnectionProtocol._on_get_empty,
}


def method_label(method: Any) -> str:
    return method_name(method.CLASS_ID, method.METHOD_ID)
