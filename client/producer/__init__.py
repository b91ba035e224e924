"""The Producer (see docs/producer.md), one module per role.

Users import it from ``amqwire.client`` (``Producer``, ``SendFuture``, ``SendResult``, the
errors, ``ProducerStats``, ...) and ``amqwire.client.aio`` (``Producer``); the modules here
are internal.  The decisions never wait; the Producer, with the flows that wait, is written
once; it owns a backend that supplies the I/O and the waiting, for threads or for asyncio:

- ``policy.py``: retries, back-off, the choice of a broker and its avoidance after a
  failure or for slowness (``Broker``, ``BrokerSelector``, ``LatencyTable``, ``Attempt``,
  ``BrokerStats``);
- ``compression.py``: which bodies are compressed, and how (``Compressor``; the encodings
  themselves are the client's, ``client/encoding.py``);
- ``ids.py``: unique, time-ordered message ids (``MessageIds``);
- ``stats.py``: ``ProducerStats``, ``Latencies``;
- ``errors.py``: ``SendFailed``, ``SendTimeout``, ``BufferFullError``;
- ``message.py``: a send on its way (``OutgoingMessage``) and its result (``SendResult``);
- ``core.py``: ``ProducerCore``, the state and decisions of a Producer, both transports,
  and ``Backend``, the little of the backend they use (none of it waits);
- ``flows_async.py``: the asyncio ``Producer``: the flows that wait (send, the sender,
  connect, flush, close), written once in async style; ``flows_sync.py``, the blocking
  ``Producer``, is generated from it by ``client/make_sync.py``;
- ``waiting_threads.py``: the blocking Producer's backend (``ThreadWaiting``: a sender
  thread, an event, a condition) and its ``SendFuture``;
- ``waiting_asyncio.py``: the asyncio Producer's backend (``AsyncioWaiting``: a sender task,
  the loop's futures);
- ``blocking.py``, ``aio.py``: where each transport's Producer is imported from.
"""
