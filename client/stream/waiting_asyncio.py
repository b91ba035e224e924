"""How the asyncio stream client waits: the loop's futures, tasks, locks and timers.

The connection (``operations_async.py``) owns one ``StreamAsyncioWaiting`` and asks it for
everything that depends on the transport, beyond each link's socket (which is the 0-9-1
client's ``io_asyncio.AsyncioIO``): sleeping, background flows (relocating
producers and consumers), a mutex for flows that must not overlap, the producers' send
futures, the waits for their confirms, and when a producer's batch is written.  Nothing in
it decides anything; the blocking counterpart is ``waiting_threads.py``
(``client/make_sync.py`` renames the one into the other).
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Coroutine, Optional

from ..io_asyncio import AsyncioIO, Mailbox, Progress
from ..publish_path import NoLock
from ..io_contract import ProgressDeadline

__all__ = ["AsyncioStreamFuture", "StreamAsyncioWaiting", "ProducerWaits", "StreamInbox"]

#: What a producer's send returns on asyncio: one of the loop's futures, whose result is
#: the message's publishing id.
AsyncioStreamFuture = asyncio.Future[int]


class StreamAsyncioWaiting:
    """The loop's ways of waiting, for one stream connection (made in its loop)."""

    __slots__ = ("loop", "_tasks")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._tasks: set["asyncio.Task[Any]"] = set()

    @staticmethod
    def new_lock() -> NoLock:
        """The lock of a producer's, consumer's or the connection's state: the links'."""
        return AsyncioIO.new_lock()

    @staticmethod
    def new_mutex() -> asyncio.Lock:
        """A lock for flows that must not overlap (``async with``)."""
        return asyncio.Lock()

    @staticmethod
    def new_flag() -> asyncio.Event:
        return AsyncioIO.new_flag()

    @staticmethod
    async def wait_flag(flag: asyncio.Event, timeout: Optional[float]) -> bool:
        return await AsyncioIO.wait_flag(flag, timeout)

    @staticmethod
    async def sleep(seconds: float) -> None:
        await AsyncioIO.sleep(seconds)

    def spawn(self, flow: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``flow(*args)`` in the background (a task the connection keeps)."""
        task = self.loop.create_task(flow(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """close(): the background flows end (cancelled)."""
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    # producers ------------------------------------------------------------------------------

    def future_maker(self, producer: Any) -> Callable[[], AsyncioStreamFuture]:
        """Makes the futures of ``producer``'s sends: the loop's Future type, called in C
        (loop.create_future is a Python call more)."""
        return functools.partial(asyncio.Future, loop=self.loop)

    @staticmethod
    async def after_write(link: Any) -> None:
        """A send wrote its producer's batch: let the loop write what the socket did not
        take yet and read confirms (a caller that sends in a loop without awaiting anything
        would hold both back)."""
        await asyncio.sleep(0)

    @staticmethod
    def settle(future: AsyncioStreamFuture, publishing_id: int) -> None:
        if not future.done():
            future.set_result(publishing_id)

    @staticmethod
    def settle_many(settled: list[tuple[AsyncioStreamFuture, int]]) -> None:
        for future, publishing_id in settled:
            if not future.done():
                future.set_result(publishing_id)

    @staticmethod
    def fail(future: AsyncioStreamFuture, error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)
            future.exception()  # retrieved: nobody has to await a send to silence asyncio's warning

    def producer_waits(self, producer: Any) -> "ProducerWaits":
        return ProducerWaits(self.loop)

    def new_inbox(self, consumer: Any) -> "StreamInbox":
        return StreamInbox(consumer, self.loop)

    def write_soon(self, flush: Callable[[], Any]) -> None:
        """A producer's batch got its first message: write it at the end of this pass of
        the loop (what else is sent in the pass joins it)."""
        self.loop.call_soon(flush)


class ProducerWaits:
    """Callers of one producer waiting for confirms (room under ``max_in_flight``, a flush)."""

    __slots__ = ("_progress",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._progress = Progress(loop)

    async def wait_progress(self, ready: Callable[[], bool], timeout: Optional[float], what: str) -> None:
        """Until ``ready()`` (checked whenever confirms or failures come); OperationTimeout
        naming ``what`` after ``timeout``."""
        if not ready():
            await self._progress.wait_until(ready, ProgressDeadline(timeout, what))

    def notify_progress(self) -> None:
        self._progress.notify()


#: A consumer's messages, received and not taken yet, for the task iterating it: the 0-9-1
#: client's Mailbox (the same buffer, wake-up and timed wait).
StreamInbox = Mailbox
