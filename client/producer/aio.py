"""The asyncio Producer: a sender task under the flows of ``flows_async.py``.

``producer = await Producer(urls, **options)`` or ``async with Producer(urls) as producer``.
Sends from any number of tasks of the loop go into one accumulator drained by the sender
task.  Futures are the loop's; their callbacks and the ``after_send`` hook run in the loop.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable, Generator, Optional, Sequence, Union

from ..aio_connection import connect
from ..io_asyncio import _Unlocked
from ..url import ConnectionParameters, ParametersLike
from .core import TICK
from .flows_async import AsyncProducer
from .message import SendResult

__all__ = ["Producer"]


class Producer(AsyncProducer["asyncio.Future[SendResult]"]):
    """An asyncio producer over one or several brokers (see the README): ``await`` it, or
    use it as ``async with``, to connect and start its sender task."""

    __slots__ = ("_loop", "_work", "_changed", "_task", "_started")

    def __init__(self, urls: Union[ParametersLike, Sequence[ParametersLike], None] = None, **options: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._lock = _Unlocked()
        self._work = asyncio.Event()
        self._changed: Optional["asyncio.Future[None]"] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self._started = False
        super().__init__(urls, **options)

    async def _open_once(self) -> "Producer":
        if not self._started:
            self._started = True
            await self._start()
        return self

    def __await__(self) -> Generator[Any, None, "Producer"]:
        return self._open_once().__await__()

    async def __aenter__(self) -> "Producer":
        return await self._open_once()

    # primitives ---------------------------------------------------------------------------

    async def _open(self, params: ConnectionParameters) -> Any:
        return await connect(params, **self._connect_options)

    def _new_future(self) -> "asyncio.Future[SendResult]":
        return self._loop.create_future()

    def _resolve(self, future: "asyncio.Future[SendResult]", result: Any, error: Optional[BaseException]) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def _wake(self) -> None:
        self._work.set()

    def _clear_work(self) -> None:
        self._work.clear()

    async def _wait_work(self, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._work.wait(), timeout)

    def _notify(self) -> None:
        waiter = self._changed
        if waiter is not None:
            self._changed = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait_until(self, ready: Callable[[], bool], timeout: Optional[float]) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            waiter = self._changed
            if waiter is None or waiter.done():
                waiter = self._changed = self._loop.create_future()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), TICK if left is None else min(left, TICK))
        return True

    async def _wait_result(self, future: "asyncio.Future[SendResult]") -> SendResult:
        return await asyncio.shield(future)

    async def _wait_confirm(self, token: Any, timeout: float) -> bool:
        done, _ = await asyncio.wait([token], timeout=timeout)
        return bool(done)

    def _start_sender(self) -> None:
        self._task = self._loop.create_task(self._run_sender())

    def _may_pace(self) -> bool:
        return asyncio.current_task() is not self._task  # callbacks cannot await: only tasks pace

    async def _join_sender(self, timeout: Optional[float]) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), timeout)
