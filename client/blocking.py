"""The blocking transport: a socket, an I/O thread, and the sans-IO core.

One I/O thread per connection reads the socket, feeds the core and routes its events:
replies wake the caller waiting for them, deliveries go to their consumer's queue, confirms
settle publish futures.  The same thread sends heartbeats on time and notices a silent
broker, so both keep working while user code is busy.  User threads write: every call
queues its frames in the core under ``_lock`` and then flushes them under ``_write_lock``,
which keeps the byte stream in order whichever thread writes.

Callbacks: publish-future callbacks run on the I/O thread (keep them short, never wait on
the connection there); consumer and return callbacks run in the thread that calls
``Connection.process_events`` or ``Channel.start_consuming``.
"""
from __future__ import annotations

import contextlib
import logging
import queue
import select
import socket
import ssl
import threading
import time
from typing import Any, Callable, Iterator, Optional, Sequence, Union

from amqwire.codec import BasicConsume, BasicProperties, CodecError

from . import protocol as proto
from .channel_api import ChannelOperations
from .connect import make_ssl_context, open_socket
from .recovery import END, RecoveryPolicy, Topology, recoverable
from .errors import (
    AMQPConnectionError,
    AuthenticationError,
    ChannelClosed,
    ConnectionBlockedError,
    ConnectionClosed,
    ConnectionLost,
    ConsumerCancelled,
    HeartbeatTimeout,
    InvalidStateError,
    MessageReturned,
    PublishNacked,
    PublishUnconfirmed,
    channel_closed,
)
from .message import Message, ReturnedMessage
from .url import ConnectionParameters, ParametersLike, parameters_list

log = logging.getLogger("amqwire.client")

__all__ = ["connect", "Connection", "Channel", "Consumer", "PublishFuture"]

_RECV_SIZE = 256 * 1024
_CORK_LIMIT = 256 * 1024  # inside batch(): flush once this much is queued


class _Slot:
    """A one-shot result another thread fills in."""

    __slots__ = ("_lock", "_done", "value", "error")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._done = False
        self.value: Any = None
        self.error: Optional[BaseException] = None

    def set(self, value: Any) -> None:
        if not self._done:
            self._done = True
            self.value = value
            self._lock.release()

    def fail(self, error: BaseException) -> None:
        if not self._done:
            self._done = True
            self.error = error
            self._lock.release()

    def wait(self, timeout: Optional[float] = None) -> Any:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"no reply within {timeout} s")
        self._lock.release()
        if self.error is not None:
            raise self.error
        return self.value


def connect(
    url: Union[ParametersLike, Sequence[ParametersLike], None] = None,
    *,
    heartbeat: Optional[int] = None,
    frame_max: Optional[int] = None,
    channel_max: Optional[int] = None,
    connection_timeout: Optional[float] = None,
    ssl_context: Optional[ssl.SSLContext] = None,
    client_properties: Optional[dict] = None,
    blocked_action: str = "wait",
    blocked_timeout: Optional[float] = None,
    recovery: Union[bool, RecoveryPolicy] = False,
    on_secure: Optional[Callable[[bytes], bytes]] = None,
) -> "Connection":
    """Open a connection (the first URL that works, in order) and finish the handshake."""
    overrides = dict(heartbeat=heartbeat, frame_max=frame_max, channel_max=channel_max, connection_timeout=connection_timeout)
    return Connection(
        parameters_list(url, **overrides),
        ssl_context=ssl_context,
        client_properties=client_properties,
        blocked_action=blocked_action,
        blocked_timeout=blocked_timeout,
        recovery=recovery,
        on_secure=on_secure,
    )


class Connection:
    """A blocking AMQP connection.  Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        parameters: list[ConnectionParameters],
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        client_properties: Optional[dict] = None,
        blocked_action: str = "wait",
        blocked_timeout: Optional[float] = None,
        recovery: Union[bool, RecoveryPolicy] = False,
        on_secure: Optional[Callable[[bytes], bytes]] = None,
    ) -> None:
        if blocked_action not in ("wait", "raise"):
            raise ValueError(f"blocked_action must be 'wait' or 'raise', not {blocked_action!r}")
        self._parameters = parameters
        self._ssl_context = ssl_context
        self._client_properties = client_properties
        self._on_secure = on_secure
        self.blocked_action = blocked_action
        self.blocked_timeout = blocked_timeout
        self.recovery = RecoveryPolicy() if recovery is True else (recovery or None)
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._unblocked = threading.Event()
        self._unblocked.set()
        self._is_blocked = False  # mirrors _unblocked, read on every publish
        self._callbacks: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._channels: dict[int, Channel] = {}
        self._cork = 0
        self._closing = False
        self._error: Optional[BaseException] = None
        self._io_thread: Optional[threading.Thread] = None
        self._recovered = threading.Condition()
        self._topology = None if self.recovery is None else Topology()
        self._connect_any()

    # ------------------------------------------------------------------ connecting

    def _connect_any(self) -> None:
        errors = []
        last: Optional[BaseException] = None
        for params in self._parameters:
            try:
                self._connect(params)
                return
            except AuthenticationError:
                raise
            except (OSError, AMQPConnectionError, CodecError) as exc:
                log.info("could not connect to %s: %s", params, exc)
                errors.append(f"{params}: {exc}")
                last = exc
        if len(errors) == 1 and isinstance(last, AMQPConnectionError):
            raise last  # one broker: its own error (e.g. ConnectionClosed 530 for a vhost)
        raise AMQPConnectionError("could not connect: " + "; ".join(errors)) from last

    def _connect(self, params: ConnectionParameters) -> None:
        sock = open_socket(params, self._ssl_context)
        core = proto.ConnectionProtocol(
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
        try:
            opened = self._handshake(sock, core, params)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self._sock = sock
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._core = core
        self.params = params
        self.server_properties: dict = opened.server_properties
        self.channel_max: int = opened.channel_max
        self.frame_max: int = opened.frame_max
        self.heartbeat: int = opened.heartbeat
        self._error = None
        self._is_blocked = False
        self._unblocked.set()
        self._monitor = proto.HeartbeatMonitor(self.heartbeat, time.monotonic())
        self._io_thread = threading.Thread(target=self._io_loop, name=f"amqwire-io {params.host}:{params.port}", daemon=True)
        self._io_thread.start()
        log.info("connected to %s (frame_max %d, heartbeat %d)", params, self.frame_max, self.heartbeat)

    def _handshake(self, sock: socket.socket, core: proto.ConnectionProtocol, params: ConnectionParameters) -> Any:
        deadline = time.monotonic() + params.connection_timeout
        core.initiate()
        while True:
            out = core.data_to_send()
            if out:
                sock.sendall(out)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AMQPConnectionError(f"handshake with {params} timed out after {params.connection_timeout} s")
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except socket.timeout:
                raise AMQPConnectionError(
                    f"handshake with {params} timed out after {params.connection_timeout} s"
                ) from None
            if not data:
                if core.server_properties:
                    raise AuthenticationError(
                        f"{params}: the broker closed the socket during the handshake "
                        f"(refused user {params.username!r} or vhost {params.vhost!r})"
                    )
                raise ConnectionLost(f"{params}: the broker closed the socket before the handshake")
            for event in core.receive_data(data):
                if type(event) is proto.ConnectionOpened:
                    sock.settimeout(None)
                    return event
                if type(event) is proto.ConnectionClosedEvent:
                    out = core.data_to_send()
                    if out:
                        with contextlib.suppress(OSError):
                            sock.sendall(out)
                    if event.reply_code == 403:
                        raise AuthenticationError(f"{params}: {event.reply_code} {event.reply_text}")
                    raise ConnectionClosed(event.reply_code, event.reply_text, event.class_id, event.method_id)

    # ------------------------------------------------------------------ properties

    @property
    def is_open(self) -> bool:
        return self._error is None and not self._closing and self._core.state == "open"

    @property
    def blocked(self) -> bool:
        return self._core.blocked is not None

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<amqwire.client.Connection {self.params} {state}>"

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise InvalidStateError("the connection is closed")

    def _flush(self) -> None:
        """Write everything the core has queued, in order."""
        with self._write_lock:
            while True:
                with self._lock:
                    pieces = self._core.buffers_to_send()
                if not pieces:
                    return
                self._write(pieces)

    def _write(self, pieces: list) -> None:
        sock = self._sock
        try:
            if len(pieces) == 1 or self._tls:
                for piece in pieces:
                    self._write_one(sock, piece)
            else:
                self._write_vectored(sock, pieces)
        except OSError as exc:
            self._on_lost(ConnectionLost(f"writing to {self.params} failed: {exc}"))
            raise self._error or ConnectionLost(str(exc)) from exc

    def _write_one(self, sock: socket.socket, data: Any) -> None:
        try:
            sent = sock.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            sent = 0
        if sent == len(data):
            return
        view = memoryview(data)[sent:]
        while view:
            self._wait_writable(sock)
            try:
                sent = sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                continue
            view = view[sent:]

    def _write_vectored(self, sock: socket.socket, pieces: list) -> None:
        # sendmsg sends the body slices straight from the caller's buffer (no copy).
        views = [memoryview(piece) for piece in pieces]
        while views:
            try:
                sent = sock.sendmsg(views[:512])
            except BlockingIOError:
                self._wait_writable(sock)
                continue
            while sent:
                first = views[0]
                if sent >= len(first):
                    sent -= len(first)
                    views.pop(0)
                else:
                    views[0] = first[sent:]
                    sent = 0
            if views:
                self._wait_writable(sock)

    def _wait_writable(self, sock: socket.socket) -> None:
        if self._error is not None:
            raise self._error
        select.select([], [sock], [], 1.0)

    def _queue_and_flush(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            result = fn(*args)
        if not self._cork:
            self._flush()
        elif self._core.pending_output >= _CORK_LIMIT:
            self._flush()
        return result

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Buffer what is published inside; write it in few big socket writes at the end."""
        self._cork += 1
        try:
            yield
        finally:
            self._cork -= 1
            if not self._cork and self._error is None and not self._closing:
                self._flush()

    # ------------------------------------------------------------------ the I/O thread

    def _io_loop(self) -> None:
        sock = self._sock
        core = self._core
        monitor = self._monitor
        buffer = bytearray(_RECV_SIZE)
        view = memoryview(buffer)
        tls = self._tls
        try:
            while self._error is None:
                now = time.monotonic()
                timeout = monitor.next_deadline(now)
                if not (tls and sock.pending()):  # type: ignore[attr-defined]
                    readable, _, _ = select.select([sock], [], [], timeout)
                    now = time.monotonic()
                else:
                    readable = [sock]
                if readable:
                    try:
                        if tls:
                            with self._write_lock:
                                size = sock.recv_into(buffer)
                        else:
                            size = sock.recv_into(buffer)
                    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        size = -1
                    if size == 0:
                        if self._closing:
                            return
                        raise ConnectionLost(f"the broker at {self.params} closed the socket")
                    if size > 0:
                        monitor.received(now)
                        with self._lock:
                            events = core.receive_data(view[:size])
                            closed = self._detach_closed_channels(events)
                        if core.pending_output:
                            self._flush()
                        if events:
                            self._dispatch(events, closed)
                if monitor.send_due(now):
                    if self._write_lock.acquire(blocking=False):
                        try:
                            with self._lock:
                                core.send_heartbeat()
                                pieces = core.buffers_to_send()
                            self._write(pieces)
                        finally:
                            self._write_lock.release()
                    monitor.sent(now)
                if monitor.timed_out(now):
                    raise HeartbeatTimeout(
                        f"no data from {self.params} for {2 * self.heartbeat} s (two heartbeat intervals)"
                    )
        except ConnectionClosed as exc:
            self._on_lost(exc)
        except (ConnectionLost, OSError, CodecError) as exc:
            if self._closing and not isinstance(exc, CodecError):
                self._on_lost(InvalidStateError("the connection is closed"))
                return
            if isinstance(exc, ConnectionLost):
                error: BaseException = exc
            else:
                error = ConnectionLost(f"connection to {self.params} failed: {exc}")
                error.__cause__ = exc
            earlier = getattr(exc, "events", None)
            if earlier:
                self._dispatch(earlier)
            with contextlib.suppress(Exception):
                self._flush()
            self._on_lost(error)
        except BaseException as exc:  # a bug: never leave waiters hanging
            log.exception("amqwire I/O thread failed")
            self._on_lost(ConnectionLost(f"I/O thread failed: {exc!r}"))

    def _detach_closed_channels(self, events: list) -> Optional[dict]:
        """Under ``_lock``, with the core's state: forget channels the broker just closed, so a
        channel opened right after with the same number is never mistaken for the old one."""
        if proto.ChannelClosedEvent not in map(type, events):
            return None
        closed = {}
        for event in events:
            if type(event) is proto.ChannelClosedEvent:
                channel = self._channels.pop(event.channel, None)
                if channel is not None:
                    channel._closed = channel._close_error(event)
                    closed[id(event)] = channel
        return closed

    def _dispatch(self, events: list, closed: Optional[dict] = None) -> None:
        channels = self._channels
        for event in events:
            kind = type(event)
            if kind is Message:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._on_message(event)
            elif kind is proto.Confirmed:
                channel = channels.get(event.channel)
                if channel is not None:
                    channel._on_confirmed(event)
            elif kind is proto.MethodReply or kind is proto.GetResult:
                channel = channels.get(event.channel)
                if channel is not None:
                    value = event.method if kind is proto.MethodReply else event.message
                    if value is not None and kind is proto.GetResult:
                        value.channel = channel
                        value.delivery_tag += channel._tag_offset
                    channel._reply(value)
            elif kind is proto.ChannelOpened:
                channel = channels.get(event.channel)
                if channel is not None:
                    channel._reply(None)
            elif kind is ReturnedMessage:
                channel = channels.get(event.channel_id)
                if channel is not None:
                    channel._on_return(event)
            elif kind is proto.ConsumerCancelled:
                channel = channels.get(event.channel)
                if channel is not None:
                    channel._on_consumer_cancelled(event.consumer_tag)
            elif kind is proto.ChannelClosedEvent:
                channel = closed.get(id(event)) if closed is not None else channels.pop(event.channel, None)
                if channel is not None:
                    channel._on_closed(event)
            elif kind is proto.ChannelFlowChanged:
                channel = channels.get(event.channel)
                if channel is not None:
                    channel._flow_paused = not event.active
                    channel._flow.set() if event.active else channel._flow.clear()
            elif kind is proto.ConnectionBlocked:
                log.warning("the broker blocked the connection: %s", event.reason)
                self._is_blocked = True
                self._unblocked.clear()
            elif kind is proto.ConnectionUnblocked:
                log.info("the broker unblocked the connection")
                self._is_blocked = False
                self._unblocked.set()
            elif kind is proto.SecretUpdated:
                slot = getattr(self, "_secret_slot", None)
                if slot is not None:
                    slot.set(None)
            elif kind is proto.ConnectionClosedEvent:
                if event.by_broker:
                    raise ConnectionClosed(event.reply_code, event.reply_text, event.class_id, event.method_id)
                raise ConnectionLost("closed")  # our own close completed

    def _on_lost(self, error: BaseException) -> None:
        """The connection is gone: fail every waiter; recover if asked to."""
        with self._lock:
            if self._error is not None:
                return
            self._error = error
            unconfirmed = self._core.drain_unconfirmed()
            for channel_id, channel in self._channels.items():
                state = self._core.channel_state(channel_id)
                if state is not None:
                    channel._tag_before_recovery = channel._tag_offset + state.last_delivery_tag
        if not self._closing:
            log.error("connection to %s lost: %s", self.params, error)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._is_blocked = False
        self._unblocked.set()
        recovering = self.recovery is not None and not self._closing and recoverable(error)
        for channel_id, channel in list(self._channels.items()):
            channel._on_connection_lost(error, unconfirmed.get(channel_id, ()), recovering)
        if not recovering:
            self._channels.clear()
            self._callbacks.put(END)
            return
        thread = threading.Thread(target=self._recover, name="amqwire-recovery", daemon=True)
        thread.start()

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        policy = self.recovery or RecoveryPolicy()
        attempt = 0
        while not self._closing:
            delay = policy.delay(attempt)
            attempt += 1
            log.info("recovery: reconnecting in %.1f s (attempt %d)", delay, attempt)
            time.sleep(delay)
            if self._closing:
                return
            try:
                self._connect_any()
                self._restore()
            except Exception as exc:  # keep trying until the policy gives up
                log.warning("recovery attempt %d failed: %r", attempt, exc)
                if self._error is None:
                    with contextlib.suppress(Exception):
                        self._sock.close()
                    self._error = ConnectionLost(f"recovery attempt failed: {exc}")
                if policy.max_attempts and attempt >= policy.max_attempts:
                    log.error("recovery gave up after %d attempts", attempt)
                    for channel in list(self._channels.values()):
                        channel._on_connection_lost(self._error, (), False)
                    self._channels.clear()
                    self._callbacks.put(END)
                    return
                continue
            log.info("recovery: connection to %s restored", self.params)
            with self._recovered:
                self._recovered.notify_all()
            return

    def _restore(self) -> None:
        """Reopen channels, then redeclare topology and resubscribe consumers."""
        topology = self._topology
        for channel in sorted(self._channels.values(), key=lambda c: c.channel_id):
            channel._reopen()
        if topology is not None and self._channels:
            first = min(self._channels.values(), key=lambda c: c.channel_id)
            plan = topology.replay()
            method = next(plan, None)
            while method is not None:
                reply = first._rpc_raw(method)
                try:
                    method = plan.send(reply)
                except StopIteration:
                    break
        for channel in self._channels.values():
            channel._resubscribe(topology)

    def wait_recovered(self, timeout: Optional[float] = None) -> bool:
        """With recovery on: wait until the connection is up again (True) or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._recovered:
            while self._error is not None and not self._closing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._recovered.wait(left)
        return self._error is None

    # ------------------------------------------------------------------ public API

    def channel(self, channel_id: Optional[int] = None) -> "Channel":
        """Open a channel (the lowest free number unless given)."""
        self._check()
        slot = _Slot()
        with self._lock:
            cid = self._core.open_channel(channel_id)
            channel = Channel(self, cid)
            channel._waiter = slot
            self._channels[cid] = channel
        self._flush()
        try:
            slot.wait()
        except BaseException:
            self._channels.pop(cid, None)
            raise
        return channel

    def update_secret(self, new_secret: str, reason: str, timeout: Optional[float] = None) -> None:
        """Give the broker a new secret (e.g. a refreshed OAuth 2 token) without reconnecting."""
        self._check()
        slot = _Slot()
        self._secret_slot = slot
        self._queue_and_flush(self._core.update_secret, new_secret, reason)
        slot.wait(timeout)

    def process_events(self, timeout: Optional[float] = 0.0) -> int:
        """Run queued consumer and return callbacks in this thread; returns how many ran.

        Waits up to ``timeout`` seconds for the first one (None: until one arrives).
        """
        ran = 0
        try:
            item = self._callbacks.get(timeout=timeout) if timeout != 0 else self._callbacks.get_nowait()
        except queue.Empty:
            self._raise_if_lost()
            return 0
        while True:
            if item is END:
                self._callbacks.put(END)
                self._raise_if_lost()
                return ran
            fn, arg = item
            fn(arg)
            ran += 1
            try:
                item = self._callbacks.get_nowait()
            except queue.Empty:
                return ran

    def _raise_if_lost(self) -> None:
        if self._error is not None and not self._closing and self.recovery is None:
            raise self._error

    def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the connection (channels first, implicitly).  Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        with self._recovered:
            self._recovered.notify_all()
        if self._error is None:
            try:
                with self._lock:
                    self._core.close(reply_code, reply_text)
                self._flush()
            except Exception as exc:  # the socket may be gone already
                log.debug("close: %s", exc)
            thread = self._io_thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(self.params.connection_timeout)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._on_lost(InvalidStateError("the connection is closed"))
        log.info("connection to %s closed", self.params)


class PublishFuture:
    """The broker's verdict on one publish in confirm mode."""

    __slots__ = ("_channel", "delivery_tag", "count", "_pending", "_state", "_error", "_callbacks", "_retrieved")

    def __init__(self, channel: "Channel", count: int = 1) -> None:
        self._channel = channel
        self.delivery_tag = 0
        self.count = count  # publishes it stands for (publish_encoded: a whole batch)
        self._pending = count
        self._state = 0  # 0 pending, 1 acked, 2 failed
        self._error: Optional[BaseException] = None
        self._callbacks: Optional[list] = None
        self._retrieved = False  # a failure seen through result() is not reported again

    def done(self) -> bool:
        return self._state != 0

    def result(self, timeout: Optional[float] = None) -> None:
        """None when the broker acked; raises PublishNacked, MessageReturned or PublishUnconfirmed."""
        if self._state == 0:
            self._channel._wait_confirm(lambda: self._state != 0, timeout)
        if self._error is not None:
            self._retrieved = True
            raise self._error

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        if self._state == 0:
            self._channel._wait_confirm(lambda: self._state != 0, timeout)
        self._retrieved = True
        return self._error

    def add_done_callback(self, fn: Callable[["PublishFuture"], Any]) -> None:
        if self._state != 0:
            fn(self)
            return
        if self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def _settle(self, error: Optional[BaseException]) -> None:
        self._error = error
        self._state = 2 if error is not None else 1
        if self._callbacks is not None:
            for fn in self._callbacks:
                try:
                    fn(self)
                except Exception:
                    log.exception("publish callback %r failed", fn)

    def __repr__(self) -> str:
        state = ("pending", "acked", "failed")[self._state]
        return f"<PublishFuture delivery_tag={self.delivery_tag} {state}>"


class Consumer:
    """A subscription: iterate it for messages, or give ``consume()`` a callback."""

    def __init__(self, channel: "Channel", queue_name: str, callback: Optional[Callable[[Message], Any]],
                 method: BasicConsume) -> None:
        self.channel = channel
        self.queue = queue_name
        self.callback = callback
        self.consumer_tag = ""
        self._method = method
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._active = True
        self._finished: Any = None  # END or an exception, once no more messages come

    def _deliver(self, message: Message) -> None:
        if self.callback is None:
            self._queue.put(message)
        else:
            self.channel._connection._callbacks.put((self.callback, message))

    def _finish(self, reason: Any) -> None:
        if self._active:
            self._active = False
            self._finished = reason
            self._queue.put(reason)

    @property
    def active(self) -> bool:
        return self._active

    def get(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message; None after ``timeout`` seconds or once the consumer is cancelled."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if type(item) is Message:
            return item
        self._queue.put(item)
        if item is END:
            return None
        raise item

    def __iter__(self) -> "Consumer":
        return self

    def __next__(self) -> Message:
        item = self._queue.get()
        if type(item) is Message:
            return item
        self._queue.put(item)  # keep the end visible to later calls
        if item is END:
            raise StopIteration
        raise item

    def cancel(self) -> None:
        """Stop the subscription; messages already received can still be read."""
        if self._active and self.channel.is_open:
            self.channel.basic_cancel(self.consumer_tag)
        self._finish(END)

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"<Consumer {self.consumer_tag!r} on {self.queue!r}{'' if self._active else ' (ended)'}>"


class Channel(ChannelOperations):
    """An AMQP channel.  A channel is meant for one thread at a time; synchronous calls from
    several threads are serialized."""

    def __init__(self, connection: Connection, channel_id: int) -> None:
        self._connection = connection
        self.channel_id = channel_id
        self._waiter: Optional[_Slot] = None
        self._rpc_lock = threading.Lock()
        self._closed: Optional[BaseException] = None
        self._consumers: dict[str, Consumer] = {}
        self._return_callbacks: list = []
        self._confirm = False
        self._max_in_flight = 0
        self._confirm_cond = threading.Condition(threading.Lock())
        self._confirm_waiters = 0
        self._failures: list = []
        self._flow = threading.Event()
        self._flow.set()
        self._flow_paused = False  # mirrors _flow, read on every publish
        self._tag_offset = 0
        self._tag_before_recovery = 0
        self._settled_after_loss = False
        self._qos: Optional[Any] = None
        self._stop_consuming = False
        self._pending_consumer: Optional[Consumer] = None

    def __repr__(self) -> str:
        return f"<amqwire.client.Channel {self.channel_id} {'open' if self.is_open else 'closed'}>"

    def __enter__(self) -> "Channel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        connection = self._connection
        if self._closed is not None or connection._error is not None or connection._closing:
            return False
        state = connection._core.channel_state(self.channel_id)  # may know of a close first
        return state is not None and state.is_open

    @property
    def connection(self) -> Connection:
        return self._connection

    def _check(self) -> None:
        if self._closed is not None:
            error = self._closed
            if isinstance(error, ChannelClosed) and error.by_broker:
                raise channel_closed(error.reply_code, error.reply_text, error.class_id, error.method_id,
                                     by_broker=True, channel=self.channel_id)
            if isinstance(error, AMQPConnectionError):
                raise error  # the connection is gone: say why
            raise InvalidStateError(f"channel {self.channel_id} is closed")
        connection = self._connection
        if connection._error is not None or connection._closing:
            connection._check()
            if connection.recovery is not None:
                raise connection._error or InvalidStateError("the connection is closed")

    # ------------------------------------------------------------------ requests

    def _rpc(self, method: Any, result: Optional[Callable[[Any], Any]] = None) -> Any:
        self._check()
        reply = self._rpc_raw(method)
        topology = self._connection._topology
        if topology is not None:
            topology.record(method, reply)
        return reply if result is None else result(reply)

    def _rpc_raw(self, method: Any) -> Any:
        connection = self._connection
        with self._rpc_lock:
            slot = _Slot()
            self._waiter = slot
            connection._queue_and_flush(connection._core.send_method, self.channel_id, method)
            if connection._cork:
                connection._flush()
            return slot.wait()

    def _reply(self, value: Any) -> None:
        slot = self._waiter
        if slot is not None:
            self._waiter = None
            slot.set(value)

    def _send(self, method: Any) -> None:
        self._check()
        connection = self._connection
        connection._queue_and_flush(connection._core.send_method, self.channel_id, method)

    # ------------------------------------------------------------------ publishing

    def _wait_publishable(self, timeout: Optional[float] = None) -> None:
        connection = self._connection
        if not connection._unblocked.is_set():
            if connection.blocked_action == "raise":
                raise ConnectionBlockedError(connection._core.blocked or "blocked")
            connection._flush()
            limit = connection.blocked_timeout
            if timeout is not None:
                limit = timeout if limit is None else min(limit, timeout)
            if not connection._unblocked.wait(limit):
                raise ConnectionBlockedError(
                    f"{connection._core.blocked or 'blocked'} (still blocked after {limit} s)"
                )
            connection._check()
        if not self._flow.is_set():
            connection._flush()
            if not self._flow.wait(timeout):
                raise TimeoutError(f"the broker kept channel {self.channel_id} paused (channel.flow) for {timeout} s")

    def basic_publish(
        self,
        exchange: str,
        routing_key: str,
        body: Union[bytes, bytearray, memoryview, str],
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
    ) -> None:
        """Publish one message.  Without confirm mode it is written before this returns; in
        confirm mode this waits for the broker's verdict and raises PublishNacked or
        MessageReturned (mandatory and unroutable)."""
        if self._confirm:
            self.publish_async(exchange, routing_key, body, properties, mandatory=mandatory).result()
            return
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if connection._is_blocked or self._flow_paused:
            self._wait_publishable()
        try:
            with connection._lock:
                connection._core.publish(self.channel_id, exchange, routing_key, body, properties, mandatory)
        except InvalidStateError:
            self._check()  # the connection or channel went away meanwhile: say why
            raise
        if not connection._cork or connection._core.pending_output >= _CORK_LIMIT:
            connection._flush()

    def publish_async(
        self,
        exchange: str,
        routing_key: str,
        body: Union[bytes, bytearray, memoryview, str],
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
        callback: Optional[Callable[[PublishFuture], Any]] = None,
    ) -> PublishFuture:
        """Publish in confirm mode without waiting for the broker: returns a PublishFuture.

        Waits only while ``max_in_flight`` publishes are unconfirmed.  ``callback(future)``
        runs on the I/O thread once the broker has answered.
        """
        if not self._confirm:
            raise InvalidStateError("publish_async needs confirm mode: call confirm_select() first")
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if connection._is_blocked or self._flow_paused:
            self._wait_publishable()
        core = connection._core
        state = core.channel_state(self.channel_id)
        if state is not None and state.confirms is not None and len(state.confirms.slots) >= self._max_in_flight:
            # Wait for the window to half empty, not for one free slot: one wake-up per
            # many acks instead of one per ack frame.
            low_water = self._max_in_flight // 2
            self._wait_confirm(lambda: len(state.confirms.slots) <= low_water, None)  # type: ignore[union-attr]
        future = PublishFuture(self)
        if callback is not None:
            future._callbacks = [callback]
        try:
            with connection._lock:
                future.delivery_tag = core.publish(
                    self.channel_id, exchange, routing_key, body, properties, mandatory, False, future
                )
        except InvalidStateError:
            self._check()
            raise
        if not connection._cork or core.pending_output >= _CORK_LIMIT:
            connection._flush()
        return future

    def publish_encoded(self, frames: Any, count: int, *, timeout: Optional[float] = None) -> Optional[PublishFuture]:
        """Send ``count`` publishes already encoded as frames for this channel (for example
        by :class:`amqwire.spark.encode.PublishEncoder`), in one write, without copying.

        In confirm mode returns one :class:`PublishFuture` for all of them: it succeeds
        when the broker has acked every one and fails with the first nack or return (of
        frames encoded ``mandatory``).  Waits while the confirm window (``max_in_flight``)
        is full: ``timeout`` bounds that wait (TimeoutError), as well as a wait for the
        broker to lift ``connection.blocked`` (ConnectionBlockedError).  Without confirm
        mode returns None.  ``frames`` must stay unchanged until written (bytes are the
        safe choice).
        """
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if connection._is_blocked or self._flow_paused:
            self._wait_publishable(timeout)
        core = connection._core
        future = None
        if self._confirm:
            state = core.channel_state(self.channel_id)
            if state is not None and state.confirms is not None and state.confirms.slots \
                    and len(state.confirms.slots) + count > self._max_in_flight:
                room = max(self._max_in_flight - count, 0)
                self._wait_confirm(lambda: len(state.confirms.slots) <= room, timeout)  # type: ignore[union-attr]
            future = PublishFuture(self, count)
            if count == 0:
                future._state = 1
        try:
            with connection._lock:
                first = core.publish_encoded(self.channel_id, frames, count, future)
        except InvalidStateError:
            self._check()
            raise
        if future is not None:
            future.delivery_tag = first
        if not connection._cork or core.pending_output >= _CORK_LIMIT:
            connection._flush()
        return future

    def batch(self) -> Any:
        """Context manager: publishes inside are written together (few socket writes)."""
        return self._connection.batch()

    def confirm_select(self, *, max_in_flight: int = 10000) -> None:
        """Turn on publisher confirms.  ``max_in_flight``: unconfirmed publishes allowed at once."""
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        self._rpc(self._confirm_method())
        self._confirm = True
        self._max_in_flight = max_in_flight

    def wait_for_confirms(self, timeout: Optional[float] = None) -> None:
        """Wait until the broker has answered every publish; raise the first failure since the
        last call (PublishNacked or MessageReturned, with ``.failures`` listing them all)."""
        if not self._confirm:
            raise InvalidStateError("wait_for_confirms needs confirm mode: call confirm_select() first")
        state = self._connection._core.channel_state(self.channel_id)
        if state is not None and state.confirms is not None:
            confirms = state.confirms
            self._wait_confirm(lambda: not confirms.slots, timeout)
        failures = [future._error for future in self._failures if not future._retrieved]
        self._failures = []
        if failures:
            error = failures[0]
            error.failures = failures
            raise error
        if self._closed is not None:
            self._check()

    def _wait_confirm(self, ready: Callable[[], bool], timeout: Optional[float]) -> None:
        connection = self._connection
        try:
            connection._flush()
        except AMQPConnectionError:
            pass  # the connection is gone: the futures say how it ended
        except InvalidStateError:
            pass
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._confirm_cond:
            self._confirm_waiters += 1
            try:
                while not ready():
                    if self._settled_after_loss:  # the channel is gone and its futures failed
                        self._check()
                        raise InvalidStateError(f"channel {self.channel_id} is closed")
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"confirms did not arrive within {timeout} s")
                    self._confirm_cond.wait(1.0 if left is None else min(left, 1.0))
            finally:
                self._confirm_waiters -= 1

    def _notify_confirm_waiters(self) -> None:
        if self._confirm_waiters:
            with self._confirm_cond:
                self._confirm_cond.notify_all()

    def _on_confirmed(self, event: proto.Confirmed) -> None:
        tokens = event.tokens
        if event.ack and event.returned is None:
            for future in tokens:
                future._pending -= 1
                if future._pending == 0 and future._state == 0:
                    future._state = 1
                    if future._callbacks is not None:
                        future._settle(None)
        else:
            returned = event.returned or {}
            for seqno, future in zip(event.seqnos, tokens):
                future._pending -= 1
                message = returned.get(seqno)
                if message is not None:
                    error: Optional[BaseException] = MessageReturned(message, seqno)
                elif not event.ack:
                    error = PublishNacked(seqno)
                else:
                    error = None
                if future._state != 0:
                    continue  # a batch that failed already
                if error is not None:
                    future._settle(error)
                    self._failures.append(future)
                elif future._pending == 0:
                    future._settle(None)
        self._notify_confirm_waiters()

    def _on_return(self, message: ReturnedMessage) -> None:
        for fn in self._return_callbacks:
            self._connection._callbacks.put((fn, message))

    def add_on_return_callback(self, fn: Callable[[ReturnedMessage], Any]) -> None:
        """``fn(returned)`` for every message the broker returns (run by process_events)."""
        self._return_callbacks.append(fn)

    # ------------------------------------------------------------------ consuming

    def consume(
        self,
        queue: str,
        callback: Optional[Callable[[Message], Any]] = None,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: Optional[dict] = None,
    ) -> Consumer:
        """Subscribe to a queue (basic.consume).  Iterate the Consumer, or pass ``callback``
        to have it called from ``process_events``/``start_consuming``."""
        method = BasicConsume(0, queue, consumer_tag, False, no_ack, exclusive, False, arguments)
        consumer = Consumer(self, queue, callback, method)
        self._subscribe(consumer)
        return consumer

    def _subscribe(self, consumer: Consumer) -> None:
        self._check()
        # The consumer must be findable before basic.consume-ok arrives: deliveries may
        # follow it at once, in the same read.
        tag = consumer._method.consumer_tag
        if tag:
            self._consumers[tag] = consumer
        try:
            reply = self._rpc_raw_consume(consumer)
        except BaseException:
            self._consumers.pop(tag, None)
            raise
        consumer.consumer_tag = reply.consumer_tag
        self._consumers[reply.consumer_tag] = consumer

    def _rpc_raw_consume(self, consumer: Consumer) -> Any:
        self._pending_consumer = consumer
        try:
            return self._rpc_raw(consumer._method)
        finally:
            self._pending_consumer = None

    basic_consume = consume

    def basic_cancel(self, consumer_tag: str) -> None:
        consumer = self._consumers.get(consumer_tag)
        self._rpc(self._cancel_method(consumer_tag))
        self._consumers.pop(consumer_tag, None)
        if consumer is not None:
            consumer._finish(END)

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

    def start_consuming(self) -> None:
        """Run consumer callbacks in this thread until stop_consuming() or no consumers are left."""
        self._stop_consuming = False
        connection = self._connection
        while not self._stop_consuming and any(c.callback is not None for c in self._consumers.values()):
            connection.process_events(0.2)
            if self._closed is not None:
                self._check()

    def stop_consuming(self) -> None:
        self._stop_consuming = True

    def basic_get(self, queue: str, *, no_ack: bool = False) -> Optional[Message]:
        """One message from the queue, or None if it is empty (``message_count``: how many remain)."""
        from amqwire.codec import BasicGet

        return self._rpc(BasicGet(0, queue, no_ack))  # type: ignore[no-any-return]

    def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if self._tag_offset:
            delivery_tag -= self._tag_offset
            if delivery_tag <= 0:
                log.info("ack of a delivery from before recovery ignored")
                return
        connection._queue_and_flush(connection._core.basic_ack, self.channel_id, delivery_tag, multiple)

    def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._check()
        delivery_tag -= self._tag_offset
        if delivery_tag <= 0 and self._tag_offset:
            return
        connection = self._connection
        connection._queue_and_flush(connection._core.basic_nack, self.channel_id, delivery_tag, multiple, requeue)

    def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        self._check()
        delivery_tag -= self._tag_offset
        if delivery_tag <= 0 and self._tag_offset:
            return
        connection = self._connection
        connection._queue_and_flush(connection._core.basic_reject, self.channel_id, delivery_tag, requeue)

    def basic_qos(self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False) -> None:
        super().basic_qos(prefetch_count, prefetch_size=prefetch_size, global_=global_)
        self._qos = (prefetch_count, prefetch_size, global_)

    # ------------------------------------------------------------------ closing

    def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the channel.  Safe to call twice, and after the connection is gone."""
        if not self.is_open:
            self._closed = self._closed or InvalidStateError(f"channel {self.channel_id} is closed")
            return
        connection = self._connection
        slot = _Slot()
        self._waiter = slot
        try:
            connection._queue_and_flush(connection._core.close_channel, self.channel_id, reply_code, reply_text)
            slot.wait(connection.params.connection_timeout)
        except (AMQPConnectionError, InvalidStateError, TimeoutError) as exc:
            log.debug("channel %d close: %s", self.channel_id, exc)
        except ChannelClosed:
            pass

    def _close_error(self, event: proto.ChannelClosedEvent) -> BaseException:
        if event.by_broker:
            return channel_closed(
                event.reply_code, event.reply_text, event.class_id, event.method_id, by_broker=True, channel=self.channel_id
            )
        return ChannelClosed(event.reply_code, event.reply_text, by_broker=False, channel=self.channel_id)

    def _on_closed(self, event: proto.ChannelClosedEvent) -> None:
        error = self._closed if self._closed is not None else self._close_error(event)
        if event.by_broker:
            log.info("%s", error)  # also raised to the caller: not a warning by itself
        self._closed = error
        if not event.by_broker:  # our close() is waiting for this
            slot = self._waiter
            self._waiter = None
            if slot is not None:
                slot.set(None)
        self._fail_everything(error, event.unconfirmed, False)

    def _on_connection_lost(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        if not recovering:
            self._closed = self._closed or error
        self._fail_everything(error, unconfirmed, recovering)

    def _fail_everything(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        slot = self._waiter
        self._waiter = None
        if slot is not None:
            slot.fail(error)
        for seqno, future in unconfirmed:
            if future._state == 0:
                future._settle(PublishUnconfirmed(seqno, error))
                self._failures.append(future)
        if not recovering:
            reason = END if isinstance(error, InvalidStateError) else error
            for consumer in list(self._consumers.values()):
                consumer._finish(reason)
            self._consumers.clear()
        self._flow_paused = False
        self._flow.set()
        self._settled_after_loss = not recovering
        with self._confirm_cond:
            self._confirm_cond.notify_all()

    # ------------------------------------------------------------------ recovery

    def _reopen(self) -> None:
        connection = self._connection
        slot = _Slot()
        with connection._lock:
            connection._core.open_channel(self.channel_id)
            self._waiter = slot
            connection._channels[self.channel_id] = self
        connection._flush()
        slot.wait(connection.params.connection_timeout)
        # Delivery tags restart at 1 on the new channel: shift them past the old ones, so an
        # ack of a delivery from before the recovery can never ack a new one.
        self._tag_offset = self._tag_before_recovery
        if self._qos is not None:
            count, size, global_ = self._qos
            ChannelOperations.basic_qos(self, count, prefetch_size=size, global_=global_)
        if self._confirm:
            self._rpc_raw(self._confirm_method())

    def _resubscribe(self, topology: Optional[Topology]) -> None:
        for tag, consumer in list(self._consumers.items()):
            method = consumer._method
            queue_name = topology.renamed.get(consumer.queue, consumer.queue) if topology is not None else consumer.queue
            consumer.queue = queue_name
            consumer._method = BasicConsume(0, queue_name, tag, method.no_local, method.no_ack, method.exclusive,
                                            False, method.arguments)
            self._consumers.pop(tag, None)
            self._subscribe(consumer)
