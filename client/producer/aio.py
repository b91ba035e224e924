"""The asyncio Producer (``flows_async.py``, over an ``AsyncioWaiting``).

``producer = await Producer(urls, **options)`` or ``async with Producer(urls) as producer``.
Sends from any number of tasks of the loop go into one accumulator drained by the sender
task.  Futures are the loop's; their callbacks and the ``after_send`` hook run in the loop.
"""
from __future__ import annotations

from .flows_async import Producer

__all__ = ["Producer"]
