"""The blocking transport's I/O and waiting: a socket, an I/O thread, threads that wait.

A connection of the blocking transport owns one ``ThreadIO``; each of its channels a
``ChannelWaits`` and each consumer an ``Inbox`` made by it.  The connection, its channels
and consumers are written once (``operations_async.py``, generated into
``operations_sync.py``); what is particular to threads and sockets is here.

An I/O thread per connection reads the socket and hands what it read to the connection
(``session.py``), which routes the events: replies wake the caller waiting for them,
deliveries go to their consumer's inbox, confirms settle publish futures.  The same thread
sends heartbeats and notices a silent broker, so both keep working while user code is
busy.  User threads write: every call queues its frames in the core under the
connection's lock and then flushes them under ``_write_lock``, which keeps the byte
stream in order whichever thread writes.

A thread that waits for deliveries (a consumer iterator, ``process_events``) reads the
socket itself while it waits, rather than be handed what the I/O thread read: consuming
then runs in one thread, without a wake-up and a GIL switch per read.  Meanwhile the I/O
thread is parked: it keeps the heartbeats, and reads again once nobody has read for a
look (2-20 ms).  While it is parked, the other waits (RPCs, confirms) read too.

Callbacks: publish-future callbacks and listeners run on the thread that reads the socket
(keep them short, never wait on the connection there); consumer, default-consumer and
return callbacks run in the thread that calls ``Connection.process_events`` or
``Channel.start_consuming``, or with ``connect(..., consumer_workers=N)`` on a pool of N
threads, in order per channel (``workpool.py``).  Their exceptions go to the connection's
exception handler.
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
from collections import deque
from typing import Any, Callable, Iterator, NoReturn, Optional, Protocol

from . import protocol as proto
from .connect import open_socket
from .errors import AMQPConnectionError, InvalidStateError
from .io_contract import ProgressDeadline, SyncConnectionIO, heartbeat_check
from .lifecycle import ChannelPhase, ConnectionStatus
from .message import Message
from .recovery import END
from .ack_path import blocking_basic_ack
from .publish_path import blocking_publish_async
from .session import ChannelBase, ConnectionBase, ConsumerBase
from .thread_future import ConfirmFutures, PublishFuture, ThreadFuture
from .thread_lock import ReentrantLock
from .write_path import thread_flush, thread_flush_acks
from .url import ConnectionParameters
from .workpool import WorkPool

log = logging.getLogger("amqwire.client")

__all__ = ["ThreadIO", "ChannelWaits", "Inbox", "Progress", "PublishFuture", "ThreadChannelAPI", "ThreadConnectionAPI",
           "ThreadFuture"]

_RECV_SIZE = 256 * 1024
_PARK_MIN = 0.002  # the parked I/O thread's first look, then twice as long up to _PARK_MAX
_PARK_MAX = 0.02
_TAKE_OVER = 0.05  # seconds a waiting reader waits for the I/O thread to finish its read


class ThreadIO:
    """A connection's socket, I/O thread and ways of waiting, on threads."""

    __slots__ = (
        "_connection", "_pool", "_write_lock", "_callbacks", "_sock", "_tls", "thread", "_monitor", "_wakeup",
        "_read_lock", "_read_buffer", "_reads", "parked", "_resume", "_followers",
    )

    def __init__(self, connection: "ConnectionBase", consumer_workers: int) -> None:
        self._connection = connection
        self._pool: Optional[WorkPool] = None
        if consumer_workers:
            self._pool = WorkPool(consumer_workers, self._run_queued, f"amqwire-worker {connection.params.host}")
        self._write_lock = threading.Lock()
        self._callbacks: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._sock: Any = None
        self._tls = False
        self.thread: Optional[threading.Thread] = None  # the I/O thread of the current socket
        self._monitor = proto.HeartbeatMonitor(0, time.monotonic())
        self._wakeup = threading.Event()  # close() ends a recovery's sleep
        # Reading: whoever holds _read_lock reads the socket and dispatches what it read.
        # Usually the I/O thread, for one read at a time.  A thread that would wait for a
        # delivery (a consumer iterator) takes the lock and reads itself while it waits:
        # one thread then reads, dispatches and acks, with no hand-over between threads
        # (each costs wake-ups and GIL switches, about a third of the CPU of consuming).
        # While such a thread drives reading, the I/O thread is parked: it keeps the
        # heartbeats and takes reading back when nobody has read for a while.
        self._read_lock = threading.Lock()
        self._read_buffer = memoryview(bytearray(_RECV_SIZE))
        self._reads = 0  # reads so far, by any thread: the parked I/O thread watches it
        self.parked = False
        self._resume = threading.Event()  # ends the parked I/O thread's look early
        # Threads that found another reading and wait for it to dispatch what they wait for
        # (their ready() tests): when the reader leaves, the I/O thread serves those left.
        self._followers: list[Callable[[], object]] = []

    # what waits and what is waited for -----------------------------------------------------

    @staticmethod
    def new_lock() -> ReentrantLock:
        """The lock of the core and the state that the reader and callers share (an RLock
        the compiled publish takes in C)."""
        return ReentrantLock()

    @staticmethod
    def new_waiter() -> "ThreadFuture[Any]":
        return ThreadFuture()

    @staticmethod
    def new_flag() -> threading.Event:
        return threading.Event()

    def wait(self, waiter: Any, timeout: Optional[float]) -> Any:
        """The waiter's result; TimeoutError after ``timeout`` seconds (the waiter stays)."""
        if self.parked and not waiter.done():
            timeout = self.read_for(waiter.done, timeout)
        return waiter.result(timeout)

    def wait_flag(self, flag: threading.Event, timeout: Optional[float]) -> bool:
        """Wait until ``flag`` is set; False if ``timeout`` passed first."""
        if self.parked and not flag.is_set():
            timeout = self.read_for(flag.is_set, timeout)
        return flag.wait(timeout)

    def sleep(self, seconds: float) -> None:
        self._wakeup.wait(seconds)

    def on_io_thread(self) -> bool:
        """Whether the calling thread is the I/O thread (a callback runs on it)."""
        return threading.current_thread() is self.thread

    def channel_waits(self, channel: "ChannelBase[Message]") -> "ChannelWaits":
        return ChannelWaits(channel, self)

    def inbox(self, consumer: "ConsumerBase") -> "Inbox":
        return Inbox(consumer, self)

    # the socket ----------------------------------------------------------------------------

    def open_transport(self, params: ConnectionParameters) -> None:
        """Connect the socket and start the I/O thread reading it."""
        connection = self._connection
        sock = open_socket(params, connection._ssl_context)
        sock.setblocking(False)
        with connection._lock:
            connection._socket_up(sock.close)
            with contextlib.suppress(OSError):
                connection._peer = sock.getpeername()
            self._sock = sock
            self._tls = isinstance(sock, ssl.SSLSocket)
            self._monitor = proto.HeartbeatMonitor(0, time.monotonic())
            self.parked = False
            self._resume.clear()
        thread = threading.Thread(target=self._io_loop, args=(sock,), name=f"amqwire-io {params.host}:{params.port}",
                                  daemon=True)
        self.thread = thread
        thread.start()

    def started(self) -> None:
        """The handshake is done: heartbeats from now on."""
        self._monitor.interval = self._connection.heartbeat

    def stop_io(self) -> None:
        """Abort the socket (its I/O thread ends)."""
        # shutdown() wakes the I/O thread's select() at once; close() alone does not, and
        # close() then waited up to a second for the thread to notice.
        self._resume.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def begin_recovery(self, recover: Callable[[], Any]) -> None:
        threading.Thread(target=recover, name="amqwire-recovery", daemon=True).start()

    def cancel_recovery(self) -> None:
        """close() was called: end a recovery's sleep."""
        self._wakeup.set()

    def closed_for_good(self) -> None:
        """No recovery follows: whoever waits in process_events learns it."""
        self._callbacks.put(END)
        if self._pool is not None:
            self._pool.stop()  # what is queued still runs

    def after_close(self) -> None:
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._connection.params.connection_timeout)

    def discard(self) -> None:
        """connect() failed: the work pool's threads end."""
        if self._pool is not None:
            self._pool.stop()

    # user callbacks ------------------------------------------------------------------------

    def run_callback(self, fn: Callable[[Any], Any], arg: Any, where: str = "consumer", channel: Any = None) -> None:
        """A consumer, default-consumer or return callback: to the work pool (in order per
        channel) or to ``process_events``."""
        pool = self._pool
        if pool is None:
            self._callbacks.put((fn, arg, where, channel))
        else:
            pool.submit(channel.channel_id if channel is not None else 0, fn, arg, where, channel)

    def _run_queued(self, fn: Callable[[Any], Any], arg: Any, where: str, channel: Any) -> None:
        try:
            fn(arg)
        except Exception as exc:
            self._connection._callback_failed(exc, fn, where, channel, arg)

    def spawn(self, awaitable: Any, fn: Any, where: str, channel: Any, arg: Any) -> None:
        """A callback returned an awaitable: there is no loop to run it."""
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()
        self._connection._callback_failed(
            TypeError(f"{where} callback {fn!r} returned an awaitable: the blocking transport calls plain functions"),
            fn, where, channel, arg,
        )

    @property
    def consumer_workers(self) -> int:
        return 0 if self._pool is None else self._pool.size

    def process_events(self, timeout: Optional[float]) -> int:
        """Run queued consumer and return callbacks in this thread (see
        ``Connection.process_events``)."""
        ran = 0
        callbacks = self._callbacks
        if timeout != 0 and callbacks.empty():  # read in this thread while waiting (see _read_lock)
            timeout = self.read_for(lambda: not callbacks.empty(), timeout)
        try:
            item = callbacks.get(timeout=timeout) if timeout != 0 else callbacks.get_nowait()
        except queue.Empty:
            self._raise_if_failed()
            return 0
        while True:
            if item is END:
                callbacks.put(END)
                self._raise_if_failed()
                return ran
            fn, arg, where, channel = item
            try:
                fn(arg)
            except Exception as exc:
                self._connection._callback_failed(exc, fn, where, channel, arg)
            ran += 1
            try:
                item = callbacks.get_nowait()
            except queue.Empty:
                return ran

    def _raise_if_failed(self) -> None:
        lifecycle = self._connection._lifecycle
        if lifecycle.state is ConnectionStatus.FAILED:
            raise lifecycle.error  # type: ignore[misc]  # FAILED always has one

    # writing -------------------------------------------------------------------------------

    # Compiled (write_path.pyx): a flush per ack and per publish outside a batch.  The
    # write of one piece the kernel takes whole is there too; the rest is _write's.
    flush = thread_flush
    flush_soon = flush  # publishes check _flush_later (the batch() depth) themselves
    flush_acks = thread_flush_acks

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Buffer what is published inside; write it in few big socket writes at the end."""
        connection = self._connection
        connection._flush_later += 1
        try:
            yield
        finally:
            connection._flush_later -= 1
            if not connection._flush_later and connection._lifecycle.has_socket:
                self.flush()

    def _write(self, sock: Any, pieces: list[Any]) -> None:
        try:
            if len(pieces) > 1 and not self._tls:
                self._write_vectored(sock, pieces)
                return
            for data in pieces:  # mostly one piece (an ack, a batch of frames)
                try:
                    sent = sock.send(data)
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    sent = 0
                if sent != len(data):
                    self._write_rest(sock, memoryview(data)[sent:])
        except OSError as exc:
            connection = self._connection
            connection._on_lost(connection._eof_error(f"writing failed: {exc}"))
            raise connection._lifecycle.error or AMQPConnectionError(str(exc)) from exc

    def _write_rest(self, sock: socket.socket, view: memoryview) -> None:
        """What the socket did not take at once: written as it becomes writable."""
        while view:
            self._wait_writable(sock)
            try:
                sent = sock.send(view)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                continue
            view = view[sent:]

    def _write_vectored(self, sock: socket.socket, pieces: list[Any]) -> None:
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
        lifecycle = self._connection._lifecycle
        if not lifecycle.has_socket:
            raise lifecycle.error or InvalidStateError("the connection is closed")
        select.select([], [sock], [], 1.0)

    # the I/O thread ------------------------------------------------------------------------

    def _io_loop(self, sock: Any) -> None:
        connection = self._connection
        lifecycle = connection._lifecycle
        monitor = self._monitor
        tls = self._tls
        read_lock = self._read_lock
        readable: Any = [sock]  # try a read first: while data flows it is there, and select() is a wasted call
        park = _PARK_MIN
        # When the heartbeat decision is next due: the monitor wants a look only by its next
        # deadline (every interval/2 at least), not after every read.  Heartbeats off (or not
        # tuned yet): a look a second.
        check_at = 0.0

        def send_heartbeat() -> None:
            if self._write_lock.acquire(blocking=False):  # else a writer holding the lock writes now
                try:
                    with connection._lock:
                        connection._core.send_heartbeat()
                        pieces = connection._take_output()
                    self._write(sock, pieces)
                finally:
                    self._write_lock.release()
        try:
            while lifecycle.has_socket and self._sock is sock:
                if self.parked:
                    park = self._parked(sock, park)
                    now = time.monotonic()
                else:
                    now = time.monotonic()
                    if not readable and not (tls and sock.pending()):
                        readable, _, _ = select.select([sock], [], [], min(max(check_at - now, 0.0), 1.0))
                        now = time.monotonic()
                    else:
                        readable = [sock]
                    if readable:
                        if not read_lock.acquire(blocking=False):
                            self.parked = True  # a waiting thread reads: leave the socket to it
                            park = _PARK_MIN
                            continue
                        try:
                            if self.parked or self._sock is not sock:
                                continue
                            if self._receive(sock, now) < _RECV_SIZE:
                                # drained (nothing, or less than a full buffer): select next
                                # rather than a read that most likely finds nothing (and
                                # raises BlockingIOError, the costliest way to learn it)
                                readable = None
                        finally:
                            read_lock.release()
                if now >= check_at:
                    if not heartbeat_check(connection, monitor, now, send_heartbeat):
                        return
                    left = monitor.next_deadline(now)
                    check_at = now + (1.0 if left is None else left)
        except (OSError, ValueError) as exc:  # ValueError: select on a socket closed meanwhile
            if self._sock is sock:
                connection._on_lost(connection._eof_error(None if type(exc) is _EndOfStream else exc))
        except AMQPConnectionError as exc:
            if self._sock is sock:
                connection._on_lost(exc)
        except BaseException as exc:  # a bug: never leave waiters hanging
            log.exception("amqwire I/O thread failed")
            if self._sock is sock:
                connection._on_lost(AMQPConnectionError(f"I/O thread failed: {exc!r}"))

    def _parked(self, sock: Any, park: float) -> float:
        """One look of the parked I/O thread: take reading back once nobody holds the read
        lock and nothing was read for a whole look; returns the time to the next look."""
        reads = self._reads
        if self._resume.wait(park):
            self._resume.clear()
            if not self.parked:
                return _PARK_MIN  # a reader left threads waiting: serve them
        if self._read_lock.locked():
            return min(park * 2, _PARK_MAX)  # a reader waits in select: it reads what comes
        if self._reads == reads:
            self.parked = False  # the socket is left alone: read it again
        return _PARK_MIN

    def _receive(self, sock: Any, now: float) -> int:
        """Under ``_read_lock``: one read, dispatched; the bytes read (0: there was nothing
        to read).  Raises OSError (_EndOfStream when the peer closed the socket)."""
        buffer = self._read_buffer
        try:
            if self._tls:
                with self._write_lock:
                    size = sock.recv_into(buffer)
            else:
                size = sock.recv_into(buffer)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return 0
        if size == 0:
            raise _EndOfStream
        self._reads += 1
        self._monitor.last_received = now
        self._connection._data_received(buffer[:size])
        return size  # type: ignore[no-any-return]

    def read_for(self, ready: Callable[[], object], timeout: Optional[float]) -> Optional[float]:
        """read_while_waiting for up to ``timeout`` seconds; returns the time left of it."""
        if timeout is None:
            self.read_while_waiting(ready, None)
            return None
        deadline = time.monotonic() + timeout
        self.read_while_waiting(ready, deadline)
        return max(0.0, deadline - time.monotonic())

    def read_while_waiting(self, ready: Callable[[], object], deadline: Optional[float]) -> None:
        """Read the socket in this thread until ``ready()``, the deadline, or the loss of
        the connection; returns soon if another thread is reading.  Threads waiting for
        deliveries call it always; other waits only while the I/O thread is parked."""
        read_lock = self._read_lock
        if not read_lock.acquire(blocking=False):
            if not self.parked:
                # The I/O thread is in the middle of a read: take the socket over once that
                # read is done (it parks when it finds the lock taken), rather than leave the
                # whole wait to the hand-over.  Never on the I/O thread itself (a callback).
                left = _TAKE_OVER if deadline is None else min(_TAKE_OVER, deadline - time.monotonic())
                if left <= 0 or threading.current_thread() is self.thread or not read_lock.acquire(timeout=left):
                    return
            else:
                self._followers.append(ready)
                if not read_lock.acquire(blocking=False):
                    return  # the reader sees this follower when it leaves (it checks after releasing)
        try:
            sock = self._sock
            self.parked = True
            tls = self._tls
            lifecycle = self._connection._lifecycle
            monotonic = time.monotonic
            readable = False  # the last read filled the buffer: read again before a select
            while not ready():
                if not lifecycle.has_socket or self._sock is not sock:
                    return
                if not (readable or (tls and sock.pending())):
                    # select first: a waiting reader mostly comes before the data, and a read
                    # that finds nothing raises BlockingIOError (the costliest way to learn it)
                    if deadline is None:
                        left = 1.0
                    else:
                        left = min(deadline - monotonic(), 1.0)
                        if left <= 0:
                            return
                    if not select.select([sock], [], [], left)[0]:
                        continue
                try:
                    readable = self._receive(sock, monotonic()) == _RECV_SIZE
                except BaseException as exc:
                    self._lost_while_reading(sock, exc)
        except (OSError, ValueError):  # ValueError: select on a socket closed meanwhile
            return
        finally:
            read_lock.release()
            if self._followers:
                self._leave_followers()

    def _leave_followers(self) -> None:
        """A reader leaves: if threads still wait for what it would have read, wake the
        parked I/O thread to read for them."""
        followers, self._followers = self._followers, []
        if not all(ready() for ready in followers):
            self.parked = False
            self._resume.set()

    def _lost_while_reading(self, sock: Any, exc: BaseException) -> NoReturn:
        """Called in the handler of a waiting thread's failed read (or its dispatch): the
        connection is lost; raises OSError, or what interrupted the thread."""
        connection = self._connection
        if isinstance(exc, OSError):
            if self._sock is sock:
                connection._on_lost(connection._eof_error(None if type(exc) is _EndOfStream else exc))
            raise exc
        if isinstance(exc, AMQPConnectionError):
            if self._sock is sock:
                connection._on_lost(exc)
            raise OSError(str(exc)) from exc
        # KeyboardInterrupt (this may be the main thread) between reading and the end of
        # the dispatch, or a bug: what the read brought is gone, so give the connection
        # up, and every waiter and unconfirmed publish learns it, rather than wait forever.
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            log.error("amqwire: dispatching a read failed", exc_info=exc)
        if self._sock is sock:
            connection._on_lost(AMQPConnectionError(f"interrupted while dispatching a read: {exc!r}"))
        raise exc


class _CallbackRunner(Protocol):
    @property
    def _io(self) -> SyncConnectionIO: ...


class _EventsConnection(Protocol):
    def process_events(self, timeout: Optional[float] = ...) -> int: ...


class _ConsumingChannel(Protocol):
    _consuming_stops: int

    @property
    def _connection(self) -> _EventsConnection: ...

    @property
    def _consumers(self) -> dict[str, Any]: ...

    @property
    def _lifecycle(self) -> Any: ...

    def _check(self) -> None: ...


class ThreadConnectionAPI:
    """What only the blocking transport's Connection offers (asyncio runs callbacks in its
    loop): callbacks run in the thread that asks for them."""

    __slots__ = ()

    def process_events(self: _CallbackRunner, timeout: Optional[float] = 0.0) -> int:
        """Run queued consumer and return callbacks in this thread; returns how many ran.

        Waits up to ``timeout`` seconds for the first one (None: until one arrives).  A
        callback's exception goes to the exception handler (``connect(exception_handler=)``,
        default: logged), and the next callbacks run.  With ``consumer_workers`` the pool
        runs them instead, and this only waits (and raises when the connection is lost).
        """
        return self._io.process_events(timeout)


class ThreadChannelAPI:
    """The blocking transport's way into a confirmed publish, and what only its Channel
    offers: consuming in the calling thread."""

    __slots__ = ()

    # Compiled (publish_path.pyx), so that a publish with room runs no Python frame; it
    # goes on in ChannelPublisher and the channel's _publish_waiting, as asyncio's does.
    publish_async = blocking_publish_async
    # Compiled (ack_path.pyx), as its flush is (write_path.pyx): an ack runs no Python frame.
    basic_ack = blocking_basic_ack

    def start_consuming(self: _ConsumingChannel) -> None:
        """Run consumer callbacks in this thread until stop_consuming() or no consumers
        are left."""
        stops = self._consuming_stops
        connection = self._connection
        while self._consuming_stops == stops and any(c.callback is not None for c in self._consumers.values()):
            connection.process_events(0.2)
            if self._lifecycle.state is ChannelPhase.CLOSED:
                self._check()

    def stop_consuming(self: _ConsumingChannel) -> None:
        self._consuming_stops += 1


class Progress:
    """Threads waiting until a condition that others change holds: they look again at each
    ``notify`` and at least every ``look`` seconds."""

    __slots__ = ("_condition", "_waiting")

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._waiting = 0

    def wait_until(self, ready: Callable[[], bool], deadline: ProgressDeadline, look: float) -> None:
        """Until ``ready()``; OperationTimeout once ``deadline`` passes."""
        with self._condition:
            self._waiting += 1  # before ready() is read: a notify after it wakes this thread
            try:
                while not ready():
                    self._condition.wait(deadline.left(look))
            finally:
                self._waiting -= 1

    def notify(self) -> None:
        if self._waiting:
            with self._condition:
                self._condition.notify_all()


class ChannelWaits(ConfirmFutures):
    """A channel's confirm futures (made, handed out and settled by the compiled
    ``ConfirmFutures``) and its waits for confirms, on threads."""

    __slots__ = ("_io", "rpc_lock", "_progress")

    def __init__(self, channel: "ChannelBase[Message]", io: ThreadIO) -> None:
        super().__init__(channel)
        self._io = io
        self.rpc_lock = threading.Lock()  # one request at a time on the channel
        self._progress = Progress()

    def wait_progress(self, ready: Callable[[], bool], timeout: Optional[float], what: str,
                      below: Optional[int] = None) -> None:
        """Wait until ``ready()`` (checked when confirms bring the channel's unsettled count
        down to ``below``, at every confirm if None, and whenever the channel fails);
        OperationTimeout naming ``what`` after ``timeout``."""
        if ready():
            return
        channel = self._channel
        with contextlib.suppress(AMQPConnectionError, InvalidStateError, OSError):
            self._io.flush()  # the connection is gone: the futures say how it ended
        deadline = ProgressDeadline(timeout, what, channel.channel_id)
        if self._io.parked:
            self._io.read_while_waiting(ready, deadline.at)
        channel._progress_wanted(below)
        try:
            self._progress.wait_until(ready, deadline, 1.0)
        finally:
            channel._progress_done(below)

    def notify_progress(self) -> None:
        """Confirms moved (or the channel failed): wake who waits for them."""
        self._progress.notify()


class Inbox:
    """A consumer's deliveries, for a thread that iterates the consumer.

    The thread that reads the socket hands over each run of deliveries the dispatch of a
    read finds (mostly the whole read) as one list: one queue operation and at most one
    wake-up of the iterating thread per run, not per message.  The list is the dispatch's
    own, never changed after.
    """

    __slots__ = ("_consumer", "_io", "_queue", "buffer")

    def __init__(self, consumer: "ConsumerBase", io: ThreadIO) -> None:
        self._consumer = consumer
        self._io = io
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.buffer: deque[Any] = deque()  # the iterating thread: handed over, not read yet

    def deliver_run(self, messages: list[Message]) -> None:
        """Several deliveries in order (a run the dispatch of one read found)."""
        consumer = self._consumer
        if consumer.callback is None:
            self._queue.put(messages)
        else:
            for message in messages:
                self._io.run_callback(consumer.callback, message, "consumer", consumer.channel)

    def wake(self) -> None:
        """The consumer ended: its reader gets why."""
        self._queue.put(self._consumer._finished)

    def next(self, timeout: Optional[float]) -> Any:
        """The next message, or the end marker (END or an exception), or None on timeout."""
        buffer = self.buffer
        if buffer:
            return buffer.popleft()
        queue_ = self._queue
        if queue_.empty() and timeout != 0:
            # Read the socket in this thread rather than wait for the I/O thread to hand
            # deliveries over (see ThreadIO._read_lock); qsize: ready once it is not 0.
            if timeout is None:
                self._io.read_while_waiting(queue_.qsize, None)
            else:
                timeout = self._io.read_for(queue_.qsize, timeout)
        try:
            item = queue_.get(timeout=timeout)
        except queue.Empty:
            return None
        if type(item) is list:
            buffer.extend(item)
            return buffer.popleft()
        queue_.put(item)  # keep the end visible to later calls
        return item


class _EndOfStream(OSError):
    """The peer closed the socket (a read returned no bytes)."""



