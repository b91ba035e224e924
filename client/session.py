"""The transport-neutral layer: what both transports do, written once.

Between the sans-IO core (``protocol.py``: bytes in, events out) and the two transports
(``blocking.py``: a socket and an I/O thread; ``aio.py``: an asyncio protocol) sits this
layer.  It routes the core's events to channels, consumers, confirm futures and return
callbacks; keeps the publish bookkeeping and the confirm window; maps every fault to one
exception, with one text; and decides what a lost connection means (fail, or recover).
None of it waits: the waiting flows (RPCs, publishing under back-pressure, recovery) are
in ``operations_async.py`` and its generated twin ``operations_sync.py``.

A transport supplies the I/O and these primitives, with the same names on both:

- ``_new_waiter()``: a one-shot result with ``done()``, ``set_result()``, ``set_exception()``
  (a ``threading``-based slot, or an ``asyncio.Future``);
- ``_new_flag()``: an event with ``set()``, ``clear()``, ``is_set()``;
- ``_flush()`` (write what the core queued, now), ``_flush_soon()`` (write it now, or once
  the current batch or loop pass ends), ``_flush_acks()``; ``_flush_later`` is true while
  a flush is certain to come anyway (inside ``batch()``; a flush scheduled on the loop),
  so a publish then only checks that no more than ``FLUSH_AT`` bytes wait;
- ``_stop_io()`` (abort the socket and the heartbeat timer), ``_begin_recovery()``,
  ``_run_callback(fn, arg)`` (a user callback: queued for ``process_events``, or run in
  the loop with coroutines kept as tasks), ``_closed_for_good()``;
- on channels: ``_notify_progress()`` (confirms moved: wake publishers waiting for room).

``_lock`` (``_new_lock()``) guards the core and the state that the reader and callers
share: an RLock on the blocking transport, a no-op on asyncio, where everything runs in
the loop's thread.
"""
from __future__ import annotations

import logging
import ssl
import threading
from typing import Any, Callable, Optional, Sequence, TypedDict, Union

from amqwire.codec import BasicCancel, BasicConsumeOk, CodecError, ProtocolHeaderError

from . import protocol as proto
from .errors import (
    AMQPConnectionError,
    AuthenticationError,
    ChannelClosed,
    ConnectionClosed,
    ConnectionLost,
    ConsumerCancelled,
    InvalidStateError,
    MessageReturned,
    PublishNacked,
    PublishUnconfirmed,
    channel_closed,
)
from .message import Message, ReturnedMessage
from .recovery import END, RecoveryPolicy, Topology, recoverable
from .connect import unverified_tls
from .url import ConnectionParameters, ParametersLike, parameters_list

log = logging.getLogger("amqwire.client")

#: The Java client's default channel RPC timeout: 10 minutes.
DEFAULT_RPC_TIMEOUT = 600.0
#: Publishes are written together until this much is queued (a batch, a loop pass).
FLUSH_AT = 256 * 1024


class ConnectOptions(TypedDict, total=False):
    """The keyword options of ``connect()``, the same on both transports.

    ``heartbeat``, ``frame_max``, ``channel_max`` and ``connection_timeout`` override the
    URL's query; ``rpc_timeout`` is the default ``timeout=`` of every request (the Java
    client's 10 minutes; None: wait forever); ``recovery``: True or a RecoveryPolicy.
    """

    heartbeat: Optional[int]
    frame_max: Optional[int]
    channel_max: Optional[int]
    connection_timeout: Optional[float]
    ssl_context: Optional[ssl.SSLContext]
    client_properties: Optional[dict[str, Any]]
    blocked_action: str
    blocked_timeout: Optional[float]
    recovery: Union[bool, RecoveryPolicy]
    on_secure: Optional[Callable[[bytes], bytes]]
    rpc_timeout: Optional[float]


_URL_OVERRIDES = ("heartbeat", "frame_max", "channel_max", "connection_timeout")


def connection_arguments(
    url: Union[ParametersLike, Sequence[ParametersLike], None], options: ConnectOptions
) -> tuple[list[ConnectionParameters], dict[str, Any]]:
    """``connect()``'s arguments split into the brokers to try and the Connection's options."""
    unknown = set(options) - set(ConnectOptions.__annotations__)
    if unknown:
        raise TypeError(f"connect() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    rest: dict[str, Any] = dict(options)
    overrides = {name: rest.pop(name, None) for name in _URL_OVERRIDES}
    return parameters_list(url, **overrides), rest


class ConnectionBase:
    """State and event routing of one logical connection (it survives recoveries)."""

    _channels: dict[int, Any]

    def __init__(
        self,
        parameters: list[ConnectionParameters],
        *,
        ssl_context: Any = None,
        client_properties: Optional[dict[str, Any]] = None,
        blocked_action: str = "wait",
        blocked_timeout: Optional[float] = None,
        recovery: Union[bool, RecoveryPolicy] = False,
        on_secure: Optional[Callable[[bytes], bytes]] = None,
        rpc_timeout: Optional[float] = DEFAULT_RPC_TIMEOUT,
    ) -> None:
        if blocked_action not in ("wait", "raise"):
            raise ValueError(f"blocked_action must be 'wait' or 'raise', not {blocked_action!r}")
        if rpc_timeout is not None and rpc_timeout <= 0:
            raise ValueError(f"rpc_timeout must be positive or None, not {rpc_timeout!r}")
        if not parameters:
            raise ValueError("no broker to connect to")
        if ssl_context is not None:  # TLS whatever the URL's scheme: show it as amqps://
            parameters = [p if p.ssl else p.replace(ssl=True) for p in parameters]
        for p in parameters:
            if p.auth_mechanism == "EXTERNAL" and not p.certfile and ssl_context is None:
                raise ValueError(
                    f"{p}: auth_mechanism EXTERNAL logs in with a TLS client certificate, and no client "
                    "certificate was configured (give certfile= and keyfile= in an amqps:// URL, or an "
                    "ssl_context holding one)"
                )
        self._parameters = parameters
        self._ssl_context = ssl_context
        self._warned_unverified: set[tuple[str, int]] = set()
        self._client_properties = client_properties
        self._on_secure = on_secure
        self.blocked_action = blocked_action
        self.blocked_timeout = blocked_timeout
        self.rpc_timeout = rpc_timeout
        self.recovery: Optional[RecoveryPolicy] = RecoveryPolicy() if recovery is True else (recovery or None)
        self.params = parameters[0]
        self._lock = self._new_lock()
        self._channels = {}
        self._batched: list[Any] = []  # consumers holding deliveries of the current read
        self._flush_later: Any = False
        self._core = proto.ConnectionProtocol()
        self._alive = False  # the current socket is up
        self._opened = False  # ... and its handshake finished
        self._closing = False  # close() was called
        self._recovering = False
        # Why calls fail: set when the connection is lost or closed, kept through a
        # recovery until the channels, topology and consumers are back.
        self._error: Optional[BaseException] = None
        self._is_blocked = False  # the broker sent connection.blocked
        self._write_paused = False  # the socket's write buffer is full (asyncio's pause_writing)
        self._held = False  # either of the two: the one flag a publish reads
        self._writable = self._new_flag()
        self._writable.set()
        self._unblocked = self._new_flag()
        self._unblocked.set()
        self._recovered = self._new_flag()
        self._recovered.set()
        self._handshake_waiter: Any = None
        self._close_waiter: Any = None
        self._secret_waiter: Any = None
        self._topology = None if self.recovery is None else Topology()
        self.server_properties: dict[str, Any] = {}
        self.channel_max = 0
        self.frame_max = 0
        self.heartbeat = 0

    # transport primitives -------------------------------------------------------------

    def _new_lock(self) -> Any:
        """The lock of the core and the shared state (a context manager)."""
        return threading.RLock()

    def _new_waiter(self) -> Any:
        raise NotImplementedError

    def _new_flag(self) -> Any:
        raise NotImplementedError

    def _flush(self) -> None:
        raise NotImplementedError

    def _flush_soon(self) -> None:
        raise NotImplementedError

    def _flush_acks(self) -> None:
        raise NotImplementedError

    def _stop_io(self) -> None:
        raise NotImplementedError

    def _begin_recovery(self) -> None:
        raise NotImplementedError

    def _run_callback(self, fn: Callable[[Any], Any], arg: Any) -> None:
        raise NotImplementedError

    def _closed_for_good(self) -> None:
        """No recovery will follow: wake whoever waits for events."""

    # state ----------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._error is None and not self._closing and self._core.state == "open"

    @property
    def blocked(self) -> bool:
        """The broker has blocked publishing on this connection (connection.blocked)."""
        return self._is_blocked

    def __repr__(self) -> str:
        module = type(self).__module__.replace("amqwire.client.blocking", "amqwire.client")
        return f"<{module}.Connection {self.params} {'open' if self.is_open else 'closed'}>"

    def _check(self) -> None:
        """Raise why the connection cannot take calls now, if it cannot."""
        if self._error is not None:
            raise self._error
        if self._closing:
            raise InvalidStateError("the connection is closed")

    def _new_core(self, params: ConnectionParameters) -> proto.ConnectionProtocol:
        return proto.ConnectionProtocol(
            params.username,
            params.password,
            params.vhost,
            auth_mechanism=params.auth_mechanism,
            channel_max=params.channel_max,
            frame_max=params.frame_max,
            heartbeat=params.heartbeat,
            client_properties=self._client_properties,
            locale=params.locale,
            on_secure=self._on_secure,
        )

    def _warn_if_unverified(self, params: ConnectionParameters) -> None:
        """One WARNING per connection and broker address when TLS does not check the broker."""
        gap = unverified_tls(params, self._ssl_context)
        if gap is not None and (params.host, params.port) not in self._warned_unverified:
            self._warned_unverified.add((params.host, params.port))
            log.warning("TLS to %s:%d: %s; anyone on the path can impersonate the broker", params.host, params.port, gap)

    def _login_refused(self, params: ConnectionParameters) -> str:
        if params.auth_mechanism == "EXTERNAL":
            return f"refused the client certificate (EXTERNAL) or vhost {params.vhost!r}"
        return f"refused user {params.username!r} or vhost {params.vhost!r}"

    # faults -> exceptions (the same on both transports) -----------------------------

    def _fault(self, exc: BaseException, data: Any = b"") -> BaseException:
        """The exception a malformed or foreign input means for the caller."""
        if isinstance(exc, AMQPConnectionError):
            return exc
        params = self.params
        if not self._opened and not self._core.server_properties:  # nothing AMQP came yet
            if isinstance(exc, ProtocolHeaderError) and exc.offered.startswith(b"AMQP"):
                text = f"{params} does not accept AMQP 0-9-1: {exc}"
            else:
                text = f"the peer at {params} is not speaking AMQP 0-9-1 (it sent {bytes(data[:32])!r})"
        else:
            text = f"connection to {params} failed: {exc}"
        error = ConnectionLost(text)
        error.__cause__ = exc
        return error

    def _eof_error(self, detail: Any = None) -> BaseException:
        """The exception for a socket the peer closed (or that failed: ``detail``)."""
        if self._closing:
            return InvalidStateError("the connection is closed")
        params = self.params
        suffix = f": {detail}" if detail else ""
        if not self._opened:
            if self._core.server_properties:
                return AuthenticationError(
                    f"{params}: the broker closed the socket during the handshake ({self._login_refused(params)})"
                )
            return ConnectionLost(f"{params}: the broker closed the socket before the handshake{suffix}")
        return ConnectionLost(f"the broker at {params} closed the socket{suffix}")

    # input -----------------------------------------------------------------------------

    def _data_received(self, data: Any) -> None:
        """Feed what the socket read; route the events; handle a malformed input."""
        core = self._core
        error = None
        with self._lock:
            released = core.channels_released
            try:
                events = core.receive_data(data)
            except (CodecError, AMQPConnectionError) as exc:
                events = getattr(exc, "events", None) or []
                error = self._fault(exc, data)
            closed = self._detach_closed_channels(events) if core.channels_released != released else None
        if core.pending_output:
            self._flush_quietly()
        if events:
            self._dispatch(events, closed)
        if error is not None:
            self._on_lost(error)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except (OSError, AMQPConnectionError, InvalidStateError) as exc:
            log.debug("flush: %s", exc)

    def _detach_closed_channels(self, events: list[Any]) -> Optional[dict[int, Any]]:
        """Under ``_lock``, with the core's state: forget channels the broker just closed, so
        a channel opened right after with the same number is never mistaken for the old one."""
        closed = {}
        for event in events:
            if type(event) is proto.ChannelClosedEvent:
                channel = self._channels.pop(event.channel_id, None)
                if channel is not None:
                    channel._closed = channel._close_error(event)
                    closed[id(event)] = channel
        return closed

    def _dispatch(self, events: list[Any], closed: Optional[dict[int, Any]] = None) -> None:
        channels = self._channels
        for event in events:
            kind = type(event)
            if kind is Message:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._on_message(event)
                continue
            if self._batched:  # deliveries before anything else that happens
                self._hand_over_batches()
            if kind is proto.Confirmed:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._on_confirmed(event)
            elif kind is proto.MethodReply:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._reply(event.method)
            elif kind is proto.GetResult:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    message = event.message
                    if message is not None:
                        message.channel = channel
                        message.delivery_tag += channel._tag_offset
                    channel._reply(message)
            elif kind is proto.ChannelOpened:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._reply(None)
            elif kind is ReturnedMessage:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._on_return(event)
            elif kind is proto.ConsumerCancelled:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._on_consumer_cancelled(event.consumer_tag)
            elif kind is proto.ChannelClosedEvent:
                channel = closed.get(id(event)) if closed is not None else channels.pop(event.channel_id, None)
                if channel is not None:
                    channel._on_closed(event)
            elif kind is proto.ChannelFlowChanged:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._set_flow(event.active)
            elif kind is proto.ConnectionBlocked:
                log.warning("the broker blocked the connection: %s", event.reason)
                self._set_blocked(True)
            elif kind is proto.ConnectionUnblocked:
                log.info("the broker unblocked the connection")
                self._set_blocked(False)
            elif kind is proto.SecretUpdated:
                _settle(self._secret_waiter, None)
            elif kind is proto.ConnectionOpened:
                self._opened = True
                _settle(self._handshake_waiter, event)
            elif kind is proto.ConnectionClosedEvent:
                if event.by_broker:
                    if event.handshake and event.reply_code == 403:
                        error: BaseException = AuthenticationError(f"{self.params}: {event.reply_code} {event.reply_text}")
                    else:
                        error = ConnectionClosed(event.reply_code, event.reply_text, event.class_id, event.method_id)
                    self._flush_quietly()  # our close-ok
                    self._on_lost(error)
                else:
                    _settle(self._close_waiter, None)  # close() takes it from here
                return
        if self._batched:
            self._hand_over_batches()

    def _hand_over_batches(self) -> None:
        """Give consumers that collect deliveries (blocking) what this read brought them."""
        batched, self._batched = self._batched, []
        for consumer in batched:
            consumer._hand_over()

    def _set_blocked(self, blocked: bool) -> None:
        self._is_blocked = blocked
        self._held = blocked or self._write_paused
        if blocked:
            self._unblocked.clear()
            if self.blocked_action == "raise":  # publishes waiting for window room raise now
                for channel in list(self._channels.values()):
                    channel._notify_progress()
        else:
            self._unblocked.set()

    # losing the connection ----------------------------------------------------------

    def _set_write_paused(self, paused: bool) -> None:
        self._write_paused = paused
        self._held = paused or self._is_blocked
        if paused:
            self._writable.clear()
        else:
            self._writable.set()

    def _on_lost(self, error: BaseException) -> None:
        """The socket is gone: fail every waiter and every unconfirmed publish; recover
        if asked to and the fault allows it.  Safe to call more than once."""
        with self._lock:
            if not self._alive:
                return
            self._alive = False
            opened = self._opened
            self._opened = False
            if self._error is None:
                self._error = error
            unconfirmed = self._core.drain_unconfirmed() if opened else {}
            for channel_id, channel in self._channels.items():
                state = self._core.channel_state(channel_id)
                if state is not None:
                    channel._tag_before_recovery = channel._tag_offset + state.last_delivery_tag
        self._stop_io()
        _fail(self._handshake_waiter, error)
        _settle(self._close_waiter, None)
        _fail(self._secret_waiter, error)
        self._set_blocked(False)
        if not opened:
            return  # a handshake that failed: whoever connects raises it
        if not self._closing:
            log.error("connection to %s lost: %s", self.params, error)
        # A loss during a recovery fails that attempt only: the recovery loop decides.
        recovering = self._recovering or (self.recovery is not None and not self._closing and recoverable(error))
        for channel_id, channel in list(self._channels.items()):
            channel._on_connection_lost(error, unconfirmed.get(channel_id, ()), recovering)
        if recovering:
            if not self._recovering:
                self._recovering = True
                self._recovered.clear()
                self._begin_recovery()
            return
        self._give_up()

    def _give_up(self) -> None:
        """No recovery: the channels are closed for good."""
        error = self._error or InvalidStateError("the connection is closed")
        for channel in list(self._channels.values()):
            channel._on_connection_lost(error, (), False)
        self._channels.clear()
        self._recovering = False
        self._recovered.set()
        self._closed_for_good()

    def _recovery_done(self) -> None:
        with self._lock:
            self._error = None
        self._recovering = False
        self._recovered.set()
        log.info("recovery: connection to %s restored", self.params)


class ChannelBase:
    """What a channel knows and does on events, on both transports."""

    _connection: Any

    def __init__(self, connection: Any, channel_id: int) -> None:
        self._connection = connection
        self.channel_id = channel_id
        self._waiter: Any = None  # the outstanding RPC's waiter
        self._stale: Any = None  # the waiter of an RPC given up on (timeout, cancel)
        self._closed: Optional[BaseException] = None
        self._consumers: dict[str, Any] = {}
        self._pending_consumer: Any = None
        self._return_callbacks: list[Any] = []
        self._confirm = False
        self._max_in_flight = 0
        self._unsettled = 0  # confirm-mode publishes whose futures are not settled yet
        self._failures: list[Any] = []  # failed confirm tokens not reported by wait_for_confirms yet
        self._flow_paused = False  # the broker sent channel.flow(active=False)
        self._flow = connection._new_flag()
        self._flow.set()
        self._tag_offset = 0
        self._tag_before_recovery = 0
        self._qos: Optional[tuple[Any, ...]] = None

    def __repr__(self) -> str:
        module = type(self).__module__.replace("amqwire.client.blocking", "amqwire.client")
        return f"<{module}.Channel {self.channel_id} {'open' if self.is_open else 'closed'}>"

    @property
    def is_open(self) -> bool:
        connection = self._connection
        if self._closed is not None or connection._error is not None or connection._closing:
            return False
        state = connection._core.channel_state(self.channel_id)  # may know of a close first
        return state is not None and state.is_open

    @property
    def connection(self) -> Any:
        return self._connection

    def _check(self) -> None:
        """Raise why this channel cannot take calls now, if it cannot: the broker's close,
        the connection's loss (an AMQPConnectionError), or InvalidStateError for misuse."""
        error = self._closed
        if error is not None:
            if isinstance(error, ChannelClosed) and error.by_broker:
                raise channel_closed(error.reply_code, error.reply_text, error.class_id, error.method_id,
                                     by_broker=True, channel=self.channel_id)
            if isinstance(error, AMQPConnectionError):
                raise error
            raise InvalidStateError(f"channel {self.channel_id} is closed")
        self._connection._check()

    def _close_error(self, event: proto.ChannelClosedEvent) -> BaseException:
        if event.by_broker:
            return channel_closed(
                event.reply_code, event.reply_text, event.class_id, event.method_id, by_broker=True, channel=self.channel_id
            )
        return ChannelClosed(event.reply_code, event.reply_text, by_broker=False, channel=self.channel_id)

    # replies ---------------------------------------------------------------------------

    def _reply(self, value: Any) -> None:
        connection = self._connection
        with connection._lock:
            waiter = self._waiter
            self._waiter = None
            if waiter is None or waiter is not self._stale:
                _settle(waiter, value)
                return
            self._stale = None
            waiter.set_result(value)
            # The reply to a request given up on: undo what it did.
            if type(value) is Message:  # a basic.get nobody takes: back to the queue
                connection._core.basic_reject(self.channel_id, value.delivery_tag - self._tag_offset, True)
            elif type(value) is BasicConsumeOk:  # a consumer nobody reads
                connection._core.send_method(self.channel_id, BasicCancel(value.consumer_tag, True))
            else:
                return
        connection._flush_quietly()

    def _abandon(self, waiter: Any) -> None:
        """An RPC stopped waiting (timeout, cancellation): its reply may still come, and the
        next request must not mistake it for its own."""
        with self._connection._lock:
            if waiter.done() or self._waiter is not waiter:
                return
            stale = self._connection._new_waiter()
            self._waiter = self._stale = stale

    # confirms --------------------------------------------------------------------------

    def _on_confirmed(self, event: proto.Confirmed) -> None:
        tokens = event.tokens
        if event.ack and event.returned is None:
            self._acked(tokens)
        else:
            returned = event.returned or {}
            for seqno, token in zip(event.seqnos, tokens):
                message = returned.get(seqno)
                if message is not None:
                    error: Optional[BaseException] = MessageReturned(message, seqno)
                elif not event.ack:
                    error = PublishNacked(seqno)
                else:
                    error = None
                if token.done():
                    continue  # a batch that failed already
                if error is None:
                    token.set_result(None)
                else:
                    token.set_exception(error)
                    self._failures.append(token)
        with self._connection._lock:
            self._unsettled -= len(tokens)
        self._notify_progress()

    def _acked(self, tokens: list[Any]) -> None:
        """Settle the tokens of publishes the broker acked (the hot path of confirms)."""
        for token in tokens:
            if not token.done():
                token.set_result(None)

    def _notify_progress(self) -> None:
        raise NotImplementedError

    def _set_flow(self, active: bool) -> None:
        self._flow_paused = not active
        if active:
            self._flow.set()
        else:
            self._flow.clear()

    def _on_return(self, message: ReturnedMessage) -> None:
        for fn in self._return_callbacks:
            self._connection._run_callback(fn, message)

    def add_on_return_callback(self, fn: Callable[[ReturnedMessage], Any]) -> None:
        """``fn(returned)`` for every message the broker returns (blocking: run by
        ``process_events``; asyncio: called in the loop, coroutines become tasks)."""
        self._return_callbacks.append(fn)

    # consumers -------------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        message.channel = self
        if self._tag_offset:
            message.delivery_tag += self._tag_offset
        consumer = self._consumers.get(message.consumer_tag)  # type: ignore[arg-type]
        if consumer is None:
            consumer = self._pending_consumer
            if consumer is None:
                log.warning("channel %d: delivery for unknown consumer %r dropped", self.channel_id, message.consumer_tag)
                return
            self._consumers[message.consumer_tag] = consumer  # type: ignore[index]
        consumer._deliver(message)

    def _on_consumer_cancelled(self, consumer_tag: str) -> None:
        consumer = self._consumers.pop(consumer_tag, None)
        log.warning("channel %d: the broker cancelled consumer %r", self.channel_id, consumer_tag)
        if consumer is not None:
            consumer._finish(ConsumerCancelled(consumer_tag))

    def _core_tag(self, delivery_tag: int) -> int:
        """The delivery tag on the current connection; 0 for a delivery from before a
        recovery (its ack is void: the broker requeued it)."""
        if self._tag_offset:
            delivery_tag -= self._tag_offset
            if delivery_tag <= 0:
                log.info("ack of a delivery from before recovery ignored")
                return 0
        return delivery_tag

    # the end ---------------------------------------------------------------------------

    def _on_closed(self, event: proto.ChannelClosedEvent) -> None:
        error = self._closed if self._closed is not None else self._close_error(event)
        if event.by_broker:
            log.info("%s", error)  # also raised to the caller: not a warning by itself
        self._closed = error
        if not event.by_broker:  # our close() is waiting for this
            with self._connection._lock:
                waiter = self._waiter
                self._waiter = None
            _settle(waiter, None)
        self._fail_everything(error, event.unconfirmed, False)

    def _on_connection_lost(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        if not recovering:
            self._closed = self._closed or error
        self._fail_everything(error, unconfirmed, recovering)

    def _fail_everything(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        with self._connection._lock:
            waiter = self._waiter
            self._waiter = None
            self._stale = None
        _fail(waiter, error)
        for seqno, token in unconfirmed:
            if not token.done():
                token.set_exception(PublishUnconfirmed(seqno, error))
                self._failures.append(token)
        with self._connection._lock:
            self._unsettled -= len(unconfirmed)
            if not recovering:
                self._unsettled = 0
        if not recovering:
            reason = END if isinstance(error, InvalidStateError) else error
            for consumer in list(self._consumers.values()):
                consumer._finish(reason)
            self._consumers.clear()
        self._set_flow(True)
        self._notify_progress()


class ConsumerBase:
    """A subscription's state, on both transports."""

    def __init__(self, channel: Any, queue_name: str, callback: Optional[Callable[[Message], Any]], method: Any) -> None:
        self.channel = channel
        self.queue = queue_name
        self.callback = callback
        self.consumer_tag = ""
        self._method = method
        self._active = True
        self._finished: Any = None  # END or an exception, once no more messages come

    @property
    def active(self) -> bool:
        return self._active

    def _deliver(self, message: Message) -> None:
        raise NotImplementedError

    def _finish(self, reason: Any) -> None:
        if self._active:
            self._active = False
            self._finished = reason
            self._wake()

    def _wake(self) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<Consumer {self.consumer_tag!r} on {self.queue!r}{'' if self._active else ' (ended)'}>"


def _settle(waiter: Any, value: Any) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(value)


def _fail(waiter: Any, error: BaseException) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(error)
        waiter.exception()  # retrieved: whoever awaits it still gets it raised
