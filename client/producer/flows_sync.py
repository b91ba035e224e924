# GENERATED from producer/flows_async.py by client/make_sync.py: do not edit.
# The blocking transport's flows; tests/test_client_sync.py checks it is up to date.
"""The Producer, written once: its waiting flows (sending, the sender, connecting, flush,
close) over the decisions of ``core.py``.

This is the asyncio Producer (``amqwire.client.aio.Producer``) and the source of truth:
``flows_sync.py``, the blocking Producer (``amqwire.client.Producer``), is generated from it
by ``client/make_sync.py`` (as ``operations_sync.py`` is), and ``tests/test_client_sync.py``
fails when they drift.  The generator renames the backend: each Producer owns one
(``AsyncioWaiting`` from ``waiting_asyncio.py`` here, ``ThreadWaiting`` from
``waiting_threads.py`` in the twin), which supplies the connections, the futures, the sender
(a task or a thread) and every wait.  What differs in the two public APIs is the backends':
asyncio opens on ``await`` (``AsyncioProducerAPI``) or ``async with``, the blocking
constructor connects at once (``ThreadWaiting.made``).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Collection, Optional, Sequence, TypeVar, Union

from amqwire.codec import BasicProperties

from ..errors import (
    AMQPConnectionError,
    AMQPError,
    ChannelClosed,
    ConnectionBlockedError,
    InvalidStateError,
    OperationTimeout,
)
from ..lifecycle import ProducerPhase, ProducerSignal, SenderSignal
from ..message import Body
from ..url import ParametersLike
from .core import TICK, ProducerCore
from .message import OutgoingMessage, SendResult
from .policy import Broker
from .waiting_threads import ThreadProducerAPI, SendFuture, ThreadWaiting

log = logging.getLogger("amqwire.client.producer")

_BROKER_ERRORS = (AMQPConnectionError, InvalidStateError, OSError)
_Self = TypeVar("_Self", bound="Producer")


class Producer(ProducerCore, ThreadProducerAPI):
    """A producer over one or several brokers (see docs/producer.md).

    Blocking (``amqwire.client.Producer``, thread-safe): ``Producer(urls, **options)``
    connects (to every broker with ``policy='round_robin'``, to the first that answers with
    ``'pinned'``) and starts the sender thread; use it as a context manager, or call
    ``close()``.  asyncio (``amqwire.client.aio.Producer``): ``await`` it, or use it as
    ``async with``, to connect and start its sender task; it must be made in the loop it
    runs in.
    """

    __slots__ = ("_wait_result",)

    _backend: ThreadWaiting  # the core's slot, typed as this transport's backend

    def __init__(self, urls: Union[ParametersLike, Sequence[ParametersLike], None] = None, **options: Any) -> None:
        super().__init__(ThreadWaiting(), urls, **options)
        self._wait_result = self._backend.wait_result  # once per send: bound here
        self._backend.made(self)

    def _open_once(self: _Self) -> _Self:
        if self._phase.state is ProducerPhase.NEW:
            with self._lock:
                self._fire(ProducerSignal.START)
            self._start()
        return self

    # opening -------------------------------------------------------------------------------

    def _start(self) -> None:
        """Connect to the first broker that answers (every broker with round_robin), then
        start the sender.  AMQPConnectionError when none answers."""
        errors = []
        now = time.monotonic()
        for broker in self.brokers:
            try:
                self._connect(broker)
            except (AMQPError, OSError, TimeoutError) as exc:
                self.selector.avoid(broker, exc, now)
                errors.append(f"{broker.url}: {exc}")
                continue
            if self.selector.policy != "round_robin":
                break
        if not any(b.usable() for b in self.brokers):
            self._close_connections()
            raise AMQPConnectionError("the producer could not connect: " + "; ".join(errors))
        self._backend.start_sender(self._run_sender)

    def _connect(self, broker: Broker, within: Optional[float] = None) -> None:
        params = broker.params
        if within is not None and within < params.connection_timeout:
            params = params.replace(connection_timeout=within)
        connection = self._backend.connect(params, **self._connect_options)
        try:
            channel = connection.channel()
            channel.confirm_select(max_in_flight=self.max_in_flight)
        except BaseException:
            self._close_quietly(connection)
            raise
        broker.connection = connection
        broker.channel = channel
        broker.oneway_channel = None
        broker.delay_routes = set()
        broker.connected()
        log.info("producer: connected to %s", broker.url)

    def _close_quietly(self, connection: Any) -> None:
        try:
            connection.close()
        except Exception as exc:  # a connection that failed: nothing more to say
            log.debug("closing a failed connection: %s", exc)

    def _close_connections(self) -> None:
        for broker in self.brokers:
            if broker.connection is not None:
                connection, broker.connection = broker.connection, None
                broker.channel = broker.oneway_channel = None
                self._close_quietly(connection)

    # sending -------------------------------------------------------------------------------

    def _enqueue(self, message: OutgoingMessage, offered: bool) -> None:
        """What a send does after ``_offer`` (``offered``: it took the message) when the
        offer was refused or the queue is long: wait for room, or pace the caller.  The
        sends call it only then: in asyncio every call of a coroutine costs one."""
        if offered:
            if len(self._inbox) + len(self._queue) > self._pace_at and self._backend.may_pace(self.brokers):
                self._pace(message)
            return
        with self._lock:
            admitted = self._admit(message)
        if admitted == 0:
            deadline = message.deadline

            def room() -> bool:
                return self._closed or self._buffered + message.size <= self.buffer_memory or not self._pending

            with self._lock:
                self._room_waiters += 1
            try:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._backend.wait_until(room, min(left, TICK)):
                        if time.monotonic() >= deadline:
                            raise self._room_timeout(message)
                        continue
                    with self._lock:
                        admitted = self._admit(message)
                    if admitted:
                        break
            finally:
                with self._lock:
                    self._room_waiters -= 1
        if admitted == 2:
            self._wake()

    def _pace(self, message: OutgoingMessage) -> None:
        """The caller is far ahead of the sender: wait until the sender has taken what is
        queued down to half of ``_pace_at``, at most until ``message``'s deadline (it is
        queued already: past its deadline the sweep fails it).  Callers that keep running
        ahead gain nothing, and they cost the sender its turns: threads take turns on the
        interpreter (the GIL), so with N callers the sender runs one turn in N + 2, and an
        asyncio caller that does not yield keeps the sender task from running at all."""
        low = self._pace_at // 2

        def caught_up() -> bool:
            return self._closed or len(self._inbox) + len(self._queue) <= low

        with self._lock:
            self._pacing += 1
        try:
            while not caught_up():
                left = message.deadline - time.monotonic()
                if left <= 0:
                    return
                self._backend.wait_until(caught_up, min(left, TICK))
        finally:
            with self._lock:
                self._pacing -= 1

    def send(
        self,
        exchange: str,
        routing_key: str,
        body: Body,
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
        timeout: Optional[float] = None,
        delay: Optional[float] = None,
        key: Optional[str] = None,
    ) -> SendResult:
        """Send and wait for the broker's confirm: the SendResult, or SendFailed (with the
        attempts) / SendTimeout (naming the wait it was in) / the codec's error for bad input.
        ``delay``: delivered that many seconds later (at most one delay level later, see
        ``delays.py``); ``key``: every send with this key goes to one broker, in order."""
        message = self._prepare(exchange, routing_key, body, properties, mandatory, timeout, False, delay, key)
        self._submit(message)
        return self._wait_result(message.future)

    def send_async(
        self,
        exchange: str,
        routing_key: str,
        body: Body,
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
        timeout: Optional[float] = None,
        callback: Optional[Callable[[SendFuture], Any]] = None,
        delay: Optional[float] = None,
        key: Optional[str] = None,
    ) -> SendFuture:
        """Queue a send and return its future (its result: a SendResult); ``callback(future)``
        runs exactly once when it settles.  Waits only for room in the buffer.  ``delay`` and
        ``key`` as for ``send``."""
        message = self._prepare(exchange, routing_key, body, properties, mandatory, timeout, False, delay, key)
        self._submit(message)
        future: SendFuture = message.future
        if callback is not None:
            message.future.add_done_callback(callback)
        return future

    def send_oneway(
        self,
        exchange: str,
        routing_key: str,
        body: Body,
        properties: Optional[BasicProperties] = None,
        *,
        timeout: Optional[float] = None,
        delay: Optional[float] = None,
        key: Optional[str] = None,
    ) -> None:
        """Queue a send without a confirm and without retries: it returns once the message is
        queued, and the message may be lost (a connection lost before the broker read it, an
        unroutable message).  Counted in ``stats().oneway``; a drop is logged."""
        message = self._prepare(exchange, routing_key, body, properties, False, timeout, True, delay, key)
        self._submit(message)

    def _submit(self, message: OutgoingMessage) -> None:
        """Hand ``message`` to the sender, waiting for room while the buffer is full; a send
        refused here (no room in time, closed) ends its trace span with the error."""
        try:
            offered = self._offer(message)
            if not offered or len(self._inbox) + len(self._queue) > self._pace_at:
                self._enqueue(message, offered)
        except BaseException as exc:
            self._refused(message, exc)
            raise

    def flush(self, timeout: Optional[float] = None) -> None:
        """Write everything queued now, without lingering, and wait until each of those sends
        is settled (confirmed or failed).  OperationTimeout after ``timeout`` seconds."""
        epoch = self._begin_flush()
        try:
            if not self._backend.wait_until(lambda: self._flushed(epoch), timeout):
                raise OperationTimeout("the producer's flush", timeout)
        finally:
            with self._lock:
                self._flushing -= 1

    def close(self, timeout: Optional[float] = None) -> None:
        """Refuse new sends, flush (within ``timeout``), wait for the confirms and close the
        connections; a send still unsettled then fails with InvalidStateError."""
        if self._stopping:
            self._backend.join_sender(timeout)
            return
        with self._lock:
            self._fire(ProducerSignal.CLOSE)
        try:
            self.flush(timeout)
        except OperationTimeout:
            log.warning("producer closed with %d sends unsettled after %s s", self._pending, timeout)
        with self._lock:
            self._fire(ProducerSignal.STOP)
            self._sender_fire(SenderSignal.WAKE)
        self._wake()
        self._backend.join_sender(TICK * 4)
        self._fail_all(InvalidStateError("the producer was closed before the send completed"))
        self._close_connections()

    def __enter__(self: _Self) -> _Self:
        return self._open_once()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # the sender ----------------------------------------------------------------------------

    def _run_sender(self) -> None:
        batch: list[OutgoingMessage] = []
        try:
            while True:
                now = time.monotonic()
                self._sweep(now)
                with self._lock:
                    batch, wait = self._next_batch(now)
                    if not batch:
                        if self._stopping and not self._pending and not self._inbox:
                            return
                        # in this order: an offer that sees the sender idle wakes it after the clear
                        self._backend.clear_work()
                        self._sender_fire(SenderSignal.WAIT)
                if batch:
                    if self._pacing and len(self._inbox) + len(self._queue) <= self._pace_at // 2:
                        self._notify()  # callers pacing themselves can go on
                    self._write(batch)
                elif not self._inbox or (self.linger and wait <= self.linger):
                    self._backend.wait_work(min(wait, TICK * 4))
                # else an offer came after the drain and may have missed the idle flag: go round
        except BaseException as exc:
            log.exception("producer: the sender failed")
            with self._lock:
                self._fire(ProducerSignal.SENDER_FAILED)  # nothing would send what comes next: refused at the call
            # The batch it was writing is in no queue: it fails with the rest (settling is once).
            self._fail_all(InvalidStateError(f"the producer's sender failed: {exc!r}"), batch)
            if not isinstance(exc, Exception):
                raise  # cancelled, or the interpreter exits: an error is reported above, once

    def _pick(self, retry_of: Collection[Broker] = (), key: Optional[str] = None) -> Optional[Broker]:
        """A broker ready to publish to, connecting as needed; None when every broker is
        avoided (``_no_broker_until`` then says when to try again).  ``retry_of``: where the
        batch's retried sends failed (another broker is preferred).  ``key``: an ordered
        send's key, whose broker is chosen by it (``BrokerSelector.for_key``)."""
        while True:
            now = time.monotonic()
            if self._stopping:  # close() is closing the connections: open none
                with self._lock:
                    self._no_broker_until = now + TICK
                return None
            with self._lock:
                if key is None:
                    broker, wait = self.selector.choose(now, self._is_blocked, retry_of)
                else:
                    broker = self.selector.for_key(key, now)
                    wait = 0.0 if broker is not None else min(b.avoid_until for b in self.brokers) - now
            if broker is None:
                with self._lock:
                    self._no_broker_until = now + min(wait, TICK)
                    self._waiting = "a connection to a broker (every broker failed recently)"
                return None
            if broker.connection is not None and not broker.usable():
                self._broker_failed(broker, broker.connection._lifecycle.error or AMQPConnectionError("connection lost"))
                continue
            if broker.connection is None:
                self._waiting = f"a connection to {broker.url}"
                try:
                    # no longer than the nearest deadline allows: the sends say why they failed in time
                    self._connect(broker, max(self._next_sweep - now, 0.1))
                except (AMQPError, OSError, TimeoutError) as exc:
                    log.warning("producer: cannot connect to %s: %s", broker.url, exc)
                    self.selector.avoid(broker, exc, time.monotonic())
                    continue
            if not broker.channel.is_open:
                try:
                    broker.channel = broker.connection.channel()
                    broker.channel.confirm_select(max_in_flight=self.max_in_flight)
                except _BROKER_ERRORS + (ChannelClosed, OperationTimeout) as exc:
                    self._broker_failed(broker, exc)
                    continue
            if broker.stale_channel(now) and not self._renew_channel(broker):
                continue
            return broker

    def _renew_channel(self, broker: Broker) -> bool:
        """Its channel answers only with nacks (policy.RENEW_AFTER_NACKS): open a fresh one,
        then close the old one (what is still in flight there fails and is retried)."""
        old = broker.channel
        broker.renewals += 1
        broker.nacked_in_row = 0
        broker.renew_at = time.monotonic() + self._backoff(broker.renewals)
        try:
            channel = broker.connection.channel()
            channel.confirm_select(max_in_flight=self.max_in_flight)
        except _BROKER_ERRORS + (ChannelClosed, OperationTimeout) as exc:
            self._broker_failed(broker, exc)
            return False
        broker.channel = channel
        log.log(logging.WARNING if broker.renewals == 1 else logging.INFO,
                "producer: every publish on channel %d of %s was nacked: renewed as channel %d (%d in a row)",
                old.channel_id, broker.url, channel.channel_id, broker.renewals)
        try:
            old.close()
        except _BROKER_ERRORS + (ChannelClosed, OperationTimeout) as exc:
            log.debug("producer: closing the renewed channel: %s", exc)
        return True

    def _broker_failed(self, broker: Broker, error: BaseException) -> None:
        with self._lock:
            period = self.selector.avoid(broker, error, time.monotonic())
            broker.forget_unsettled()  # no verdict will come: not a latency
        log.warning("producer: %s failed (%s): avoided for %.1f s", broker.url, error, period)
        if broker.connection is not None:
            connection, broker.connection = broker.connection, None
            broker.channel = broker.oneway_channel = None
            self._close_quietly(connection)

    def _write(self, batch: list[OutgoingMessage]) -> None:
        """Publish a batch: ordered sends (with a key) to their key's broker, each broker's
        share in order; the others through one broker (``_write_to``)."""
        for message in batch:
            if message.key is not None:
                break
        else:
            self._write_to(batch, None)
            return
        now = time.monotonic()
        shares: dict[Optional[Broker], list[OutgoingMessage]] = {}
        for message in batch:
            target = None if message.key is None else self.selector.for_key(message.key, now)
            shares.setdefault(target, []).append(message)
        for target, share in shares.items():
            self._write_to(share, None if target is None else share[0].key)

    def _write_to(self, batch: list[OutgoingMessage], key: Optional[str]) -> None:
        """Publish a batch through one broker (``key``: an ordered send's), in one write: the
        plain confirmed sends as one run of frames under one confirm future (a failure
        retries the whole run: at least once), mandatory and one-way sends one by one.  What
        cannot be written now goes back to the head of the queue."""
        retry_of: Collection[Broker] = ()
        if batch[0].attempts:  # retries are at the head of the queue
            retry_of = {m.broker for m in batch if m.attempts and m.broker is not None}
        broker = self._pick(retry_of, key)
        if broker is None:
            self._requeue(batch)
            return
        if not self._declare_delays(broker, batch):
            return
        now = time.monotonic()
        live = []
        plain = []  # one run of frames under one confirm future
        rest: list[OutgoingMessage] = []  # one by one
        earliest = now + TICK
        for message in batch:
            if message.done:
                continue
            deadline = message.deadline
            if deadline <= now:
                self._expire(message, self._waiting)
                continue
            live.append(message)
            if deadline < earliest:
                earliest = deadline
            if message.oneway or message.mandatory or message.solo:
                rest.append(message)
            else:
                message.stage = "room in the confirm window"
                plain.append(message)
        if not live:
            return
        slice_ = min(earliest - now, max(self._next_sweep - now, 0.001))
        if live[0].solo:
            self._write_solo(broker, live[0], slice_)
            self._requeue(live[1:])  # back to "the producer's queue"
            return
        channel = broker.channel
        unwritten: list[OutgoingMessage] = live
        try:
            with channel.batch():
                if plain:
                    frames = self._encode(plain, channel.channel_id, broker.connection.frame_max)
                    token = channel.publish_encoded(frames, len(plain), timeout=slice_)
                    unwritten = rest
                    with self._lock:
                        write = broker.written(len(plain), time.monotonic())
                    self._published(plain, broker)
                    done = self._batch_cb(plain, broker, write)
                    token.add_done_callback(done)
                    if token.done():  # settled before the callback was added: never missed
                        done(token)
                for index, message in enumerate(rest):
                    unwritten = rest[index:]
                    if message.oneway:
                        if broker.oneway_channel is None or not broker.oneway_channel.is_open:
                            broker.oneway_channel = broker.connection.channel()
                        broker.oneway_channel.basic_publish(
                            message.exchange, message.routing_key, message.body, message.wire_properties(), timeout=slice_)
                        broker.sent += 1
                        self._settle(message, None, None)
                        continue
                    if message.solo:
                        self._requeue(rest[index:])  # written alone, after this batch
                        break
                    message.stage = "room in the confirm window"
                    self._publish_one(broker, message, True, slice_)
                unwritten = []
        except OperationTimeout as exc:  # window full, channel.flow, socket buffer: the deadlines decide
            self._waiting = exc.operation
            self._requeue(unwritten)
            return
        except ConnectionBlockedError:
            self._waiting = f"the broker to lift connection.blocked ({broker.blocked_reason()})"
            self._requeue(unwritten)
            return
        except ChannelClosed as exc:  # what it had written fails through the futures
            log.info("producer: channel to %s closed: %s", broker.url, exc)
            self._requeue(unwritten)
            return
        except _BROKER_ERRORS as exc:
            self._broker_failed(broker, exc)
            self._requeue(unwritten)
            return
        self._waiting = "the producer's queue"
        self.selector.succeeded(broker)

    def _declare_delays(self, broker: Broker, batch: list[OutgoingMessage]) -> bool:
        """Declare on ``broker`` the delay routes of the batch's delayed sends it has not yet
        (delays.py: a fanout exchange, a durable queue with the step's TTL dead-lettering to
        the target, the binding).  A route the broker refuses (a queue of that name with
        other arguments) fails its sends; a lost channel or connection requeues the batch."""
        routes = {m.delay_route for m in batch if m.delay_route is not None} - broker.delay_routes
        for route in routes:
            channel = broker.channel
            try:
                channel.exchange_declare(route.exchange, "fanout", durable=True)
                channel.queue_declare(route.queue, durable=True, arguments=route.queue_arguments)
                channel.queue_bind(route.queue, route.exchange)
            except ChannelClosed as exc:
                if exc.reply_code in (403, 404, 406):  # refused for good: those sends fail
                    log.warning("producer: the delay route %s on %s was refused: %s", route.queue, broker.url, exc)
                    for message in batch:
                        if message.delay_route == route:
                            self._fail(message, exc)
                self._requeue(batch)  # the others, on a new channel
                return False
            except _BROKER_ERRORS + (OperationTimeout,) as exc:
                self._broker_failed(broker, exc)
                self._requeue(batch)
                return False
            broker.delay_routes.add(route)
        return True

    def _write_solo(self, broker: Broker, message: OutgoingMessage, timeout: float) -> None:
        """One message alone, its confirm awaited (within ``timeout``) before anything else
        goes out on the channel: its verdict is its own."""
        message.stage = "room in the confirm window"
        try:
            token = self._publish_one(broker, message, message.mandatory, timeout)
        except (OperationTimeout, ConnectionBlockedError, ChannelClosed):
            self._requeue([message])
            return
        except _BROKER_ERRORS as exc:
            self._broker_failed(broker, exc)
            self._requeue([message])
            return
        self._backend.wait_confirm(token, min(max(message.deadline - time.monotonic(), 0.0), 1.0))

    def _publish_one(self, broker: Broker, message: OutgoingMessage, mandatory: bool, timeout: float) -> Any:
        """Publish one message under its own confirm future; its token.  Numbered in the
        broker's record before it is written: its confirm may come before publish_async returns."""
        with self._lock:
            write = broker.written(1, time.monotonic())
        try:
            token = broker.channel.publish_async(
                message.exchange, message.routing_key, message.body, message.wire_properties(),
                mandatory=mandatory, callback=self._confirmed_cb(message, broker, write), timeout=timeout)
        except BaseException:
            with self._lock:
                broker.unwritten(write, 1)
            raise
        self._published([message], broker)
        return token


__all__ = ["Producer"]
