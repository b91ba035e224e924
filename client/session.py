"""The transport-neutral layer: what both transports do, written once.

Between the sans-IO core (``protocol.py``: bytes in, events out) and the two transports
(``blocking.py``: a socket and an I/O thread; ``aio_connection.py``: an asyncio protocol) sits this
layer.  It routes the core's events to channels, consumers, confirm futures and return
callbacks; keeps the publish bookkeeping and the confirm window; maps every fault to one
exception, with one text; and decides what a lost connection means (fail, or recover).
Where a connection, a channel or a consumer is, is one state each (``lifecycle.py``); who
watches them is one observer (``observer.py``).  None of it waits: the waiting flows (RPCs, publishing under back-pressure, recovery) are
in ``operations_async.py`` and its generated twin ``operations_sync.py``.

The I/O and the ways of waiting are not here: each connection owns an I/O object
(``io_threads.ThreadIO`` or ``io_asyncio.AsyncioIO``: the socket, the lock, waiters, flags,
the flushes, user callbacks, recovery's thread or task), each channel a ``ChannelWaits``
(its confirm futures and the waits for them) and each consumer an ``Inbox`` made by it.
``_flush_later`` is true while a flush is certain to come anyway (inside ``batch()``; a
flush scheduled on the loop), so a publish then only checks that no more than
``FLUSH_AT`` bytes wait.

``_lock`` guards the core and the state that the reader and callers share: an RLock on
the blocking transport, a no-op on asyncio, where everything runs in the loop's thread.
"""
from __future__ import annotations

import inspect
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, Sequence, TypedDict, TypeVar, Union

from amqwire.codec import BasicCancel, BasicConsumeOk, CodecError, ProtocolHeaderError
from amqwire.codec.parser import one_run, set_channel

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
from .listeners import (
    BlockedEvent,
    CallbackError,
    ConfirmEvent,
    ConsumerEvent,
    ConsumerEventKind,
    ExceptionHandler,
    FlowEvent,
    RecoveryEvent,
    ShutdownEvent,
    UnblockedEvent,
    log_callback_error,
)
from .message import DeliveredMessage, Message, ReturnedMessage
from .lifecycle import (
    CHANNEL_OPEN_PHASES,
    CHANNEL_PHASES,
    CONSUMER_PHASES,
    OPENED_STATES,
    RECOVERING_STATES,
    ChannelSignal,
    ChannelPhase,
    ConnectionSignal,
    ConnectionStatus,
    ConsumerSignal,
    ConsumerPhase,
    Lifecycle,
    Machine,
    REQUEST_PHASES,
    RequestPhase,
    RequestSignal,
)
from .metrics import MetricsCollector
from .observer import Listeners, Observer
from .publish_path import ChannelPublisher, WindowCount, channel_on_confirmed
from .recovery import END, NackWatch, RecoveryPolicy, Topology, recoverable
from .connect import unverified_tls
from .io_contract import ConnectionIO
from .url import ConnectionParameters, ParametersLike, parameters_list

if TYPE_CHECKING:
    from .tracing import Tracing

_clock = time.monotonic
_CHANNEL_OPEN = ChannelPhase.OPEN
_ANY = 1 << 62  # a confirm waiter that wants every change
# What the dispatch of a read may owe the broker (ConnectionBase._owe)
_REJECT, _NACK, _CANCEL = "basic.reject", "basic.nack", "basic.cancel"
log = logging.getLogger("amqwire.client")
_E = TypeVar("_E")
#: the transport's message as type checkers see it: Message (blocking) or AsyncMessage
_M = TypeVar("_M", bound=DeliveredMessage)

#: The Java client's default channel RPC timeout: 10 minutes.
DEFAULT_RPC_TIMEOUT = 600.0


class ConnectOptions(TypedDict, total=False):
    """The keyword options of ``connect()``, the same on both transports.

    ``heartbeat``, ``frame_max``, ``channel_max`` and ``connection_timeout`` override the
    URL's query; ``rpc_timeout`` is the default ``timeout=`` of every request (the Java
    client's 10 minutes; None: wait forever); ``recovery``: on by default, as the Java
    client's (True: the default RecoveryPolicy; a RecoveryPolicy; False: a lost connection
    fails for good);
    ``exception_handler``: called with a CallbackError for exceptions of user callbacks
    (default: log them); ``metrics``: a MetricsCollector (default: none, nothing counted);
    ``tracing``: OpenTelemetry tracing of publishes and deliveries (True: the global
    TracerProvider; a TracerProvider; a ``tracing.Tracing``; default off, see docs/tracing.md);
    ``consumer_workers`` (blocking only): run consumer and return callbacks on that many
    worker threads, in order per channel, instead of in ``process_events``.
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
    exception_handler: Optional[ExceptionHandler]
    metrics: Optional[MetricsCollector]
    tracing: Any
    consumer_workers: int


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

    # Slots, on every class of the chain: CPython 3.11 keeps at most 30 attributes of an instance
    # inline; past that the instance gets a dict and calls of its methods are no longer specialized
    # (on a publish that cost ~700 more instructions).
    __slots__ = (
        "_io", "_parameters", "_ssl_context", "_warned_unverified", "_client_properties", "_on_secure",
        "blocked_action", "blocked_timeout", "rpc_timeout", "recovery", "params", "_lock",
        "_channels", "_flush_later", "_core", "_lifecycle", "_held", "_writable",
        "_unblocked", "_recovered", "_handshake_waiter", "_close_waiter", "_secret_waiter",
        "_topology", "server_properties", "channel_max", "frame_max", "heartbeat",
        "exception_handler", "_observer", "_seen_published", "_to_stamp",
        "_stamped", "_no_ack_consumers_started", "_seen_acked", "_seen_nacked", "_seen_returned",
        "_seen_delivered", "_seen_got", "_tracing", "_peer", "_owed", "__weakref__"
    )

    _channels: dict[int, Any]
    _io: ConnectionIO
    _recover: Callable[[], Any]  # the recovery flow (operations_async.py), run by the I/O's thread or task

    def __init__(
        self,
        parameters: list[ConnectionParameters],
        io: Callable[[Any], ConnectionIO],
        *,
        ssl_context: Any = None,
        client_properties: Optional[dict[str, Any]] = None,
        blocked_action: str = "wait",
        blocked_timeout: Optional[float] = None,
        recovery: Union[bool, RecoveryPolicy] = True,
        on_secure: Optional[Callable[[bytes], bytes]] = None,
        rpc_timeout: Optional[float] = DEFAULT_RPC_TIMEOUT,
        exception_handler: Optional[ExceptionHandler] = None,
        metrics: Optional[MetricsCollector] = None,
        tracing: Any = False,
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
        self._io = io(self)  # the transport's I/O and ways of waiting
        self._lock = self._io.new_lock()
        self._channels = {}
        # Answers the dispatch of a read owes the broker, (what, channel, tag): queued on the
        # core once the dispatch is over, never while it handles the core's output.
        self._owed: list[tuple[str, int, Any]] = []
        self._flush_later: Any = 0  # the batch() depth (threads), or a flush scheduled on the loop (asyncio)
        self._core = proto.ConnectionProtocol()
        # The one state of this connection, and why calls fail (``_lifecycle.error``: set
        # by a loss or a close, kept through a recovery until everything is back).
        self._lifecycle = Lifecycle(f"connection to {parameters[0]}")
        self._writable = self._io.new_flag()
        self._writable.set()
        # Blocked by the broker or by a full socket buffer: the one attribute a publish
        # reads before it takes the slow path (a view written by _update_held only).
        self._update_held()
        self._unblocked = self._io.new_flag()
        self._unblocked.set()
        self._recovered = self._io.new_flag()
        self._recovered.set()
        self._handshake_waiter: Any = None
        self._close_waiter: Any = None
        self._secret_waiter: Any = None
        self._topology = None if self.recovery is None else Topology()
        self.server_properties: dict[str, Any] = {}
        self.channel_max = 0
        self.frame_max = 0
        self.heartbeat = 0
        self.exception_handler: ExceptionHandler = exception_handler or log_callback_error
        # Listeners and metrics; None while nothing watches: the hot paths check this alone.
        self._observer: Optional[Observer] = None if metrics is None else Observer(metrics)
        # OpenTelemetry (tracing.py); None while off: the hot paths check this alone, and
        # nothing of OpenTelemetry is imported.
        self._tracing: Optional[Tracing] = None
        self._peer: Any = None  # (address, port) of the socket's far end, set by the transport
        if tracing is not None and tracing is not False:
            from .tracing import tracing_from_option

            self._tracing = tracing_from_option(tracing)
        if metrics is not None:
            self._lifecycle.watch = _ConnectionGauge(metrics)
        self._seen_published = 0  # the core's count of queued publishes, reported to the metrics
        # channels with confirm-mode publishes not written yet (a dict as an ordered set)
        self._to_stamp: dict[Any, None] = {}
        self._stamped: list[Any] = []  # channels with written confirm-mode publishes unsettled
        self._no_ack_consumers_started = 0  # their deliveries need no ack (metrics)
        # the core's totals, counted already
        self._seen_acked = self._seen_nacked = self._seen_returned = self._seen_delivered = self._seen_got = 0

    # listeners (see listeners.py) ------------------------------------------------------

    def add_close_listener(self, fn: Callable[[ShutdownEvent], Any]) -> None:
        """``fn(ShutdownEvent)`` whenever the connection closes or is lost (also before each
        recovery: ``event.recovering``)."""
        self._add_listener("close", fn)

    def remove_close_listener(self, fn: Callable[[ShutdownEvent], Any]) -> None:
        self._remove_listener("close", fn)

    def add_blocked_listener(self, fn: Callable[[BlockedEvent], Any]) -> None:
        """``fn(BlockedEvent)`` when the broker blocks publishing (connection.blocked)."""
        self._add_listener("blocked", fn)

    def remove_blocked_listener(self, fn: Callable[[BlockedEvent], Any]) -> None:
        self._remove_listener("blocked", fn)

    def add_unblocked_listener(self, fn: Callable[[UnblockedEvent], Any]) -> None:
        """``fn(UnblockedEvent)`` when the broker lifts the block (connection.unblocked)."""
        self._add_listener("unblocked", fn)

    def remove_unblocked_listener(self, fn: Callable[[UnblockedEvent], Any]) -> None:
        self._remove_listener("unblocked", fn)

    def add_recovery_started_listener(self, fn: Callable[[RecoveryEvent], Any]) -> None:
        """``fn(RecoveryEvent)`` when a recovery begins (attempt 0; ``error``: the loss)."""
        self._add_listener("recovery_started", fn)

    def remove_recovery_started_listener(self, fn: Callable[[RecoveryEvent], Any]) -> None:
        self._remove_listener("recovery_started", fn)

    def add_recovery_succeeded_listener(self, fn: Callable[[RecoveryEvent], Any]) -> None:
        """``fn(RecoveryEvent)`` once channels, topology and consumers are back."""
        self._add_listener("recovery_succeeded", fn)

    def remove_recovery_succeeded_listener(self, fn: Callable[[RecoveryEvent], Any]) -> None:
        self._remove_listener("recovery_succeeded", fn)

    def add_recovery_failed_listener(self, fn: Callable[[RecoveryEvent], Any]) -> None:
        """``fn(RecoveryEvent)`` for every attempt that failed (``final``: no more attempts)."""
        self._add_listener("recovery_failed", fn)

    def remove_recovery_failed_listener(self, fn: Callable[[RecoveryEvent], Any]) -> None:
        self._remove_listener("recovery_failed", fn)

    def _add_listener(self, kind: str, fn: Callable[[Any], Any]) -> None:
        with self._lock:
            if self._observer is None:
                self._observer = Observer()
            self._observer.add(kind, fn)

    def _remove_listener(self, kind: str, fn: Callable[[Any], Any]) -> None:
        with self._lock:
            observer = self._observer
            if observer is None:
                raise ValueError(f"{fn!r} is not a registered listener (of {kind} events)")
            observer.remove(kind, fn)
            if observer.empty:
                self._observer = None

    def _listeners_of(self, kind: str) -> tuple[Callable[[Any], Any], ...]:
        observer = self._observer
        return () if observer is None else observer.of(kind)

    @property
    def _metrics(self) -> Optional[MetricsCollector]:
        observer = self._observer
        return None if observer is None else observer.metrics

    def _emit(self, listeners: Sequence[Callable[[_E], Any]], event: _E, channel: Any = None) -> None:
        for fn in listeners:
            self._call_user(fn, event, "listener", channel)

    def _call_user(self, fn: Callable[[Any], Any], arg: Any, where: str, channel: Any = None) -> None:
        """Call user code now, in this thread; its exception (or, on asyncio, its coroutine's)
        goes to the exception handler."""
        try:
            result = fn(arg)
        except Exception as exc:
            self._callback_failed(exc, fn, where, channel, arg)
            return
        if result is not None and inspect.isawaitable(result):
            self._io.spawn(result, fn, where, channel, arg)

    def _callback_failed(self, error: BaseException, fn: Any, where: str, channel: Any, arg: Any) -> None:
        try:
            self.exception_handler(CallbackError(error, fn, where, self, channel, arg))
        except Exception:
            log.exception("the exception handler %r failed on an error of %r", self.exception_handler, fn)

    # metrics ---------------------------------------------------------------------------

    def _take_output(self) -> list[Any]:
        """The core's queued output, for the transport to write (under ``_lock``), counted:
        the transports call it only when there is a collector."""
        pieces = self._core.buffers_to_send()
        metrics = self._metrics
        if metrics is not None and pieces:
            queued = self._core.publishes_queued
            count = queued - self._seen_published
            self._seen_published = queued
            metrics.socket_write(sum(len(piece) for piece in pieces), count)
            if self._to_stamp:  # confirm-mode publishes in this write: when they went out
                now = _clock()
                for channel in self._to_stamp:
                    channel._stamp(now)
                self._to_stamp.clear()
        return pieces

    def _count_input(self, metrics: MetricsCollector, data: Any, events: list[Any]) -> None:
        """Count what one read brought, in one call to the collector (under ``_lock``).  Its
        cost does not grow with the messages: deliveries are counted in C, confirms from
        the core's totals, latencies from how far each channel's confirms advanced."""
        core = self._core
        delivered = core.deliveries_received - self._seen_delivered
        got = core.gets_received - self._seen_got
        if delivered or got:
            self._seen_delivered += delivered
            self._seen_got += got
            if self._no_ack_consumers_started or got:
                self._note_settled_on_delivery(events)
            delivered += got
        confirmed = core.publishes_acked - self._seen_acked
        nacked = core.publishes_nacked - self._seen_nacked
        returned = core.publishes_returned - self._seen_returned
        if not (confirmed or nacked or returned):
            metrics.socket_read(len(data), delivered, 0, 0, 0, 0.0, ())
            return
        self._seen_acked += confirmed
        self._seen_nacked += nacked
        self._seen_returned += returned
        runs: list[tuple[float, int]] = []
        for channel in list(self._stamped):
            channel._confirm_runs(runs)
        if len(runs) > 1:
            runs.sort()  # several channels: the collector gets them oldest first
        metrics.socket_read(len(data), delivered, confirmed, nacked, returned, _clock() if runs else 0.0, runs)

    def _note_settled_on_delivery(self, events: list[Any]) -> None:
        """Deliveries of no_ack consumers and basic.get(no_ack=True) results: settled on
        delivery, counted apart (see _count_settled).  Under ``_lock``."""
        channels = self._channels
        no_ack_channels = [cid for cid, channel in channels.items() if channel._no_ack_consumers]
        for event in events:
            kind = type(event)
            if kind is Message:
                if event.channel_id in no_ack_channels:
                    channel = channels[event.channel_id]
                    consumer = channel._consumers.get(event.consumer_tag) or channel._pending_consumer
                    if consumer is not None and consumer._method.no_ack:
                        self._note_no_ack(channel, event.delivery_tag)
            elif kind is proto.GetResult and event.message is not None:
                channel = channels.get(event.channel_id)
                # a reply not dispatched yet: its request is still the channel's
                if channel is not None and getattr(channel._request_method, "no_ack", False):
                    self._note_no_ack(channel, event.message.delivery_tag)

    @staticmethod
    def _note_no_ack(channel: Any, delivery_tag: int) -> None:
        tags = channel._no_ack_tags
        tags.add(delivery_tag)
        if len(tags) > 65536:  # nobody acks on this channel: keep the newest only
            floor = delivery_tag - 32768
            tags.difference_update([tag for tag in tags if tag < floor])
            channel._settled_upto = max(channel._settled_upto, floor - 1)

    # state ----------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionStatus:
        """Where the connection is: NEW, CONNECTING, OPEN, BLOCKED, CLOSED_BY_BROKER, DOWN,
        RECONNECTING, RESTORING, CLOSING, CLOSED or FAILED (see ``amqwire.client.lifecycle``)."""
        return self._lifecycle.state

    @property
    def is_open(self) -> bool:
        return self._lifecycle.usable and self._core.state == "open"

    @property
    def blocked(self) -> bool:
        """The broker has blocked publishing on this connection (connection.blocked)."""
        return self._lifecycle.state is ConnectionStatus.BLOCKED

    def _socket_up(self, discard: Callable[[], Any]) -> None:
        """A transport's new socket becomes the connection's (under ``_lock``); when the
        lifecycle refuses it (closed while it was being opened), ``discard()`` it."""
        try:
            self._fire(ConnectionSignal.SOCKET_UP)
        except InvalidStateError:
            discard()
            raise

    def _fire(self, event: ConnectionSignal, error: Optional[BaseException] = None) -> ConnectionStatus:
        """The one way the connection's state changes (under ``_lock``); returns the old one."""
        lifecycle = self._lifecycle
        old = lifecycle.fire(event, error)
        self._update_held()
        # What waits reads of the state, written here alone: publishes wait while the broker
        # blocks the connection, wait_recovered() while a recovery is under way.
        if lifecycle.state is ConnectionStatus.BLOCKED:
            self._unblocked.clear()
        else:
            self._unblocked.set()
        if lifecycle.recovering:
            self._recovered.clear()
        else:
            self._recovered.set()
        return old

    def __repr__(self) -> str:
        module = type(self).__module__.replace("amqwire.client.blocking", "amqwire.client")
        return f"<{module}.Connection {self.params} {'open' if self.is_open else 'closed'}>"

    def _check(self) -> None:
        """Raise why the connection cannot take calls now, if it cannot."""
        lifecycle = self._lifecycle
        if lifecycle.usable:
            return
        if lifecycle.error is not None:
            raise lifecycle.error
        if lifecycle.closed_by_user:
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
        if not self._lifecycle.opened and not self._core.server_properties:  # nothing AMQP came yet
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
        lifecycle = self._lifecycle
        if lifecycle.closed_by_user:
            return InvalidStateError("the connection is closed")
        params = self.params
        suffix = f": {detail}" if detail else ""
        if not lifecycle.opened:
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
        lock = self._lock
        lock.acquire()  # acquire/release, not with: ~1,100 instructions less a read (see make_sync.py)
        try:
            # The channels as of this read: if another thread gives the connection up before
            # the dispatch below, the acks read here must still settle their futures.
            channels = self._channels
            released = core.channels_released
            try:
                events = core.receive_data(data)
            except (CodecError, AMQPConnectionError) as exc:
                events = getattr(exc, "events", None) or []
                error = self._fault(exc, data)
            closed = self._detach_closed_channels(events) if core.channels_released != released else None
            if core.state is proto.ConnectionState.CLOSED:
                # The broker closed the connection: a call made between this read and the
                # dispatch below (which handles the loss) must raise why, an
                # AMQPConnectionError, not find a closed core (see _check).
                for event in events:
                    if type(event) is proto.ConnectionClosedEvent and event.by_broker:
                        self._fire(ConnectionSignal.BROKER_CLOSE, self._broker_close_error(event))
            observer = self._observer
            if observer is not None and observer.metrics is not None:
                self._count_input(observer.metrics, data, events)
        finally:
            lock.release()
        if core.pending_output:
            self._flush_quietly()
        if events:
            lost = self._dispatch(events, closed, channels)
            if self._owed:
                self._pay_owed()
            if lost is not None:  # the broker's close, before any fault of the same read
                error = lost
        if error is not None:
            self._on_lost(error)

    def _owe(self, what: str, channel_id: int, tag: Any) -> None:
        """An answer to the broker that the dispatch found due: queued after it (_pay_owed)."""
        self._owed.append((what, channel_id, tag))

    def _pay_owed(self) -> None:
        """Queue what the dispatch owes the broker on the core, and write it."""
        core = self._core
        with self._lock:
            owed, self._owed = self._owed, []
            for what, channel_id, tag in owed:
                try:
                    if what is _REJECT:
                        core.basic_reject(channel_id, tag, True)
                    elif what is _NACK:
                        core.basic_nack(channel_id, tag, False, True)
                    else:
                        core.send_method(channel_id, BasicCancel(tag, True))
                except InvalidStateError:
                    pass  # the channel is going: the broker requeues or forgets it anyway
        self._flush_quietly()

    def _broker_close_error(self, event: proto.ConnectionClosedEvent) -> BaseException:
        if event.handshake and event.reply_code == 403:
            return AuthenticationError(f"{self.params}: {event.reply_code} {event.reply_text}")
        return ConnectionClosed(event.reply_code, event.reply_text, event.class_id, event.method_id)

    def _flush_quietly(self) -> None:
        try:
            self._io.flush()
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
                    channel._lifecycle.fire(ChannelSignal.CLOSED, channel._close_error(event))
                    closed[id(event)] = channel
        return closed

    def _dispatch(self, events: list[Any], closed: Optional[dict[int, Any]] = None,
                  read_channels: Optional[dict[int, Any]] = None) -> Optional[BaseException]:
        """Hand the core's events to channels, consumers, waiters and listeners, without
        calling the core: what they owe the broker is queued after (_pay_owed), and a
        close by the broker is returned, the loss to handle once the dispatch is over."""
        if one_run(events):  # the hot path of consuming: the whole read to one consumer
            channel = self._channels.get(events[0].channel_id)
            if channel is not None:
                channel._on_messages(events)
            return None
        channels = self._channels
        # Consecutive deliveries to one consumer go to it as one run: one lookup and one
        # call per run, not per message.
        run: list[Message] = []
        run_channel = run_tag = None
        for event in events:
            kind = type(event)
            if kind is Message:
                if run and event.channel_id == run_channel and event.consumer_tag == run_tag:
                    run.append(event)
                    continue
                if run:
                    self._deliver_run(run_channel, run)
                run = [event]
                run_channel = event.channel_id
                run_tag = event.consumer_tag
                continue
            if run:
                self._deliver_run(run_channel, run)
                run = []
            if kind is proto.Confirmed:
                channel = channels.get(event.channel_id)
                if channel is None and read_channels is not None:
                    # Given up by another thread since the read: the broker's verdict still
                    # settles the futures (they left the confirm tracker with this read).
                    channel = read_channels.get(event.channel_id)
                if channel is not None:
                    channel._on_confirmed(event)
            elif kind is proto.ChannelClosedEvent:
                channel = closed.get(id(event)) if closed is not None else channels.pop(event.channel_id, None)
                if channel is not None:
                    channel._on_closed(event)
            elif kind is proto.ConnectionClosedEvent:
                return self._on_connection_closed(event)  # nothing comes after it
            else:
                on_channel = _CHANNEL_EVENTS.get(kind)
                if on_channel is None:
                    _CONNECTION_EVENTS[kind](self, event)
                else:
                    channel = channels.get(event.channel_id)
                    if channel is not None:
                        on_channel(channel, event)
        if run:
            self._deliver_run(run_channel, run)
        return None

    def _on_blocked(self, event: proto.ConnectionBlocked) -> None:
        log.warning("the broker blocked the connection: %s", event.reason)
        self._set_blocked(True)
        listeners = self._listeners_of("blocked")
        if listeners:
            self._emit(listeners, BlockedEvent(event.reason))

    def _on_unblocked(self, event: proto.ConnectionUnblocked) -> None:
        log.info("the broker unblocked the connection")
        self._set_blocked(False)
        listeners = self._listeners_of("unblocked")
        if listeners:
            self._emit(listeners, UnblockedEvent())

    def _on_secret_updated(self, event: proto.SecretUpdated) -> None:
        _settle(self._secret_waiter, None)

    def _on_opened(self, event: proto.ConnectionOpened) -> None:
        with self._lock:
            self._fire(ConnectionSignal.HANDSHAKE_DONE)
        _settle(self._handshake_waiter, event)

    def _on_connection_closed(self, event: proto.ConnectionClosedEvent) -> Optional[BaseException]:
        """Our close answered (close() takes it from here), or the broker's close: the
        error its loss is handled with, once the dispatch is over."""
        if not event.by_broker:
            _settle(self._close_waiter, None)
            return None
        lifecycle = self._lifecycle
        if lifecycle.state is ConnectionStatus.CLOSED_BY_BROKER and lifecycle.error is not None:
            return lifecycle.error  # made when it was read
        return self._broker_close_error(event)

    def _deliver_run(self, channel_id: Any, messages: list[Message]) -> None:
        """Deliveries of one read, in order, to one consumer tag of one channel."""
        channel = self._channels.get(channel_id)
        if channel is not None:
            channel._on_messages(messages)

    def _set_blocked(self, blocked: bool) -> None:
        with self._lock:
            self._fire(ConnectionSignal.BLOCK if blocked else ConnectionSignal.UNBLOCK)
        self._wake_blocked()

    def _wake_blocked(self) -> None:
        """Publishes waiting for window room raise once the connection is blocked, with
        blocked_action 'raise' (those waiting for it to be unblocked wake by _unblocked)."""
        if self._lifecycle.state is ConnectionStatus.BLOCKED and self.blocked_action == "raise":
            for channel in list(self._channels.values()):
                channel._waits.notify_progress()

    def _set_write_paused(self, paused: bool) -> None:
        """The socket's write buffer is full (asyncio's pause_writing), or has room again."""
        if paused:
            self._writable.clear()
        else:
            self._writable.set()
        self._update_held()

    def _update_held(self) -> None:
        self._held = self._lifecycle.state is ConnectionStatus.BLOCKED or not self._writable.is_set()

    # losing the connection ----------------------------------------------------------

    def _on_lost(self, error: BaseException) -> None:
        """The socket is gone: fail every waiter and every unconfirmed publish; recover
        if asked to and the fault allows it.  Safe to call more than once."""
        with self._lock:
            lifecycle = self._lifecycle
            if not lifecycle.has_socket:
                return
            wanted = self.recovery is not None and recoverable(error)
            old = self._fire(ConnectionSignal.LOST_RECOVERABLE if wanted else ConnectionSignal.LOST, error)
            opened = old in OPENED_STATES
            # A loss during a recovery fails that attempt only: the recovery loop decides.
            recovering = lifecycle.recovering
            starts_recovery = opened and recovering and old not in RECOVERING_STATES
            unconfirmed = self._core.drain_unconfirmed() if opened else {}
            # The channels whose futures were just drained, taken with them: a close() on
            # another thread may replace _channels (_give_up) before they are failed below,
            # and a future drained here and failed nowhere would wait forever.
            channels = list(self._channels.items())
            for channel_id, channel in channels:
                state = self._core.channel_state(channel_id)
                if state is not None:  # a reopened channel's tags go on after this connection's
                    channel._tag_base = max(channel._tag_base, state.tag_base + state.last_delivery_tag)
            self._core.connection_lost()  # what is read of this socket from now on is dropped
        self._io.stop_io()
        _fail(self._handshake_waiter, error)
        _settle(self._close_waiter, None)
        _fail(self._secret_waiter, error)
        if not opened:
            return  # a handshake that failed: whoever connects raises it
        if old is not ConnectionStatus.CLOSING:
            log.error("connection to %s lost: %s", self.params, error)
        recovering = recovering and old is not ConnectionStatus.CLOSING
        for channel_id, channel in channels:
            channel._on_connection_lost(error, unconfirmed.get(channel_id, ()), recovering)
        listeners = self._listeners_of("close")
        if listeners:
            self._emit(listeners, self._shutdown_event(error, recovering))
        if recovering:
            if starts_recovery:
                listeners = self._listeners_of("recovery_started")
                if listeners:
                    self._emit(listeners, RecoveryEvent(0, error))
                self._io.begin_recovery(self._recover)
            return
        self._give_up()

    def _shutdown_event(self, error: BaseException, recovering: bool) -> ShutdownEvent:
        if self._lifecycle.closed_by_user:
            code, text = self._core.close_reason_sent()
            return ShutdownEvent(0, True, False, code, text, None, False)
        if isinstance(error, ConnectionClosed):
            return ShutdownEvent(0, False, True, error.reply_code, error.reply_text, error, recovering)
        code = getattr(error.__cause__, "reply_code", 0) or 0  # a protocol error we closed with
        return ShutdownEvent(0, False, False, code, str(error), error, recovering)

    def _give_up(self, announced_recovering: bool = False) -> None:
        """No recovery: the channels are closed for good.  ``announced_recovering``: the
        close listeners last heard that a recovery follows, and must hear it does not."""
        with self._lock:
            if self._lifecycle.recovering:
                self._fire(ConnectionSignal.GIVE_UP)
        error = self._lifecycle.error or InvalidStateError("the connection is closed")
        for channel in list(self._channels.values()):
            channel._on_connection_lost(error, (), False)
        self._channels = {}  # a new dict, not cleared: see _data_received
        listeners = self._listeners_of("close") if announced_recovering else ()
        if listeners:
            self._emit(listeners, self._shutdown_event(error, False))
        self._io.closed_for_good()

    def _recovery_done(self, attempt: int) -> None:
        with self._lock:
            self._fire(ConnectionSignal.RESTORED)
            if self._core.blocked is not None:  # blocked while restoring: the core kept it
                self._fire(ConnectionSignal.BLOCK)
        self._wake_blocked()
        log.info("recovery: connection to %s restored", self.params)
        if self._metrics is not None:
            self._metrics.connection_recovered()
        listeners = self._listeners_of("recovery_succeeded")
        if listeners:
            self._emit(listeners, RecoveryEvent(attempt))


class ChannelBase(Generic[_M]):
    """What a channel knows and does on events, on both transports (``_M``: the
    transport's message, for the types of callbacks that receive one)."""

    # Slots, on every class of the chain: CPython 3.11 keeps at most 30 attributes of an instance
    # inline; past that the instance gets a dict and calls of its methods are no longer specialized
    # (on a publish that cost ~700 more instructions).
    __slots__ = (
        "_connection", "channel_id", "_waiter", "_request", "_lifecycle", "_consumers",
        "_pending_consumer", "_return_callbacks",
        "_failures", "_flow_paused", "_flow", "_tag_base", "_qos",
        "_default_consumer", "_default_cancel", "_unknown_deliveries", "_no_ack_orphans", "_request_method",
        "_listeners",
        "_progress_belows", "_stamp_ends", "_stamp_times", "_stamp_head",
        "_stamp_low", "_settled_upto", "_settled", "_no_ack_tags",
        "_no_ack_consumers", "_waits", "_publisher", "_nack_watch", "__weakref__"
    )

    _connection: Any

    # The confirm window's counts: C fields of the channel's ChannelPublisher (see there)
    _confirm_window = WindowCount("confirm_window")  # confirm_select's max_in_flight; 0: not in confirm mode
    _max_in_flight = WindowCount("max_in_flight")  # unconfirmed publishes allowed now: the window, or less while watched
    _unsettled = WindowCount("unsettled")  # confirm-mode publishes whose futures are not settled yet
    _progress_below = WindowCount("progress_below")  # see _progress_belows

    def __init__(self, connection: Any, channel_id: int) -> None:
        self._connection = connection
        self.channel_id = channel_id
        # Its synchronous request (lifecycle.py): the method out, and the waiter its reply
        # settles (once abandoned, a fresh one, which the next request waits for).  Changed
        # by _request_sent, _request_ended, _reply and _abandon only.
        self._request = Machine(REQUEST_PHASES, RequestPhase.IDLE, None, f"channel {channel_id}'s request")
        self._waiter: Any = None
        self._request_method: Any = None
        # Its one state (opening, open, down, closed) and, once closed, why.
        self._lifecycle = Machine(CHANNEL_PHASES, ChannelPhase.OPENING, ChannelPhase.CLOSED, f"channel {channel_id}")
        metrics = connection._metrics
        if metrics is not None:
            self._lifecycle.watch = _ChannelGauge(metrics)
        self._consumers: dict[str, Any] = {}
        self._pending_consumer: Any = None
        self._return_callbacks: list[Any] = []
        self._failures: list[Any] = []  # failed confirm tokens not reported by wait_for_confirms yet
        # Publishes wait while it is clear: the broker's channel.flow(active=False), or a
        # renewal; _flow_paused is its view for the hot path (written by _set_flow only).
        self._flow = connection._io.new_flag()
        self._set_flow(True)
        self._tag_base = 0  # the delivery tags of a reopened channel go on after this one
        self._qos: Optional[tuple[Any, ...]] = None
        self._default_consumer: Optional[Callable[[_M], Any]] = None
        self._default_cancel: Optional[Callable[[str], Any]] = None
        self._unknown_deliveries = 0  # for consumer tags it does not know: logged once
        # consumer tags whose deliveries must not be nacked: no_ack consumers abandoned
        # before their consume-ok (a nack of an unacked-mode tag would close the channel)
        self._no_ack_orphans: set[str] = set()
        self._listeners: Optional[Listeners] = None  # None while no listener is registered
        # metrics (only with a collector): when confirm-mode publishes were written, one
        # entry per socket write (reset when seqnos restart: confirm_select, a reopen).
        # Delivery tags (the core's) are consecutive per channel, so counting what an ack
        # settles needs no record per delivery: every tag up to _settled_upto is settled,
        # _settled holds those settled singly above it, _no_ack_tags those delivered
        # settled (tracked only on channels that had no_ack consumers).
        # Waiters for confirms (room in the window, wait_for_confirms) say how low _unsettled
        # must be for them to go on (_progress_below, the highest): an ack frame that leaves
        # it higher wakes nobody (a thread's wake-up costs more than the frame).  No waiter:
        # _ANY (notify, cheaply).
        self._progress_belows: list[int] = []
        self._stamp_ends: list[int] = []  # from index _stamp_head on: the last seqno of a write
        self._stamp_times: list[float] = []  # ... and when that write happened
        self._stamp_head = 0
        self._stamp_low = 1  # the lowest seqno whose latency is not counted yet
        self._settled_upto = 0
        self._settled: set[int] = set()
        self._no_ack_tags: set[int] = set()
        self._no_ack_consumers = 0
        self._waits = connection._io.channel_waits(self)  # confirm futures, waits for confirms
        # publish_async's compiled end, and the confirm window's counts (WindowCount)
        self._publisher = ChannelPublisher(self, connection, self._waits, _ANY)
        # after a recovery: when a channel whose publishes are only nacked is renewed
        self._nack_watch = NackWatch(connection.recovery)

    # listeners (see listeners.py) ------------------------------------------------------

    def add_close_listener(self, fn: Callable[[ShutdownEvent], Any]) -> None:
        """``fn(ShutdownEvent)`` when the channel closes (by ``close()``, by the broker, or
        with its connection: ``event.recovering`` when it comes back)."""
        self._add_listener("close", fn)

    def remove_close_listener(self, fn: Callable[[ShutdownEvent], Any]) -> None:
        self._remove_listener("close", fn)

    def add_flow_listener(self, fn: Callable[[FlowEvent], Any]) -> None:
        """``fn(FlowEvent)`` when the broker pauses (``active`` False) or resumes the channel."""
        self._add_listener("flow", fn)

    def remove_flow_listener(self, fn: Callable[[FlowEvent], Any]) -> None:
        self._remove_listener("flow", fn)

    def add_confirm_listener(self, fn: Callable[[ConfirmEvent], Any]) -> None:
        """``fn(ConfirmEvent)`` for every basic.ack and basic.nack of publisher confirms,
        beside the per-publish futures."""
        self._add_listener("confirm", fn)

    def remove_confirm_listener(self, fn: Callable[[ConfirmEvent], Any]) -> None:
        self._remove_listener("confirm", fn)

    def add_consumer_listener(self, fn: Callable[[ConsumerEvent], Any]) -> None:
        """``fn(ConsumerEvent)`` for the lifecycle of this channel's consumers: consume-ok,
        cancel-ok, cancelled by the broker, channel closed, connection lost, recover-ok."""
        self._add_listener("consumer", fn)

    def remove_consumer_listener(self, fn: Callable[[ConsumerEvent], Any]) -> None:
        self._remove_listener("consumer", fn)

    def _add_listener(self, kind: str, fn: Callable[[Any], Any]) -> None:
        with self._connection._lock:
            if self._listeners is None:
                self._listeners = Listeners()
            self._listeners.add(kind, fn)

    def _remove_listener(self, kind: str, fn: Callable[[Any], Any]) -> None:
        with self._connection._lock:
            listeners = self._listeners
            if listeners is None:
                raise ValueError(f"{fn!r} is not a registered listener (of {kind} events)")
            listeners.remove(kind, fn)
            if listeners.empty:
                self._listeners = None

    def _listeners_of(self, kind: str) -> tuple[Callable[[Any], Any], ...]:
        listeners = self._listeners
        return () if listeners is None else listeners.of(kind)

    def remove_on_return_callback(self, fn: Callable[[ReturnedMessage], Any]) -> None:
        _remove(self._return_callbacks, fn)

    def _consumer_event(self, kind: ConsumerEventKind, consumer: Any, error: Optional[BaseException] = None,
                        recovering: bool = False) -> None:
        listeners = self._listeners_of("consumer")
        if listeners:
            event = ConsumerEvent(kind, self.channel_id, consumer.consumer_tag, consumer.queue, error, recovering)
            self._connection._emit(listeners, event, self)

    def _emit_close(self, error: BaseException, by_broker: bool, code: int, text: str, recovering: bool) -> None:
        listeners = self._listeners_of("close")
        if listeners:
            by_application = not by_broker and not isinstance(error, AMQPConnectionError)
            cause = None if by_application else error
            event = ShutdownEvent(self.channel_id, by_application, by_broker, code, text, cause, recovering)
            self._connection._emit(listeners, event, self)

    # the default consumer --------------------------------------------------------------

    @property
    def default_consumer(self) -> Optional[Callable[[_M], Any]]:
        """Called with deliveries for consumer tags this channel does not know (None: they
        are nacked back to their queue, and logged once)."""
        return self._default_consumer

    def set_default_consumer(self, callback: Optional[Callable[[_M], Any]], *,
                             on_cancel: Optional[Callable[[str], Any]] = None) -> None:
        """``callback(message)`` for deliveries to consumer tags this channel does not know;
        ``on_cancel(consumer_tag)`` for the broker's basic.cancel of such a tag (the Java
        client's DefaultConsumer.handleDelivery / handleCancel).  Both run like consumer
        callbacks; either may be None (deliveries are then nacked back to their queue, and
        such cancels only logged)."""
        self._default_consumer = callback
        self._default_cancel = on_cancel

    def _close_soon(self, reply_code: int, reply_text: str) -> None:
        """Queue channel.close without waiting for close-ok (from the connection's threads)."""
        connection = self._connection
        with connection._lock:
            try:
                connection._core.close_channel(self.channel_id, reply_code, reply_text)
            except InvalidStateError:
                return
            waiter = self._request_ended()
        _fail(waiter, InvalidStateError(f"channel {self.channel_id} was closed"))
        connection._flush_quietly()

    def _cancel_while_down(self, consumer: Any) -> None:
        """A consumer cancelled while the connection is down or being restored: a recovery
        must not subscribe it again, and if this channel is back on the new socket already
        (its basic.consume may have gone out), the broker is told (basic.cancel, nowait)."""
        connection = self._connection
        tag = consumer.consumer_tag
        with connection._lock:
            if self._consumers.get(tag) is consumer:
                del self._consumers[tag]
            if connection._channels.get(self.channel_id) is not self:
                return  # closed for good: its number may be another channel's now
            state = connection._core.channel_state(self.channel_id)
            if not (tag and connection._lifecycle.has_socket and state is not None and state.is_open):
                return
            try:
                connection._core.send_method(self.channel_id, BasicCancel(tag, True))
            except InvalidStateError:
                return  # the socket is going: its consumers go with it
        connection._flush_quietly()

    def _forget_while_down(self) -> None:
        """Closed while the connection is down or being restored: not reopened, and its
        consumers end (a recovery must not bring back what the user closed)."""
        connection = self._connection
        with connection._lock:
            # Its number may be another channel's already (this one was closed by the broker
            # and the number reused): only a channel still registered is this one.
            registered = connection._channels.get(self.channel_id) is self
            state = connection._core.channel_state(self.channel_id)
            reopened = registered and connection._lifecycle.has_socket and state is not None and state.is_open
            if registered and not reopened:
                del connection._channels[self.channel_id]
        for consumer in list(self._consumers.values()):
            consumer._finish(END)
        self._consumers.clear()
        if reopened:  # restored on the new socket already: close it there (its close-ok forgets it)
            self._close_soon(200, "Normal shutdown")

    def __repr__(self) -> str:
        module = type(self).__module__.replace("amqwire.client.blocking", "amqwire.client")
        return f"<{module}.Channel {self.channel_id} {'open' if self.is_open else 'closed'}>"

    @property
    def is_open(self) -> bool:
        connection = self._connection
        if self._lifecycle.state not in CHANNEL_OPEN_PHASES or not connection._lifecycle.usable:
            return False
        state = connection._core.channel_state(self.channel_id)  # may know of a close first
        return state is not None and state.is_open

    @property
    def connection(self) -> Any:
        return self._connection

    def _check(self) -> None:
        """Raise why this channel cannot take calls now, if it cannot: the broker's close,
        the connection's loss (an AMQPConnectionError), or InvalidStateError for misuse."""
        error = self._lifecycle.reason
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

    def _request_sent(self, waiter: Any, method: Any = None) -> None:
        """A synchronous request went out (under ``_lock``): ``waiter`` gets its reply."""
        self._request.fire(RequestSignal.SEND)
        self._waiter = waiter
        self._request_method = method

    def _request_ended(self) -> Any:
        """The channel closed or was lost (under ``_lock``): the request's waiter, for the
        caller to fail (or to answer the close)."""
        self._request.fire(RequestSignal.END)
        waiter = self._waiter
        self._waiter = self._request_method = None
        return waiter

    def _stale_reply(self) -> Any:
        """The waiter a request must wait on first: the abandoned request's, settled by its
        reply; None when no request was abandoned."""
        return self._waiter if self._request.state is RequestPhase.ABANDONED else None

    def _reply(self, value: Any) -> None:
        """The reply to the channel's request (from the dispatch).  The reply to a request
        given up on is undone, by answers the connection owes once the dispatch is over."""
        connection = self._connection
        with connection._lock:
            waiter = self._waiter
            method = self._request_method
            abandoned = self._request.fire(RequestSignal.REPLY) is RequestPhase.ABANDONED
            self._waiter = self._request_method = None
        _settle(waiter, value)
        if not abandoned:
            return
        if type(value) is Message:  # a basic.get nobody takes: back to the queue
            connection._owe(_REJECT, self.channel_id, value.delivery_tag)
        elif type(value) is BasicConsumeOk:  # a consumer nobody reads
            if getattr(method, "no_ack", False):
                self._no_ack_orphans.add(value.consumer_tag)
            connection._owe(_CANCEL, self.channel_id, value.consumer_tag)

    def _abandon(self, waiter: Any, method: Any = None) -> None:
        """An RPC stopped waiting (timeout, cancellation): its reply may still come, and the
        next request must not mistake it for its own."""
        with self._connection._lock:
            if waiter.done() or self._waiter is not waiter:
                return
            self._request.fire(RequestSignal.ABANDON)
            self._waiter = self._connection._io.new_waiter()
            self._request_method = method

    # confirms --------------------------------------------------------------------------

    # The broker's verdict on publishes (once per Confirmed event): settle their futures,
    # count them settled, watch a restored channel, wake waiters.  Compiled (publish_path.pyx).
    _on_confirmed = channel_on_confirmed

    def _tell_and_settle(self, event: proto.Confirmed, listeners: tuple[Callable[[Any], Any], ...]) -> None:
        """Confirm listeners are told of each ack or nack frame before its futures settle."""
        acks = event.acks
        if acks is None:
            acks = [(event.delivery_tag, event.multiple, len(event.tokens))]
        start = 0
        for tag, multiple, end in acks:  # several: acks folded into one event, each as if it came alone
            self._connection._emit(listeners, ConfirmEvent(self.channel_id, event.ack, tag, multiple), self)
            self._settle_tokens(event, start, end)
            start = end

    def _settle_tokens(self, event: proto.Confirmed, start: int, end: int) -> None:
        """Settle the futures ``event.tokens[start:end]`` by the broker's verdict."""
        tokens = event.tokens[start:end]
        if event.ack and event.returned is None:
            self._waits.acked(tokens)
            return
        returned = event.returned or {}
        for seqno, token in zip(event.seqnos[start:end], tokens):
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

    def _phase(self) -> ChannelPhase:
        """The channel's phase now (read afresh: another thread, or an await, may have changed it)."""
        phase: ChannelPhase = self._lifecycle.state
        return phase

    def _set_watched(self, watched: bool) -> None:
        """While a restored channel is watched (no ack yet), at most ``renew_after_nacks``
        publishes are in flight: a stale channel wastes that many, not a whole window."""
        window = self._confirm_window
        probe = self._nack_watch.policy.renew_after_nacks if watched and self._nack_watch.policy else 0
        self._max_in_flight = min(window, probe) if probe else window

    def _watch_verdict(self, ack: bool, count: int) -> None:
        """A channel restored by a recovery: an ack ends the watch; a run of nacks with no
        ack stalls it, and its next publish renews it first (RecoveryPolicy.renew_after_nacks)."""
        lifecycle = self._lifecycle
        with self._connection._lock:
            state = lifecycle.state
            if ack:
                if state is ChannelPhase.RESTORED or state is ChannelPhase.STALLED:
                    lifecycle.fire(ChannelSignal.ACKED)
                    self._set_watched(False)
                    if state is ChannelPhase.STALLED:
                        self._set_flow(True)
                return
            if state is not ChannelPhase.RESTORED or not self._nack_watch.nacked(count):
                return
            lifecycle.fire(ChannelSignal.NACKED_RUN)
            self._set_flow(False)  # publishes take the slow path, which renews the channel
        log.info("channel %d: its last %d publishes since the recovery were all nacked: renewing it before "
                 "the next publish", self.channel_id, self._nack_watch.run)

    def _progress_wanted(self, below: Optional[int]) -> None:
        """A waiter wants waking once ``_unsettled <= below`` (None: at every change)."""
        self._progress_belows.append(_ANY if below is None else below)
        self._progress_below = max(self._progress_belows)

    def _progress_done(self, below: Optional[int]) -> None:
        self._progress_belows.remove(_ANY if below is None else below)
        self._progress_below = max(self._progress_belows, default=_ANY)

    def _stamp(self, now: float) -> None:
        """The connection wrote this channel's confirm-mode publishes up to now (under
        ``_lock``): one entry for all of them."""
        state = self._connection._core.channel_state(self.channel_id)
        if state is None or state.confirms is None:
            return
        last = state.confirms.next_seqno - 1
        ends = self._stamp_ends
        if len(ends) > self._stamp_head:
            if ends[-1] >= last:
                return
        else:
            self._connection._stamped.append(self)
        ends.append(last)
        self._stamp_times.append(now)

    def _confirm_runs(self, runs: list[tuple[float, int]]) -> None:
        """Add (written at, count) for the publishes settled since the last call: those the
        lowest unsettled seqno moved past (one settled out of order counts once everything
        before it is settled too).  Under ``_lock``."""
        state = self._connection._core.channel_state(self.channel_id)
        if state is None or state.confirms is None:  # closed: its unsettled publishes failed
            self._restart_seqnos()
            return
        base = state.confirms.base
        ends = self._stamp_ends
        times = self._stamp_times
        head = self._stamp_head
        size = len(ends)
        lowest = self._stamp_low  # the lowest seqno not counted yet
        while head < size and lowest < base:
            upto = min(ends[head], base - 1)
            runs.append((times[head], upto - lowest + 1))
            lowest = upto + 1
            if upto == ends[head]:
                head += 1
        self._stamp_low = lowest
        if head == size:
            del ends[:], times[:]
            head = 0
            self._connection._stamped.remove(self)
        elif head > 1024 and 2 * head > size:
            del ends[:head], times[:head]
            head = 0
        self._stamp_head = head

    def _restart_seqnos(self) -> None:
        """Confirm seqnos start again at 1 (confirm_select, a reopened channel)."""
        self._stamp_ends.clear()
        self._stamp_times.clear()
        self._stamp_head = 0
        self._stamp_low = 1
        if self in self._connection._stamped:
            self._connection._stamped.remove(self)

    def _restart_delivery_tags(self) -> None:
        self._settled_upto = self._tag_base
        self._settled.clear()
        self._no_ack_tags.clear()

    def _count_settled(self, metrics: MetricsCollector, core_method: str, delivery_tag: int, multiple: bool) -> None:
        """Metrics on: how many deliveries an ack, nack or reject settles (``multiple``: every
        one up to its tag not settled yet)."""
        upto = self._settled_upto
        settled = self._settled
        no_ack = self._no_ack_tags
        if multiple:
            if delivery_tag <= upto:
                return
            count = delivery_tag - upto
            for known in (settled, no_ack):
                if known:
                    covered = [tag for tag in known if tag <= delivery_tag]
                    count -= len(covered)
                    known.difference_update(covered)
            self._settled_upto = delivery_tag
        else:
            count = 1
            if delivery_tag == upto + 1:
                upto = delivery_tag
                while upto + 1 in settled or upto + 1 in no_ack:
                    upto += 1
                    settled.discard(upto)
                    no_ack.discard(upto)
                self._settled_upto = upto
            elif delivery_tag > upto:
                settled.add(delivery_tag)
        if count:
            if core_method == "basic_ack":
                metrics.acked(count)
            else:
                metrics.rejected(count)

    def _set_flow(self, active: bool) -> None:
        """The one way the channel's flow changes: its flag, and the view of it."""
        self._flow_paused = not active
        if active:
            self._flow.set()
        else:
            self._flow.clear()

    def _on_method_reply(self, event: proto.MethodReply) -> None:
        self._reply(event.method)

    def _on_get_result(self, event: proto.GetResult) -> None:
        message = event.message
        if message is not None:
            message.channel = self
        self._reply(message)

    def _on_opened(self, event: proto.ChannelOpened) -> None:
        self._reply(None)

    def _on_cancel_event(self, event: proto.ConsumerCancelled) -> None:
        self._on_consumer_cancelled(event.consumer_tag)

    def _on_flow_changed(self, event: proto.ChannelFlowChanged) -> None:
        self._set_flow(event.active)
        listeners = self._listeners_of("flow")
        if listeners:
            self._connection._emit(listeners, FlowEvent(event.channel_id, event.active), self)

    def _on_return(self, message: ReturnedMessage) -> None:
        for fn in self._return_callbacks:
            self._connection._io.run_callback(fn, message, "return", self)

    def add_on_return_callback(self, fn: Callable[[ReturnedMessage], Any]) -> None:
        """``fn(returned)`` for every message the broker returns (blocking: run by
        ``process_events``; asyncio: called in the loop, coroutines become tasks)."""
        self._return_callbacks.append(fn)

    # consumers -------------------------------------------------------------------------

    def _on_messages(self, messages: list[Message]) -> None:
        """Deliveries to one consumer tag, in order."""
        set_channel(messages, self)
        tag = messages[0].consumer_tag
        consumer = self._consumers.get(tag)  # type: ignore[arg-type]
        if consumer is None:
            consumer = self._pending_consumer
            if consumer is None:
                for message in messages:
                    self._on_unknown_delivery(message)
                return
            self._consumers[tag] = consumer  # type: ignore[index]
        consumer._inbox.deliver_run(messages)

    def _on_unknown_delivery(self, message: Message) -> None:
        """A delivery for a consumer tag this channel does not know: to the default consumer,
        or back to its queue (nack, requeue), logged once per channel."""
        if self._default_consumer is not None:
            self._connection._io.run_callback(self._default_consumer, message, "default_consumer", self)
            return
        self._unknown_deliveries += 1
        if self._unknown_deliveries == 1:
            log.warning(
                "channel %d: delivery for unknown consumer %r nacked back to its queue (no default consumer set; "
                "not logged again for this channel)", self.channel_id, message.consumer_tag,
            )
        if message.consumer_tag in self._no_ack_orphans:
            return  # delivered settled already: nothing to give back
        self._connection._owe(_NACK, self.channel_id, message.delivery_tag)

    def _on_consumer_cancelled(self, consumer_tag: str) -> None:
        consumer = self._consumers.pop(consumer_tag, None)
        log.warning("channel %d: the broker cancelled consumer %r", self.channel_id, consumer_tag)
        if consumer is not None:
            error = ConsumerCancelled(consumer_tag)
            consumer._finish(error)
            self._consumer_event(ConsumerEventKind.CANCELLED, consumer, error)
        elif self._default_cancel is not None:
            self._connection._io.run_callback(self._default_cancel, consumer_tag, "default_consumer", self)

    # the end ---------------------------------------------------------------------------

    def _on_closed(self, event: proto.ChannelClosedEvent) -> None:
        error = self._lifecycle.reason if self._lifecycle.reason is not None else self._close_error(event)
        if event.by_broker:
            log.info("%s", error)  # also raised to the caller: not a warning by itself
        self._lifecycle.fire(ChannelSignal.CLOSED, error)
        # listeners first: whoever waits on the channel wakes up with them done
        self._emit_close(error, event.by_broker, event.reply_code, event.reply_text, False)
        self._consumer_events(ConsumerEventKind.CHANNEL_CLOSED, error, False)
        if not event.by_broker:  # our close() is waiting for this
            with self._connection._lock:
                waiter = self._request_ended()
            _settle(waiter, None)
        self._fail_everything(error, event.unconfirmed, False)

    def _on_connection_lost(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        was_closed = self._lifecycle.state is ChannelPhase.CLOSED
        if recovering:
            self._lifecycle.fire(ChannelSignal.CONNECTION_DOWN, error)  # a reason if it was opening
        else:
            self._lifecycle.fire(ChannelSignal.CONNECTION_GONE, error)
        if not was_closed:
            code = getattr(error, "reply_code", 0) or 0
            self._emit_close(error, isinstance(error, ConnectionClosed), code, str(error), recovering)
        self._consumer_events(ConsumerEventKind.CONNECTION_LOST, error, recovering)
        self._fail_everything(error, unconfirmed, recovering)

    def _consumer_events(self, kind: ConsumerEventKind, error: BaseException, recovering: bool) -> None:
        if self._listeners is not None:
            for consumer in list(self._consumers.values()):
                if consumer.active:
                    self._consumer_event(kind, consumer, error, recovering)

    def _fail_everything(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        with self._connection._lock:
            waiter = self._request_ended()
        _fail(waiter, error)
        failed = 0
        for seqno, token in unconfirmed:
            if not token.done():
                token.set_exception(PublishUnconfirmed(seqno, error))
                self._failures.append(token)
                failed += 1
        if failed:
            metrics = self._connection._metrics
            if metrics is not None:
                metrics.publish_unconfirmed(failed)
        with self._connection._lock:
            self._unsettled -= len(unconfirmed)
            if not recovering:
                self._unsettled = 0
        if not recovering:
            reason = END if isinstance(error, InvalidStateError) else error
            for consumer in list(self._consumers.values()):
                consumer._finish(reason)
            self._consumers.clear()
        else:  # the ones a recovery would not restore end now, with the loss
            for tag, consumer in list(self._consumers.items()):
                if not consumer._recoverable:
                    del self._consumers[tag]
                    consumer._finish(error)
        self._set_flow(True)
        self._waits.notify_progress()


class _ConnectionGauge:
    """Tells a collector when a connection's socket finished its handshake (also a
    recovery's) and when that socket closes or is lost: the open-connections gauge.  A
    close() during a recovery's handshake passes through CLOSING without the socket ever
    having opened: hence the flag, not the states alone."""

    __slots__ = ("metrics", "open")

    def __init__(self, metrics: MetricsCollector) -> None:
        self.metrics = metrics
        self.open = False

    def __call__(self, old: Any, new: Any) -> None:
        if new is ConnectionStatus.OPEN or new is ConnectionStatus.RESTORING:
            if not self.open:
                self.open = True
                self.metrics.connection_opened()
        elif self.open and new not in OPENED_STATES:
            self.open = False
            self.metrics.connection_closed()


class _ChannelGauge:
    """Tells a collector when a channel opens (also reopened by a recovery) and when it
    closes or goes down with its connection: the open-channels gauge."""

    __slots__ = ("metrics",)

    def __init__(self, metrics: MetricsCollector) -> None:
        self.metrics = metrics

    def __call__(self, old: Any, new: Any) -> None:
        opened = new in CHANNEL_OPEN_PHASES
        if opened and old not in CHANNEL_OPEN_PHASES:
            self.metrics.channel_opened()
        elif not opened and old in CHANNEL_OPEN_PHASES:
            self.metrics.channel_closed()


class ConsumerBase:
    """A subscription's state, on both transports."""

    #: whether connection recovery subscribes it again (a stream consumer would restart
    #: at its first offset: it ends with the connection instead)
    _recoverable = True

    # callback: given the transport's message (consume() types it: Message or AsyncMessage)
    def __init__(self, channel: Any, queue_name: str, callback: Optional[Callable[[Any], Any]], method: Any) -> None:
        self.channel = channel
        self.queue = queue_name
        # With tracing, each message reaches the callback inside a ``process`` span, and an
        # iterator keeps the span of the message it handed out last in _traced.
        self._tracing = tracing = channel._connection._tracing
        self._traced: Any = None
        if tracing is not None and callback is not None:
            callback = tracing.traced_callback(callback, self)
        self.callback = callback
        self.consumer_tag = ""
        self._method = method
        # active or ended; once ended, why (END, or an exception), which the reader gets
        self._lifecycle = Machine(CONSUMER_PHASES, ConsumerPhase.ACTIVE, ConsumerPhase.ENDED,
                                  f"consumer on {queue_name!r}")
        self._inbox = channel._connection._io.inbox(self)  # its deliveries, or its callback's calls
        # The collector told of this consumer (from its consume-ok to its end), to be told
        # of its end; None: not counted (no metrics, or never subscribed).
        self._gauged: Optional[MetricsCollector] = None

    def _count_subscribed(self) -> None:
        """consume-ok: one more open consumer (once: a recovery's re-subscription is the same one)."""
        if self._gauged is None:
            metrics = self.channel._connection._metrics
            if metrics is not None:
                self._gauged = metrics
                metrics.consumer_opened()

    @property
    def active(self) -> bool:
        return self._lifecycle.state is ConsumerPhase.ACTIVE

    @property
    def _finished(self) -> Any:
        """Why no more messages come (END or an exception); None while active."""
        return self._lifecycle.reason

    def _finish(self, reason: Any) -> None:
        if self._lifecycle.fire(ConsumerSignal.END, reason) is ConsumerPhase.ACTIVE:
            self._inbox.wake()
            metrics, self._gauged = self._gauged, None
            if metrics is not None:
                metrics.consumer_closed()

    def __repr__(self) -> str:
        return f"<Consumer {self.consumer_tag!r} on {self.queue!r}{'' if self.active else ' (ended)'}>"


# What the dispatch does with each event of the core, by its class (a delivery, a confirm and
# a close are handled in the loop itself): events of a channel go to its object, if it has one.
_CHANNEL_EVENTS: dict[type, Callable[[Any, Any], None]] = {
    proto.MethodReply: ChannelBase._on_method_reply,
    proto.GetResult: ChannelBase._on_get_result,
    proto.ChannelOpened: ChannelBase._on_opened,
    ReturnedMessage: ChannelBase._on_return,
    proto.ConsumerCancelled: ChannelBase._on_cancel_event,
    proto.ChannelFlowChanged: ChannelBase._on_flow_changed,
}
_CONNECTION_EVENTS: dict[type, Callable[[Any, Any], None]] = {
    proto.ConnectionBlocked: ConnectionBase._on_blocked,
    proto.ConnectionUnblocked: ConnectionBase._on_unblocked,
    proto.SecretUpdated: ConnectionBase._on_secret_updated,
    proto.ConnectionOpened: ConnectionBase._on_opened,
}


def _remove(listeners: list[Any], fn: Any) -> None:
    """Remove a listener; ValueError naming it when it was never added."""
    try:
        listeners.remove(fn)
    except ValueError:
        raise ValueError(f"{fn!r} is not a registered listener") from None


def _settle(waiter: Any, value: Any) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(value)


def _fail(waiter: Any, error: BaseException) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(error)
        waiter.exception()  # retrieved: whoever awaits it still gets it raised
