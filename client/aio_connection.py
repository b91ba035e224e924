"""The asyncio transport: an asyncio.Protocol under the shared client layer.

Users import it as ``amqwire.client.aio``, which adds the asyncio Producer: this module
imports nothing of the producer, so the producer can build on it.

Same names and meaning as the blocking transport; every call that waits is a coroutine
(the flows are written once, in ``operations_async.py``).  Publishes made in one pass of
the event loop go out in one socket write (the flush is scheduled with ``call_soon``, and
forced once 256 KiB are queued); when the socket's write buffer is full, or the broker
blocks the connection, publishing waits.

Cancellation: a cancelled request (``asyncio.wait_for(ch.queue_declare(...), 1)``) leaves
the channel usable; its late reply is discarded.  Callbacks and listeners may be
coroutine functions: they run as tasks that the connection keeps until they finish, and
their exceptions go to the connection's exception handler (default: logged), never lost.

Heartbeats are sent by a loop timer: code that blocks the event loop for longer than a
heartbeat interval stops them, as with any asyncio library (use ``asyncio.to_thread``).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generator, Optional, Sequence, Union


from . import protocol as proto
from .connect import make_ssl_context, server_hostname
from .errors import AMQPConnectionError, HeartbeatTimeout, OperationTimeout
from .message import Message
from .operations_async import AsyncChannel, AsyncConnection, AsyncConsumer
from .recovery import END
from .session import FLUSH_AT, ConnectOptions, connection_arguments
from .url import ConnectionParameters, ParametersLike

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger("amqwire.client")

__all__ = ["connect", "Connection", "Channel", "Consumer"]

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
    url: Union[ParametersLike, Sequence[ParametersLike], None] = None, **options: Unpack[ConnectOptions]
) -> _Opener:
    """Open a connection: ``conn = await connect(url)`` or ``async with connect(url) as conn``."""
    parameters, connection_options = connection_arguments(url, options)

    async def factory() -> Connection:
        connection = Connection(parameters, **connection_options)
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
        self.connection._set_write_paused(True)

    def resume_writing(self) -> None:
        self.connection._set_write_paused(False)


class _Unlocked:
    """The asyncio transport's ``_lock``: everything runs in the loop's thread, so the
    shared layer's critical sections need no lock here."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class Connection(AsyncConnection):
    """An asyncio AMQP connection.  ``async with``, or ``await close()``."""

    __slots__ = (
        "_loop", "_transport", "_stream", "_heartbeat_timer", "_monitor", "_suspect",
        "_recovery_task", "_tasks"
    )

    def __init__(self, parameters: list[ConnectionParameters], *, consumer_workers: int = 0, **options: Any) -> None:
        if consumer_workers:
            raise ValueError(
                "consumer_workers is for the blocking transport: asyncio runs callbacks in the loop "
                "(make them coroutines, or use asyncio.to_thread for blocking work)"
            )
        self._loop = asyncio.get_running_loop()
        self._transport: Optional[asyncio.Transport] = None
        self._stream: Optional[_StreamProtocol] = None
        self._heartbeat_timer: Optional[asyncio.TimerHandle] = None
        self._monitor = proto.HeartbeatMonitor(0, time.monotonic())
        self._suspect = False
        self._recovery_task: Optional["asyncio.Task[None]"] = None
        self._tasks: set[Any] = set()  # callback tasks, kept until done
        super().__init__(parameters, **options)

    # waiting primitives ------------------------------------------------------------------

    def _new_lock(self) -> _Unlocked:
        return _Unlocked()

    def _new_waiter(self) -> "asyncio.Future[Any]":
        return self._loop.create_future()

    def _new_flag(self) -> asyncio.Event:
        return asyncio.Event()

    async def _wait(self, waiter: "asyncio.Future[Any]", timeout: Optional[float]) -> Any:
        if waiter.done() or timeout is None:
            return await waiter
        try:
            # shield: a timeout leaves the waiter pending, so a late reply still lands on it
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no result within {timeout} s") from None

    async def _wait_flag(self, flag: asyncio.Event, timeout: Optional[float]) -> bool:
        if flag.is_set():
            return True
        try:
            await asyncio.wait_for(flag.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _make_channel(self, channel_id: int) -> "Channel":
        return Channel(self, channel_id)

    # the socket ----------------------------------------------------------------------------

    async def _open_transport(self, params: ConnectionParameters) -> None:
        context = None
        if params.ssl or self._ssl_context is not None:
            context = self._ssl_context or make_ssl_context(params)
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
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._socket_up(transport.abort)
            self._transport = transport
            self._stream = stream
            self._set_write_paused(False)
            self._monitor = proto.HeartbeatMonitor(0, time.monotonic())

    def _started(self) -> None:
        self._monitor.interval = self.heartbeat
        self._monitor.last_received = self._monitor.last_sent = self._monitor.last_check = time.monotonic()
        if self.heartbeat:
            self._heartbeat_timer = self._loop.call_later(self.heartbeat / 2, self._on_heartbeat_timer)

    def _stop_io(self) -> None:
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None
        transport = self._transport
        if transport is not None:
            transport.abort()
        self._set_write_paused(False)

    def _transport_lost(self, stream: _StreamProtocol, exc: Optional[Exception]) -> None:
        if stream is self._stream:
            self._on_lost(self._eof_error(exc))

    def _begin_recovery(self) -> None:
        self._recovery_task = self._loop.create_task(self._recover())

    def _cancel_recovery(self) -> None:
        task = self._recovery_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def _after_close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _run_callback(self, fn: Callable[[Any], Any], arg: Any, where: str = "consumer", channel: Any = None) -> None:
        self._call_user(fn, arg, where, channel)

    def _spawn(self, awaitable: Any, fn: Any, where: str = "consumer", channel: Any = None, arg: Any = None) -> None:
        task = self._loop.create_task(awaitable) if asyncio.iscoroutine(awaitable) else asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._task_done(done, fn, where, channel, arg))

    def _task_done(self, task: "asyncio.Future[Any]", fn: Any, where: str, channel: Any, arg: Any) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                self._callback_failed(error, fn, where, channel, arg)

    # writing -------------------------------------------------------------------------------

    def _flush(self) -> None:
        self._flush_later = False
        transport = self._transport
        if transport is None or not self._lifecycle.has_socket:
            return
        pieces = self._core.buffers_to_send() if self._observer is None else self._take_output()
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
        if self._core.pending_output >= FLUSH_AT:
            self._flush()
        elif not self._flush_later:
            self._flush_later = True
            self._loop.call_soon(self._flush)

    _flush_acks = _flush

    # heartbeats ----------------------------------------------------------------------------

    def _data_received(self, data: Any) -> None:
        self._monitor.last_received = time.monotonic()
        super()._data_received(data)

    def _on_heartbeat_timer(self) -> None:
        self._heartbeat_timer = None
        if not self._lifecycle.has_socket or self._transport is None:
            return
        monitor = self._monitor
        now = time.monotonic()
        if monitor.timed_out(now):
            if not self._suspect:
                # The loop may have been busy: read what is waiting before judging.
                self._suspect = True
                self._heartbeat_timer = self._loop.call_later(0.05, self._on_heartbeat_timer)
                return
            self._on_lost(HeartbeatTimeout(f"no data from {self.params} for {2 * self.heartbeat} s (two heartbeat intervals)"))
            return
        self._suspect = False
        if monitor.send_due(now, self._core.bytes_sent):
            self._core.send_heartbeat()
            self._flush()
            monitor.sent(now, self._core.bytes_sent)
        delay = monitor.next_deadline(now)
        self._heartbeat_timer = self._loop.call_later(max(delay or 0.0, 0.01), self._on_heartbeat_timer)

    # public API ----------------------------------------------------------------------------

    def channel(self, channel_id: Optional[int] = None, *, timeout: Optional[float] = None) -> "_ChannelOpener":
        """Open a channel: ``ch = await conn.channel()`` or ``async with conn.channel() as ch``."""
        return _ChannelOpener(self._open_channel(channel_id, timeout))


class _ChannelOpener:
    def __init__(self, coro: Awaitable["Channel"]) -> None:
        self._coro = coro
        self._channel: Optional[Channel] = None

    def __await__(self) -> Generator[Any, None, "Channel"]:
        return self._coro.__await__()

    async def __aenter__(self) -> "Channel":
        self._channel = await self._coro
        return self._channel

    async def __aexit__(self, *exc: Any) -> None:
        if self._channel is not None:
            await self._channel.close()


class Consumer(AsyncConsumer):
    """A subscription: ``async for msg in consumer``, or a callback given to ``consume()``."""

    channel: "Channel"

    def __init__(self, channel: "Channel", queue_name: str, callback: Optional[Callable[[Message], Any]],
                 method: Any) -> None:
        super().__init__(channel, queue_name, callback, method)
        self._buffer: deque[Any] = deque()
        self._waiter: Optional["asyncio.Future[None]"] = None
        self._is_coroutine = asyncio.iscoroutinefunction(callback)

    def _deliver(self, message: Message) -> None:
        callback = self.callback
        if callback is None:
            self._buffer.append(message)
            waiter = self._waiter  # _wake(), inlined: this runs for every delivery
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)
        elif self._is_coroutine:
            self.channel._connection._spawn(callback(message), callback, "consumer", self.channel, message)
        else:
            try:
                callback(message)
            except Exception as exc:
                self.channel._connection._callback_failed(exc, callback, "consumer", self.channel, message)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> Message:
        buffer = self._buffer
        if buffer:  # without the coroutine of get(): this runs for every delivery
            return buffer.popleft()  # type: ignore[no-any-return]
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
            if not self.active:
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


class _ConsumerOpener:
    def __init__(self, channel: "Channel", consumer: Consumer, timeout: Optional[float]) -> None:
        self._channel = channel
        self._consumer = consumer
        self._timeout = timeout

    def __await__(self) -> Generator[Any, None, Consumer]:
        return self._start().__await__()

    async def _start(self) -> Consumer:
        await self._channel._subscribe(self._consumer, self._timeout)
        return self._consumer

    async def __aenter__(self) -> Consumer:
        return await self._start()

    async def __aexit__(self, *exc: Any) -> None:
        await self._consumer.cancel()


class _BatchFuture:
    """The confirm token of a publish_encoded batch: settles its future when the last of
    ``count`` publishes is acked, or at the first failure."""

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


class Channel(AsyncChannel["asyncio.Future[None]", _ConsumerOpener]):
    """An AMQP channel on the asyncio transport."""

    __slots__ = ("_rpc_lock", "_progress")

    _connection: Connection

    def __init__(self, connection: Connection, channel_id: int) -> None:
        super().__init__(connection, channel_id)
        self._rpc_lock = asyncio.Lock()
        self._progress: Optional["asyncio.Future[None]"] = None

    # primitives ----------------------------------------------------------------------------

    async def _wait_progress(self, ready: Callable[[], bool], timeout: Optional[float], what: str,
                             below: Optional[int] = None) -> None:
        if ready():
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        connection = self._connection
        self._progress_wanted(below)
        try:
            while not ready():
                connection._flush()
                waiter = self._progress
                if waiter is None or waiter.done():
                    waiter = self._progress = connection._loop.create_future()
                if deadline is None:
                    await waiter
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OperationTimeout(what, timeout, self.channel_id)
                try:
                    await asyncio.wait_for(asyncio.shield(waiter), left)
                except asyncio.TimeoutError:
                    raise OperationTimeout(what, timeout, self.channel_id) from None
        finally:
            self._progress_done(below)

    def _notify_progress(self) -> None:
        waiter = self._progress
        if waiter is not None:
            self._progress = None
            if not waiter.done():
                waiter.set_result(None)

    def _new_token(self, count: int, callback: Any) -> Any:
        future = self._connection._loop.create_future()
        if callback is not None:
            future.add_done_callback(self._guarded(callback))
        return future if count == 1 else _BatchFuture(future, count)

    def _token_error(self, token: Any) -> Optional[BaseException]:
        error: Optional[BaseException] = token.exception()
        return error

    def _guarded(self, callback: Callable[[Any], Any]) -> Callable[[Any], None]:
        """A publish-future callback whose exception (or coroutine) the connection handles."""
        connection = self._connection

        def run(future: Any) -> None:
            connection._call_user(callback, future, "publish", self)

        return run

    def _issued(self, token: Any, seqno: int) -> "asyncio.Future[None]":
        future: asyncio.Future[None] = token.future if type(token) is _BatchFuture else token
        return future

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Publishes are batched by the event loop already; kept for the blocking API's sake."""
        return contextlib.nullcontext()

    # consuming -----------------------------------------------------------------------------

    def _new_consumer(self, queue: str, callback: Optional[Callable[[Message], Any]], method: Any) -> Consumer:
        return Consumer(self, queue, callback, method)

    def _subscription(self, consumer: Consumer, timeout: Optional[float]) -> _ConsumerOpener:
        return _ConsumerOpener(self, consumer, timeout)

