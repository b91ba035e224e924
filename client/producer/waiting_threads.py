"""How a blocking Producer waits: a sender thread, its futures (``SendFuture``), an event
and a condition.

The Producer (``flows_sync.py``) owns one ``ThreadWaiting`` and calls it for everything
that depends on threads: connecting, making and settling the send futures, waking the
sender, waiting for room, a flush or a confirm.  Nothing in it decides anything; the
asyncio Producer's counterpart is ``waiting_asyncio.py``.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, Sequence

from ..blocking import connect
from ..errors import OperationTimeout
from ..io_contract import ProgressDeadline
from ..io_threads import Progress, ThreadFuture
from ..url import ConnectionParameters
from .core import TICK
from .message import SendResult
from .policy import Broker

__all__ = ["SendFuture", "ThreadProducerAPI", "ThreadWaiting"]

log = logging.getLogger("amqwire.client.producer")


class SendFuture(ThreadFuture[SendResult]):
    """The outcome of one ``send_async``: a SendResult, or the error the send failed with."""

    __slots__ = ()

    _log = log

    def result(self, timeout: Optional[float] = None) -> SendResult:
        """The SendResult once the broker confirmed; raises SendFailed / SendTimeout / ...
        OperationTimeout if ``timeout`` passes first (the send goes on)."""
        return super().result(timeout)

    def _wait(self, timeout: Optional[float]) -> None:
        try:
            super()._wait(timeout)
        except TimeoutError:
            raise OperationTimeout("the send's outcome", timeout) from None



class ThreadProducerAPI:
    """What only the blocking Producer offers: nothing more (the asyncio one's ``__await__``
    is ``waiting_asyncio.AsyncioProducerAPI``)."""

    __slots__ = ()


class ThreadWaiting:
    """A blocking Producer's I/O and waiting: the transport's connections, a lock around
    the Producer's state, its ``SendFuture``s, the sender thread and what it and the
    callers wait on."""

    __slots__ = ("lock", "_changed", "_work", "_thread")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # callers waiting for room or a flush; notified only while there are some
        self._changed = Progress()
        self._work = threading.Event()  # the sender has something to do
        self._thread: Optional[threading.Thread] = None

    def connect(self, params: ConnectionParameters, **options: Any) -> Any:
        return connect(params, **options)

    @staticmethod
    def made(producer: Any) -> None:
        """The Producer was made: the blocking one connects and starts its sender now."""
        producer._open_once()

    # settling (never waits) ----------------------------------------------------------------

    def new_future(self) -> SendFuture:
        return SendFuture()

    def resolve(self, future: SendFuture, result: Optional[SendResult], error: Optional[BaseException]) -> None:
        future._settle(result, error)

    def resolve_all(self, futures: list[SendFuture], results: list[SendResult]) -> None:
        """ThreadFuture._settle for a confirmed batch, inlined (the hot path)."""
        for future, result in zip(futures, results):
            if future._state == 0:
                future._value = result
                future._state = 1  # before reading _callbacks and _waiter: see ThreadFuture
                if future._callbacks is not None or future._waiter is not None:
                    future._wake()

    # the sender ----------------------------------------------------------------------------

    def start_sender(self, run: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=run, name="amqwire-producer-sender", daemon=True)
        self._thread.start()

    def join_sender(self, timeout: Optional[float]) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wake(self) -> None:
        self._work.set()

    def clear_work(self) -> None:
        """The sender is about to wait: forget earlier wake-ups (called under the lock)."""
        self._work.clear()

    def wait_work(self, timeout: float) -> None:
        self._work.wait(timeout)

    # the callers ---------------------------------------------------------------------------

    def notify(self) -> None:
        self._changed.notify()

    def wait_until(self, ready: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Until ``ready()`` (checked at each ``notify`` and at least every TICK); False
        after ``timeout``."""
        try:
            self._changed.wait_until(ready, ProgressDeadline(timeout, "room or a flush"), TICK)
        except OperationTimeout:
            return False
        return True

    def wait_result(self, future: SendFuture) -> SendResult:
        return future.result()

    def wait_confirm(self, token: Any, timeout: float) -> bool:
        """Until a publish's confirm future is done; False after ``timeout``."""
        try:
            token.exception(timeout)
        except OperationTimeout:
            return False
        return True

    def may_pace(self, brokers: Sequence[Broker]) -> bool:
        """Whether the calling thread may wait for the sender: not the sender itself, nor a
        thread the sender waits for (a connection's reader running a confirm callback)."""
        current = threading.current_thread()
        if current is self._thread:
            return False
        for broker in brokers:
            connection = broker.connection
            if connection is not None and connection._io.on_io_thread():
                return False  # a confirm callback: the sender may be waiting for this thread
        return True
