"""The I/O a connection owns, declared: what the transport-neutral code asks of it.

A connection (``session.py``, ``operations_async.py`` and its generated twin, the stream
client's links) owns one I/O object: ``io_threads.ThreadIO`` on the blocking transport,
``io_asyncio.AsyncioIO`` on asyncio.  ``ConnectionIO`` is what the core calls, none of it
waits; ``SyncConnectionIO`` and ``AsyncConnectionIO`` add the calls that wait, plain on
threads and coroutines on asyncio (``client/make_sync.py`` renames the one into the
other).  mypy --strict checks both backends against these (``Connection._io``'s type).

What both backends decide alike is written here once; they keep only the way of waiting:
when a heartbeat is due or the broker is silent for too long, and how long a wait for
confirms has left.
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, Callable, Optional, Protocol

from .errors import HeartbeatTimeout, OperationTimeout

__all__ = [
    "AsyncConnectionIO", "ChannelWaitsCore", "ConnectionIO", "Flag", "InboxCore", "Lock",
    "ProgressDeadline", "SyncConnectionIO", "Waiter", "heartbeat_check",
]


class Lock(Protocol):
    """The lock of a connection's core and of the state its reader and callers share (an
    RLock on threads; on asyncio a lock that does nothing)."""

    def __enter__(self) -> object: ...

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any, /) -> object: ...

    def acquire(self) -> bool: ...

    def release(self) -> None: ...


class Flag(Protocol):
    """A condition waiters wait for (``threading.Event``, ``asyncio.Event``)."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...


class Waiter(Protocol):
    """A one-shot result the reader fills in for a caller that waits."""

    def done(self) -> bool: ...

    def set_result(self, value: Any, /) -> None: ...

    def set_exception(self, error: BaseException, /) -> None: ...


class ChannelWaitsCore(Protocol):
    """What the core asks of a channel's confirm futures and waits (none of it waits)."""

    def notify_progress(self) -> None:
        """Confirms moved (or the channel failed): wake who waits for them."""

    def acked(self, tokens: list[Any], /) -> None:
        """Settle the futures of publishes the broker acked."""


class InboxCore(Protocol):
    """What the core asks of a consumer's inbox."""

    def deliver_run(self, messages: list[Any], /) -> None:
        """Deliveries of one read, in order."""

    def wake(self) -> None:
        """The consumer ended: its reader gets why."""


class ConnectionIO(Protocol):
    """What the core (``session.py``, the stream client's links) calls on its I/O: none of
    it waits."""

    def new_lock(self) -> Lock: ...

    def new_waiter(self) -> Waiter: ...

    def new_flag(self) -> Flag: ...

    def on_io_thread(self) -> bool:
        """Whether the calling thread is the I/O thread (a callback runs on it)."""

    def channel_waits(self, channel: Any, /) -> ChannelWaitsCore: ...

    def inbox(self, consumer: Any, /) -> InboxCore: ...

    def started(self) -> None:
        """The handshake is done: heartbeats from now on."""

    def stop_io(self) -> None:
        """Abort the socket."""

    def begin_recovery(self, recover: Callable[[], Any], /) -> None: ...

    def cancel_recovery(self) -> None: ...

    def closed_for_good(self) -> None:
        """No recovery follows."""

    def after_close(self) -> None: ...

    def discard(self) -> None:
        """connect() failed: nothing of this I/O outlives it."""

    def run_callback(self, fn: Callable[[Any], Any], arg: Any, where: str = ..., channel: Any = ..., /) -> None:
        """A consumer, default-consumer or return callback."""

    def spawn(self, awaitable: Any, fn: Any, where: str, channel: Any, arg: Any, /) -> None:
        """A callback returned an awaitable."""

    @property
    def consumer_workers(self) -> int: ...

    def flush(self) -> None:
        """Write everything the core has queued, in order."""

    def flush_soon(self) -> None:
        """Write what a publish queued, now or soon (batched)."""

    def flush_acks(self) -> None: ...

    def batch(self) -> AbstractContextManager[None]: ...


class SyncConnectionIO(ConnectionIO, Protocol):
    """The blocking transport's I/O: its waits block the calling thread."""

    def wait(self, waiter: Any, timeout: Optional[float], /) -> Any:
        """The waiter's result; TimeoutError after ``timeout`` seconds (the waiter stays)."""

    def wait_flag(self, flag: Any, timeout: Optional[float], /) -> bool:
        """Wait until ``flag`` is set; False if ``timeout`` passed first."""

    def sleep(self, seconds: float, /) -> None: ...

    def open_transport(self, params: Any, /) -> None: ...

    def read_for(self, ready: Callable[[], object], timeout: Optional[float], /) -> Optional[float]:
        """Read the socket in this thread while waiting for ``ready()``, up to ``timeout``
        seconds; returns the time left of it."""

    def process_events(self, timeout: Optional[float], /) -> int:
        """Run queued consumer and return callbacks in this thread."""


class AsyncConnectionIO(ConnectionIO, Protocol):
    """The asyncio transport's I/O: its waits are coroutines."""

    async def wait(self, waiter: Any, timeout: Optional[float], /) -> Any:
        """The waiter's result; TimeoutError after ``timeout`` seconds (the waiter stays)."""

    async def wait_flag(self, flag: Any, timeout: Optional[float], /) -> bool:
        """Wait until ``flag`` is set; False if ``timeout`` passed first."""

    async def sleep(self, seconds: float, /) -> None: ...

    async def open_transport(self, params: Any, /) -> None: ...


# What both backends decide alike -------------------------------------------------------------


def heartbeat_check(connection: Any, monitor: Any, now: float, send: Callable[[], None]) -> bool:
    """The heartbeat decision at ``now``: ``send()`` a heartbeat when one is due (the
    backend writes what the core queued); False once the broker was silent for two
    intervals (the connection is lost then)."""
    core = connection._core
    if monitor.send_due(now, core.bytes_sent):
        send()
        monitor.sent(now, core.bytes_sent)
    if monitor.timed_out(now):
        connection._on_lost(heartbeat_timeout(connection))
        return False
    return True


def heartbeat_timeout(connection: Any) -> HeartbeatTimeout:
    return HeartbeatTimeout(
        f"no data from {connection.params} for {2 * connection.heartbeat} s (two heartbeat intervals)"
    )


class ProgressDeadline:
    """A wait for confirms' deadline: how long is left of it, OperationTimeout naming what
    is waited for once nothing is."""

    __slots__ = ("_at", "_timeout", "_what", "_channel_id")

    def __init__(self, timeout: Optional[float], what: str, channel_id: Optional[int] = None) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout
        self._timeout = timeout
        self._what = what
        self._channel_id = channel_id

    @property
    def at(self) -> Optional[float]:
        """The monotonic time it passes (None: never)."""
        return self._at

    def left(self, longest: Optional[float] = None) -> Optional[float]:
        """Seconds to wait now, at most ``longest`` (None: as long as it takes); raises
        OperationTimeout once the deadline passed."""
        if self._at is None:
            return longest
        left = self._at - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left if longest is None else min(left, longest)

    def expired(self) -> OperationTimeout:
        if self._channel_id is None:
            return OperationTimeout(self._what, self._timeout)
        return OperationTimeout(self._what, self._timeout, self._channel_id)

