"""The Producer (see the README's "The Producer"), one module per role.

Users import it from ``amqwire.client`` (``Producer``, ``SendFuture``, ``SendResult``, the
errors, ``ProducerStats``, ...) and ``amqwire.client.aio`` (``Producer``); the modules here
are internal.  The decisions never wait; the flows that wait are written once; the
transports supply only waiting primitives:

- ``policy.py``: retries, back-off, the choice of a broker and its avoidance (``Broker``,
  ``BrokerSelector``, ``Attempt``);
- ``compression.py``: which bodies are compressed, and how (``Compressor``; the encodings
  themselves are the client's, ``client/encoding.py``);
- ``ids.py``: unique, time-ordered message ids (``MessageIds``);
- ``stats.py``: ``ProducerStats``, ``Latencies``;
- ``errors.py``: ``SendFailed``, ``SendTimeout``, ``BufferFullError``;
- ``message.py``: a send on its way (``OutgoingMessage``) and its result (``SendResult``);
- ``core.py``: ``ProducerCore``, the state and decisions of a Producer, both transports;
- ``flows_async.py``: the flows that wait (send, the sender, connect, flush, close), written
  once in async style; ``flows_sync.py`` is generated from it by ``client/make_sync.py``;
- ``blocking.py``: the blocking Producer (a sender thread) and its ``SendFuture``;
- ``aio.py``: the asyncio Producer (a sender task).
"""
