"""The asyncio transport: the sans-IO core driven by an asyncio.Protocol.

Same names and meaning as the blocking transport; every call that waits is a coroutine.
Publishes made in one pass of the event loop go out in one socket write (the flush is
scheduled with ``call_soon``, and forced once 256 KiB are queued); when the socket's
write buffer is full, or the broker blocks the connection, publishing waits.

Heartbeats are sent by a loop timer: code that blocks the event loop for longer than a
heartbeat interval stops them, as with any asyncio library (use ``asyncio.to_thread``).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import sys
import time
from collections import deque
from typing import Any, Awaitable, Callable, Generator, Optional, Sequence, Union

from amqwire.codec import BasicConsume, BasicGet, BasicProperties, CodecError

from . import protocol as proto
from .channel_api import ChannelOperations
from .connect import make_ssl_context, server_hostname
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

__all__ = ["connect", "Connection", "Channel", "Consumer"]

_FLUSH_AT = 256 * 1024
# Python 3.12's selector transport sends writelines() pieces with sendmsg; before, it joins them.
_VECTORED_WRITELINES = sys.version_info >= (3, 12)


class _Opener:
    """What ``connect()`` returns: await it, or use it as ``async with``."""

    def __init__(self, factory: Callable[[], Awaitable["Connection"]]) -> None:
        self._factory = factory
        self._connection: Optional[Connection] = None

    def __await__(self) -> Generator[Any, None, "Connection"]:
        return self._factory().__await__()

    async def __aenter__(self) -> "Connection":
        self._connection = await self._factory()
        return self._connection

    async def __aexit__(self, *exc: Any) -> None:
        if self._connection is not None:
            await self._connection.close()


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
) -> _Opener:
    """Open a connection: ``conn = await connect(url)`` or ``async with connect(url) as conn``."""
    overrides = dict(heartbeat=heartbeat, frame_max=frame_max, channel_max=channel_max, connection_timeout=connection_timeout)
    parameters = parameters_list(url, **overrides)

    async def factory() -> Connection:
        connection = Connection(
            parameters,
            ssl_context=ssl_context,
            client_properties=client_properties,
            blocked_action=blocked_action,
            blocked_timeout=blocked_timeout,
            recovery=recovery,
            on_secure=on_secure,
        )
        await connection._connect_any()
        return connection

    return _Opener(factory)


class _StreamProtocol(asyncio.Protocol):
    """Forwards transport callbacks to the Connection of the current socket."""

    def __init__(self, connection: "Connection") -> None:
        self.connection = connection

    def data_received(self, data: bytes) -> None:
        self.connection._data_received(data)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.connection._transport_lost(self, exc)

    def pause_writing(self) -> None:
        self.connection._writable.clear()

    def resume_writing(self) -> None:
        self.connection._writable.set()


class Connection:
    """An asyncio AMQP connection.  ``async with``, or ``await close()``."""

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
        self._loop = asyncio.get_running_loop()
        self._channels: dict[int, Channel] = {}
        self._transport: Optional[asyncio.Transport] = None
        self._stream: Optional[_StreamProtocol] = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._unblocked = asyncio.Event()
        self._unblocked.set()
        self._flush_scheduled = False
        self._closing = False
        self._error: Optional[BaseException] = None
        self._handshake_waiter: Optional[asyncio.Future] = None
        self._heartbeat_timer: Optional[asyncio.TimerHandle] = None
        self._recovered = asyncio.Event()
        self._recovery_task: Optional[asyncio.Task] = None
        self._secret_waiter: Optional[asyncio.Future] = None
        self._close_waiter: Optional[asyncio.Future] = None
        self._topology = None if self.recovery is None else Topology()
        self._core: proto.ConnectionProtocol = proto.ConnectionProtocol()

    # ------------------------------------------------------------------ connecting

    async def _connect_any(self) -> None:
        errors = []
        last: Optional[BaseException] = None
        for params in self._parameters:
            try:
                await self._connect(params)
                return
            except AuthenticationError:
                raise
            except (OSError, AMQPConnectionError, CodecError, asyncio.TimeoutError) as exc:
                log.info("could not connect to %s: %s", params, exc)
                errors.append(f"{params}: {exc or type(exc).__name__}")
                last = exc
        if len(errors) == 1 and isinstance(last, AMQPConnectionError):
            raise last  # one broker: its own error (e.g. ConnectionClosed 530 for a vhost)
        raise AMQPConnectionError("could not connect: " + "; ".join(errors)) from last

    async def _connect(self, params: ConnectionParameters) -> None:
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
        context = None
        if params.ssl or self._ssl_context is not None:
            context = self._ssl_context or make_ssl_context(params)
        self.params = params
        self._core = core
        self._error = None
        self._handshake_waiter = self._loop.create_future()
        try:
            transport, stream = await asyncio.wait_for(
                self._loop.create_connection(
                    lambda: _StreamProtocol(self),
                    params.host,
                    params.port,
                    ssl=context,
                    server_hostname=server_hostname(params) if context else None,
                ),
                params.connection_timeout,
            )
        except asyncio.TimeoutError:
            raise AMQPConnectionError(f"connecting to {params} timed out after {params.connection_timeout} s") from None
        self._transport = transport  # type: ignore[assignment]
        self._stream = stream
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        core.initiate()
        self._flush()
        try:
            opened = await asyncio.wait_for(asyncio.shield(self._handshake_waiter), params.connection_timeout)
        except asyncio.TimeoutError:
            transport.abort()
            raise AMQPConnectionError(f"handshake with {params} timed out after {params.connection_timeout} s") from None
        except BaseException:
            transport.abort()
            raise
        self.server_properties: dict = opened.server_properties
        self.channel_max: int = opened.channel_max
        self.frame_max: int = opened.frame_max
        self.heartbeat: int = opened.heartbeat
        self._unblocked.set()
        self._writable.set()
        self._monitor = proto.HeartbeatMonitor(self.heartbeat, time.monotonic())
        if self.heartbeat:
            self._heartbeat_timer = self._loop.call_later(self.heartbeat / 2, self._on_heartbeat_timer)
        log.info("connected to %s (frame_max %d, heartbeat %d)", params, self.frame_max, self.heartbeat)

    # ------------------------------------------------------------------ properties

    @property
    def is_open(self) -> bool:
        return self._error is None and not self._closing and self._core.state == "open"

    @property
    def blocked(self) -> bool:
        return self._core.blocked is not None

    def __repr__(self) -> str:
        return f"<amqwire.client.aio.Connection {self.params} {'open' if self.is_open else 'closed'}>"

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise InvalidStateError("the connection is closed")

    # ------------------------------------------------------------------ writing

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self._transport
        if transport is None or self._error is not None:
            return
        pieces = self._core.buffers_to_send()
        if not pieces:
            return
        if len(pieces) == 1:
            transport.write(pieces[0])
        elif _VECTORED_WRITELINES:
            transport.writelines(pieces)  # sendmsg from the body slices, no copy
        else:
            for piece in pieces:  # writelines would join (copy) them all first
                transport.write(piece)

    def _flush_soon(self) -> None:
        if self._core.pending_output >= _FLUSH_AT:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    # ------------------------------------------------------------------ reading

    def _data_received(self, data: bytes) -> None:
        core = self._core
        self._monitor_received()
        try:
            events = core.receive_data(data)
        except (CodecError, AMQPConnectionError) as exc:
            earlier = getattr(exc, "events", None)
            if earlier:
                self._dispatch(earlier)
            self._flush()
            error = exc if isinstance(exc, AMQPConnectionError) else ConnectionLost(f"connection to {self.params} failed: {exc}")
            if error is not exc:
                error.__cause__ = exc
            self._fail(error)
            return
        if core.pending_output:
            self._flush()
        if events:
            self._dispatch(events)

    def _monitor_received(self) -> None:
        monitor = getattr(self, "_monitor", None)
        if monitor is not None:
            monitor.last_received = time.monotonic()

    def _transport_lost(self, stream: _StreamProtocol, exc: Optional[Exception]) -> None:
        if stream is not self._stream:
            return
        self._writable.set()
        if self._closing and self._error is None:
            self._fail(InvalidStateError("the connection is closed"))
        elif self._error is None:
            self._fail(ConnectionLost(f"the broker at {self.params} closed the socket" + (f": {exc}" if exc else "")))

    def _on_heartbeat_timer(self) -> None:
        self._heartbeat_timer = None
        if self._error is not None or self._transport is None:
            return
        monitor = self._monitor
        now = time.monotonic()
        if monitor.timed_out(now):
            if not getattr(self, "_suspect", False):
                # The loop may have been busy: read what is waiting before judging.
                self._suspect = True
                self._heartbeat_timer = self._loop.call_later(0.05, self._on_heartbeat_timer)
                return
            self._fail(HeartbeatTimeout(f"no data from {self.params} for {2 * self.heartbeat} s (two heartbeat intervals)"))
            return
        self._suspect = False
        if monitor.send_due(now):
            self._core.send_heartbeat()
            self._flush()
            monitor.sent(now)
        delay = monitor.next_deadline(now)
        self._heartbeat_timer = self._loop.call_later(max(delay or 0.0, 0.01), self._on_heartbeat_timer)

    def _dispatch(self, events: list) -> None:
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
                channel = channels.pop(event.channel, None)
                if channel is not None:
                    channel._on_closed(event)
            elif kind is proto.ChannelFlowChanged:
                channel = channels.get(event.channel)
                if channel is not None:
                    channel._flow.set() if event.active else channel._flow.clear()
            elif kind is proto.ConnectionBlocked:
                log.warning("the broker blocked the connection: %s", event.reason)
                self._unblocked.clear()
            elif kind is proto.ConnectionUnblocked:
                log.info("the broker unblocked the connection")
                self._unblocked.set()
            elif kind is proto.SecretUpdated:
                waiter = self._secret_waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
            elif kind is proto.ConnectionOpened:
                waiter = self._handshake_waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(event)
            elif kind is proto.ConnectionClosedEvent:
                if event.by_broker:
                    if event.handshake and event.reply_code == 403:
                        error: BaseException = AuthenticationError(f"{self.params}: {event.reply_code} {event.reply_text}")
                    else:
                        error = ConnectionClosed(event.reply_code, event.reply_text, event.class_id, event.method_id)
                    self._flush()
                    self._fail(error)
                else:
                    self._fail(InvalidStateError("the connection is closed"))
                return

    def _fail(self, error: BaseException) -> None:
        """The connection is gone: fail every waiter; recover if asked to."""
        if self._error is not None:
            return
        self._error = error
        close_waiter = self._close_waiter
        if close_waiter is not None and not close_waiter.done():
            close_waiter.set_result(None)
        if not self._closing and not isinstance(error, InvalidStateError):
            log.error("connection to %s lost: %s", getattr(self, "params", "?"), error)
        waiter = self._handshake_waiter
        if waiter is not None and not waiter.done():
            if isinstance(error, ConnectionLost) and self._core.server_properties and self._core.state == "handshake":
                error = AuthenticationError(
                    f"{self.params}: the broker closed the socket during the handshake "
                    f"(refused user {self.params.username!r} or vhost {self.params.vhost!r})"
                )
                self._error = error
            waiter.set_exception(error)
            waiter.exception()  # retrieved: the opener re-raises it
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None
        transport = self._transport
        if transport is not None:
            transport.abort()
        self._unblocked.set()
        self._writable.set()
        for channel in list(self._channels.values()):
            state = self._core.channel_state(channel.channel_id)
            if state is not None:
                channel._tag_before_recovery = channel._tag_offset + state.last_delivery_tag
        unconfirmed = self._core.drain_unconfirmed()
        recovering = self.recovery is not None and not self._closing and recoverable(error) and self._core.frame_max > 0
        for channel_id, channel in list(self._channels.items()):
            channel._on_connection_lost(error, unconfirmed.get(channel_id, ()), recovering)
        if recovering:
            self._recovered.clear()
            self._recovery_task = self._loop.create_task(self._recover())
        else:
            self._channels.clear()

    # ------------------------------------------------------------------ recovery

    async def _recover(self) -> None:
        policy = self.recovery or RecoveryPolicy()
        attempt = 0
        while not self._closing:
            delay = policy.delay(attempt)
            attempt += 1
            log.info("recovery: reconnecting in %.1f s (attempt %d)", delay, attempt)
            await asyncio.sleep(delay)
            if self._closing:
                return
            try:
                await self._connect_any()
                await self._restore()
            except Exception as exc:
                log.warning("recovery attempt %d failed: %r", attempt, exc)
                if self._error is None:
                    self._error = ConnectionLost(f"recovery attempt failed: {exc}")
                    if self._transport is not None:
                        self._transport.abort()
                if policy.max_attempts and attempt >= policy.max_attempts:
                    log.error("recovery gave up after %d attempts", attempt)
                    for channel in list(self._channels.values()):
                        channel._on_connection_lost(self._error, (), False)
                    self._channels.clear()
                    self._recovered.set()
                    return
                continue
            log.info("recovery: connection to %s restored", self.params)
            self._recovered.set()
            return

    async def _restore(self) -> None:
        topology = self._topology
        for channel in sorted(self._channels.values(), key=lambda c: c.channel_id):
            await channel._reopen()
        if topology is not None and self._channels:
            first = min(self._channels.values(), key=lambda c: c.channel_id)
            plan = topology.replay()
            method = next(plan, None)
            while method is not None:
                reply = await first._rpc_raw(method)
                try:
                    method = plan.send(reply)
                except StopIteration:
                    break
        for channel in list(self._channels.values()):
            await channel._resubscribe(topology)

    async def wait_recovered(self, timeout: Optional[float] = None) -> bool:
        """With recovery on: wait until the connection is up again (True) or timeout."""
        if self._error is None:
            return True
        try:
            await asyncio.wait_for(self._recovered.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return self._error is None

    # ------------------------------------------------------------------ public API

    async def _open_channel(self, channel_id: Optional[int]) -> "Channel":
        self._check()
        cid = self._core.open_channel(channel_id)
        channel = Channel(self, cid)
        waiter = self._loop.create_future()
        channel._waiter = waiter
        self._channels[cid] = channel
        self._flush()
        try:
            await waiter
        except BaseException:
            self._channels.pop(cid, None)
            raise
        return channel

    def channel(self, channel_id: Optional[int] = None) -> "_ChannelOpener":
        """Open a channel: ``ch = await conn.channel()`` or ``async with conn.channel() as ch``."""
        return _ChannelOpener(self._open_channel(channel_id))

    async def update_secret(self, new_secret: str, reason: str) -> None:
        self._check()
        self._secret_waiter = self._loop.create_future()
        self._core.update_secret(new_secret, reason)
        self._flush()
        await self._secret_waiter

    async def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the connection.  Safe to call twice."""
        if self._closing:
            return
        self._closing = True
        self._recovered.set()
        if self._recovery_task is not None and not self._recovery_task.done():
            self._recovery_task.cancel()
        if self._error is None and self._transport is not None:
            self._core.close(reply_code, reply_text)
            self._flush()
            self._close_waiter = self._loop.create_future()
            deadline = self.params.connection_timeout
            try:
                await asyncio.wait_for(asyncio.shield(self._close_waiter), deadline)
            except asyncio.TimeoutError:
                log.debug("close: no close-ok within %s s", deadline)
        if self._transport is not None:
            self._transport.close()
        self._fail(InvalidStateError("the connection is closed"))
        log.info("connection to %s closed", self.params)


class _ChannelOpener:
    def __init__(self, coro: Awaitable["Channel"]) -> None:
        self._coro = coro
        self._channel: Optional[Channel] = None

    def __await__(self) -> Generator[Any, None, "Channel"]:
        return self._coro.__await__()  # type: ignore[attr-defined,no-any-return]

    async def __aenter__(self) -> "Channel":
        self._channel = await self._coro
        return self._channel

    async def __aexit__(self, *exc: Any) -> None:
        if self._channel is not None:
            await self._channel.close()


class Consumer:
    """A subscription: ``async for msg in consumer``, or a callback given to ``consume()``."""

    def __init__(self, channel: "Channel", queue_name: str, callback: Optional[Callable[[Message], Any]],
                 method: BasicConsume) -> None:
        self.channel = channel
        self.queue = queue_name
        self.callback = callback
        self.consumer_tag = ""
        self._method = method
        self._buffer: deque = deque()
        self._waiter: Optional[asyncio.Future] = None
        self._active = True
        self._finished: Any = None
        self._is_coroutine = asyncio.iscoroutinefunction(callback)
        self._tasks: set = set()

    @property
    def active(self) -> bool:
        return self._active

    def _deliver(self, message: Message) -> None:
        callback = self.callback
        if callback is None:
            self._buffer.append(message)
            waiter = self._waiter
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)
        elif self._is_coroutine:
            task = asyncio.ensure_future(callback(message))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
        else:
            try:
                callback(message)
            except Exception:
                log.exception("consumer callback %r failed", callback)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("consumer callback failed", exc_info=task.exception())

    def _finish(self, reason: Any) -> None:
        if self._active:
            self._active = False
            self._finished = reason
            waiter = self._waiter
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> Message:
        message = await self.get()
        if message is None:
            finished = self._finished
            if finished is END or finished is None:
                raise StopAsyncIteration
            raise finished
        return message

    async def get(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message; None after ``timeout`` or once the consumer was cancelled."""
        while True:
            if self._buffer:
                return self._buffer.popleft()  # type: ignore[no-any-return]
            if not self._active:
                finished = self._finished
                if finished is END or finished is None:
                    return None
                raise finished
            waiter = self._waiter = self.channel._connection._loop.create_future()
            if timeout is None:
                await waiter
            else:
                try:
                    await asyncio.wait_for(waiter, timeout)
                except asyncio.TimeoutError:
                    return None

    async def cancel(self) -> None:
        if self._active and self.channel.is_open:
            await self.channel.basic_cancel(self.consumer_tag)
        self._finish(END)

    async def __aenter__(self) -> "Consumer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.cancel()

    def __repr__(self) -> str:
        return f"<aio.Consumer {self.consumer_tag!r} on {self.queue!r}{'' if self._active else ' (ended)'}>"


class _ConsumerOpener:
    def __init__(self, channel: "Channel", consumer: Consumer) -> None:
        self._channel = channel
        self._consumer = consumer

    def __await__(self) -> Generator[Any, None, Consumer]:
        return self._start().__await__()

    async def _start(self) -> Consumer:
        await self._channel._subscribe(self._consumer)
        return self._consumer

    async def __aenter__(self) -> Consumer:
        return await self._start()

    async def __aexit__(self, *exc: Any) -> None:
        await self._consumer.cancel()



class _BatchConfirm:
    """The confirm token of a publish_encoded batch: answers like a future to the
    confirm routing, settles its future when the last of ``count`` publishes is acked, or
    at the first failure."""

    __slots__ = ("future", "pending")

    def __init__(self, future: "asyncio.Future[None]", count: int) -> None:
        self.future = future
        self.pending = count
        if count == 0:
            future.set_result(None)

    def done(self) -> bool:
        return self.future.done()

    def set_result(self, value: None) -> None:
        self.pending -= 1
        if self.pending <= 0 and not self.future.done():
            self.future.set_result(value)

    def set_exception(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def exception(self) -> Optional[BaseException]:
        return self.future.exception()


class Channel(ChannelOperations):
    """An AMQP channel on the asyncio transport."""

    def __init__(self, connection: Connection, channel_id: int) -> None:
        self._connection = connection
        self.channel_id = channel_id
        self._waiter: Optional[asyncio.Future] = None
        self._rpc_lock = asyncio.Lock()
        self._closed: Optional[BaseException] = None
        self._consumers: dict[str, Consumer] = {}
        self._pending_consumer: Optional[Consumer] = None
        self._return_callbacks: list = []
        self._confirm = False
        self._max_in_flight = 0
        self._confirm_waiter: Optional[asyncio.Future] = None
        self._failures: list = []
        self._flow = asyncio.Event()
        self._flow.set()
        self._tag_offset = 0
        self._tag_before_recovery = 0
        self._qos: Optional[tuple] = None

    def __repr__(self) -> str:
        return f"<amqwire.client.aio.Channel {self.channel_id} {'open' if self.is_open else 'closed'}>"

    async def __aenter__(self) -> "Channel":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

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

    # ------------------------------------------------------------------ requests

    async def _rpc(self, method: Any, result: Optional[Callable[[Any], Any]] = None) -> Any:
        self._check()
        reply = await self._rpc_raw(method)
        topology = self._connection._topology
        if topology is not None:
            topology.record(method, reply)
        return reply if result is None else result(reply)

    async def _rpc_raw(self, method: Any) -> Any:
        connection = self._connection
        async with self._rpc_lock:
            self._check()
            waiter = connection._loop.create_future()
            self._waiter = waiter
            connection._core.send_method(self.channel_id, method)
            connection._flush()
            return await waiter

    def _reply(self, value: Any) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(value)

    # ------------------------------------------------------------------ publishing

    async def _wait_publishable(self) -> None:
        connection = self._connection
        if not connection._unblocked.is_set():
            if connection.blocked_action == "raise":
                raise ConnectionBlockedError(connection._core.blocked or "blocked")
            connection._flush()
            try:
                await asyncio.wait_for(connection._unblocked.wait(), connection.blocked_timeout)
            except asyncio.TimeoutError:
                raise ConnectionBlockedError(
                    f"{connection._core.blocked or 'blocked'} (still blocked after {connection.blocked_timeout} s)"
                ) from None
            connection._check()
        if not connection._writable.is_set():
            await connection._writable.wait()
            connection._check()
        if not self._flow.is_set():
            connection._flush()
            await self._flow.wait()

    async def basic_publish(
        self,
        exchange: str,
        routing_key: str,
        body: Union[bytes, bytearray, memoryview, str],
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
    ) -> None:
        """Publish one message.  Without confirm mode it waits only under back-pressure (full
        socket buffer, blocked connection); in confirm mode it waits for the broker's verdict
        and raises PublishNacked or MessageReturned."""
        if self._confirm:
            future = await self.publish_async(exchange, routing_key, body, properties, mandatory=mandatory)
            try:
                await future
            finally:
                if future in self._failures:  # raised here: not reported again by wait_for_confirms
                    self._failures.remove(future)
            return
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if not (connection._unblocked.is_set() and connection._writable.is_set() and self._flow.is_set()):
            await self._wait_publishable()
        connection._core.publish(self.channel_id, exchange, routing_key, body, properties, mandatory)
        connection._flush_soon()

    async def publish_async(
        self,
        exchange: str,
        routing_key: str,
        body: Union[bytes, bytearray, memoryview, str],
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
        callback: Optional[Callable[["asyncio.Future[None]"], Any]] = None,
    ) -> "asyncio.Future[None]":
        """Publish in confirm mode; returns a future for the broker's verdict once the message
        is handed over (waiting only while ``max_in_flight`` publishes are unconfirmed)."""
        if not self._confirm:
            raise InvalidStateError("publish_async needs confirm mode: call confirm_select() first")
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if not (connection._unblocked.is_set() and connection._writable.is_set() and self._flow.is_set()):
            await self._wait_publishable()
        core = connection._core
        state = core.channel_state(self.channel_id)
        if state is not None and state.confirms is not None:
            slots = state.confirms.slots
            if len(slots) >= self._max_in_flight:
                low_water = self._max_in_flight // 2  # one wake-up per many acks
                while len(slots) > low_water:
                    await self._wait_confirm_progress()
        future = connection._loop.create_future()
        if callback is not None:
            future.add_done_callback(callback)
        core.publish(self.channel_id, exchange, routing_key, body, properties, mandatory, False, future)
        connection._flush_soon()
        return future

    async def publish_encoded(self, frames: Any, count: int) -> "Optional[asyncio.Future[None]]":
        """Send ``count`` publishes already encoded as frames for this channel (for example
        by :class:`amqwire.spark.encode.PublishEncoder`), as they are.

        In confirm mode returns one future for all of them: its result is None once the
        broker acked every one; it fails with the first nack or return (of frames encoded
        ``mandatory``).  Waits while the confirm window (``max_in_flight``) is full.
        Without confirm mode returns None.  ``frames`` must stay unchanged until written.
        """
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        if not (connection._unblocked.is_set() and connection._writable.is_set() and self._flow.is_set()):
            await self._wait_publishable()
        core = connection._core
        token = None
        if self._confirm:
            state = core.channel_state(self.channel_id)
            if state is not None and state.confirms is not None:
                slots = state.confirms.slots
                room = max(self._max_in_flight - count, 0)
                while slots and len(slots) > room:
                    await self._wait_confirm_progress()
            token = _BatchConfirm(connection._loop.create_future(), count)
        try:
            core.publish_encoded(self.channel_id, frames, count, token)
        except InvalidStateError:
            self._check()
            raise
        connection._flush_soon()
        return None if token is None else token.future

    def batch(self) -> contextlib.AbstractContextManager:
        """Publishes are batched by the event loop already; kept for the blocking API's sake."""
        return contextlib.nullcontext()

    async def _wait_confirm_progress(self) -> None:
        self._check()
        connection = self._connection
        connection._flush()
        waiter = self._confirm_waiter
        if waiter is None or waiter.done():
            waiter = self._confirm_waiter = connection._loop.create_future()
        await waiter

    async def confirm_select(self, *, max_in_flight: int = 10000) -> None:
        """Turn on publisher confirms.  ``max_in_flight``: unconfirmed publishes allowed at once."""
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        await self._rpc(self._confirm_method())
        self._confirm = True
        self._max_in_flight = max_in_flight

    async def wait_for_confirms(self, timeout: Optional[float] = None) -> None:
        """Wait until every publish is answered; raise the first failure since the last call."""
        if not self._confirm:
            raise InvalidStateError("wait_for_confirms needs confirm mode: call confirm_select() first")

        async def drained() -> None:
            while True:
                state = self._connection._core.channel_state(self.channel_id)
                if state is None or state.confirms is None or not state.confirms.slots:
                    return
                if self._closed is not None or self._connection._error is not None:
                    return
                await self._wait_confirm_progress()

        await asyncio.wait_for(drained(), timeout)
        failures = [future.exception() for future in self._failures]
        self._failures = []
        if failures:
            error = failures[0]
            error.failures = failures  # type: ignore[union-attr]
            raise error  # type: ignore[misc]
        if self._closed is not None:
            self._check()

    def _on_confirmed(self, event: proto.Confirmed) -> None:
        if event.ack and event.returned is None:
            for future in event.tokens:
                if not future.done():
                    future.set_result(None)
        else:
            returned = event.returned or {}
            for seqno, future in zip(event.seqnos, event.tokens):
                message = returned.get(seqno)
                if message is not None:
                    error: Optional[BaseException] = MessageReturned(message, seqno)
                elif not event.ack:
                    error = PublishNacked(seqno)
                else:
                    error = None
                if future.done():
                    continue
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)
                    self._failures.append(future)
        waiter = self._confirm_waiter
        if waiter is not None:
            self._confirm_waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _on_return(self, message: ReturnedMessage) -> None:
        for fn in self._return_callbacks:
            try:
                result = fn(message)
                if asyncio.iscoroutine(result):
                    asyncio.ensure_future(result)
            except Exception:
                log.exception("return callback %r failed", fn)

    def add_on_return_callback(self, fn: Callable[[ReturnedMessage], Any]) -> None:
        """``fn(returned)`` for every message the broker returns (called in the loop)."""
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
    ) -> _ConsumerOpener:
        """Subscribe to a queue: ``consumer = await ch.consume(q)`` or ``async with ch.consume(q) as c``.
        With ``callback``, it is called in the loop for each message (coroutines become tasks)."""
        method = BasicConsume(0, queue, consumer_tag, False, no_ack, exclusive, False, arguments)
        return _ConsumerOpener(self, Consumer(self, queue, callback, method))

    basic_consume = consume

    async def _subscribe(self, consumer: Consumer) -> None:
        self._check()
        tag = consumer._method.consumer_tag
        if tag:
            self._consumers[tag] = consumer
        self._pending_consumer = consumer
        try:
            reply = await self._rpc_raw(consumer._method)
        except BaseException:
            self._consumers.pop(tag, None)
            raise
        finally:
            self._pending_consumer = None
        consumer.consumer_tag = reply.consumer_tag
        self._consumers[reply.consumer_tag] = consumer

    async def basic_cancel(self, consumer_tag: str) -> None:
        consumer = self._consumers.get(consumer_tag)
        await self._rpc(self._cancel_method(consumer_tag))
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

    async def basic_get(self, queue: str, *, no_ack: bool = False) -> Optional[Message]:
        """One message from the queue, or None if it is empty."""
        return await self._rpc(BasicGet(0, queue, no_ack))  # type: ignore[no-any-return]

    def _ack_tag(self, delivery_tag: int) -> int:
        if self._tag_offset:
            delivery_tag -= self._tag_offset
            if delivery_tag <= 0:
                log.info("ack of a delivery from before recovery ignored")
        return delivery_tag

    async def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        connection = self._connection
        if self._closed is not None or connection._error is not None:
            self._check()
        tag = self._ack_tag(delivery_tag)
        if tag > 0 or not self._tag_offset:
            connection._core.basic_ack(self.channel_id, tag, multiple)
            # Now, not at the end of the loop pass: a consumer busy with its buffered
            # messages would otherwise hold back the acks that let the broker send more.
            connection._flush()

    async def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._check()
        tag = self._ack_tag(delivery_tag)
        if tag > 0 or not self._tag_offset:
            self._connection._core.basic_nack(self.channel_id, tag, multiple, requeue)
            self._connection._flush()

    async def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        self._check()
        tag = self._ack_tag(delivery_tag)
        if tag > 0 or not self._tag_offset:
            self._connection._core.basic_reject(self.channel_id, tag, requeue)
            self._connection._flush()

    async def basic_qos(self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False) -> None:
        await super().basic_qos(prefetch_count, prefetch_size=prefetch_size, global_=global_)
        self._qos = (prefetch_count, prefetch_size, global_)

    # ------------------------------------------------------------------ closing

    async def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the channel.  Safe to call twice, and after the connection is gone."""
        if not self.is_open:
            self._closed = self._closed or InvalidStateError(f"channel {self.channel_id} is closed")
            return
        connection = self._connection
        waiter = connection._loop.create_future()
        self._waiter = waiter
        try:
            connection._core.close_channel(self.channel_id, reply_code, reply_text)
            connection._flush()
            await asyncio.wait_for(waiter, connection.params.connection_timeout)
        except (AMQPConnectionError, InvalidStateError, asyncio.TimeoutError, ChannelClosed) as exc:
            log.debug("channel %d close: %s", self.channel_id, exc)

    def _on_closed(self, event: proto.ChannelClosedEvent) -> None:
        if event.by_broker:
            error: BaseException = channel_closed(
                event.reply_code, event.reply_text, event.class_id, event.method_id, by_broker=True, channel=self.channel_id
            )
            log.info("%s", error)  # also raised to the caller: not a warning by itself
        else:
            error = ChannelClosed(event.reply_code, event.reply_text, by_broker=False, channel=self.channel_id)
        self._closed = error
        waiter = self._waiter
        if not event.by_broker and waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
        self._fail_everything(error, event.unconfirmed, False)

    def _on_connection_lost(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        if not recovering:
            self._closed = self._closed or error
        self._fail_everything(error, unconfirmed, recovering)

    def _fail_everything(self, error: BaseException, unconfirmed: Any, recovering: bool) -> None:
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        for seqno, future in unconfirmed:
            if not future.done():
                future.set_exception(PublishUnconfirmed(seqno, error))
                self._failures.append(future)
        if not recovering:
            reason = END if isinstance(error, InvalidStateError) else error
            for consumer in list(self._consumers.values()):
                consumer._finish(reason)
            self._consumers.clear()
        self._flow.set()
        confirm_waiter = self._confirm_waiter
        self._confirm_waiter = None
        if confirm_waiter is not None and not confirm_waiter.done():
            confirm_waiter.set_result(None)

    # ------------------------------------------------------------------ recovery

    async def _reopen(self) -> None:
        connection = self._connection
        connection._core.open_channel(self.channel_id)
        waiter = connection._loop.create_future()
        self._waiter = waiter
        connection._channels[self.channel_id] = self
        connection._flush()
        await asyncio.wait_for(waiter, connection.params.connection_timeout)
        self._tag_offset = self._tag_before_recovery
        if self._qos is not None:
            count, size, global_ = self._qos
            await ChannelOperations.basic_qos(self, count, prefetch_size=size, global_=global_)
        if self._confirm:
            await self._rpc_raw(self._confirm_method())

    async def _resubscribe(self, topology: Optional[Topology]) -> None:
        for tag, consumer in list(self._consumers.items()):
            method = consumer._method
            queue_name = topology.renamed.get(consumer.queue, consumer.queue) if topology is not None else consumer.queue
            consumer.queue = queue_name
            consumer._method = BasicConsume(0, queue_name, tag, method.no_local, method.no_ack, method.exclusive,
                                            False, method.arguments)
            self._consumers.pop(tag, None)
            await self._subscribe(consumer)
