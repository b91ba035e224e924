"""The Producer (see the README's "The Producer"), one module per role.

Users import it from ``amqwire.client`` (``Producer``, ``SendFuture``, ``SendResult``, the
errors, ``ProducerStats``, ...) and ``amqwire.client.aio`` (``Producer``); the modules here
are internal.  The transport-neutral decisions never wait; the flows that wait are written
once; the transports supply only waiting primitives:

- ``core.py``: ``ProducerCore``, the state and decisions of a Producer, both transports;
- ``flows_async.py``: the flows that wait (send, the sender, connect, flush, close), written
  once in async style; ``flows_sync.py`` is generated from it by ``client/make_sync.py``;
- ``blocking.py``: the blocking Producer (a sender thread) and its ``SendFuture``;
- ``aio.py``: the asyncio Producer (a sender task).
"""
