"""The consumer work pool of the blocking transport (the Java client's ConsumerWorkService).

``connect(..., consumer_workers=N)`` runs consumer, default-consumer and return callbacks
on N worker threads instead of in the thread that calls ``process_events``.  Work is
queued per channel and a channel is run by at most one worker at a time, so each
channel's callbacks run one after the other in delivery order, while a slow callback on
one channel holds up only that channel.  The I/O thread only queues work: it keeps
reading, acking and sending heartbeats whatever the callbacks do.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Optional

__all__ = ["WorkPool"]

# A worker runs at most this many callbacks of one channel before it lets other channels
# in (as the Java client does), then queues the channel again behind them.
BATCH = 16

_STOP = object()


class _Queue:
    __slots__ = ("items", "scheduled")

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self.scheduled = False  # in the ready queue, or being run by a worker


class WorkPool:
    """Per-key FIFO work on ``size`` threads; ``run(fn, arg, where, key)`` is called for
    every item (it handles the item's exceptions)."""

    def __init__(self, size: int, run: Callable[[Any, Any, str, Any], None], name: str = "amqwire-worker") -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"consumer_workers must be a positive int, not {size!r}")
        self._run = run
        self._lock = threading.Lock()
        self._queues: dict[Any, _Queue] = {}
        self._ready: deque[Any] = deque()
        self._wakeup = threading.Condition(self._lock)
        self._threads = [
            threading.Thread(target=self._worker, name=f"{name}-{index + 1}", daemon=True) for index in range(size)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def _stopping(self) -> bool:
        """stop() was called (under the lock): its marker stays in the ready queue."""
        return _STOP in self._ready

    @property
    def size(self) -> int:
        return len(self._threads)

    def submit(self, key: Any, fn: Any, arg: Any, where: str, channel: Any) -> None:
        with self._lock:
            if self._stopping:
                return
            work = self._queues.get(key)
            if work is None:
                work = self._queues[key] = _Queue()
            work.items.append((fn, arg, where, channel))
            if not work.scheduled:
                work.scheduled = True
                self._ready.append(key)
                self._wakeup.notify()

    def pending(self) -> int:
        """Callbacks queued and not started yet."""
        with self._lock:
            return sum(len(work.items) for work in self._queues.values())

    def stop(self, wait: Optional[float] = None) -> None:
        """Let the workers finish what is queued, then end them (``wait``: join them that long)."""
        with self._lock:
            self._ready.append(_STOP)
            self._wakeup.notify_all()
        if wait is not None:
            current = threading.current_thread()
            for thread in self._threads:
                if thread is not current:
                    thread.join(wait)

    def _worker(self) -> None:
        run = self._run
        while True:
            with self._lock:
                key = self._next_key()
                if key is _STOP:
                    return
                work = self._queues[key]
                batch = [work.items.popleft() for _ in range(min(BATCH, len(work.items)))]
            for fn, arg, where, channel in batch:
                run(fn, arg, where, channel)
            with self._lock:
                if work.items:
                    self._ready.append(key)
                    self._wakeup.notify()
                else:
                    work.scheduled = False
                    del self._queues[key]
                    if self._stopping:
                        self._wakeup.notify_all()  # a worker may wait to see the pool drained

    def _next_key(self) -> Any:
        """Under the lock: the next channel to run, or _STOP once nothing is left before it."""
        ready = self._ready
        while True:
            while not ready:
                self._wakeup.wait()
            key = ready.popleft()
            if key is not _STOP:
                return key
            ready.append(_STOP)  # it stays for the other workers
            if len(ready) == 1:
                self._wakeup.notify_all()
                if not any(work.scheduled for work in self._queues.values()):
                    return _STOP
                self._wakeup.wait()  # a channel being run may queue itself again
