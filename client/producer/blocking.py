"""The blocking Producer (``flows_sync.py``, over a ``ThreadWaiting``) and its ``SendFuture``.

Thread-safe: any number of threads may send through one Producer; their messages go into
one accumulator that the sender thread drains.  Futures' callbacks and the ``after_send``
hook run in the thread that settles the send: the connection's I/O thread for a confirm or a
lost connection, the sender thread for a timeout; keep them short and never wait there for
another send.
"""
from __future__ import annotations

from .flows_sync import Producer
from .waiting_threads import SendFuture

__all__ = ["Producer", "SendFuture"]
