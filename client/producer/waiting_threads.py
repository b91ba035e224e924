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
import time
from typing import Any, Callable, Optional, Sequence

from ..blocking import connect
from ..errors import OperationTimeout
from ..url import ConnectionParameters
from .core import TICK
from .message import SendResult
from .policy import Broker

__all__ = ["SendFuture", "ThreadWaiting"]

log = logging.getLogger("amqwire.client.producer")

_CALLBACKS = threading.Lock()  # registering a callback against settling a future


class SendFuture:
    """The outcome of one ``send_async``: a SendResult, or the error the send failed with."""

    __slots__ = ("_waiter", "_result", "_error", "_done", "_callbacks")

    def __init__(self) -> None:
        self._waiter: Optional[Any] = None  # a held lock, made by the first wait
        self._result: Optional[SendResult] = None
        self._error: Optional[BaseException] = None
        self._done = False
        self._callbacks: Optional[list[Callable[["SendFuture"], Any]]] = None  # made by the first

    def done(self) -> bool:
        return self._done

    def _wait(self, timeout: Optional[float]) -> None:
        if self._done:
            return
        with _CALLBACKS:
            if self._done:
                return
            waiter = self._waiter
            if waiter is None:
                waiter = self._waiter = threading.Lock()
                waiter.acquire()
        if not waiter.acquire(timeout=-1 if timeout is None else timeout):
            raise OperationTimeout("the send's outcome", timeout)
        waiter.release()  # the next waiter, if any

    def result(self, timeout: Optional[float] = None) -> SendResult:
        """The SendResult once the broker confirmed; raises SendFailed / SendTimeout / ...
        OperationTimeout if ``timeout`` passes first (the send goes on)."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # settled without an error: a result

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        self._wait(timeout)
        return self._error

    def add_done_callback(self, fn: Callable[["SendFuture"], Any]) -> None:
        """``fn(future)``, once: now if the future is done, else when it settles."""
        with _CALLBACKS:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = [fn]
                else:
                    self._callbacks.append(fn)
                return
        _run(fn, self)

    def _settle(self, result: Optional[SendResult], error: Optional[BaseException]) -> None:
        self._result = result
        self._error = error
        with _CALLBACKS:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
            waiter = self._waiter
        if waiter is not None:
            waiter.release()
        if callbacks:
            for fn in callbacks:
                _run(fn, self)

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<SendFuture {state}>"


def _run(fn: Callable[[SendFuture], Any], future: SendFuture) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("send callback %r failed", fn)


class ThreadWaiting:
    """A blocking Producer's I/O and waiting: the transport's connections, a lock around
    the Producer's state, its ``SendFuture``s, the sender thread and what it and the
    callers wait on."""

    __slots__ = ("lock", "_changed", "_waiters", "_work", "_thread")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # callers waiting for room or a flush; notified only while there are some
        self._changed = threading.Condition(threading.Lock())
        self._waiters = 0
        self._work = threading.Event()  # the sender has something to do
        self._thread: Optional[threading.Thread] = None

    def connect(self, params: ConnectionParameters, **options: Any) -> Any:
        return connect(params, **options)

    # settling (never waits) ----------------------------------------------------------------

    def new_future(self) -> SendFuture:
        return SendFuture()

    def resolve(self, future: SendFuture, result: Optional[SendResult], error: Optional[BaseException]) -> None:
        future._settle(result, error)

    def resolve_all(self, futures: list[SendFuture], results: list[SendResult]) -> None:
        """SendFuture._settle for a confirmed batch: one lock for all (the hot path)."""
        with _CALLBACKS:
            work = []
            for future, result in zip(futures, results):
                future._result = result
                future._done = True
                if future._callbacks is not None or future._waiter is not None:
                    work.append((future, future._callbacks))
                    future._callbacks = None
        for future, callbacks in work:
            if future._waiter is not None:
                future._waiter.release()
            if callbacks:
                for fn in callbacks:
                    _run(fn, future)

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
        if self._waiters:
            with self._changed:
                self._changed.notify_all()

    def wait_until(self, ready: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Until ``ready()`` (checked at each ``notify`` and at least every TICK); False
        after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            self._waiters += 1
            try:
                while not ready():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._changed.wait(TICK if left is None else min(left, TICK))
                return True
            finally:
                self._waiters -= 1

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
