"""How an asyncio Producer waits: a sender task, the loop's futures, an event and a
future that callers waiting for room or a flush share.

The Producer (``flows_async.py``) owns one ``AsyncioWaiting`` and calls it for everything
that depends on the loop; everything runs in the loop's thread, so the Producer's "lock"
is a no-op.  Nothing in it decides anything; the blocking Producer's counterpart is
``waiting_threads.py`` (``client/make_sync.py`` renames the one into the other).
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Awaitable, Callable, Coroutine, Generator, Optional, Protocol, Sequence, TypeVar

from ..aio_connection import connect
from ..errors import OperationTimeout
from ..io_asyncio import Progress
from ..publish_path import NoLock
from ..io_contract import ProgressDeadline
from ..url import ConnectionParameters
from .core import TICK
from .message import SendResult
from .policy import Broker

__all__ = ["AsyncioProducerAPI", "AsyncioSendFuture", "AsyncioWaiting"]

#: An asyncio Producer's send future: one of the loop's.
AsyncioSendFuture = asyncio.Future[SendResult]


class _OpensOnce(Protocol):
    def _open_once(self) -> Awaitable[Any]: ...


_Opened = TypeVar("_Opened", bound=_OpensOnce)


class AsyncioProducerAPI:
    """What only the asyncio Producer offers: ``await Producer(...)`` connects it and starts
    its sender."""

    __slots__ = ()

    def __await__(self: _Opened) -> Generator[Any, None, _Opened]:
        opened: _Opened = yield from self._open_once().__await__()
        return opened


class AsyncioWaiting:
    """An asyncio Producer's I/O and waiting: the transport's connections, the loop's
    futures, the sender task and what it and the callers wait on.  Made in the loop it
    serves (RuntimeError outside one)."""

    __slots__ = ("lock", "_loop", "_work", "_changed", "_task")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.lock = NoLock()
        self._work = asyncio.Event()  # the sender has something to do
        self._changed = Progress(self._loop)  # callers waiting for room or a flush
        self._task: Optional[asyncio.Task[None]] = None

    async def connect(self, params: ConnectionParameters, **options: Any) -> Any:
        return await connect(params, **options)

    @staticmethod
    def made(producer: Any) -> None:
        """The Producer was made: it connects when awaited (``AsyncioProducerAPI``) or entered."""

    # settling (never waits) ----------------------------------------------------------------

    def new_future(self) -> AsyncioSendFuture:
        return self._loop.create_future()

    def resolve(self, future: AsyncioSendFuture, result: Any, error: Optional[BaseException]) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def resolve_all(self, futures: list[AsyncioSendFuture], results: list[SendResult]) -> None:
        for future, result in zip(futures, results):
            if not future.done():
                future.set_result(result)

    # the sender ----------------------------------------------------------------------------

    def start_sender(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._task = self._loop.create_task(run())

    async def join_sender(self, timeout: Optional[float]) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), timeout)

    def wake(self) -> None:
        self._work.set()

    def clear_work(self) -> None:
        """The sender is about to wait: forget earlier wake-ups."""
        self._work.clear()

    async def wait_work(self, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._work.wait(), timeout)

    # the callers ---------------------------------------------------------------------------

    def notify(self) -> None:
        self._changed.notify()

    async def wait_until(self, ready: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Until ``ready()`` (checked at each ``notify`` and at least every TICK); False
        after ``timeout``."""
        try:
            await self._changed.wait_until(ready, ProgressDeadline(timeout, "room or a flush"), TICK)
        except OperationTimeout:
            return False
        return True

    async def wait_result(self, future: AsyncioSendFuture) -> SendResult:
        return await asyncio.shield(future)

    async def wait_confirm(self, token: Any, timeout: float) -> bool:
        """Until a publish's confirm future is done; False after ``timeout``."""
        done, _ = await asyncio.wait([token], timeout=timeout)
        return bool(done)

    def may_pace(self, brokers: Sequence[Broker]) -> bool:
        """Whether the caller may wait for the sender: only tasks other than the sender
        (a callback cannot await)."""
        return asyncio.current_task() is not self._task
