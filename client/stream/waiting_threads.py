"""How the blocking stream client waits: threads, locks, events and its send futures.

The connection (``operations_sync.py``, generated) owns one ``StreamThreadWaiting`` and
asks it for everything that depends on the transport, beyond each link's socket (the 0-9-1
client's ``io_threads.ThreadIO``: its I/O thread reads, dispatches confirms and
deliveries, and keeps the heartbeats): sleeping, background flows (threads), a
mutex, the producers' send futures (``StreamFuture``), the waits for their confirms, and
when a producer's batch is written.  The asyncio counterpart is ``waiting_asyncio.py``.

Batches: a producer writes its batch when it is full, when a caller waits (a future's
``result()``, ``flush()``, ``close()``), and otherwise after ``linger`` seconds (a thread
of the connection, woken when a batch gets its first message), so a lone send is never
left unwritten.
"""
from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from typing import Any, Callable, Optional

from ..errors import AMQPConnectionError, InvalidStateError
from ..io_contract import ProgressDeadline
from ..io_threads import Progress, ThreadFuture, ThreadIO

__all__ = ["StreamFuture", "StreamThreadWaiting", "ProducerWaits", "StreamInbox"]

log = logging.getLogger("amqwire.client.stream")

LINGER = 0.0005  # seconds a batch that is not full waits for more sends before it is written


class StreamFuture(ThreadFuture[int]):
    """The outcome of one send (or one ``send_batch``): the publishing id once the broker
    confirmed it, or the error it failed with (``StreamPublishFailed``, ...)."""

    __slots__ = ("_producer",)

    _log = log

    def __init__(self, producer: Any) -> None:
        super().__init__()
        self._producer = producer  # the producer whose send made it

    def result(self, timeout: Optional[float] = None) -> int:
        """The publishing id, once the broker confirmed the message; raises why it failed,
        or OperationTimeout if ``timeout`` passes first (the send goes on)."""
        return super().result(timeout)

    def _wait(self, timeout: Optional[float]) -> None:
        if self._state == 0:
            producer = self._producer
            producer._flush_batch()  # the batch it may be in is written now, not after the linger
            producer._waits.wait_progress(self.done, timeout, "the broker's confirm")



class StreamThreadWaiting:
    """Threads' ways of waiting, for one stream connection."""

    __slots__ = ("_stopped", "_linger_lock", "_linger_due", "_linger_work", "_linger_thread", "linger")

    def __init__(self) -> None:
        self._stopped = threading.Event()  # close(): sleeps end
        self._linger_lock = threading.Lock()
        self._linger_due = threading.Event()
        self._linger_work: collections.deque[Callable[[], Any]] = collections.deque()
        self._linger_thread: Optional[threading.Thread] = None
        self.linger = LINGER

    @staticmethod
    def new_lock() -> Any:
        """The lock of a producer's, consumer's or the connection's state: the links'."""
        return ThreadIO.new_lock()

    @staticmethod
    def new_mutex() -> Any:
        """A lock for flows that must not overlap (``with``)."""
        return threading.Lock()

    @staticmethod
    def new_flag() -> threading.Event:
        return ThreadIO.new_flag()

    @staticmethod
    def wait_flag(flag: threading.Event, timeout: Optional[float]) -> bool:
        return flag.wait(timeout)

    def sleep(self, seconds: float) -> None:
        self._stopped.wait(seconds)

    def spawn(self, flow: Callable[..., Any], *args: Any) -> None:
        """Run ``flow(*args)`` in the background (a daemon thread)."""
        threading.Thread(target=flow, args=args, name="amqwire-stream-flow", daemon=True).start()

    def stop(self) -> None:
        """close(): sleeping flows wake up (and see the connection closed), the linger
        thread ends."""
        self._stopped.set()
        self._linger_due.set()

    # producers ------------------------------------------------------------------------------

    @staticmethod
    def future_maker(producer: Any) -> Callable[[], StreamFuture]:
        """Makes the futures of ``producer``'s sends (their result() writes the batch they
        are in, then waits)."""
        return functools.partial(StreamFuture, producer)

    @staticmethod
    def after_write(link: Any) -> None:
        """A send wrote its producer's batch: read the confirms waiting on the socket in
        this thread (no hand-over to the I/O thread and back: a GIL switch each), as a
        consumer reads its deliveries."""
        link._io.read_for(_nothing, 0)

    @staticmethod
    def settle(future: StreamFuture, publishing_id: int) -> None:
        future.set_result(publishing_id)

    @staticmethod
    def settle_many(settled: list[tuple[StreamFuture, int]]) -> None:
        """StreamFuture._settle for a confirm frame's futures, inlined (the hot path)."""
        for future, publishing_id in settled:
            if future._state == 0:
                future._value = publishing_id
                future._state = 1  # before reading _callbacks and _waiter: see ThreadFuture
                if future._callbacks is not None or future._waiter is not None:
                    future._wake()

    @staticmethod
    def fail(future: StreamFuture, error: BaseException) -> None:
        future.set_exception(error)

    @staticmethod
    def producer_waits(producer: Any) -> "ProducerWaits":
        return ProducerWaits(producer)

    @staticmethod
    def new_inbox(consumer: Any) -> "StreamInbox":
        return StreamInbox(consumer)

    def write_soon(self, flush: Callable[[], Any]) -> None:
        """A producer's batch got its first message: write it after ``linger`` seconds
        unless it fills up (or a caller waits) first."""
        self._linger_work.append(flush)
        if not self._linger_due.is_set():
            self._linger_due.set()
            if self._linger_thread is None:
                with self._linger_lock:
                    if self._linger_thread is None:
                        self._linger_thread = threading.Thread(target=self._linger_loop, name="amqwire-stream-linger",
                                                               daemon=True)
                        self._linger_thread.start()

    def _linger_loop(self) -> None:
        due = self._linger_due
        work = self._linger_work
        stopped = self._stopped
        while not stopped.is_set():
            due.wait()
            if stopped.is_set():
                return
            time.sleep(self.linger)
            due.clear()
            while work:
                flush = work.popleft()
                try:
                    flush()
                except (AMQPConnectionError, InvalidStateError, OSError) as exc:
                    log.debug("a lingering batch was not written: %s", exc)  # its producer fails or resends it
                except Exception:
                    log.exception("writing a lingering batch failed")


class ProducerWaits:
    """Threads waiting for one producer's confirms (room under ``max_in_flight``, a flush,
    a future's result)."""

    __slots__ = ("_producer", "_progress")

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self._progress = Progress()

    def wait_progress(self, ready: Callable[[], bool], timeout: Optional[float], what: str) -> None:
        """Until ``ready()`` (checked whenever confirms or failures come); OperationTimeout
        naming ``what`` after ``timeout``."""
        if ready():
            return
        deadline = ProgressDeadline(timeout, what)
        io = self._producer._reading_io()
        if io is not None and io.parked:  # a consumer thread reads the socket: read for this wait too
            io.read_while_waiting(ready, deadline.at)
        self._progress.wait_until(ready, deadline, 0.5)

    def notify_progress(self) -> None:
        self._progress.notify()


class StreamInbox:
    """A consumer's messages, received and not taken yet, for the thread iterating it.

    A thread waiting for messages reads its link's socket itself while it waits (the 0-9-1
    client's ``ThreadIO.read_for``): consuming then runs in one thread, with no hand-over
    and wake-up per read; otherwise the link's I/O thread reads and wakes it."""

    __slots__ = ("_consumer", "buffer", "_condition", "_waiting")

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.buffer: collections.deque[Any] = collections.deque()
        self._condition = threading.Condition(threading.Lock())
        self._waiting = 0

    def deliver_run(self, messages: list[Any]) -> None:
        """A chunk's messages, in order (the thread that read them)."""
        self.buffer.extend(messages)
        if self._waiting:
            with self._condition:
                self._condition.notify_all()

    def hand_over(self) -> None:
        """Nothing to hand over: deliveries go to the buffer at once."""

    def wake(self) -> None:
        """The consumer ended (or moved): whoever waits looks again."""
        with self._condition:
            self._condition.notify_all()

    def next(self, timeout: Optional[float]) -> Any:
        """The next message, the end marker (END or an exception), or None on timeout."""
        buffer = self.buffer
        if buffer:
            return buffer.popleft()
        consumer = self._consumer
        deadline = None if timeout is None else time.monotonic() + timeout

        def ready() -> bool:
            return bool(buffer) or not consumer.active

        while True:
            if buffer:
                return buffer.popleft()
            if not consumer.active:
                return consumer._finished
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            link = consumer._link
            if link is not None:
                link._io.read_for(ready, left)  # read in this thread while waiting
                if ready():
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    continue
            with self._condition:
                self._waiting += 1
                try:
                    if not ready():
                        self._condition.wait(0.2 if left is None else min(left, 0.2))
                finally:
                    self._waiting -= 1


def _nothing() -> bool:
    """A wait that is never over: read_for then reads what the socket holds, and returns."""
    return False
