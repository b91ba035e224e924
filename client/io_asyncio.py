"""The asyncio transport's I/O and waiting: an ``asyncio.Protocol``, loop timers, futures.

A connection of the asyncio transport owns one ``AsyncioIO``; each of its channels a
``ChannelWaits`` and each consumer an ``Inbox`` made by it.  The connection, its channels
and consumers are written once (``operations_async.py``); what is particular to asyncio is
here.

Publishes made in one pass of the event loop go out in one socket write (the flush is
scheduled with ``call_soon``, and forced once 256 KiB are queued); when the socket's write
buffer is full, or the broker blocks the connection, publishing waits.

Callbacks and listeners may be coroutine functions: they run as tasks that the connection
keeps until they finish, and their exceptions go to the connection's exception handler
(default: logged), never lost.

Heartbeats are sent by a loop timer: code that blocks the event loop for longer than a
heartbeat interval stops them, as with any asyncio library (use ``asyncio.to_thread``).
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections import deque
from typing import Any, Awaitable, Callable, Generator, Generic, Optional, TypeVar

from . import protocol as proto
from .connect import make_ssl_context, server_hostname
from .errors import AMQPConnectionError
from .io_contract import ProgressDeadline, heartbeat_check
from .message import AsyncMessage, Message
from .ack_path import channel_answer_delivery
from .loop_future import LoopConfirmFutures
from .publish_path import FLUSH_AT, NoLock, aio_publish_async  # NoLock compiled: the confirmed publish knows it and skips it
from .session import ChannelBase, ConnectionBase, ConsumerBase
from .url import ConnectionParameters

__all__ = ["AsyncioChannelAPI", "AsyncioConnectionAPI", "AsyncioIO", "ChannelWaits", "ConfirmFuture", "Inbox", "Opener",
           "Progress"]

# Python 3.12's selector transport sends writelines() pieces with sendmsg; before, it joins them.
_VECTORED_WRITELINES = sys.version_info >= (3, 12)
_T = TypeVar("_T")

#: What a confirm-mode publish returns on asyncio (the blocking transport's PublishFuture).
ConfirmFuture = asyncio.Future[None]


class Opener(Generic[_T]):
    """What a call that opens something returns on asyncio (``connect()``, ``channel()``,
    ``consume()``): ``x = await opener``, or ``async with opener as x`` (which closes it,
    or cancels the consumer, at the end)."""

    __slots__ = ("_opening", "_opened")

    def __init__(self, opening: Awaitable[_T]) -> None:
        self._opening = opening
        self._opened: Optional[_T] = None

    def __await__(self) -> Generator[Any, None, _T]:
        return self._opening.__await__()

    async def __aenter__(self) -> _T:
        self._opened = await self._opening
        return self._opened

    async def __aexit__(self, *exc: Any) -> None:
        if self._opened is not None:
            await self._opened.__aexit__(*exc)  # type: ignore[attr-defined]


class _StreamProtocol(asyncio.Protocol):
    """Forwards the transport's callbacks to the I/O of the current socket."""

    def __init__(self, io: "AsyncioIO") -> None:
        self.io = io

    def data_received(self, data: bytes) -> None:
        self.io.data_received(data)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.io.transport_lost(self, exc)

    def pause_writing(self) -> None:
        self.io.connection._set_write_paused(True)

    def resume_writing(self) -> None:
        self.io.connection._set_write_paused(False)


class AsyncioIO:
    """A connection's transport, heartbeat timer and ways of waiting, on an event loop."""

    __slots__ = ("connection", "loop", "_transport", "_stream", "_heartbeat_timer", "_monitor", "_suspect",
                 "_recovery_task", "_tasks")

    consumer_workers = 0

    def __init__(self, connection: "ConnectionBase", consumer_workers: int) -> None:
        if consumer_workers:
            raise ValueError(
                "consumer_workers is for the blocking transport: asyncio runs callbacks in the loop "
                "(make them coroutines, or use asyncio.to_thread for blocking work)"
            )
        self.connection = connection
        self.loop = asyncio.get_running_loop()
        self._transport: Optional[asyncio.Transport] = None
        self._stream: Optional[_StreamProtocol] = None
        self._heartbeat_timer: Optional[asyncio.TimerHandle] = None
        self._monitor = proto.HeartbeatMonitor(0, time.monotonic())
        self._suspect = False
        self._recovery_task: Optional["asyncio.Task[None]"] = None
        self._tasks: set[Any] = set()  # callback tasks, kept until done

    # what waits and what is waited for -----------------------------------------------------

    @staticmethod
    def new_lock() -> NoLock:
        return NoLock()

    def new_waiter(self) -> "asyncio.Future[Any]":
        return self.loop.create_future()

    @staticmethod
    def new_flag() -> asyncio.Event:
        return asyncio.Event()

    async def wait(self, waiter: "asyncio.Future[Any]", timeout: Optional[float]) -> Any:
        """The waiter's result; TimeoutError after ``timeout`` seconds (the waiter stays)."""
        if waiter.done() or timeout is None:
            return await waiter
        try:
            # shield: a timeout leaves the waiter pending, so a late reply still lands on it
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no result within {timeout} s") from None

    @staticmethod
    async def wait_flag(flag: asyncio.Event, timeout: Optional[float]) -> bool:
        """Wait until ``flag`` is set; False if ``timeout`` passed first."""
        if flag.is_set():
            return True
        try:
            await asyncio.wait_for(flag.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    @staticmethod
    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    @staticmethod
    def on_io_thread() -> bool:
        return False

    def channel_waits(self, channel: "ChannelBase[AsyncMessage]") -> "ChannelWaits":
        return ChannelWaits(channel, self)

    def inbox(self, consumer: "ConsumerBase") -> "Inbox":
        return Inbox(consumer, self)

    # the socket ----------------------------------------------------------------------------

    async def open_transport(self, params: ConnectionParameters) -> None:
        """Connect and start reading into the connection."""
        connection = self.connection
        context = None
        if params.ssl or connection._ssl_context is not None:
            context = connection._ssl_context or make_ssl_context(params)
        try:
            transport, stream = await asyncio.wait_for(
                self.loop.create_connection(
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
        with connection._lock:
            connection._socket_up(transport.abort)
            connection._peer = transport.get_extra_info("peername")
            self._transport = transport
            self._stream = stream
            connection._set_write_paused(False)
            self._monitor = proto.HeartbeatMonitor(0, time.monotonic())

    def started(self) -> None:
        """The handshake is done: start the heartbeat timer."""
        heartbeat = self.connection.heartbeat
        monitor = self._monitor
        monitor.interval = heartbeat
        monitor.last_received = monitor.last_sent = monitor.last_check = time.monotonic()
        if heartbeat:
            self._heartbeat_timer = self.loop.call_later(heartbeat / 2, self._on_heartbeat_timer)

    def stop_io(self) -> None:
        """Abort the transport and stop the heartbeat timer."""
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
            self._heartbeat_timer = None
        transport = self._transport
        if transport is not None:
            transport.abort()
        self.connection._set_write_paused(False)

    def data_received(self, data: Any) -> None:
        self._monitor.last_received = time.monotonic()
        self.connection._data_received(data)

    def transport_lost(self, stream: _StreamProtocol, exc: Optional[Exception]) -> None:
        if stream is self._stream:
            connection = self.connection
            connection._on_lost(connection._eof_error(exc))

    def begin_recovery(self, recover: Callable[[], Awaitable[None]]) -> None:
        self._recovery_task = self.loop.create_task(recover())  # type: ignore[arg-type]

    def cancel_recovery(self) -> None:
        """close() was called: stop a recovery under way."""
        task = self._recovery_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def closed_for_good(self) -> None:
        """No recovery follows (nobody waits for the I/O here)."""

    def after_close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def discard(self) -> None:
        """connect() failed: nothing of this I/O outlives it."""

    # user callbacks ------------------------------------------------------------------------

    def run_callback(self, fn: Callable[[Any], Any], arg: Any, where: str = "consumer", channel: Any = None) -> None:
        """Call user code now, in the loop; a coroutine it returns becomes a task."""
        self.connection._call_user(fn, arg, where, channel)

    def spawn(self, awaitable: Any, fn: Any, where: str = "consumer", channel: Any = None, arg: Any = None) -> None:
        """Run a callback's coroutine as a task the connection keeps until it is done."""
        task = self.loop.create_task(awaitable) if asyncio.iscoroutine(awaitable) else asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._task_done(done, fn, where, channel, arg))

    def _task_done(self, task: "asyncio.Future[Any]", fn: Any, where: str, channel: Any, arg: Any) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                self.connection._callback_failed(error, fn, where, channel, arg)

    # writing -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything the core has queued."""
        connection = self.connection
        connection._flush_later = False
        transport = self._transport
        if transport is None or not connection._lifecycle.has_socket:
            return
        pieces = connection._core.buffers_to_send() if connection._observer is None else connection._take_output()
        if not pieces:
            return
        if len(pieces) == 1:
            transport.write(pieces[0])
        elif _VECTORED_WRITELINES:
            transport.writelines(pieces)  # sendmsg from the body slices, no copy
        else:
            for piece in pieces:  # writelines would join (copy) them all first
                transport.write(piece)

    def flush_soon(self) -> None:
        """Write at the end of this pass of the loop (now, once FLUSH_AT bytes wait)."""
        connection = self.connection
        if connection._core.pending_output >= FLUSH_AT:
            self.flush()
        elif not connection._flush_later:
            connection._flush_later = True
            self.loop.call_soon(self.flush)

    flush_acks = flush

    @staticmethod
    def batch() -> contextlib.AbstractContextManager[None]:
        """Publishes are batched by the event loop already: one write per pass of the loop."""
        return contextlib.nullcontext()

    # heartbeats ----------------------------------------------------------------------------

    def _on_heartbeat_timer(self) -> None:
        self._heartbeat_timer = None
        connection = self.connection
        if not connection._lifecycle.has_socket or self._transport is None:
            return
        monitor = self._monitor
        now = time.monotonic()
        if monitor.timed_out(now) and not self._suspect:
            # The loop may have been busy: read what is waiting before judging.
            self._suspect = True
            self._heartbeat_timer = self.loop.call_later(0.05, self._on_heartbeat_timer)
            return
        self._suspect = False
        if not heartbeat_check(connection, monitor, now, self._send_heartbeat):
            return
        delay = monitor.next_deadline(now)
        self._heartbeat_timer = self.loop.call_later(max(delay or 0.0, 0.01), self._on_heartbeat_timer)


    def _send_heartbeat(self) -> None:
        self.connection._core.send_heartbeat()
        self.flush()


class AsyncioConnectionAPI:
    """What only the asyncio transport's Connection offers: nothing (the blocking one's
    ``process_events`` is ``io_threads.ThreadConnectionAPI``)."""

    __slots__ = ()


class AsyncioChannelAPI:
    """The asyncio transport's way into a confirmed publish: a compiled coroutine (the
    blocking one's, ``io_threads.ThreadChannelAPI``, a compiled function); both go on in
    ``publish_path.ChannelPublisher`` and the channel's ``_publish_waiting``.  And its ack,
    a coroutine around what both transports' acks do (``ack_path``)."""

    __slots__ = ()

    publish_async = aio_publish_async

    async def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        """Acknowledge a delivery (``multiple``: and every one before it on this channel);
        written at once."""
        channel_answer_delivery(self, "basic_ack", delivery_tag, multiple)


class Progress:
    """Tasks waiting until a condition that others change holds: they look again at each
    ``notify`` (and every ``look`` seconds if given)."""

    __slots__ = ("_loop", "_changed")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._changed: Optional["asyncio.Future[None]"] = None  # set by the next notify

    async def wait_until(self, ready: Callable[[], bool], deadline: ProgressDeadline, look: Optional[float] = None,
                         before_each: Optional[Callable[[], None]] = None) -> None:
        """Until ``ready()``, calling ``before_each()`` before each wait; OperationTimeout once
        ``deadline`` passes."""
        while not ready():
            if before_each is not None:
                before_each()
            changed = self._changed
            if changed is None or changed.done():
                changed = self._changed = self._loop.create_future()
            left = deadline.left(look)
            if left is None:
                await changed
                continue
            # shield: the future is shared by every waiter; a timeout must not cancel it for the others
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(changed), left)

    def notify(self) -> None:
        changed = self._changed
        if changed is not None:
            self._changed = None
            if not changed.done():
                changed.set_result(None)


class ChannelWaits(LoopConfirmFutures):
    """A channel's confirm futures (made, handed out and settled by the compiled
    ``LoopConfirmFutures``) and its waits for confirms, on the loop."""

    __slots__ = ("_io", "rpc_lock", "_progress")

    def __init__(self, channel: "ChannelBase[AsyncMessage]", io: AsyncioIO) -> None:
        super().__init__(channel, io.connection, io.loop)
        self._io = io
        self.rpc_lock = asyncio.Lock()  # one request at a time on the channel
        self._progress = Progress(io.loop)

    async def wait_progress(self, ready: Callable[[], bool], timeout: Optional[float], what: str,
                            below: Optional[int] = None) -> None:
        """Wait until ``ready()`` (checked when confirms bring the channel's unsettled count
        down to ``below``, at every confirm if None, and whenever the channel fails);
        OperationTimeout naming ``what`` after ``timeout``."""
        if ready():
            return
        channel = self._channel
        channel._progress_wanted(below)
        try:
            await self._progress.wait_until(ready, ProgressDeadline(timeout, what, channel.channel_id),
                                            before_each=self._io.flush)
        finally:
            channel._progress_done(below)

    def notify_progress(self) -> None:
        """Confirms moved (or the channel failed): wake who waits for them."""
        self._progress.notify()


class Mailbox:
    """Messages received and not taken yet, for the task that iterates a consumer (of a
    queue, or of a stream: the stream client's inbox on asyncio is this one)."""

    __slots__ = ("_consumer", "_loop", "buffer", "_waiter")

    def __init__(self, consumer: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._consumer = consumer
        self._loop = loop
        self.buffer: deque[Any] = deque()
        self._waiter: Optional["asyncio.Future[None]"] = None

    def deliver_run(self, messages: list[Any]) -> None:
        """Several messages in order (what one read or one chunk brought)."""
        self.buffer.extend(messages)
        self.wake()

    def wake(self) -> None:
        """Messages came, or the consumer ended: its reader looks."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def next(self, timeout: Optional[float]) -> Any:
        """The next message, the end marker (END or an exception), or None once ``timeout``
        has passed with none (a wake-up that brought nothing does not restart it)."""
        buffer = self.buffer
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if buffer:
                return buffer.popleft()
            consumer = self._consumer
            if not consumer.active:
                return consumer._finished
            waiter = self._waiter = self._loop.create_future()
            if deadline is None:
                await waiter
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(waiter, left)
            except asyncio.TimeoutError:
                if not buffer:
                    return None


class Inbox(Mailbox):
    """A queue consumer's deliveries: its Mailbox, or its callback, called in the loop (a
    coroutine function's as a task)."""

    __slots__ = ("_io", "_is_coroutine")

    def __init__(self, consumer: "ConsumerBase", io: AsyncioIO) -> None:
        super().__init__(consumer, io.loop)
        self._io = io
        self._is_coroutine = asyncio.iscoroutinefunction(consumer.callback)

    def deliver(self, message: Message) -> None:
        consumer = self._consumer
        callback = consumer.callback
        if callback is None:
            self.buffer.append(message)
            waiter = self._waiter  # wake(), inlined: this runs for every delivery
            if waiter is not None:
                self._waiter = None
                if not waiter.done():
                    waiter.set_result(None)
        elif self._is_coroutine:
            self._io.spawn(callback(message), callback, "consumer", consumer.channel, message)
        else:
            try:
                callback(message)
            except Exception as exc:
                self._io.connection._callback_failed(exc, callback, "consumer", consumer.channel, message)

    def deliver_run(self, messages: list[Message]) -> None:
        """Several deliveries in order (the run the dispatch of one read found)."""
        if self._consumer.callback is None:
            Mailbox.deliver_run(self, messages)
        else:
            for message in messages:
                self.deliver(message)
