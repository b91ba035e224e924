"""The client's Connection, Channel and Consumer, written once: RPCs, publishing, consuming, closing, recovery.

This file is the source of truth: it defines the asyncio transport's ``Connection``,
``Channel`` and ``Consumer`` (``amqwire.client.aio``), and ``operations_sync.py``, the
blocking transport's (``amqwire.client.blocking``), is generated from it by
``client/make_sync.py`` (``async def`` -> ``def``, ``await x`` -> ``x``, ``async with`` ->
``with``, ``Async*`` -> ``Sync*``, ``io_asyncio`` -> ``io_threads``); ``tests/test_client_sync.py``
fails when the two drift.  So both transports run the same logic and differ only in the
I/O object each connection owns (``io_asyncio.AsyncioIO``, ``io_threads.ThreadIO``: the
socket, the lock, waiters, flags, sleeping, tasks or threads), the ``ChannelWaits`` each
channel owns (confirm futures and the waits for them) and the ``Inbox`` each consumer owns.
Where the public APIs differ, the source says so with ``Opener[...]``; the calls only
one transport has come from the backends (``ThreadConnectionAPI``, ``ThreadChannelAPI``).

Timeouts: every request takes ``timeout=`` (default: the connection's ``rpc_timeout``);
on expiry it raises :class:`~amqwire.client.errors.OperationTimeout`.  A request that
timed out or was cancelled leaves the channel usable: its late reply is discarded (a
message it fetched is rejected back to its queue, a consumer it made is cancelled), and
the next request on the channel first waits for that reply, within its own timeout.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, AsyncIterator, Callable, Literal, Optional, TypeVar

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
from amqwire.codec.parser import DeliveryIterator

from .io_asyncio import Opener, AsyncioChannelAPI, AsyncioConnectionAPI, AsyncioIO, ChannelWaits, ConfirmFuture, Inbox
from .io_contract import AsyncConnectionIO
from .ack_path import channel_answer_delivery
from .lifecycle import CHANNEL_OPEN_PHASES, OPENED_STATES, ChannelSignal, ChannelPhase, ConnectionSignal, ConnectionStatus
from .listeners import ConsumerEventKind, RecoveryEvent
from .errors import (
    AMQPConnectionError,
    AMQPError,
    AuthenticationError,
    ConnectionBlockedError,
    ConnectionLost,
    InvalidStateError,
    NotAStream,
    OperationTimeout,
    PreconditionFailed,
    StreamReplicaUnavailable,
)
from .message import AsyncMessage, Body
from .recovery import END, Topology
from .session import ChannelBase, ConnectionBase, ConsumerBase
from .streams import (
    HAND_OUT, LAST, SKIP, TRUNCATED, ReplicaWait, StreamConsumerBase, StreamOffset, StreamOffsets,
    check_options, offset_argument,
)
from .url import ConnectionParameters

log = logging.getLogger("amqwire.client")

# The hot sections below (publishing, acks) hold ``connection._lock`` with an explicit
# acquire and a ``try``/``finally``: the blocking transport's reader thread and other calling
# threads share the core, and a ``with`` would cost an RLock about twice as much.  On
# asyncio the lock is io_asyncio's NoLock (one thread runs everything, and a section
# without an await cannot be interleaved).
_Self = TypeVar("_Self")


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


class AsyncConnection(ConnectionBase, AsyncioConnectionAPI):
    """An AMQP connection.  Use it as a context manager, or call ``close()``."""

    __slots__ = ()  # all in ConnectionBase's

    _io: AsyncConnectionIO

    def __init__(self, parameters: list[ConnectionParameters], *, consumer_workers: int = 0, **options: Any) -> None:
        def io(connection: ConnectionBase) -> AsyncConnectionIO:
            return AsyncioIO(connection, consumer_workers)

        super().__init__(parameters, io, **options)

    def channel(self, channel_id: Optional[int] = None, *, timeout: Optional[float] = None) -> Opener[AsyncChannel]:
        """Open a channel (the lowest free number unless given).  asyncio: ``ch = await
        conn.channel()`` or ``async with conn.channel() as ch``."""
        return Opener(self._open_channel(channel_id, timeout))

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Context manager: what is published inside is written in few big socket writes at
        the end (asyncio: one write per pass of the loop, always)."""
        return self._io.batch()

    @property
    def consumer_workers(self) -> int:
        """Threads of the consumer work pool (0: callbacks run in ``process_events``; asyncio:
        in the loop)."""
        return self._io.consumer_workers

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
        waiter = self._io.new_waiter()
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
        await self._io.open_transport(params)
        with self._lock:
            core.initiate()
        self._flush_quietly()
        try:
            opened = await self._io.wait(waiter, _left(deadline))
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
        self._io.started()
        log.info("connected to %s (frame_max %d, heartbeat %d)", params, self.frame_max, self.heartbeat)

    # channels ----------------------------------------------------------------------------

    async def _open_channel(self, channel_id: Optional[int] = None, timeout: Optional[float] = None) -> AsyncChannel:
        self._check()
        waiter = self._io.new_waiter()
        with self._lock:
            self._check()
            cid = self._core.open_channel(channel_id)
            channel = AsyncChannel(self, cid)
            channel._request_sent(waiter)
            self._channels[cid] = channel
        self._io.flush()
        limit = self.rpc_timeout if timeout is None else timeout
        try:
            await self._io.wait(waiter, limit)
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
        waiter = self._io.new_waiter()
        with self._lock:
            self._core.update_secret(new_secret, reason)
            self._secret_waiter = waiter
        self._io.flush()
        limit = self.rpc_timeout if timeout is None else timeout
        try:
            await self._io.wait(waiter, limit)
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
            await self._io.sleep(0.001)
        await self._io.wait_flag(self._recovered, _left(deadline))
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
            await self._io.sleep(delay)
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
            if channel._lifecycle.state in CHANNEL_OPEN_PHASES:
                await channel._resubscribe(topology)

    # closing -------------------------------------------------------------------------------

    async def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the connection (its channels with it).  Safe to call twice."""
        with self._lock:
            old = self._fire(ConnectionSignal.CLOSE)
        if old is ConnectionStatus.CLOSING or old is ConnectionStatus.CLOSED:
            return
        self._io.cancel_recovery()
        if old in OPENED_STATES:
            waiter = self._io.new_waiter()
            self._close_waiter = waiter
            try:
                with self._lock:
                    self._core.close(reply_code, reply_text)
                self._io.flush()
                await self._io.wait(waiter, self.params.connection_timeout)
            except (AMQPError, OSError, TimeoutError) as exc:
                log.debug("close: %s", exc)
        self._on_lost(InvalidStateError("the connection is closed"))  # the socket, if there is one
        if old is ConnectionStatus.DOWN or self._channels:
            # Down: nothing else ends the channels.  Channels left: a loss on another thread
            # has not given them up yet (it fails the publishes it drained on its own list).
            self._give_up(announced_recovering=old is ConnectionStatus.DOWN)
        self._io.after_close()
        log.info("connection to %s closed", self.params)


class AsyncChannel(ChannelBase[AsyncMessage], AsyncioChannelAPI):
    """An AMQP channel.  A channel is meant for one thread (or task) at a time; requests
    from several are serialized."""

    __slots__ = ("_consuming_stops",)

    _connection: AsyncConnection
    _waits: ChannelWaits

    def __init__(self, connection: AsyncConnection, channel_id: int) -> None:
        super().__init__(connection, channel_id)
        self._consuming_stops = 0  # stop_consuming() calls: a start_consuming() runs until the next

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Context manager: publishes inside are written together (few socket writes)."""
        return self._connection.batch()

    # requests ------------------------------------------------------------------------------

    async def _rpc(self, method: Any, timeout: Optional[float] = None, *, check: bool = True, record: bool = True) -> Any:
        """Send a synchronous request and wait for its reply.  ``check=False``: for
        recovery, which talks to a connection that callers cannot use yet."""
        if check:
            self._check()
        connection = self._connection
        limit = connection.rpc_timeout if timeout is None else timeout
        deadline = _deadline(limit)
        async with self._waits.rpc_lock:
            stale = self._stale_reply()
            if stale is not None and not stale.done():
                try:
                    await connection._io.wait(stale, _left(deadline))
                except TimeoutError:
                    raise OperationTimeout(method.NAME, limit, self.channel_id, earlier=True) from None
                except AMQPError:
                    pass  # the channel or connection ended: said below
            waiter = connection._io.new_waiter()
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
                self._request_sent(waiter, method)
            connection._io.flush()
            try:
                reply = await connection._io.wait(waiter, _left(deadline))
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

    async def basic_get(self, queue: str, *, no_ack: bool = False, timeout: Optional[float] = None) -> Optional[AsyncMessage]:
        """One message from the queue, or None if it is empty (``message_count``: how many remain)."""
        tracing = self._connection._tracing
        started = 0 if tracing is None else tracing.now()
        message: Optional[AsyncMessage] = await self._rpc(BasicGet(0, queue, no_ack), timeout, record=False)
        if tracing is not None:
            tracing.received(self, queue, message, started)
        return message

    async def basic_cancel(self, consumer_tag: str, *, timeout: Optional[float] = None) -> None:
        """Stop a consumer; messages it already received can still be read."""
        consumer = self._consumers.get(consumer_tag)
        await self._rpc(BasicCancel(consumer_tag, False), timeout, record=False)
        self._consumers.pop(consumer_tag, None)
        if consumer is not None:
            consumer._finish(END)
            self._consumer_event(ConsumerEventKind.CANCEL_OK, consumer)

    async def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        self._answer_delivery("basic_nack", delivery_tag, multiple, requeue)

    async def basic_reject(self, delivery_tag: int, requeue: bool = True) -> None:
        self._answer_delivery("basic_reject", delivery_tag, requeue)

    # ack, nack or reject: never waits, so both transports share it as it is (compiled,
    # ack_path.pyx; each transport's basic_ack is in its backend: the blocking one is
    # compiled whole)
    _answer_delivery = channel_answer_delivery

    # modes ---------------------------------------------------------------------------------

    async def confirm_select(self, *, max_in_flight: int = 10000, timeout: Optional[float] = None) -> None:
        """Turn on publisher confirms.  ``max_in_flight``: unconfirmed publishes allowed at once."""
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        await self._rpc(ConfirmSelect(False), timeout, record=False)
        if not self._confirm_window:
            self._restart_seqnos()
        self._confirm_window = max_in_flight
        self._set_watched(self._lifecycle.state is ChannelPhase.RESTORED)

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
            connection._io.flush()
            limit = connection.blocked_timeout
            left = _left(deadline)
            if left is not None:
                limit = left if limit is None else min(limit, left)
            if not await connection._io.wait_flag(connection._unblocked, limit):
                raise ConnectionBlockedError(connection._core.blocked or "blocked", waited=limit)
            self._check()
        if not connection._writable.is_set():
            limit = _left(deadline)
            if not await connection._io.wait_flag(connection._writable, limit):
                raise OperationTimeout("room in the socket's write buffer", limit, self.channel_id)
            self._check()
        if self._flow_paused:
            if self._lifecycle.state is ChannelPhase.STALLED:
                await self._renew()
            connection._io.flush()
            limit = _left(deadline)
            if not await connection._io.wait_flag(self._flow, limit):
                renewing = self._lifecycle.state is ChannelPhase.RENEWING
                raise OperationTimeout("the channel's renewal" if renewing else "channel.flow to resume publishing",
                                       limit, self.channel_id)
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
            await self._waits.wait_progress(
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
        if connection._tracing is not None and connection._tracing.outside_send():
            with connection._tracing.sending(self, exchange, routing_key, body, properties) as traced:
                await self.basic_publish(exchange, routing_key, body, traced, mandatory=mandatory, timeout=timeout)
            return
        if self._confirm_window:
            deadline = _deadline(timeout)
            token: Any = await self.publish_async(
                exchange, routing_key, body, properties, mandatory=mandatory, timeout=timeout
            )
            try:
                await self._waits.wait_progress(token.done, _left(deadline), "the broker's confirm")
            finally:
                if token in self._failures:  # raised here: wait_for_confirms does not report it again
                    self._failures.remove(token)
            error = self._waits.token_error(token)
            if error is not None:
                raise error
            return
        if connection._held or self._flow_paused:
            await self._wait_publishable(_deadline(timeout))
        lock = connection._lock
        lock.acquire()
        try:
            if not connection._lifecycle.usable:  # a closed channel: the core refuses it below
                self._check()
            try:
                connection._core.publish(self.channel_id, exchange, routing_key, body, properties, mandatory)
            except InvalidStateError:
                self._check()  # the connection or channel went away meanwhile: say why
                raise
        finally:
            lock.release()
        if not connection._flush_later or connection._core.flush_due:
            connection._io.flush_soon()

    async def _publish_waiting(
        self,
        exchange: str,
        routing_key: str,
        body: Body,
        properties: Optional[BasicProperties],
        mandatory: bool,
        callback: Optional[Callable[[ConfirmFuture], Any]],
        timeout: Optional[float],
    ) -> ConfirmFuture:
        """``publish_async`` when it cannot publish at once (``ChannelPublisher.if_room``
        declined): says why, traces, or waits for room."""
        if not self._confirm_window:
            raise InvalidStateError("publish_async needs confirm mode: call confirm_select() first")
        connection = self._connection
        if connection._tracing is not None and connection._tracing.outside_send():
            with connection._tracing.sending(self, exchange, routing_key, body, properties) as traced:
                return await self.publish_async(exchange, routing_key, body, traced, mandatory=mandatory,
                                                callback=callback, timeout=timeout)
        if connection._held or self._flow_paused or self._unsettled >= self._max_in_flight:
            await self._wait_for_room(1, _deadline(timeout))
        return self._publisher.publish(  # type: ignore[no-any-return]
            exchange, routing_key, body, properties, mandatory, callback
        )

    async def publish_encoded(self, frames: Any, count: int, *, timeout: Optional[float] = None) -> Optional[ConfirmFuture]:
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
        if connection._held or self._flow_paused or self._confirm_window:
            await self._wait_for_room(count if self._confirm_window else 0, deadline)
        token = self._waits.new_token(count, None) if self._confirm_window else None
        lock = connection._lock
        lock.acquire()
        try:
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
                if token is not None and count:
                    connection._to_stamp[self] = None
        finally:
            lock.release()
        if not connection._flush_later or connection._core.flush_due:
            connection._io.flush_soon()
        if token is None:
            return None
        return self._waits.issued(token, first)

    async def wait_for_confirms(self, timeout: Optional[float] = None) -> None:
        """Wait until the broker has answered every publish; raise the first failure since
        the last call (PublishNacked, MessageReturned or PublishUnconfirmed, with
        ``.failures`` listing them all)."""
        if not self._confirm_window:
            raise InvalidStateError("wait_for_confirms needs confirm mode: call confirm_select() first")
        self._connection._flush_quietly()
        if self._unsettled > 0:
            await self._waits.wait_progress(lambda: self._unsettled <= 0, timeout, "confirms", 0)
        failures = [error for error in map(self._waits.token_error, self._failures) if error is not None]
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
        callback: Optional[Callable[[AsyncMessage], Any]] = None,
        *,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        arguments: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> Opener[AsyncConsumer]:
        """Subscribe to a queue (basic.consume).  Blocking: returns the Consumer (iterate
        it, or pass ``callback`` to have it called from ``process_events`` /
        ``start_consuming``).  asyncio: ``consumer = await ch.consume(q)`` or ``async with
        ch.consume(q) as consumer``; ``callback`` is called in the loop (coroutines become
        tasks)."""
        method = BasicConsume(0, queue, consumer_tag, False, no_ack, exclusive, False, arguments)
        return Opener(self._subscribed(AsyncConsumer(self, queue, callback, method), timeout))

    basic_consume = consume

    async def _subscribed(self, consumer: AsyncConsumer, timeout: Optional[float]) -> AsyncConsumer:
        await self._subscribe(consumer, timeout)
        return consumer

    async def _subscribe(self, consumer: ConsumerBase, timeout: Optional[float] = None, *, check: bool = True) -> None:
        if check:
            self._check()
        # The consumer must be findable before basic.consume-ok arrives: deliveries may
        # follow it at once, in the same read.
        tag = consumer._method.consumer_tag
        if consumer._method.no_ack:
            self._no_ack_consumers += 1  # metrics: its deliveries need no settling
            self._connection._no_ack_consumers_started += 1
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
        consumer._count_subscribed()
        self._consumer_event(ConsumerEventKind.CONSUME_OK, consumer)

    # streams -------------------------------------------------------------------------------

    def consume_stream(
        self,
        queue: str,
        *,
        offset: StreamOffset = "next",
        end: Optional[int] = None,
        prefetch: int = 1000,
        on_truncated: Literal["warn", "raise"] = "warn",
        consumer_tag: str = "",
        arguments: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> Opener[AsyncStreamConsumer]:
        """Read a stream queue from ``offset`` (``"first"``, ``"last"``, ``"next"``, an offset,
        a datetime, or an interval such as ``"1h"``) up to the message at offset ``end``
        (included; None: no end).  Returns a StreamConsumer to iterate (``for`` / ``async
        for``) or ``get()`` from; each message has its offset in ``stream_offset``.

        It acks for the reader (acks are only credit on a stream): messages are acked as
        they are read, ``prefetch // 2`` at a time, with one ack (``multiple``) when it is
        the channel's only consumer.  ``prefetch`` is set on the channel (``basic.qos``,
        per consumer) if it differs.  Once the message at ``end`` is read, the consumer is
        cancelled, everything it received acked, and the iteration stops.

        A start offset that retention removed starts at the first offset retained: the
        consumer says so (``truncated``, ``first_offset``, a logged warning), or with
        ``on_truncated="raise"`` raises StreamTruncated from the read that finds it out.
        StreamOptionError for a bad option (before anything is sent), NotAStream for a
        queue that is not a stream.  Not restored by connection recovery: it ends with the
        connection's error; start again from ``last_offset + 1``.
        """
        value = offset_argument(offset)
        check_options(offset, end, prefetch, on_truncated)
        stream_arguments = dict(arguments or {})
        stream_arguments["x-stream-offset"] = value
        method = BasicConsume(0, queue, consumer_tag, False, False, False, False, stream_arguments)
        consumer = AsyncStreamConsumer(self, queue, method, offset, end, prefetch, on_truncated)
        return Opener(self._stream_subscribed(consumer, prefetch, timeout))

    async def _stream_subscribed(self, consumer: AsyncStreamConsumer, prefetch: int,
                                 timeout: Optional[float]) -> AsyncStreamConsumer:
        deadline = _deadline(self._connection.rpc_timeout if timeout is None else timeout)
        if self._qos != (prefetch, 0, False):
            await self.basic_qos(prefetch, timeout=_left(deadline))
        try:
            await self._subscribe(consumer, _left(deadline))
        except PreconditionFailed as exc:
            if "x-stream-offset" in exc.reply_text and "queue type" in exc.reply_text:
                raise NotAStream(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id,
                                 by_broker=exc.by_broker, channel=exc.channel) from None
            if "does not have a replica on the local node" in exc.reply_text:
                raise StreamReplicaUnavailable(exc.reply_code, exc.reply_text, exc.class_id, exc.method_id,
                                               by_broker=exc.by_broker, channel=exc.channel) from None
            raise
        return consumer

    async def stream_offsets(self, queue: str, *, wait: float = 1.0, quiet: float = 0.1,
                             timeout: Optional[float] = None) -> StreamOffsets:
        """The first and last offsets of a stream, (None, None) when it is empty.

        Read with two short consumers on a channel of their own (so their prefetch, and a
        NotFound or NotAStream that closes it, leave this channel as it is): the last chunk
        from ``"last"``, up to its highest offset, then the first message from ``"first"``.
        Both are offsets of messages the broker delivered: they exist (``first`` until
        retention removes it).  ``last`` is at least the tail when the call began, unless
        the broker paused longer than ``quiet`` seconds in the middle of sending its last
        chunk; under concurrent appends it may be newer (the last chunk is read for at most
        ``wait`` seconds).  An empty stream costs ``wait`` seconds: how long a first
        delivery is waited for.  A node that says it has no running replica of the stream is
        asked again on a new channel for up to ``REPLICA_WAIT`` (10) seconds within
        ``timeout``, then StreamReplicaUnavailable.
        """
        connection = self._connection
        deadline = _deadline(connection.rpc_timeout if timeout is None else timeout)
        replica = ReplicaWait(deadline)
        while True:
            probe = await connection._open_channel(None, _left(deadline))
            try:
                last = await probe._stream_probe(queue, "last", wait, quiet, deadline)
                if last is None:
                    return StreamOffsets(None, None)
                first = await probe._stream_probe(queue, "first", wait, 0.0, deadline)
                if first is None or first > last:  # retention removed them all meanwhile
                    return StreamOffsets(None, None)
                return StreamOffsets(first, last)
            except StreamReplicaUnavailable as exc:
                delay = replica.next_delay(exc)
            finally:
                await probe.close()
            await connection._io.sleep(delay)

    async def _stream_probe(self, queue: str, start: str, wait: float, quiet: float,
                            deadline: Optional[float]) -> Optional[int]:
        """The offset of the first delivery from ``start``; with ``quiet``, the highest one
        delivered until none came for that long, for at most ``wait`` seconds."""
        consumer = await self.consume_stream(queue, offset=start, prefetch=2000, timeout=_left(deadline))
        try:
            left = _left(deadline)
            message = await consumer.get(wait if left is None else min(wait, left))
            if message is None or message.stream_offset is None:
                return None
            highest: int = message.stream_offset
            reading = _deadline(wait)
            if deadline is not None and reading is not None:
                reading = min(reading, deadline)
            while quiet:
                left = _left(reading)
                if left is not None and left <= 0:
                    break
                message = await consumer.get(quiet if left is None else min(quiet, left))
                if message is None or message.stream_offset is None:
                    break
                highest = max(highest, message.stream_offset)
            return highest
        finally:
            await consumer.cancel()

    # closing -------------------------------------------------------------------------------

    async def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        """Close the channel.  Safe to call twice, and after the connection is gone (while
        it recovers: the channel and its consumers are not restored)."""
        if not self.is_open:
            self._lifecycle.fire(ChannelSignal.CLOSED, InvalidStateError(f"channel {self.channel_id} is closed"))
            self._forget_while_down()
            return
        connection = self._connection
        waiter = connection._io.new_waiter()
        try:
            with connection._lock:
                connection._core.close_channel(self.channel_id, reply_code, reply_text)
                outstanding = self._request_ended()
                self._request_sent(waiter)
            if outstanding is not None and not outstanding.done():
                outstanding.set_exception(InvalidStateError(f"channel {self.channel_id} was closed"))
            connection._io.flush()
            await connection._io.wait(waiter, connection.params.connection_timeout)
        except (AMQPError, OSError, TimeoutError) as exc:
            log.debug("channel %d close: %s", self.channel_id, exc)

    # recovery ------------------------------------------------------------------------------

    async def _reopen(self) -> None:
        connection = self._connection
        waiter = connection._io.new_waiter()
        with connection._lock:
            if not connection._lifecycle.has_socket:
                raise connection._lifecycle.error or ConnectionLost("the connection is gone")
            connection._core.open_channel(self.channel_id, self._tag_base)
            self._request_ended()  # the old socket's, failed with it
            self._request_sent(waiter)
            self._unsettled = 0  # nothing can be in flight: publishing waits for the recovery
            self._restart_seqnos()
            self._restart_delivery_tags()
            connection._channels[self.channel_id] = self
        connection._io.flush()
        await connection._io.wait(waiter, connection.params.connection_timeout)
        with connection._lock:
            self._lifecycle.fire(ChannelSignal.REOPENED)
            self._nack_watch.restored()
            self._set_watched(self._lifecycle.state is ChannelPhase.RESTORED)
        if self._lifecycle.state is ChannelPhase.CLOSED:  # closed by the user meanwhile
            self._close_soon(200, "Normal shutdown")
            return
        if self._qos is not None:
            count, size, global_ = self._qos
            await self._rpc(BasicQos(size, count, global_), None, check=False, record=False)
        if self._confirm_window:
            await self._rpc(ConfirmSelect(False), None, check=False, record=False)

    async def _renew(self) -> None:
        """Replace this stalled channel (restored by a recovery, then only nacked: see
        RecoveryPolicy.renew_after_nacks) by a fresh one on the same connection: after the
        policy's back-off and once the nacks on the way are in, open a new channel number,
        turn on confirm mode and qos there, move this object onto it, close the old number,
        and subscribe its consumers again.  Run by the publish that finds it stalled;
        publishing waits meanwhile.  A renewal that fails, or one past the policy's bound,
        leaves the channel as it is, unwatched until the next recovery."""
        connection = self._connection
        watch = self._nack_watch
        with connection._lock:
            if self._lifecycle.state is not ChannelPhase.STALLED:
                return  # another publisher renews it, an ack came, or it was lost or closed
            delay = watch.next_renewal()
            self._lifecycle.fire(ChannelSignal.RENEW if delay is not None else ChannelSignal.RENEW_GIVEN_UP)
            if delay is None:
                self._set_watched(False)
        if delay is None:
            log.warning("channel %d: its publishes are still nacked after %d renewals since the recovery; "
                        "it stays as it is (a queue that rejects publishes, e.g. x-overflow reject-publish?)",
                        self.channel_id, watch.renewals)
            self._set_flow(True)
            return
        old = self.channel_id
        new = None
        try:
            await connection._io.sleep(delay)
            limit = connection.params.connection_timeout
            async with self._waits.rpc_lock:
                stale = self._stale_reply()
                if stale is not None and not stale.done():
                    await connection._io.wait(stale, limit)
                waiter = connection._io.new_waiter()
                with connection._lock:
                    self._check_renewing()
                    state = connection._core.channel_state(old)
                    tag_base = self._tag_base if state is None else state.tag_base + state.last_delivery_tag
                    new = connection._core.open_channel(None, tag_base)
                    connection._channels[new] = self  # its replies come to this object
                    self._request_sent(waiter)
                connection._io.flush()
                await connection._io.wait(waiter, limit)
                if self._qos is not None:
                    count, size, global_ = self._qos
                    await self._request_on(new, BasicQos(size, count, global_), limit)
                await self._request_on(new, ConfirmSelect(False), limit)
                while True:  # the old channel's publishes are answered before it closes
                    await self._waits.wait_progress(lambda: self._unsettled == 0, limit,
                                                    "the stalled channel's last verdicts", 0)
                    with connection._lock:
                        self._check_renewing()
                        if self._unsettled:
                            continue  # published meanwhile, before the swap: their verdicts first
                        if connection._channels.get(old) is self:
                            del connection._channels[old]
                        self.channel_id = new
                        self._lifecycle.name = f"channel {new}"
                        self._tag_base = tag_base
                        self._restart_seqnos()
                        self._restart_delivery_tags()
                        try:
                            connection._core.close_channel(old, 200, f"renewed as channel {new}")
                        except InvalidStateError:
                            pass  # the broker closed it meanwhile: the number is free already
                        break
            connection._flush_quietly()
            await self._resubscribe(connection._topology)
        except BaseException as exc:
            # Failed (an error: given up, publishing goes on as it is) or cancelled with the
            # publish that ran it (stalled again: the next publish renews it).
            failed = isinstance(exc, (AMQPError, OSError, TimeoutError))
            with connection._lock:
                if new is not None and self.channel_id != new and connection._channels.get(new) is self:
                    del connection._channels[new]
                    if connection._lifecycle.has_socket and connection._core.channel_state(new) is not None:
                        try:
                            connection._core.close_channel(new)
                        except InvalidStateError:
                            pass
                renewing = self._phase() is ChannelPhase.RENEWING  # a loss or close may have overtaken it
                if renewing:
                    self._lifecycle.fire(ChannelSignal.RENEW_GIVEN_UP if failed else ChannelSignal.RENEW_CANCELLED)
                    if failed:
                        self._set_watched(False)
            connection._flush_quietly()
            if not failed:
                raise
            if renewing:
                log.warning("channel %d: renewing it failed (%r); it stays as it is", self.channel_id, exc)
                self._set_flow(True)
            return
        with connection._lock:
            watch.renewed()
            self._lifecycle.fire(ChannelSignal.RENEWED)
            renewed = self._phase() is ChannelPhase.RESTORED
            if renewed:
                self._set_watched(True)
        if renewed:
            self._set_flow(True)
            log.log(logging.WARNING if watch.renewals == 1 else logging.INFO,
                    "channel %d: renewed as channel %d (renewal %d since the recovery): its publishes since the "
                    "recovery were all nacked", old, new, watch.renewals)

    def _check_renewing(self) -> None:
        """Under ``_lock``: raise if the renewal was overtaken (a loss, a close)."""
        if self._lifecycle.state is not ChannelPhase.RENEWING or not self._connection._lifecycle.usable:
            raise self._lifecycle.reason or self._connection._lifecycle.error or ConnectionLost(
                f"channel {self.channel_id} was closed or lost while being renewed")

    async def _request_on(self, channel_id: int, method: Any, limit: float) -> Any:
        """A synchronous request on ``channel_id``, whose replies come to this object (a
        renewal, under the channel's request lock)."""
        connection = self._connection
        waiter = connection._io.new_waiter()
        with connection._lock:
            self._check_renewing()
            connection._core.send_method(channel_id, method)
            self._request_sent(waiter, method)
        connection._io.flush()
        return await connection._io.wait(waiter, limit)

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
    """A subscription: iterate it for messages (``for`` on the blocking transport, ``async
    for`` on asyncio), or give ``consume()`` a callback."""

    __slots__ = ("_buffer", "_tracing", "_traced")

    channel: AsyncChannel
    _inbox: Inbox

    def __init__(self, channel: AsyncChannel, queue_name: str, callback: Optional[Callable[[AsyncMessage], Any]],
                 method: Any) -> None:
        super().__init__(channel, queue_name, callback, method)
        self._buffer = self._inbox.buffer  # read here first: no call per message while it holds some

    def __aiter__(self) -> AsyncIterator[AsyncMessage]:
        if self._tracing is not None:
            return self  # each step ends the last message's span and starts the next one's
        # While messages are buffered, each step takes one in C; the step below once none is.
        return DeliveryIterator(self._buffer, self.__anext__)

    async def __anext__(self) -> AsyncMessage:
        buffer = self._buffer
        if buffer and self._tracing is None:
            return buffer.popleft()  # type: ignore[no-any-return]
        tracing = self._tracing
        if tracing is not None:
            tracing.handled(self)  # asking for the next message ends the last one's span
        item = await self._inbox.next(None)
        if type(item) is AsyncMessage:
            if tracing is not None:
                tracing.hand_out(self, item)
            return item
        if item is END:
            raise StopAsyncIteration
        raise item

    async def get(self, timeout: Optional[float] = None) -> Optional[AsyncMessage]:
        """The next message; None after ``timeout`` seconds or once the consumer is cancelled."""
        tracing = self._tracing
        if tracing is not None:
            tracing.handled(self)
        item = await self._inbox.next(timeout)
        if item is None or type(item) is AsyncMessage:
            if tracing is not None and item is not None:
                tracing.hand_out(self, item)
            return item
        if item is END:
            return None
        raise item

    async def cancel(self) -> None:
        """Stop the subscription; messages already received can still be read.  While the
        connection recovers: the subscription is not restored."""
        if self._tracing is not None:
            self._tracing.handled(self)
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


class AsyncStreamConsumer(AsyncConsumer, StreamConsumerBase):
    """A consumer of a stream queue (``Channel.consume_stream``): iterate it (``for`` on
    the blocking transport, ``async for`` on asyncio) or ``get()``; each message has its
    offset in ``stream_offset``; do not ack them (the consumer does).

    ``first_offset``: the offset of the first message the broker delivered (None before);
    ``truncated``: True when that is after the start offset asked for (an int), which
    retention removed; ``last_offset``: the offset of the last message read, so reading
    again from ``last_offset + 1`` goes on where this one stopped.  ``truncated`` can only
    be known for a start offset: ``"first"``, a timestamp or an interval start at whatever
    is retained.
    """

    __slots__ = ("start", "end", "first_offset", "last_offset", "truncated", "_skip_below", "_on_truncated",
                 "_unacked", "_credit_batch")

    _recoverable = False

    def __init__(self, channel: AsyncChannel, queue_name: str, method: Any, start: StreamOffset,
                 end: Optional[int], prefetch: int, on_truncated: Literal["warn", "raise"]) -> None:
        super().__init__(channel, queue_name, None, method)
        self._init_stream(start, end, prefetch, on_truncated)

    def __aiter__(self) -> AsyncStreamConsumer:
        return self

    async def __anext__(self) -> AsyncMessage:
        message = await self.get()
        if message is None:
            raise StopAsyncIteration
        return message

    async def get(self, timeout: Optional[float] = None) -> Optional[AsyncMessage]:
        """The next message; None after ``timeout`` seconds, or once the end offset was read
        or the consumer cancelled."""
        deadline = _deadline(timeout)
        while True:
            buffer = self._buffer
            if buffer:
                message = buffer.popleft()
            else:
                item = await self._next_delivery(_left(deadline))
                if item is None:
                    return None
                message = item
            verdict = self._admit(message)
            if verdict == HAND_OUT:
                return message  # type: ignore[no-any-return]
            if verdict != SKIP:
                await self._end_here()
                if verdict == LAST:
                    return message  # type: ignore[no-any-return]
                if verdict == TRUNCATED:
                    raise self._truncation()

    async def _next_delivery(self, timeout: Optional[float]) -> Optional[AsyncMessage]:
        """Wait for the next delivery (None: timeout, or the consumer ended), acking what
        was read first: a reader that waits must not hold back the broker's credit."""
        self._give_credit()
        item = await self._inbox.next(timeout)
        if item is None or type(item) is AsyncMessage:
            return item
        if item is END:
            return None
        raise item

    async def _end_here(self) -> None:
        """Cancel, then ack everything received up to the cancel-ok (nothing of this
        consumer comes after it): the end offset was read, the start was truncated, or
        the reader cancels."""
        if self.active and self.channel.is_open:
            await self.channel.basic_cancel(self.consumer_tag)
        self._finish(END)
        while True:
            item = await self._inbox.next(0)
            if type(item) is not AsyncMessage:
                break
            self._unacked.append(item.delivery_tag)
        self._give_credit()

    async def cancel(self) -> None:
        """Stop reading; what was received is acked (messages received and not read yet
        are dropped: read again from ``last_offset + 1``)."""
        await self._end_here()
