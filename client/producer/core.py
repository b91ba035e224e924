"""The Producer's core: its state and decisions, written once for both transports.

Everything here never waits: validation at the call site, the accumulator and its batching
decisions, deadlines, settling each send exactly once, hooks and the counters.  It applies
the policies of its sibling modules: compression (``compression.py``), message ids
(``ids.py``), retries with back-off and jitter, the choice of a broker and the avoidance of
one that failed (``policy.py``), statistics (``stats.py``).  ``flows_async.py`` holds the
flows that wait (written once in async style; ``flows_sync.py`` is generated from it by
``client/make_sync.py``); the Producer's backend (``waiting_threads.py``,
``waiting_asyncio.py``) supplies the few primitives the core calls (``Backend``).
"""
from __future__ import annotations

import logging
import random
import time
from collections import deque
from typing import Any, Callable, Deque, Optional, Protocol, Sequence, Union

from amqwire.codec import AMQPSyntaxError, BasicProperties, FrameWriter, encode_publish

from .. import delays
from ..delays import ROCKETMQ_LEVELS, check_levels
from ..errors import InvalidStateError, MessageReturned, PublishNacked
from ..lifecycle import (
    PRODUCER_FINISHED_PHASES,
    PRODUCER_PHASES,
    PRODUCER_REFUSING_PHASES,
    PRODUCER_STOPPING_PHASES,
    SENDER_PHASES,
    Machine,
    ProducerPhase,
    ProducerSignal,
    SenderPhase,
    SenderSignal,
)
from ..message import Body
from ..url import ParametersLike, parameters_list
from .compression import Compressor
from .errors import BufferFullError, SendFailed, SendTimeout
from .ids import MessageIds
from .message import FOREVER, OutgoingMessage, SendResult
from .policy import (
    LATENCY_PENALTIES,
    LATENCY_THRESHOLDS,
    ROUND_ROBIN,
    Attempt,
    Broker,
    BrokerSelector,
    LatencyTable,
    backoff,
    retryable,
)
from .stats import Latencies, ProducerStats

log = logging.getLogger("amqwire.client.producer")

#: RabbitMQ 4's default max_message_size.
DEFAULT_MAX_BODY_SIZE = 16 * 1024 * 1024
#: How often at most a sender that waits looks at the deadlines of what it holds.
TICK = 0.25

_new_tuple = tuple.__new__


class Backend(Protocol):
    """What the core uses of its Producer's backend (``ThreadWaiting``, ``AsyncioWaiting``):
    none of it waits."""

    #: a context manager around the core's state (the asyncio backend's does nothing)
    lock: Any

    def new_future(self) -> Any:
        """A send's future."""

    def resolve(self, future: Any, result: Any, error: Optional[BaseException]) -> None:
        """Settle ``future`` with ``result``, or with ``error`` when there is one."""

    def resolve_all(self, futures: list[Any], results: list[SendResult]) -> None:
        """``resolve(future, result, None)`` for each pair: a confirmed batch."""

    def wake(self) -> None:
        """The sender has something to do."""

    def notify(self) -> None:
        """Something changed that callers waiting for room or a flush look at."""


class ProducerCore:
    """The Producer's state and decisions.  ``backend`` supplies what they need of the
    transport (see ``Backend``); its methods are bound once here, since the core calls
    some of them for every send."""

    # Slots on every class of the chain, as on the client's Connection (see session.py): past 30
    # attributes CPython 3.11 stops specializing the method calls on an instance.
    __slots__ = (
        "brokers", "selector", "timeout", "retries", "retry_backoff", "retry_backoff_max",
        "retry_on_return", "batch_size", "batch_bytes", "linger", "buffer_memory", "buffer_full",
        "max_in_flight", "max_body_size", "compressor", "_compress_at", "_ids", "before_send",
        "after_send", "_connect_options", "_random", "_inbox", "_largest", "_finished", "_queue",
        "_queued_bytes", "_retrying", "_inflight", "_buffered", "_pending", "_epochs", "_epoch",
        "_next_sweep", "_no_broker_until", "_sender_idle", "_flushing", "_room_waiters", "_pace_at", "_pacing",
        "_closed", "_stopping", "_phase", "_sender",
        "_waiting", "_sent", "_confirmed", "_oneway", "_retried", "_failed", "_bytes",
        "_latencies", "_backend", "_lock", "_new_future", "_resolve", "_resolve_all", "_wake", "_notify",
        "_tracing", "delay_levels",
    )

    def __init__(
        self,
        backend: Backend,
        urls: Union[ParametersLike, Sequence[ParametersLike], None] = None,
        *,
        policy: str = ROUND_ROBIN,
        timeout: Optional[float] = 30.0,
        retries: int = 2,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 2.0,
        retry_on_return: bool = False,
        avoid_backoff: float = 1.0,
        avoid_backoff_max: float = 30.0,
        latency_avoidance: bool = True,
        latency_thresholds: Sequence[float] = LATENCY_THRESHOLDS,
        latency_penalties: Sequence[float] = LATENCY_PENALTIES,
        batch_size: int = 1000,
        batch_bytes: int = 1024 * 1024,
        linger: float = 0.0,
        buffer_memory: int = 32 * 1024 * 1024,
        buffer_full: str = "block",
        max_in_flight: int = 10000,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        compression: Optional[str] = "auto",
        compress_threshold: int = 4096,
        compress_level: Optional[int] = None,
        message_ids: bool = True,
        before_send: Optional[Callable[[OutgoingMessage], Any]] = None,
        after_send: Optional[Callable[[OutgoingMessage, Optional[SendResult], Optional[BaseException]], Any]] = None,
        connection_timeout: Optional[float] = 5.0,
        heartbeat: Optional[int] = None,
        ssl_context: Any = None,
        client_properties: Optional[dict[str, Any]] = None,
        tracing: Any = False,
        delay_levels: Sequence[float] = ROCKETMQ_LEVELS,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 or None, not {timeout!r}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, not {retries}")
        if batch_size < 1 or batch_bytes < 1:
            raise ValueError("batch_size and batch_bytes must be >= 1")
        if linger < 0:
            raise ValueError(f"linger must be >= 0, not {linger}")
        if buffer_full not in ("block", "raise"):
            raise ValueError(f"buffer_full must be 'block' or 'raise', not {buffer_full!r}")
        if buffer_memory < 1:
            raise ValueError(f"buffer_memory must be >= 1, not {buffer_memory}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, not {max_in_flight}")
        if retry_backoff < 0 or retry_backoff_max < retry_backoff:
            raise ValueError("retry_backoff must be >= 0 and retry_backoff_max >= retry_backoff")
        self._backend = backend
        self._lock = backend.lock
        self._new_future: Callable[[], Any] = backend.new_future
        self._resolve: Callable[[Any, Any, Optional[BaseException]], None] = backend.resolve
        self._resolve_all: Callable[[list[Any], list[SendResult]], None] = backend.resolve_all
        self._wake: Callable[[], None] = backend.wake
        self._notify: Callable[[], None] = backend.notify
        params = parameters_list(urls, connection_timeout=connection_timeout, heartbeat=heartbeat)
        self.brokers = [Broker(i, p) for i, p in enumerate(params)]
        table = LatencyTable(latency_thresholds, latency_penalties)  # checked even when not used
        self.selector = BrokerSelector(self.brokers, policy, avoid_backoff, avoid_backoff_max,
                                       table if latency_avoidance else None)
        self.delay_levels = check_levels(delay_levels)
        self.timeout = timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.retry_on_return = retry_on_return
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.linger = linger
        self.buffer_memory = buffer_memory
        self.buffer_full = buffer_full
        self.max_in_flight = max_in_flight
        self.max_body_size = max_body_size
        self.compressor = Compressor(compression, compress_threshold, compress_level)
        self._compress_at = compress_threshold if self.compressor.encoding else FOREVER
        self._ids = MessageIds() if message_ids else None
        self.before_send = before_send
        self.after_send = after_send
        self._connect_options: dict[str, Any] = {"recovery": False, "blocked_action": "wait"}
        if ssl_context is not None:
            self._connect_options["ssl_context"] = ssl_context
        if client_properties is not None:
            self._connect_options["client_properties"] = client_properties
        # OpenTelemetry: a send span per send, from the call to its result.  The producer's
        # connections do not trace: their publishes are the producer's (see tracing.py).
        self._tracing: Any = None
        if tracing is not None and tracing is not False:
            from ..tracing import tracing_from_option

            self._tracing = tracing_from_option(tracing)
        self._random = random.Random()
        # the accumulator.  Callers append to _inbox without the lock (deque.append is
        # atomic under the GIL): with many sending threads, a lock taken per send turns into
        # a convoy that costs more than the send.  Whoever holds the lock moves the inbox
        # into _queue (_drain), where everything is counted.
        self._inbox: Deque[OutgoingMessage] = deque()
        self._largest = 0  # the largest message offered: bounds the inbox's bytes
        self._queue: Deque[OutgoingMessage] = deque()
        self._queued_bytes = 0
        self._retrying: list[OutgoingMessage] = []  # waiting for their back-off
        self._inflight: set[OutgoingMessage] = set()
        self._buffered = 0  # bytes of everything accepted and not settled
        self._pending = 0
        self._epochs: dict[int, int] = {}
        self._epoch = 0
        self._next_sweep = FOREVER
        self._no_broker_until = 0.0
        self._flushing = 0
        # callers waiting for room in the buffer: while there are none, a settled send wakes
        # the waiters (flushes) only when it completes an epoch
        self._room_waiters = 0
        # Pacing: a caller that finds more than _pace_at sends queued and not yet written
        # waits until the sender has taken them down to half (see Producer._pace in flows_async.py).
        self._pace_at = 2 * max(max_in_flight, batch_size)
        self._pacing = 0  # callers waiting so
        # Where the producer and its sender are (lifecycle.py).  What the hot paths read of
        # them are views, written by _fire and _sender_fire alone: _closed (no more sends),
        # _stopping (the sender ends once everything is settled), _finished (what was left
        # failed: nothing is drained any more), _sender_idle (an offer must wake it).
        self._phase = Machine(PRODUCER_PHASES, ProducerPhase.NEW, ProducerPhase.CLOSED, "producer")
        self._sender = Machine(SENDER_PHASES, SenderPhase.BUSY, None, "producer's sender")
        self._fire(None)
        self._sender_fire(None)
        self._waiting = "the producer's queue"  # what the sender waits for now
        # statistics
        self._sent = 0
        self._confirmed = 0
        self._oneway = 0
        self._retried = 0
        self._failed = 0
        self._bytes = 0
        self._latencies = Latencies()

    # the call site ----------------------------------------------------------------------

    def _prepare(self, exchange: str, routing_key: str, body: Body, properties: Optional[BasicProperties],
                 mandatory: bool, timeout: Optional[float], oneway: bool, delay: Optional[float] = None,
                 key: Optional[str] = None) -> OutgoingMessage:
        """Validate and shape one send, before anything is queued: the codec's typed errors.
        ``delay``: served that many seconds later (delays.py); ``key``: the broker is chosen
        by it (``BrokerSelector.for_key``)."""
        if self._closed:
            raise InvalidStateError("the producer is closed")
        if timeout is None:
            timeout = self.timeout
        elif not timeout > 0:
            raise ValueError(f"timeout must be > 0, not {timeout!r}")
        if properties is not None or type(body) is not bytes or type(exchange) is not str \
                or type(routing_key) is not str or len(exchange) > 63 or len(routing_key) > 63:
            body = self._check(exchange, routing_key, body, properties, mandatory)
        if len(body) >= self._compress_at:
            body, properties = self.compressor.apply(body, properties)
        message_id = None
        with_id = False
        if self._ids is not None and (properties is None or properties.message_id is None):
            message_id = self._ids.next()
            with_id = True
        elif properties is not None:
            message_id = properties.message_id
        if len(body) > self.max_body_size:
            raise AMQPSyntaxError(f"body: {len(body)} bytes, over max_body_size ({self.max_body_size} bytes)")
        route = None
        if delay is not None:
            route = delays.route(exchange, delay, self.delay_levels)  # ValueError for a bad delay
            exchange = route.exchange
        if key is not None and not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        message = OutgoingMessage(exchange, routing_key, body, properties, mandatory, message_id, oneway, timeout,
                                  with_id)
        if route is not None:
            message.delay_route = route
        if key is not None:
            message.key = key
        if self.before_send is not None:
            self.before_send(message)
        if self._tracing is not None:
            message.span = self._tracing.start_producer_send(message)
        return message

    def _refused(self, message: OutgoingMessage, error: BaseException) -> None:
        """A send that raised before it was queued (closed, full buffer, no room in time):
        its span ends with the error.  One that was queued settles as usual (a pacing wait
        interrupted after its offer leaves it on its way)."""
        if message.span is None:
            return
        with self._lock:
            accepted = message.done or message in self._inflight or message in self._retrying \
                or message in self._inbox or message in self._queue
        if not accepted:
            self._tracing.end(message.span, error)

    def _check(self, exchange: str, routing_key: str, body: Body, properties: Optional[BasicProperties],
               mandatory: bool) -> bytes:
        """The slow path of _prepare: types, and the codec's checks of names and properties."""
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            if not isinstance(body, (bytearray, memoryview)):
                raise TypeError(f"body must be bytes, bytearray, memoryview or str, not {type(body).__name__}")
            body = bytes(body)
        if properties is not None and not isinstance(properties, BasicProperties):
            raise TypeError(f"properties must be a BasicProperties, not {type(properties).__name__}")
        if not isinstance(exchange, str):
            raise TypeError(f"exchange must be a str, not {type(exchange).__name__}")
        if not isinstance(routing_key, str):
            raise TypeError(f"routing_key must be a str, not {type(routing_key).__name__}")
        # The codec names the field: basic.publish.routing_key, BasicProperties.headers['x']...
        encode_publish(1, exchange, routing_key, b"", properties, mandatory)
        return body

    def _offer(self, message: OutgoingMessage) -> bool:
        """The call site's fast path, without the lock: append to the inbox when the buffer
        surely has room (True), else False (the caller takes the slow path, ``_admit``).
        The check counts every inbox message at the largest size seen, so buffer_memory is
        exceeded only by racing offers: at most one message per sending thread."""
        if self._closed:
            raise InvalidStateError("the producer is closed")
        size = message.size
        if size > self._largest:
            self._largest = size
        inbox = self._inbox
        if self._buffered + (len(inbox) + 1) * self._largest > self.buffer_memory and (self._pending or inbox):
            return False
        if not message.oneway:
            message.future = self._new_future()
        inbox.append(message)
        if self._closed:  # close() may have drained the inbox for the last time
            self._reclaim(message)
        if self._sender_idle and (self.linger == 0 or len(inbox) == 1 or len(inbox) >= self.batch_size
                                  or self._queued_bytes + len(inbox) * self._largest >= self.batch_bytes):
            self._sender_fire(SenderSignal.WAKE)
            self._wake()
        return True

    def _reclaim(self, message: OutgoingMessage) -> None:
        """An offer that raced close(): take it back and refuse it, unless something drained
        it already (then it is on its way, or failed by close)."""
        with self._lock:
            try:
                self._inbox.remove(message)
            except ValueError:
                return
        raise InvalidStateError("the producer is closed")

    def _drain(self) -> int:
        """Move the inbox into the queue, counting each message; how many it moved.  Under
        the lock."""
        inbox = self._inbox
        if not inbox or self._finished:
            return 0
        queue = self._queue
        epoch = self._epoch
        count = 0
        size = 0
        nearest = self._next_sweep
        popleft = inbox.popleft
        for _ in range(len(inbox)):  # offers racing this loop wait for the next drain
            message = popleft()
            message.epoch = epoch
            size += message.size
            count += 1
            queue.append(message)
            if message.deadline < nearest:
                nearest = message.deadline
        self._next_sweep = nearest
        self._epochs[epoch] = self._epochs.get(epoch, 0) + count
        self._buffered += size
        self._queued_bytes += size
        self._pending += count
        self._sent += count
        return count

    def _admit(self, message: OutgoingMessage) -> int:
        """The slow path of a send (the buffer may be full): queue the message if the buffer
        has room: 0 it has not, 1 queued, 2 queued and the sender must be woken (outside the
        lock).  Under the lock."""
        if self._closed:
            raise InvalidStateError("the producer is closed")
        was_empty = not self._queue  # and the sender idle: it waits for no lingering message
        self._drain()
        size = message.size
        if self._buffered + size > self.buffer_memory and self._pending:
            if self.buffer_full == "raise":
                raise BufferFullError(size, self._buffered, self.buffer_memory)
            return 0
        if not message.oneway and message.future is None:
            message.future = self._new_future()
        message.epoch = self._epoch
        self._epochs[self._epoch] = self._epochs.get(self._epoch, 0) + 1
        self._buffered += size
        self._pending += 1
        self._sent += 1
        self._queue.append(message)
        self._queued_bytes += size
        if message.deadline < self._next_sweep:
            self._next_sweep = message.deadline
        if self._sender_idle and (self.linger == 0 or was_empty or len(self._queue) >= self.batch_size
                                  or self._queued_bytes >= self.batch_bytes):
            self._sender_fire(SenderSignal.WAKE)
            return 2
        return 1

    def _room_timeout(self, message: OutgoingMessage) -> SendTimeout:
        return SendTimeout("room in the producer's buffer (buffer_memory)", message.timeout, (), message.message_id)

    # settling -----------------------------------------------------------------------------

    def _settle(self, message: OutgoingMessage, result: Optional[SendResult], error: Optional[BaseException]) -> None:
        """The end of a send, exactly once: its future, its callback, the hooks, the stats."""
        with self._lock:
            if message.done:
                return
            message.done = True
            self._inflight.discard(message)
            self._buffered -= message.size
            self._pending -= 1
            completed = self._drop_epoch(message.epoch, 1)
            if error is None:
                if message.oneway:
                    self._oneway += 1
                else:
                    self._confirmed += 1
                    self._latencies.add(result.latency if result is not None else 0.0)
                self._bytes += message.size
            else:
                self._failed += 1
        if error is not None and message.oneway:
            log.warning("one-way send of message %s dropped: %s", message.message_id, error)
        if message.span is not None:
            self._tracing.end(message.span, error, _result_attributes(message, result))
        if message.future is not None:
            self._resolve(message.future, result, error)
        if self.after_send is not None:
            try:
                self.after_send(message, result, error)
            except Exception:
                log.exception("after_send hook %r failed", self.after_send)
        if completed or self._room_waiters:
            self._notify()

    def _succeeded(self, message: OutgoingMessage, broker: Broker) -> None:
        attempts = 1 + (len(message.attempts) if message.attempts else 0)
        latency = time.monotonic() - message.started
        self._settle(message, SendResult(broker.url, attempts, message.message_id, latency), None)

    def _fail(self, message: OutgoingMessage, error: BaseException) -> None:
        attempts = message.attempts or ()
        self._settle(message, None, SendFailed(error, attempts, message.message_id))

    def _expire(self, message: OutgoingMessage, wait: str) -> None:
        self._settle(message, None, SendTimeout(wait, message.timeout, message.attempts or (), message.message_id))

    def _attempt_failed(self, message: OutgoingMessage, broker: Broker, error: BaseException) -> None:
        """A try ended badly: retry after a back-off if the error, the attempts left and the
        deadline allow, else fail the send."""
        now = time.monotonic()
        if message.attempts is None:
            message.attempts = []
        message.attempts.append(Attempt(broker.url, error, now))
        if message.done:
            return
        if message.oneway or not retryable(error, self.retry_on_return) or len(message.attempts) > self.retries:
            self._fail(message, error)
            return
        backoff = self._backoff(len(message.attempts))
        if now + backoff >= message.deadline:
            self._settle(message, None, SendTimeout(
                f"the back-off before retry {len(message.attempts)}", message.timeout, message.attempts,
                message.message_id))
            return
        with self._lock:
            self._inflight.discard(message)
            message.not_before = now + backoff
            message.stage = f"the back-off before retry {len(message.attempts)}"
            self._retrying.append(message)
            self._retried += 1
            self._sender_fire(SenderSignal.WAKE)
        self._wake()

    def _backoff(self, attempt: int) -> float:
        """Exponential from retry_backoff, capped, with full jitter in its upper half."""
        return backoff(attempt, self.retry_backoff, self.retry_backoff_max, self._random)

    def _succeeded_all(self, messages: Sequence[OutgoingMessage], broker: Broker) -> None:
        """A batch the broker confirmed: _succeeded for each, one lock for all."""
        now = time.monotonic()
        settled = []
        futures = []
        results = []
        url = broker.url
        new = _new_tuple  # SendResult(...) without its Python-level __new__: this is per message
        with self._lock:
            discard = self._inflight.discard
            size = 0
            epoch = -1
            count = 0
            completed = False  # an epoch (what a flush waits for) ended
            for message in messages:
                if message.done:
                    continue
                message.done = True
                discard(message)
                size += message.size
                if message.epoch != epoch:
                    if count and self._drop_epoch(epoch, count):
                        completed = True
                    epoch, count = message.epoch, 0
                count += 1
                settled.append(message)
                futures.append(message.future)
                results.append(new(SendResult, (url, 1 + len(message.attempts) if message.attempts else 1,
                                                message.message_id, now - message.started)))
            if count and self._drop_epoch(epoch, count):
                completed = True
            self._latencies.extend([r[3] for r in results])
            self._buffered -= size
            self._bytes += size
            self._pending -= len(settled)
            self._confirmed += len(settled)
        if self._tracing is not None:
            for message, result in zip(settled, results):
                if message.span is not None:
                    self._tracing.end(message.span, None, _result_attributes(message, result))
        self._resolve_all(futures, results)
        after = self.after_send
        if after is not None:
            for message, result in zip(settled, results):
                try:
                    after(message, result, None)
                except Exception:
                    log.exception("after_send hook %r failed", after)
        if completed or self._room_waiters:
            self._notify()

    def _drop_epoch(self, epoch: int, count: int) -> bool:
        """``count`` sends of ``epoch`` settled: True when that was the epoch's last."""
        left = self._epochs[epoch] - count
        if left:
            self._epochs[epoch] = left
            return False
        del self._epochs[epoch]
        return True

    def _encode(self, messages: Sequence[OutgoingMessage], channel_id: int, frame_max: int) -> bytes:
        writer = FrameWriter(frame_max)  # one growing buffer: no bytes object per message
        publish = writer.publish
        for m in messages:
            publish(channel_id, m.exchange, m.routing_key, m.body, m.wire_properties())
        return writer.take()

    def _observe(self, broker: Broker, write: int, count: int, error: Optional[BaseException]) -> None:
        """The broker's verdict on a write (or its loss), for its latency and counts."""
        answered = error is None or isinstance(error, (PublishNacked, MessageReturned))
        with self._lock:
            self.selector.observe(broker, write, time.monotonic(), answered, count, error is None)
            broker.verdict(error is None, count if isinstance(error, PublishNacked) else 0)

    def _batch_cb(self, messages: Sequence[OutgoingMessage], broker: Broker, write: int) -> Callable[[Any], None]:
        """The callback of a batch's confirm future (it may be called twice: once only counts).
        ``write``: the batch's number in the broker's record."""
        handled: list[bool] = []

        def done(token: Any) -> None:
            with self._lock:
                if handled:
                    return
                handled.append(True)
            error = token.exception()
            self._observe(broker, write, len(messages), error)
            if error is None:
                self._succeeded_all(messages, broker)
            elif len(messages) > 1 and not retryable(error, self.retry_on_return):
                # A channel error (a missing exchange...) caused by one message of the batch
                # fails every publish after it on the channel: each is sent again alone, so
                # that only the one at fault fails with it.  Not counted as an attempt.
                self._isolate(messages)
            else:
                for message in messages:
                    self._attempt_failed(message, broker, error)
        return done

    def _isolate(self, messages: Sequence[OutgoingMessage]) -> None:
        with self._lock:
            for message in messages:
                if not message.done:
                    self._inflight.discard(message)
                    message.solo = True
                    message.not_before = 0.0
                    message.stage = "the producer's queue"
                    self._retrying.append(message)
            self._sender_fire(SenderSignal.WAKE)
        self._wake()

    def _confirmed_cb(self, message: OutgoingMessage, broker: Broker, write: int) -> Callable[[Any], None]:
        def done(token: Any) -> None:
            error = token.exception()
            self._observe(broker, write, 1, error)  # once: a second call finds the write settled
            if message.done:
                return
            if error is None:
                self._succeeded(message, broker)
            else:
                self._attempt_failed(message, broker, error)
        return done

    # the sender's decisions ------------------------------------------------------------

    def _next_batch(self, now: float) -> tuple[list[OutgoingMessage], float]:
        """(messages to write now, []) or ([], seconds to wait before asking again).  Under the lock."""
        self._drain()
        if self._retrying:
            due = [m for m in self._retrying if m.not_before <= now]
            if due:
                self._retrying = [m for m in self._retrying if m.not_before > now]
                for m in reversed(due):
                    m.stage = "the producer's queue"
                    self._queue.appendleft(m)
                    self._queued_bytes += m.size
        wait = FOREVER
        if self._retrying:
            wait = min(m.not_before for m in self._retrying) - now
        queue = self._queue
        if queue and now < self._no_broker_until:
            wait = min(wait, self._no_broker_until - now)
        elif queue:
            oldest = queue[0].started
            if (self.linger == 0 or len(queue) >= self.batch_size or self._queued_bytes >= self.batch_bytes
                    or self._flushing or self._stopping or now - oldest >= self.linger or queue[0].attempts):
                batch: list[OutgoingMessage] = []
                size = 0
                while queue and len(batch) < self.batch_size and size < self.batch_bytes:
                    m = queue.popleft()
                    size += m.size
                    batch.append(m)
                self._queued_bytes -= size
                return batch, 0.0
            wait = min(wait, oldest + self.linger - now)
        if self._pending:
            wait = min(wait, max(self._next_sweep - now, 0.0) + 0.001)
        return [], wait

    def _requeue(self, batch: Sequence[OutgoingMessage]) -> None:
        """Put messages not written back at the head of the queue, in order."""
        with self._lock:
            for m in reversed(batch):
                if not m.done:
                    m.stage = "the producer's queue"
                    self._queue.appendleft(m)
                    self._queued_bytes += m.size

    def _sweep(self, now: float) -> None:
        """Fail every send whose deadline passed, with the wait it was in."""
        if now < self._next_sweep:
            return
        expired: list[tuple[OutgoingMessage, str]] = []
        with self._lock:
            nearest = FOREVER
            keep: Deque[OutgoingMessage] = deque()
            for m in self._queue:
                if m.deadline <= now:
                    expired.append((m, self._waiting))
                    self._queued_bytes -= m.size
                else:
                    keep.append(m)
                    nearest = min(nearest, m.deadline)
            if len(keep) != len(self._queue):
                self._queue = keep
            retrying = []
            for m in self._retrying:
                if m.deadline <= now:
                    expired.append((m, m.stage))
                else:
                    retrying.append(m)
                    nearest = min(nearest, m.deadline)
            self._retrying = retrying
            for m in list(self._inflight):
                if m.deadline <= now:
                    broker = m.broker
                    if broker is not None and broker.usable() and broker.connection.blocked:
                        expired.append((m, f"{m.stage}, held back by connection.blocked ({broker.blocked_reason()})"))
                    else:
                        expired.append((m, m.stage))
                else:
                    nearest = min(nearest, m.deadline)
            self._next_sweep = nearest
        for m, wait in expired:
            self._expire(m, wait)

    def _published(self, messages: Sequence[OutgoingMessage], broker: Broker) -> None:
        """Written, waiting for their confirms (some may be settled already)."""
        with self._lock:
            nearest = self._next_sweep
            inflight = self._inflight
            for message in messages:
                message.broker = broker
                if not message.done and not message.oneway:
                    message.stage = "the broker's confirm"
                    inflight.add(message)
                    if message.deadline < nearest:
                        nearest = message.deadline
            self._next_sweep = nearest

    def _flushed(self, epoch: int) -> bool:
        return not any(e <= epoch for e in self._epochs)

    def _begin_flush(self) -> int:
        with self._lock:
            self._drain()  # what was offered before flush() belongs to the epoch it waits for
            epoch = self._epoch
            self._epoch += 1
            self._flushing += 1
            self._sender_fire(SenderSignal.WAKE)
        self._wake()
        return epoch

    def _fire(self, signal: Optional[ProducerSignal]) -> None:
        """The one way the producer's phase changes (under ``_lock``; None: set the views)."""
        if signal is not None:
            self._phase.fire(signal)
        phase = self._phase.state
        self._closed = phase in PRODUCER_REFUSING_PHASES
        self._stopping = phase in PRODUCER_STOPPING_PHASES
        self._finished = phase in PRODUCER_FINISHED_PHASES

    def _sender_fire(self, signal: Optional[SenderSignal]) -> None:
        """The one way the sender's phase changes (None: set the view)."""
        if signal is not None:
            self._sender.fire(signal)
        self._sender_idle = self._sender.state is SenderPhase.IDLE

    def _fail_all(self, error: BaseException, writing: Sequence[OutgoingMessage] = ()) -> None:
        """Settle everything still held (the producer is closing, or its sender died with
        the batch it was ``writing``)."""
        with self._lock:
            self._drain()
            self._fire(ProducerSignal.FINISH)
            held = list(writing) + list(self._queue) + self._retrying + list(self._inflight)
            self._queue.clear()
            self._queued_bytes = 0
            self._retrying = []
        for m in held:
            self._settle(m, None, error)

    def stats(self) -> ProducerStats:
        with self._lock:
            # Counting the inbox in moves it to the queue: an idle sender must hear of it (the
            # offers it holds may have found the sender busy, and woken nobody).
            wake = self._drain() > 0 and self._sender_idle
            if wake:
                self._sender_fire(SenderSignal.WAKE)
            p50, p90, p99, pmax = self._latencies.percentiles(50, 90, 99, 100)
            stats = ProducerStats(
                sent=self._sent, confirmed=self._confirmed, oneway=self._oneway, retried=self._retried,
                failed=self._failed, bytes=self._bytes, pending=self._pending, buffered_bytes=self._buffered,
                latency_p50=p50, latency_p90=p90, latency_p99=p99, latency_max=pmax,
                brokers=self.selector.broker_stats(time.monotonic(), self._is_blocked),
            )
        if wake:
            self._wake()
        return stats

    @staticmethod
    def _is_blocked(broker: Broker) -> bool:
        return broker.usable() and bool(broker.connection.blocked)

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Producer {state} brokers={[b.url for b in self.brokers]} pending={self._pending}>"


def _result_attributes(message: OutgoingMessage, result: Optional[SendResult]) -> dict[str, Any]:
    """A send span's last attributes: the broker it went to last, and for a confirmed send
    the attempts it took."""
    attributes: dict[str, Any] = {}
    broker = message.broker
    if broker is not None:
        attributes["server.address"] = broker.params.host
        attributes["server.port"] = broker.params.port
        peer = broker.connection._peer if broker.connection is not None else None
        if peer:
            attributes["network.peer.address"] = peer[0]
            attributes["network.peer.port"] = peer[1]
    if result is not None:
        attributes["amqwire.producer.broker"] = result.broker
        attributes["amqwire.producer.attempts"] = result.attempts
    return attributes
