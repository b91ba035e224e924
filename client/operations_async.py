"""The client's waiting flows, written once: RPCs, publishing, consuming, closing, recovery.

This file is the source of truth.  ``operations_sync.py`` is generated from it by
``client/make_sync.py`` (``async def`` -> ``def``, ``await x`` -> ``x``, ``async with`` ->
``with``, ``Async*`` -> ``Sync*``), and ``tests/test_client_sync.py`` fails when the two
drift, so the blocking and asyncio transports run the same logic and differ only in how
they wait.  Each transport supplies the waiting primitives as coroutines (asyncio) or
plain calls (blocking): ``_wait(waiter, timeout)``, ``_wait_flag(flag, timeout)``,
``_sleep(seconds)``, ``_open_transport(params)`` on the connection, and
``_wait_progress(ready, timeout, what)`` on the channel.  Their other primitives never
wait; ``session.py`` lists them.

Timeouts: every request takes ``timeout=`` (default: the connection's ``rpc_timeout``);
on expiry it raises :class:`~amqwire.client.errors.OperationTimeout`.  A request that
timed out or was cancelled leaves the channel usable: its late reply is discarded (a
message it fetched is rejected back to its queue, a consumer it made is cancelled), and
the next request on the channel first waits for that reply, within its own timeout.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Generic, Optional, TypeVar, Union

from amqwire.codec import (
    BasicCancel,
    BasicConsume,
    BasicGet,
    BasicProperties,
    BasicQos,
    BasicRecover,
    ConfirmSelect,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueuePurge,
    QueueUnbind,
    TxCommit,
    TxRollback,
    TxSelect,
)

from .lifecycle import OPENED_STATES, ChannelSignal, ChannelPhase, ConnectionSignal, ConnectionStatus
from .listeners import ConsumerEventKind, RecoveryEvent
from .errors import (
    AMQPConnectionError,
    AMQPError,
    AuthenticationError,
    ConnectionBlockedError,
    ConnectionLost,
    InvalidStateError,
    OperationTimeout,
)
from .message import Message
from .recovery import END, Topology
from .session import FLUSH_AT, ChannelBase, ConnectionBase, ConsumerBase
from .url import ConnectionParameters

log = logging.getLogger("amqwire.client")

Body = Union[bytes, bytearray, memoryview, str]

# The hot sections below (publishing, acks) run in the blocking twin under
# ``connection._lock``, which its reader thread and other calling threads share: the
# generator turns ``if _LOCKED_SECTION:`` into ``with connection._lock:``.  On asyncio one
# thread runs everything and a section without an await cannot be interleaved, so it
# takes no lock: a ``with`` costs more than the rest of an unconfirmed publish's bookkeeping.
_LOCKED_SECTION = True
_Self = TypeVar("_Self")
_Token = TypeVar("_Token")  # a transport's confirm future
_Subscription = TypeVar("_Subscription")  # what consume() returns on a transport


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


class AsyncConnection(ConnectionBase):
    """The connection's waiting flows."""

    __slots__ = ()  # all in ConnectionBase's

    # waiting primitives of the transport ------------------------------------------------

    async def _wait(self, waiter: Any, timeout: Optional[float]) -> Any:
        """The waiter's result; TimeoutError after ``timeout`` seconds (the waiter stays)."""
        raise NotImplementedError

    async def _wait_flag(self, flag: Any, timeout: Optional[float]) -> bool:
        """Wait until ``flag`` is set; False if ``timeout`` passed first."""
        raise NotImplementedError

    async def _sleep(self, seconds: float) -> None:
        raise NotImplementedError

    async def _open_transport(self, params: ConnectionParameters) -> None:
        """Connect the socket and start reading into ``_data_received``; fires SOCKET_UP."""
        raise NotImplementedError

    def _make_channel(self, channel_id: int) -> Any:
        raise NotImplementedError

    def _started(self) -> None:
        """The handshake is done: start the heartbeats."""

    def _cancel_recovery(self) -> None:
        """close() was called: stop a recovery under way."""

    def _after_close(self) -> None:
        """Last step of close()."""

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # connecting ----------------------------------------------------------------------------

    async def _connect_any(self) -> None:
        try:
            await self._try_brokers()
        except BaseException:
            with self._lock:
                if self._lifecycle.state is ConnectionStatus.NEW:  # connect() gives up
                    self._fire(ConnectionSignal.CONNECT_FAILED)
            raise

    async def _try_brokers(self) -> None:
        errors = []
        last: Optional[BaseException] = None
        for params in self._parameters:
            try:
                await self._connect(params)
                return
            except AuthenticationError:
                raise
            except (OSError, AMQPConnectionError, TimeoutError) as exc:
                log.info("could not connect to %s: %s", params, exc)
                errors.append(f"{params}: {exc or type(exc).__name__}")
                last = exc
        if len(errors) == 1 and isinstance(last, AMQPConnectionError):
            raise last  # one broker: its own error (e.g. ConnectionClosed 530 for a vhost)
        raise AMQPConnectionError("could not connect: " + "; ".join(errors)) from last

    async def _connect(self, params: ConnectionParameters) -> None:
        deadline = _deadline(params.connection_timeout)
        core = self._new_core(params)
        waiter = self._new_waiter()
        with self._lock:
            self.params = params
            self._core = core
            # the new core's totals start at 0
            self._seen_acked = self._seen_nacked = self._seen_returned = 0
            self._seen_delivered = self._seen_got = self._seen_published = 0
            self._stamped.clear()
            self._to_stamp.clear()
            self._handshake_waiter = waiter
        self._warn_if_unverified(params)
        await self._open_transport(params)
        with self._lock:
            core.initiate()
        self._flush_quietly()
        try:
            opened = await self._wait(waiter, _left(deadline))
        except TimeoutError:
            error = AMQPConnectionError(f"handshake with {params} timed out after {params.connection_timeout} s")
            self._on_lost(error)
            raise error from None
        except BaseException as exc:
            self._on_lost(exc if isinstance(exc, AMQPConnectionError) else ConnectionLost(f"connecting to {params}: {exc!r}"))
            raise
        self.server_properties = opened.server_properties
        self.channel_max = opened.channel_max
        self.frame_max = opened.frame_max
        self.heartbeat = opened.heartbeat
        self._started()
        metrics = self._metrics
        if metrics is not None:
            metrics.connection_opened()
        log.info("connected to %s (frame_max %d, heartbeat %d)", params, self.frame_max, self.heartbeat)

    # channels ----------------------------------------------------------------------------

    async def _open_channel(self, channel_id: Optional[int] = None, timeout: Optional[float] = None) -> Any:
        self._check()
        waiter = self._new_waiter()
        with self._lock:
            self._check()
            cid = self._core.open_channel(channel_id)
            channel = self._make_channel(cid)
            channel._waiter = waiter
            self._channels[cid] = channel
        self._flush()
        limit = self.rpc_timeout if timeout is None else timeout
        try:
            await self._wait(waiter, limit)
        except BaseException as exc:
            with self._lock:
                self._channels.pop(cid, None)
                state = self._core.channel_state(cid)
                if state is not None and self._lifecycle.has_socket:
                    try:
                        self._core.close_channel(cid)  # its late open-ok must not leak the number
                    except InvalidStateError:
                        pass  # the connection is closing: the number goes with it
            self._flush_quietly()
            if isinstance(exc, TimeoutError):
                raise OperationTimeout("channel.open", limit, cid) from None
            raise
        with self._lock:
            channel._lifecycle.fire(ChannelSignal.OPENED)
        if channel._lifecycle.state is ChannelPhase.CLOSED:  # lost right after its open-ok
            channel._check()
        return channel

    async def update_secret(self, new_secret: str, reason: str, *, timeout: Optional[float] = None) -> None:
        """Give the broker a new secret (e.g. a refreshed OAuth 2 token) without reconnecting."""
        self._check()
        waiter = self._new_waiter()
        with self._lock:
            self._core.update_secret(new_secret, reason)
            self._secret_waiter = waiter
        self._flush()
        limit = self.rpc_timeout if timeout is None else timeout
        try:
            await self._wait(waiter, limit)
        except TimeoutError:
            raise OperationTimeout("connection.update-secret", limit) from None

    # recovery ------------------------------------------------------------------------------

    async def wait_recovered(self, timeout: Optional[float] = None) -> bool:
        """With recovery on: wait until the connection is up again (True) or timeout."""
        lifecycle = self._lifecycle
        if lifecycle.usable:
            return True
        deadline = _deadline(timeout)
        while lifecycle.state is ConnectionStatus.CLOSED_BY_BROKER:  # its loss is not handled yet
            left = _left(deadline)
            if left is not None and left <= 0:
                return False
            await self._sleep(0.001)
        await self._wait_flag(self._recovered, _left(deadline))
        return lifecycle.usable

    async def _recover(self) -> None:
        policy = self.recovery
        if policy is None:
            return
        attempt = 0
        lifecycle = self._lifecycle
        while lifecycle.recovering:  # close() ends it: it gives the connection up itself
            delay = policy.delay(attempt)
            attempt += 1
            log.info("recovery: reconnecting in %.1f s (attempt %d)", delay, attempt)
            await self._sleep(delay)
            if not lifecycle.recovering:
                break
            try:
                await self._connect_any()
                await self._restore()
            except Exception as exc:  # keep trying until the policy gives up
                log.warning("recovery attempt %d failed: %r", attempt, exc)
                self._on_lost(ConnectionLost(f"recovery attempt {attempt} failed: {exc}"))
                final = bool(policy.max_attempts and attempt >= policy.max_attempts)
                listeners = self._listeners_of("recovery_failed")
                if listeners:
                    self._emit(listeners, RecoveryEvent(attempt, exc, final))
                if final:
                    log.error("recovery gave up after %d attempts", attempt)
                    self._give_up(announced_recovering=True)
                    return
                continue
            if not lifecycle.recovering:
                break  # close() came during the restore: it wins
            self._recovery_done(attempt)
            return

    async def _restore(self) -> None:
        """Reopen the channels, declare the topology again, resubscribe the consumers."""
        topology = self._topology
        channels = []
        for channel in sorted(self._channels.values(), key=lambda c: c.channel_id):
            if channel._lifecycle.state is ChannelPhase.DOWN:  # else closed by the user meanwhile
                await channel._reopen()
                channels.append(channel)
        if topology is not None and channels:
            first = channels[0]
            plan = topology.replay()
            method = next(plan, None)
            while method is not None:
                reply = await first._rpc(method, None, check=False, record=False)
                try:
                    method = plan.send(reply)
                except StopIteration:
                    break
        for channel in channels:
            if channel._lifecycle.state is ChannelPhase.OPEN:
                await channel._resubscribe(topology)

    # closing -------------------------------------------------------------------------------

    async def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the connection (its channels with it).  Safe to call twice."""
        with self._lock:
            old = self._fire(ConnectionSignal.CLOSE)
        if old is ConnectionStatus.CLOSING or old is ConnectionStatus.CLOSED:
            return
        self._recovered.set()
        self._cancel_recovery()
        if old in OPENED_STATES:
            waiter = self._new_waiter()
            self._close_waiter = waiter
            try:
                with self._lock:
                    self._core.close(reply_code, reply_text)
                self._flush()
                await self._wait(waiter, self.params.connection_timeout)
            except (AMQPError, OSError, TimeoutError) as exc:
                log.debug("close: %s", exc)
        self._on_lost(InvalidStateError("the connection is closed"))  # the socket, if there is one
        if old is ConnectionStatus.DOWN or self._channels:
            # Down: nothing else ends the channels.  Channels left: a loss on another thread
            # has not given them up yet (it fails the publishes it drained on its own list).
            self._give_up(announced_recovering=old is ConnectionStatus.DOWN)
        self._after_close()
        log.info("connection to %s closed", self.params)


class AsyncChannel(ChannelBase, Generic[_Token, _Subscription]):
    """A channel's operations, in AMQP's names, with precise types: a transport names its
    confirm future (``_Token``) and what ``consume()`` gives back (``_Subscription``)."""

    __slots__ = ()  # all in ChannelBase's

    _connection: AsyncConnection
    _rpc_lock: Any

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _wait_progress(self, ready: Callable[[], bool], timeout: Optional[float], what: str,
                             below: Optional[int] = None) -> None:
        """Wait until ``ready()`` (checked when confirms bring ``_unsettled`` down to
        ``below``, at every confirm if None, and whenever the channel fails);
        OperationTimeout naming ``what`` after ``timeout``."""
        raise NotImplementedError

    def _new_token(self, count: int, callback: Any) -> Any:
        """A confirm token standing for ``count`` publishes (see ``session.py``)."""
        raise NotImplementedError

    def _issued(self, token: Any, seqno: int) -> _Token:
        """What the caller gets for a confirm token whose first publish has ``seqno``."""
        raise NotImplementedError

    def _subscription(self, consumer: Any, timeout: Optional[float]) -> _Subscription:
        """consume()'s result: the consumer once subscribed (blocking), or an awaitable
        and ``async with`` opener (asyncio)."""
        raise NotImplementedError

    def _token_error(self, token: Any) -> Optional[BaseException]:
        raise NotImplementedError

    # requests ------------------------------------------------------------------------------

    async def _rpc(self, method: Any, timeout: Optional[float] = None, *, check: bool = True, record: bool = True) -> Any:
        """Send a synchronous request and wait for its reply.  ``check=False``: for
        recovery, which talks to a connection that callers cannot use yet."""
        if check:
            self._check()
        connection = self._connection
        limit = connection.rpc_timeout if timeout is None else timeout
        deadline = _deadline(limit)
        async with self._rpc_lock:
            stale = self._stale
            if stale is not None and not stale.done():
                try:
                    await connection._wait(stale, _left(deadline))
                except TimeoutError:
                    raise OperationTimeout(method.NAME, limit, self.channel_id, earlier=True) from None
                except AMQPError:
                    pass  # the channel or connection ended: said below
            waiter = connection._new_waiter()
            with connection._lock:
                if check:
                    self._check()
                elif not connection._lifecycle.has_socket:
                    raise connection._lifecycle.error or ConnectionLost("the connection is gone")
                try:
                    connection._core.send_method(self.channel_id, method)
                except InvalidStateError:
                    self._check()
                    raise
                self._waiter = waiter
            connection._flush()
            try:
                reply = await connection._wait(waiter, _left(deadline))
            except TimeoutError:
                self._abandon(waiter, method)
                raise OperationTimeout(method.NAME, limit, self.channel_id) from None
            except BaseException:
                self._abandon(waiter, method)
                raise
        if record and connection._topology is not None:
            connection._topology.record(method, reply)
        return reply

    # exchanges -----------------------------------------------------------------------------

    async def exchange_declare(
        self,
        exchange: str,
        exchange_type: str = "direct",
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        """Declare an exchange (``passive``: only check that it exists; 404 if not)."""
        method = ExchangeDeclare(0, exchange, exchange_type, passive, durable, auto_delete, internal, False, arguments)
        await self._rpc(method, timeout)

    async def exchange_delete(self, exchange: str, *, if_unused: bool = False, timeout: Optional[float] = None) -> None:
        await self._rpc(ExchangeDelete(0, exchange, if_unused, False), timeout)

    async def exchange_bind(
        self, destination: str, source: str, routing_key: str = "", arguments: Optional[dict[str, Any]] = None,
        *, timeout: Optional[float] = None,
    ) -> None:
        """Route messages from exchange ``source`` to exchange ``destination`` (RabbitMQ extension)."""
        await self._rpc(ExchangeBind(0, destination, source, routing_key, False, arguments), timeout)

    async def exchange_unbind(
        self, destination: str, source: str, routing_key: str = "", arguments: Optional[dict[str, Any]] = None,
        *, timeout: Optional[float] = None,
    ) -> None:
        await self._rpc(ExchangeUnbind(0, destination, source, routing_key, False, arguments), timeout)

    # queues --------------------------------------------------------------------------------

    async def queue_declare(
        self,
        queue: str = "",
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> QueueDeclareOk:
        """Declare a queue; returns QueueDeclareOk (``.queue``, ``.message_count``, ``.consumer_count``).

        An empty name asks the broker to name it.  ``passive``: only check it exists (404 if not).
        """
        reply: QueueDeclareOk = await self._rpc(
            QueueDeclare(0, queue, passive, durable, exclusive, auto_delete, False, arguments), timeout
        )
        return reply

    async def queue_bind(
        self, queue: str, exchange: str, routing_key: str = "", arguments: Optional[dict[str, Any]] = None,
        *, timeout: Optional[float] = None,
    ) -> None:
        await self._rpc(QueueBind(0, queue, exchange, routing_key, False, arguments), timeout)

    async def queue_unbind(
        self, queue: str, exchange: str, routing_key: str = "", arguments: Optional[dict[str, Any]] = None,
        *, timeout: Optional[float] = None,
    ) -> None:
        await self._rpc(QueueUnbind(0, queue, exchange, routing_key, arguments), timeout)

    async def queue_purge(self, queue: str, *, timeout: Optional[float] = None) -> int:
        """Remove all ready messages; returns how many."""
        reply = await self._rpc(QueuePurge(0, queue, False), timeout)
        return int(reply.message_count)

    async def queue_delete(
        self, queue: str, *, if_unused: bool = False, if_empty: bool = False, timeout: Optional[float] = None
    ) -> int:
        """Delete a queue; returns how many messages it still held."""
        reply = await self._rpc(QueueDelete(0, queue, if_unused, if_empty, False), timeout)
        return int(reply.message_count)

    # basic ---------------------------------------------------------------------------------

    async def basic_qos(
        self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False, timeout: Optional[float] = None
    ) -> None:
        """Unacknowledged deliveries allowed per consumer (``global_``: per channel)."""
        await self._rpc(BasicQos(prefetch_size, prefetch_count, global_), timeout)
        self._qos = (prefetch_count, prefetch_size, global_)

    async def basic_recover(self, requeue: bool = True, *, timeout: Optional[float] = None) -> None:
        """Redeliver the unacknowledged messages of this channel."""
        await self._rpc(BasicRecover(requeue), timeout)
        for consumer in list(self._consumers.values()):
            self._consumer_event(ConsumerEventKind.RECOVER_OK, consumer)

    async def basic_get(self, queue: str, *, no_ack: bool = False, timeout: Optional[float] = None) -> Optional[Message]:
        """One message from the queue, or None if it is empty (``message_count``: how many remain)."""
        self._get_no_ack = no_ack
        message: Optional[Message] = await self._rpc(BasicGet(0, queue, no_ack), timeout, record=False)
        return message

    async def basic_cancel(self, consumer_tag: str, *, timeout: Optional[float] = None) -> None:
        """Stop a consumer; messages it already received can still be read."""
        consumer = self._consumers.get(consumer_tag)
        await self._rpc(BasicCancel(consumer_tag, False), timeout, record=False)
        self._consumers.pop(consumer_tag, None)
        if consumer is not None:
            consumer._finish(END)
            self._consumer_event(ConsumerEventKind.CANCEL_OK, consumer)

    async def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self._answer_delivery("basic_ack", delivery_tag, multiple)

    async def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._answer_delivery("basic_nack", delivery_tag, multiple, requeue)

    async def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        self._answer_delivery("basic_reject", delivery_tag, requeue)

    def _answer_delivery(self, core_method: str, delivery_tag: int, *args: bool) -> None:
        """ack, nack or reject: never waits, so both transports share it as it is.

        Whether it may go ahead is the channel's own state on the current connection: a
        delivery of that connection is always answered there, even while a recovery is
        still re-subscribing other consumers; one of a lost connection is refused with the
        loss while the connection is down, and void (logged) once the channel is back: the
        broker requeued it."""
        connection = self._connection
        if _LOCKED_SECTION:
            if not connection._lifecycle.answerable:  # a closed channel: the core refuses it below
                self._check()
            try:
                sent = getattr(connection._core, core_method)(self.channel_id, delivery_tag, *args)
            except InvalidStateError:
                self._check()
                raise
            if not sent:
                log.info("channel %d: %s of delivery %d from before a recovery ignored (the broker requeued it)",
                         self.channel_id, core_method, delivery_tag)
                return
            observer = connection._observer
            if observer is not None and observer.metrics is not None:
                self._count_settled(observer.metrics, core_method, delivery_tag,
                                    core_method != "basic_reject" and args[0])
        # At once: a consumer busy with its buffered messages would otherwise hold back
        # the acks that let the broker send more.
        connection._flush_acks()

    # modes ---------------------------------------------------------------------------------

    async def confirm_select(self, *, max_in_flight: int = 10000, timeout: Optional[float] = None) -> None:
        """Turn on publisher confirms.  ``max_in_flight``: unconfirmed publishes allowed at once."""
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        await self._rpc(ConfirmSelect(False), timeout, record=False)
        if not self._confirm:
            self._restart_seqnos()
        self._confirm = True
        self._max_in_flight = max_in_flight

    async def tx_select(self, *, timeout: Optional[float] = None) -> None:
        """Make the channel transactional: publishes and acks take effect at tx_commit."""
        await self._rpc(TxSelect(), timeout, record=False)

    async def tx_commit(self, *, timeout: Optional[float] = None) -> None:
        await self._rpc(TxCommit(), timeout, record=False)

    async def tx_rollback(self, *, timeout: Optional[float] = None) -> None:
        await self._rpc(TxRollback(), timeout, record=False)

    # publishing ----------------------------------------------------------------------------

    async def _wait_publishable(self, deadline: Optional[float]) -> None:
        """Wait while the broker blocks the connection, the socket cannot take more, or
        channel.flow paused the channel."""
        connection = self._connection
        self._check()
        if connection._lifecycle.state is ConnectionStatus.BLOCKED:
            if connection.blocked_action == "raise":
                raise ConnectionBlockedError(connection._core.blocked or "blocked")
            connection._flush()
            limit = connection.blocked_timeout
            left = _left(deadline)
            if left is not None:
                limit = left if limit is None else min(limit, left)
            if not await connection._wait_flag(connection._unblocked, limit):
                raise ConnectionBlockedError(f"{connection._core.blocked or 'blocked'} (still blocked after {limit} s)")
            self._check()
        if not connection._writable.is_set():
            if not await connection._wait_flag(connection._writable, _left(deadline)):
                raise OperationTimeout("room in the socket's write buffer", _left(deadline), self.channel_id)
            self._check()
        if self._flow_paused:
            connection._flush()
            if not await connection._wait_flag(self._flow, _left(deadline)):
                raise OperationTimeout("channel.flow to resume publishing", _left(deadline), self.channel_id)
            self._check()

    async def _wait_for_room(self, count: int, deadline: Optional[float]) -> None:
        connection = self._connection
        if connection._held or self._flow_paused:
            await self._wait_publishable(deadline)
        window = self._max_in_flight
        if self._unsettled and self._unsettled + count > window:
            # Wait for the window to half empty, not for one free slot: one wake-up per
            # many acks instead of one per ack frame.
            room = max(min(window // 2, window - count), 0)
            connection._flush_quietly()
            # blocked_action raise: a connection blocked meanwhile ends the wait (confirms
            # may not come before it is unblocked); it raises below, as it would have before.
            refuse = connection.blocked_action == "raise"
            await self._wait_progress(
                lambda: self._unsettled <= room or (refuse and connection.blocked),
                _left(deadline), "room in the confirm window", room,
            )
            self._check()
            if refuse and connection.blocked:
                raise ConnectionBlockedError(connection._core.blocked or "blocked")

    async def basic_publish(
        self,
        exchange: str,
        routing_key: str,
        body: Body,
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
        timeout: Optional[float] = None,
    ) -> None:
        """Publish one message.  Without confirm mode it waits only under back-pressure
        (blocked connection, channel.flow, a full socket); in confirm mode it waits for the
        broker's verdict and raises PublishNacked or MessageReturned (mandatory,
        unroutable).  ``timeout`` bounds every wait."""
        connection = self._connection
        if self._confirm:
            deadline = _deadline(timeout)
            token: Any = await self.publish_async(
                exchange, routing_key, body, properties, mandatory=mandatory, timeout=timeout
            )
            try:
                await self._wait_progress(token.done, _left(deadline), "the broker's confirm")
            finally:
                if token in self._failures:  # raised here: wait_for_confirms does not report it again
                    self._failures.remove(token)
            error = self._token_error(token)
            if error is not None:
                raise error
            return
        if connection._held or self._flow_paused:
            await self._wait_publishable(_deadline(timeout))
        if _LOCKED_SECTION:
            if not connection._lifecycle.usable:  # a closed channel: the core refuses it below
                self._check()
            try:
                connection._core.publish(self.channel_id, exchange, routing_key, body, properties, mandatory)
            except InvalidStateError:
                self._check()  # the connection or channel went away meanwhile: say why
                raise
        if not connection._flush_later or connection._core.pending_output >= FLUSH_AT:
            connection._flush_soon()

    async def publish_async(
        self,
        exchange: str,
        routing_key: str,
        body: Body,
        properties: Optional[BasicProperties] = None,
        *,
        mandatory: bool = False,
        callback: Optional[Callable[[_Token], Any]] = None,
        timeout: Optional[float] = None,
    ) -> _Token:
        """Publish in confirm mode without waiting for the broker: returns a future of its
        verdict (None when acked; PublishNacked, MessageReturned or PublishUnconfirmed).

        Waits only while ``max_in_flight`` publishes are unconfirmed, or under
        back-pressure; ``timeout`` bounds that wait.  ``callback(future)`` runs once the
        broker has answered (blocking: on the I/O thread; asyncio: in the loop).
        """
        if not self._confirm:
            raise InvalidStateError("publish_async needs confirm mode: call confirm_select() first")
        connection = self._connection
        if connection._held or self._flow_paused or self._unsettled >= self._max_in_flight:
            await self._wait_for_room(1, _deadline(timeout))
        token = self._new_token(1, callback)
        if _LOCKED_SECTION:
            # Checked again under the lock: a connection lost while we waited has drained
            # its unconfirmed publishes already, and one queued now would never settle.
            if not connection._lifecycle.usable:  # a closed channel: the core refuses it below
                self._check()
            try:
                seqno = connection._core.publish(
                    self.channel_id, exchange, routing_key, body, properties, mandatory, False, token
                )
            except InvalidStateError:
                self._check()
                raise
            self._unsettled += 1
            if connection._observer is not None and connection._metrics is not None:
                if not self._stamp_pending:  # stamped when written (see ConnectionBase._take_output)
                    self._stamp_pending = True
                    connection._to_stamp.append(self)
        if not connection._flush_later or connection._core.pending_output >= FLUSH_AT:
            connection._flush_soon()
        return self._issued(token, seqno)

    async def publish_encoded(self, frames: Any, count: int, *, timeout: Optional[float] = None) -> Optional[_Token]:
        """Send ``count`` publishes already encoded as frames for this channel (for example
        by :class:`amqwire.spark.encode.PublishEncoder`), in one write, without copying.

        In confirm mode returns one future for all of them: it succeeds when the broker has
        acked every one and fails with the first nack or return (of frames encoded
        ``mandatory``).  Waits while the confirm window (``max_in_flight``) is full, the
        broker blocks the connection or pauses the channel: ``timeout`` bounds those waits
        (OperationTimeout; ConnectionBlockedError for a blocked connection).  Without
        confirm mode returns None.  ``frames`` must stay unchanged until written (bytes are
        the safe choice).
        """
        connection = self._connection
        if not connection._lifecycle.usable or self._lifecycle.state is ChannelPhase.CLOSED:
            self._check()
        deadline = _deadline(timeout)
        if connection._held or self._flow_paused or self._confirm:
            await self._wait_for_room(count if self._confirm else 0, deadline)
        token = self._new_token(count, None) if self._confirm else None
        if _LOCKED_SECTION:
            if not connection._lifecycle.usable:  # a closed channel: the core refuses it below
                self._check()
            try:
                first = connection._core.publish_encoded(self.channel_id, frames, count, token)
            except InvalidStateError:
                self._check()
                raise
            if token is not None:
                self._unsettled += count
            if connection._observer is not None and connection._metrics is not None:
                if token is not None and count and not self._stamp_pending:
                    self._stamp_pending = True
                    connection._to_stamp.append(self)
        if not connection._flush_later or connection._core.pending_output >= FLUSH_AT:
            connection._flush_soon()
        if token is None:
            return None
        return self._issued(token, first)

    async def wait_for_confirms(self, timeout: Optional[float] = None) -> None:
        """Wait until the broker has answered every publish; raise the first failure since
        the last call (PublishNacked, MessageReturned or PublishUnconfirmed, with
        ``.failures`` listing them all)."""
        if not self._confirm:
            raise InvalidStateError("wait_for_confirms needs confirm mode: call confirm_select() first")
        self._connection._flush_quietly()
        if self._unsettled > 0:
            await self._wait_progress(lambda: self._unsettled <= 0, timeout, "confirms", 0)
        failures = [error for error in map(self._token_error, self._failures) if error is not None]
        self._failures = []
        if failures:
            error = failures[0]
            error.failures = failures  # type: ignore[attr-defined]
            raise error
        if self._lifecycle.state is ChannelPhase.CLOSED:
            self._check()

    # consuming -----------------------------------------------------------------------------

    def consume(
        self,
        queue: str,
        callback: Optional[Callable[[Message], Any]] = None,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> _Subscription:
        """Subscribe to a queue (basic.consume).  Blocking: returns the Consumer (iterate
        it, or pass ``callback`` to have it called from ``process_events`` /
        ``start_consuming``).  asyncio: ``consumer = await ch.consume(q)`` or ``async with
        ch.consume(q) as consumer``; ``callback`` is called in the loop (coroutines become
        tasks)."""
        method = BasicConsume(0, queue, consumer_tag, False, no_ack, exclusive, False, arguments)
        return self._subscription(self._new_consumer(queue, callback, method), timeout)

    basic_consume = consume

    def _new_consumer(self, queue: str, callback: Optional[Callable[[Message], Any]], method: BasicConsume) -> Any:
        raise NotImplementedError

    async def _subscribe(self, consumer: ConsumerBase, timeout: Optional[float] = None, *, check: bool = True) -> None:
        if check:
            self._check()
        # The consumer must be findable before basic.consume-ok arrives: deliveries may
        # follow it at once, in the same read.
        tag = consumer._method.consumer_tag
        if consumer._method.no_ack:
            self._no_ack_consumers += 1  # metrics: its deliveries need no settling
            self._connection._no_ack_seen = True
        if tag:
            self._consumers[tag] = consumer
        self._pending_consumer = consumer
        try:
            reply = await self._rpc(consumer._method, timeout, check=check, record=False)
        except BaseException:
            self._consumers.pop(tag, None)
            raise
        finally:
            self._pending_consumer = None
        consumer.consumer_tag = reply.consumer_tag
        self._consumers[reply.consumer_tag] = consumer
        self._consumer_event(ConsumerEventKind.CONSUME_OK, consumer)

    # closing -------------------------------------------------------------------------------

    async def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the channel.  Safe to call twice, and after the connection is gone (while
        it recovers: the channel and its consumers are not restored)."""
        if not self.is_open:
            self._lifecycle.fire(ChannelSignal.CLOSED, InvalidStateError(f"channel {self.channel_id} is closed"))
            self._forget_while_down()
            return
        connection = self._connection
        waiter = connection._new_waiter()
        try:
            with connection._lock:
                connection._core.close_channel(self.channel_id, reply_code, reply_text)
                outstanding = self._waiter
                self._waiter = waiter
                self._stale = None
            if outstanding is not None and not outstanding.done():
                outstanding.set_exception(InvalidStateError(f"channel {self.channel_id} was closed"))
            connection._flush()
            await connection._wait(waiter, connection.params.connection_timeout)
        except (AMQPError, OSError, TimeoutError) as exc:
            log.debug("channel %d close: %s", self.channel_id, exc)

    # recovery ------------------------------------------------------------------------------

    async def _reopen(self) -> None:
        connection = self._connection
        waiter = connection._new_waiter()
        with connection._lock:
            if not connection._lifecycle.has_socket:
                raise connection._lifecycle.error or ConnectionLost("the connection is gone")
            connection._core.open_channel(self.channel_id, self._tag_base)
            self._waiter = waiter
            self._stale = None
            self._unsettled = 0  # nothing can be in flight: publishing waits for the recovery
            self._restart_seqnos()
            self._restart_delivery_tags()
            connection._channels[self.channel_id] = self
        connection._flush()
        await connection._wait(waiter, connection.params.connection_timeout)
        with connection._lock:
            self._lifecycle.fire(ChannelSignal.REOPENED)
        if self._lifecycle.state is ChannelPhase.CLOSED:  # closed by the user meanwhile
            self._close_soon(200, "Normal shutdown")
            return
        if self._qos is not None:
            count, size, global_ = self._qos
            await self._rpc(BasicQos(size, count, global_), None, check=False, record=False)
        if self._confirm:
            await self._rpc(ConfirmSelect(False), None, check=False, record=False)

    async def _resubscribe(self, topology: Optional[Topology]) -> None:
        for tag, consumer in list(self._consumers.items()):
            if not consumer.active:
                continue  # cancelled while the connection was down
            method = consumer._method
            queue_name = topology.renamed.get(consumer.queue, consumer.queue) if topology is not None else consumer.queue
            consumer.queue = queue_name
            consumer._method = BasicConsume(0, queue_name, tag, method.no_local, method.no_ack, method.exclusive,
                                            False, method.arguments)
            self._consumers.pop(tag, None)
            await self._subscribe(consumer, None, check=False)
            if not consumer.active:  # cancelled while its basic.consume was on the way
                self._cancel_while_down(consumer)


class AsyncConsumer(ConsumerBase):
    """A subscription's operations."""

    channel: AsyncChannel[Any, Any]

    async def cancel(self) -> None:
        """Stop the subscription; messages already received can still be read.  While the
        connection recovers: the subscription is not restored."""
        if self.active:
            if self.channel.is_open:
                await self.channel.basic_cancel(self.consumer_tag)
            else:
                self._finish(END)
                self.channel._cancel_while_down(self)
        self._finish(END)

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.cancel()
