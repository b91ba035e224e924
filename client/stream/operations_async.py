"""The stream client's Connection, Producer and Consumer, written once: every flow that waits.

This file is the source of truth: it defines the asyncio transport's classes
(``amqwire.client.stream.aio``), and ``operations_sync.py``, the blocking transport's
(``amqwire.client.stream``), is generated from it by ``client/make_sync.py`` (``async
def`` -> ``def``, ``await x`` -> ``x``, ``Async*`` -> ``Sync*``, ``io_asyncio`` ->
``io_threads``, ``waiting_asyncio`` -> ``waiting_threads``); ``tests/test_client_sync.py``
fails when the two drift.  Both transports run the same logic and differ only in what each
owns: every link an I/O (``io_asyncio.AsyncioIO`` / ``io_threads.ThreadIO``, the 0-9-1
client's), the connection its ways of waiting (``waiting_asyncio`` / ``waiting_threads``).

The flows: connecting (the URLs in order), requests and their responses, placing producers
on a stream's leader and consumers on a replica (Metadata, the nodes' advertised
addresses, one link per node), sending under back-pressure, relocating after a loss or a
MetadataUpdate (recovery), closing.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any, AsyncIterator, Callable, Iterable, NamedTuple, Optional, TypeVar

from amqwire.codec.stream.amqp10 import encode_message

from ..errors import (
    AMQPConnectionError,
    AuthenticationError,
    ConnectionLost,
    InvalidStateError,
    OperationTimeout,
)
from ..io_asyncio import Opener, AsyncioIO
from ..io_contract import AsyncConnectionIO
from ..lifecycle import ConnectionSignal, ConnectionStatus
from ..recovery import END
from . import protocol as proto
from .protocol import PUBLISH_FRAME_OVERHEAD, PUBLISH_MESSAGE_OVERHEAD
from .errors import (
    MessageTooLarge,
    NoOffset,
    StreamAlreadyExists,
    StreamDoesNotExist,
    StreamNotAvailable,
    StreamResponseError,
    response_error,
)
from .lifecycle import ConsumerPhase, ConsumerSignal, ProducerPhase, ProducerSignal
from .message import StreamMessage
from .options import (
    FIRST,
    compression_option,
    LAST,
    StreamOffset,
    check_name,
    check_reference,
    end_offset,
    offset_spec,
    positive,
    retention_arguments,
)
from .session import LinkBase, Node, ProducerBase, StreamConnectionBase, StreamConsumerBase, _Batch
from .url import StreamParameters
from .waiting_asyncio import AsyncioStreamFuture, StreamAsyncioWaiting

log = logging.getLogger("amqwire.client.stream")

# The hot section of a send holds the producer's lock (acquire, then try/finally: cheaper
# than ``with``); on asyncio that is io_asyncio's NoLock: nothing can interleave with a
# section without an await.
_Self = TypeVar("_Self")
#: Metadata's leader reference when a stream has no leader.
_NO_NODE = 0xFFFF
#: Times a link to an advertised address is tried when it leads to another node (a load balancer).
_NODE_TRIES = 5


def _deadline(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


class StreamMetadata(NamedTuple):
    """Where a stream lives: ``leader`` and ``replicas`` as (host, port) the nodes advertise
    (``leader`` None while it has none)."""

    stream: str
    leader: Optional[Node]
    replicas: list[Node]


class StreamStats(NamedTuple):
    """A stream's first and last offsets (both None when it holds no message)."""

    first_offset: Optional[int]
    last_offset: Optional[int]


# --------------------------------------------------------------------------- links


class AsyncLink(LinkBase):
    """One socket to one node, on asyncio (see session.LinkBase)."""

    __slots__ = ()

    _io: AsyncConnectionIO

    def __init__(self, env: Any, params: StreamParameters) -> None:
        def io(link: Any) -> AsyncConnectionIO:
            return AsyncioIO(link, 0)

        super().__init__(env, params, io)

    async def _open(self) -> None:
        """Connect and finish the handshake; raises why not (and the link is gone)."""
        params = self.params
        waiter = self._io.new_waiter()
        self._handshake_waiter = waiter
        await self._io.open_transport(params)
        with self._lock:
            self._core.initiate()
        self._flush_quietly()
        try:
            await self._io.wait(waiter, params.connection_timeout)
        except TimeoutError:
            error = AMQPConnectionError(f"handshake with {params} timed out after {params.connection_timeout} s")
            self._on_lost(error)
            raise error from None
        except BaseException as exc:
            self._on_lost(exc if isinstance(exc, AMQPConnectionError) else ConnectionLost(f"connecting to {params}: {exc!r}"))
            raise
        self._io.started()
        log.info("stream connection to %s open (node %s:%d, frame_max %d, heartbeat %d)", params, self.node[0],
                 self.node[1], self.frame_max, self.heartbeat)

    async def _request(self, build: Callable[[proto.StreamProtocol], int], what: str, subject: str = "",
                       timeout: Optional[float] = None) -> Any:
        """Send a request, wait for its response; the response command, or the error of
        its code (as its class)."""
        waiter, correlation = self._queue_request(build, what, subject)
        return await self._reply(waiter, correlation, what, subject, timeout)

    async def _reply(self, waiter: Any, correlation: int, what: str, subject: str, timeout: Optional[float]) -> Any:
        """Write what is queued, then wait for the response to request ``correlation``."""
        self._io.flush()
        limit = self._env.rpc_timeout if timeout is None else timeout
        try:
            reply = await self._io.wait(waiter, limit)
        except TimeoutError:
            with self._lock:
                self._waiters.pop(correlation, None)
            raise OperationTimeout(what, limit) from None
        if reply.code != proto.OK:
            raise response_error(reply.code, what, subject)
        return reply.command

    async def _close(self, timeout: Optional[float]) -> None:
        """Close the socket with the Close handshake (at most ``timeout`` seconds)."""
        with self._lock:
            lifecycle = self._lifecycle
            if not lifecycle.has_socket:
                return
            old = lifecycle.fire(ConnectionSignal.CLOSE)
            waiter = None
            if old in (ConnectionStatus.OPEN, ConnectionStatus.BLOCKED) and self._core.state is proto.LinkState.OPEN:
                waiter = self._io.new_waiter()
                self._waiters[self._core.close(proto.OK, "closed by the client")] = (waiter, "close", "")
        if waiter is not None:
            self._flush_quietly()
            try:
                await self._io.wait(waiter, timeout)
            except (TimeoutError, AMQPConnectionError, InvalidStateError, OSError) as exc:
                log.debug("closing %s: %r", self.params, exc)
        self._on_lost(InvalidStateError("the stream connection is closed"))
        self._io.after_close()


# --------------------------------------------------------------------------- the connection


class AsyncStreamConnection(StreamConnectionBase):
    """A connection to RabbitMQ's stream protocol (``connect()``).  Use it as a context
    manager, or call ``close()``.  Over its links (one socket per node it needs) it
    manages streams (create, delete, metadata, stored offsets) and places producers on a
    stream's leader and consumers on a replica, moving them when a node is lost."""

    __slots__ = ()

    _waiting: StreamAsyncioWaiting
    _links: dict[Node, AsyncLink]
    _locator: Optional[AsyncLink]

    def __init__(self, parameters: list[StreamParameters], **options: Any) -> None:
        super().__init__(parameters, StreamAsyncioWaiting(), **options)

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # connecting ----------------------------------------------------------------------------

    def _locator_candidates(self) -> list[StreamParameters]:
        """The URLs in order, then the nodes learnt from metadata."""
        candidates = list(self._parameters)
        seen = {(p.host, p.port) for p in candidates}
        for node in self._known_nodes:
            if node not in seen:
                candidates.append(self._link_params(node))
        return candidates

    async def _connect_any(self) -> None:
        try:
            await self._open_locator()
        except BaseException:
            with self._lock:
                if self._lifecycle.state is ConnectionStatus.NEW:
                    self._lifecycle.fire(ConnectionSignal.CONNECT_FAILED)
            raise

    async def _open_locator(self) -> AsyncLink:
        """A new locator link: the first candidate that accepts the connection."""
        errors = []
        last: Optional[BaseException] = None
        for params in self._locator_candidates():
            link = AsyncLink(self, params)
            try:
                await link._open()
            except AuthenticationError:
                raise
            except (OSError, AMQPConnectionError, TimeoutError) as exc:
                log.info("could not connect to %s: %s", params, exc)
                errors.append(f"{params}: {exc or type(exc).__name__}")
                last = exc
                continue
            with self._lock:
                lifecycle = self._lifecycle
                if lifecycle.closed_by_user or lifecycle.state is ConnectionStatus.FAILED:
                    refused = True
                else:
                    refused = False
                    lifecycle.fire(ConnectionSignal.SOCKET_UP)
                    lifecycle.fire(ConnectionSignal.HANDSHAKE_DONE)
                    self._locator = link
                    old = self._links.get(link.node)
                    if old is None or not old.usable:
                        self._links[link.node] = link
            if refused:
                await link._close(1.0)
                raise InvalidStateError("the stream connection is closed")
            return link
        if len(errors) == 1 and isinstance(last, AMQPConnectionError):
            raise last
        raise AMQPConnectionError("could not connect: " + "; ".join(errors)) from last

    async def _locator_link(self, timeout: Optional[float] = None) -> AsyncLink:
        """The locator, once it is up (waiting for a recovery under way)."""
        locator = self._locator
        if locator is not None and locator.usable:
            return locator
        self._check()
        limit = self.rpc_timeout if timeout is None else timeout
        if not await self._waiting.wait_flag(self._recovered, limit):
            raise OperationTimeout("the stream connection's recovery", limit)
        locator = self._locator
        if locator is None or not locator.usable:
            self._check()
            raise self._lifecycle.error or ConnectionLost("the stream connection is down")
        return locator

    async def _recover_locator(self) -> None:
        """The locator was lost (recovery on): reconnect with back-off, through the URLs and
        the nodes known, until it is back, close() or the policy gives up."""
        policy = self.recovery
        if policy is None:
            return
        attempt = 0
        lifecycle = self._lifecycle
        while lifecycle.state is ConnectionStatus.DOWN:
            delay = policy.delay(attempt)
            attempt += 1
            log.info("stream recovery: reconnecting in %.1f s (attempt %d)", delay, attempt)
            await self._waiting.sleep(delay)
            if self.state is not ConnectionStatus.DOWN:
                break
            try:
                await self._open_locator()
            except Exception as exc:
                log.warning("stream recovery attempt %d failed: %r", attempt, exc)
                if policy.max_attempts and attempt >= policy.max_attempts:
                    log.error("stream recovery gave up after %d attempts", attempt)
                    self._give_up(ConnectionLost(f"recovery gave up after {attempt} attempts: {exc}"))
                    return
                continue
            if self._restored():
                log.info("stream recovery: connected again")
            else:
                self._recovered.set()
            return

    async def _link_for_node(self, node: Node) -> AsyncLink:
        """An open link to ``node`` (the one there is, else a new one: the advertised
        address, tried again while it leads to another node)."""
        link = self._links.get(node)
        if link is not None and link.usable:
            return link
        async with self._locator_mutex:
            link = self._links.get(node)
            if link is not None and link.usable:
                return link
            params = self._link_params(node)
            reached: Node = node
            for _ in range(_NODE_TRIES):
                link = AsyncLink(self, params)
                await link._open()
                reached = link.node
                if reached == node:
                    with self._lock:
                        if self._lifecycle.closed_by_user:
                            refused = True
                        else:
                            refused = False
                            self._links[node] = link
                    if refused:
                        await link._close(1.0)
                        raise InvalidStateError("the stream connection is closed")
                    return link
                await link._close(1.0)
            raise AMQPConnectionError(f"{params} leads to node {reached[0]}:{reached[1]}, not to {node[0]}:{node[1]} "
                                      f"(after {_NODE_TRIES} tries); set stream.advertised_host/port on the nodes")

    async def _metadata_of(self, stream: str, timeout: Optional[float] = None) -> tuple[int, StreamMetadata]:
        """Metadata of one stream: (its response code, where it lives)."""
        locator = await self._locator_link(timeout)
        reply = await locator._request(lambda core: core.metadata([stream]), "metadata", stream, timeout)
        brokers = {broker.reference: (broker.host, broker.port) for broker in reply.brokers}
        for node in brokers.values():
            self._known_nodes[node] = None
        for entry in reply.streams:
            if entry.stream == stream:
                leader = brokers.get(entry.leader) if entry.leader != _NO_NODE else None
                replicas = [brokers[ref] for ref in entry.replicas if ref in brokers]
                return entry.response_code, StreamMetadata(stream, leader, replicas)
        return 0x02, StreamMetadata(stream, None, [])

    async def _link_to(self, stream: str, leader: bool, timeout: Optional[float] = None) -> AsyncLink:
        """A link for a producer (the stream's leader) or a consumer (a replica, else the leader)."""
        code, where = await self._metadata_of(stream, timeout)
        if code != proto.OK:
            raise response_error(code, "metadata", stream)
        if leader:
            candidates = [where.leader] if where.leader is not None else []
        else:
            candidates = list(where.replicas)
            random.shuffle(candidates)
            if where.leader is not None:
                candidates.append(where.leader)
        if not candidates:
            raise StreamNotAvailable(0x06, "metadata", stream)
        last: Optional[BaseException] = None
        for node in candidates:
            try:
                return await self._link_for_node(node)
            except AuthenticationError:
                raise
            except (OSError, AMQPConnectionError, TimeoutError) as exc:
                log.info("stream %r: node %s:%d not reachable: %s", stream, node[0], node[1], exc)
                last = exc
        if last is None:  # no candidate at all
            raise StreamNotAvailable(0x06, "metadata", stream)
        raise last

    # streams -------------------------------------------------------------------------------

    async def create_stream(self, name: str, *, exist_ok: bool = False, timeout: Optional[float] = None,
                            **retention: Any) -> None:
        """Create a stream.  ``retention``: ``max_length_bytes``, ``max_age`` (a timedelta
        or '7D', '12h', ...; units Y M D h m s), ``max_segment_size_bytes``,
        ``initial_cluster_size``, ``leader_locator``.  StreamAlreadyExists if it exists,
        unless ``exist_ok``."""
        check_name(name)
        arguments = retention_arguments(retention)
        locator = await self._locator_link(timeout)
        try:
            await locator._request(lambda core: core.create_stream(name, arguments), "create_stream", name, timeout)
        except StreamAlreadyExists:
            if not exist_ok:
                raise

    async def delete_stream(self, name: str, *, missing_ok: bool = False, timeout: Optional[float] = None) -> None:
        """Delete a stream and everything in it.  StreamDoesNotExist if there is none,
        unless ``missing_ok``."""
        check_name(name)
        locator = await self._locator_link(timeout)
        try:
            await locator._request(lambda core: core.delete_stream(name), "delete_stream", name, timeout)
        except StreamDoesNotExist:
            if not missing_ok:
                raise

    async def stream_exists(self, name: str, *, timeout: Optional[float] = None) -> bool:
        """Whether the stream exists (Metadata; a stream without a leader right now exists)."""
        check_name(name)
        code, _ = await self._metadata_of(name, timeout)
        if code == 0x02:
            return False
        if code in (proto.OK, 0x06):
            return True
        raise response_error(code, "metadata", name)

    async def metadata(self, name: str, *, timeout: Optional[float] = None) -> StreamMetadata:
        """Where a stream lives (leader and replicas, as the nodes advertise themselves)."""
        check_name(name)
        code, where = await self._metadata_of(name, timeout)
        if code not in (proto.OK, 0x06):
            raise response_error(code, "metadata", name)
        return where

    async def stream_stats(self, name: str, *, quiet: float = 0.5, timeout: Optional[float] = None) -> StreamStats:
        """The stream's first and last offsets, both None when it is empty.  RabbitMQ 3.10
        has no StreamStats command (3.11 added it, and 3.10 closes the connection of a client
        that sends it): they are read from the first chunk of a subscription at "first" and
        the chunk of one at "last"; an empty stream is one that sends nothing for ``quiet``
        seconds.  Both are offsets of messages that exist."""
        check_name(name)
        first = await self._probe(name, FIRST, quiet, timeout)
        if first is None:
            return StreamStats(None, None)
        last = await self._probe(name, LAST, quiet, timeout)
        return StreamStats(first[0], last[1] if last is not None else first[1])

    async def _probe(self, name: str, kind: int, quiet: float, timeout: Optional[float]) -> Optional[tuple[int, int]]:
        """The first offset a subscription at ``kind`` gets, and the last of what it
        received; None when nothing comes within ``quiet`` seconds."""
        probe = AsyncStreamConsumer(self, name, offset_spec("first" if kind == FIRST else "last"), None, None, 1, None)
        await probe._attach(first=True, timeout=timeout)
        try:
            message = await probe.get(quiet)
            if message is None:
                return None
            received = probe._next_offset
            return message.offset, (received - 1 if received is not None else message.offset)
        finally:
            await probe.close()

    # stored offsets and publisher sequences --------------------------------------------------

    async def store_offset(self, stream: str, name: str, offset: int) -> None:
        """Store ``offset`` for the consumer ``name`` on ``stream`` (StoreOffset: the broker
        answers nothing; read it back with query_offset)."""
        check_name(stream)
        reference = check_reference(name, "name")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**64:
            raise ValueError(f"offset must be an integer 0 .. 2**64-1, not {offset!r}")
        locator = await self._locator_link()
        locator._send_no_reply(lambda core: core.store_offset(reference or "", stream, offset))

    async def query_offset(self, stream: str, name: str, *, timeout: Optional[float] = None) -> Optional[int]:
        """The offset stored for the consumer ``name`` on ``stream``; None when none is."""
        check_name(stream)
        reference = check_reference(name, "name") or ""
        locator = await self._locator_link(timeout)
        try:
            reply = await locator._request(lambda core: core.query_offset(reference, stream), "query_offset",
                                           stream, timeout)
        except NoOffset:
            return None
        offset: int = reply.offset
        return offset

    async def query_publisher_sequence(self, stream: str, reference: str, *, timeout: Optional[float] = None) -> int:
        """The last publishing id the broker stored for producer ``reference`` on ``stream``
        (0 when none)."""
        check_name(stream)
        ref = check_reference(reference, "reference") or ""
        locator = await self._locator_link(timeout)
        reply = await locator._request(lambda core: core.query_publisher_sequence(ref, stream),
                                       "query_publisher_sequence", ref, timeout)
        sequence: int = reply.sequence
        return sequence

    # producers and consumers ---------------------------------------------------------------

    def producer(self, stream: str, reference: Optional[str] = None, *, batch_size: int = 200,
                 max_in_flight: int = 10_000, subentry_size: int = 0, compression: Optional[str] = None,
                 timeout: Optional[float] = None) -> Opener[AsyncStreamProducer]:
        """A producer on ``stream`` (declared on its leader).  With a ``reference``, the
        broker deduplicates: it stores a message only if its publishing id is above the last
        it stored for that reference, so a producer restarted with the same reference (or
        one that resends after a loss) never stores a message twice.  ``batch_size``:
        messages per Publish frame; ``max_in_flight``: sends not yet confirmed before send()
        waits.  ``subentry_size``: sub-entry batching, that many messages stored as one
        entry under one publishing id (one confirm, settling each of their futures with it),
        compressed with ``compression`` ("gzip", or "zstd" with the zstandard package).
        asyncio: ``p = await conn.producer(...)`` or ``async with conn.producer(...) as p``."""
        check_name(stream)
        ref = check_reference(reference, "reference")
        size = positive("batch_size", batch_size, 65535)
        window = positive("max_in_flight", max_in_flight, 2**31 - 1)
        subentries = 0 if subentry_size in (0, 1) else positive("subentry_size", subentry_size, 65535)
        codec = compression_option(compression, subentries)
        return Opener(self._open_producer(stream, ref, size, window, subentries, codec, timeout))

    async def _open_producer(self, stream: str, reference: Optional[str], batch_size: int, max_in_flight: int,
                             subentry_size: int, compression: int, timeout: Optional[float]) -> AsyncStreamProducer:
        self._check()
        producer = AsyncStreamProducer(self, stream, reference, batch_size, max_in_flight, subentry_size, compression)
        with self._lock:
            self._producers.append(producer)
        try:
            await producer._attach(first=True, timeout=timeout)
        except BaseException as exc:
            with self._lock:
                if producer in self._producers:
                    self._producers.remove(producer)
            with producer._lock:
                producer._machine.fire(ProducerSignal.FAIL, exc)
            raise
        return producer

    def consumer(self, stream: str, offset: StreamOffset = "first", *, end: Optional[int] = None,
                 name: Optional[str] = None, credit: int = 10, properties: Optional[dict[str, str]] = None,
                 timeout: Optional[float] = None) -> Opener[AsyncStreamConsumer]:
        """A consumer of ``stream`` from ``offset`` ("first": the default, "last", "next", an
        offset, or a datetime) up to ``end`` (an offset, inclusive: the iteration stops after it; None:
        no end).  ``credit``: chunks the broker may send ahead (the buffer's bound: one
        more is granted per chunk read); ``name``: the consumer's name, for store_offset and
        query_offset.  It reads from a replica when one is reachable, else the leader.
        asyncio: ``c = await conn.consumer(...)``, ``async with``, ``async for message in c``."""
        check_name(stream)
        spec = offset_spec(offset)
        last = end_offset(end)
        reference = check_reference(name, "name")
        chunks = positive("credit", credit, 65535)
        if properties is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise ValueError("properties must map str to str")
        return Opener(self._open_consumer(stream, spec, last, reference, chunks, properties, timeout))

    async def _open_consumer(self, stream: str, spec: Any, end: Optional[int], name: Optional[str], credit: int,
                             properties: Optional[dict[str, str]], timeout: Optional[float]) -> AsyncStreamConsumer:
        self._check()
        consumer = AsyncStreamConsumer(self, stream, spec, end, name, credit, properties)
        with self._lock:
            self._consumers.append(consumer)
        try:
            await consumer._attach(first=True, timeout=timeout)
        except BaseException as exc:
            with self._lock:
                if consumer in self._consumers:
                    self._consumers.remove(consumer)
            consumer._fail(exc)
            raise
        return consumer

    # recovery -------------------------------------------------------------------------------

    async def _relocate(self, member: Any) -> None:
        """A producer or consumer lost its link (or its stream moved): place it again, with
        back-off, until it is back, its stream is gone, or the policy gives up."""
        policy = self.recovery
        if policy is None:
            return
        attempt = 0
        lifecycle = self._lifecycle
        down = ProducerPhase.DOWN if isinstance(member, ProducerBase) else ConsumerPhase.DOWN
        while member._machine.state is down and not lifecycle.closed_by_user:
            if attempt:
                await self._waiting.sleep(policy.delay(attempt - 1))
                if member._machine.state is not down or lifecycle.closed_by_user:
                    return
            attempt += 1
            try:
                await member._attach(first=False)
                log.info("%r placed again (attempt %d)", member, attempt)
                return
            except StreamDoesNotExist:
                if member._machine.state is down:  # else closed meanwhile: nothing to say
                    log.warning("stream %r was deleted: %r ends", member.stream, member)
                    self._member_deleted(member)
                return
            except (AMQPConnectionError, StreamResponseError, OperationTimeout, TimeoutError, OSError) as exc:
                log.info("relocating %r failed (attempt %d): %r", member, attempt, exc)
                if policy.max_attempts and attempt >= policy.max_attempts:
                    error = ConnectionLost(f"{member!r}: recovery gave up after {attempt} attempts: {exc}")
                    if isinstance(member, ProducerBase):
                        member._link_lost(error, False)
                    else:
                        member._fail(error)
                    return
            except InvalidStateError:
                return  # closed meanwhile

    async def _end_subscription(self, consumer: Any) -> None:
        """A consumer reached its end offset: unsubscribe it (its messages stay readable)."""
        await consumer._unsubscribe()

    async def wait_recovered(self, timeout: Optional[float] = None) -> bool:
        """With recovery on: wait until the connection's locator is up again (True) or timeout."""
        if self._lifecycle.usable:
            return True
        await self._waiting.wait_flag(self._recovered, timeout)
        return self._lifecycle.usable

    # closing -------------------------------------------------------------------------------

    async def close(self, timeout: float = 10.0) -> None:
        """Close the producers (each flushed: waits up to ``timeout`` for their confirms),
        the consumers, and every link.  Safe to call twice."""
        with self._lock:
            old = self._lifecycle.fire(ConnectionSignal.CLOSE)
            producers, consumers = list(self._producers), list(self._consumers)
        if old in (ConnectionStatus.CLOSING, ConnectionStatus.CLOSED):
            return
        deadline = _deadline(timeout)
        for producer in producers:
            try:
                await producer.close(_left(deadline))
            except Exception as exc:
                log.warning("closing %r: %r", producer, exc)
        for consumer in consumers:
            try:
                await consumer.close()
            except Exception as exc:
                log.debug("closing %r: %r", consumer, exc)
        with self._lock:
            links = list(self._links.values())
            if self._locator is not None and self._locator not in links:
                links.append(self._locator)
            self._links.clear()
            self._locator = None
        for link in links:
            await link._close(min(_left(deadline) or 1.0, 5.0))
        self._waiting.stop()
        with self._lock:
            if self._lifecycle.state is ConnectionStatus.CLOSING:
                self._lifecycle.fire(ConnectionSignal.LOST)
        self._recovered.set()


# --------------------------------------------------------------------------- producers


class AsyncStreamProducer(ProducerBase):
    """Sends messages to one stream (``Connection.producer()``); see its text."""

    __slots__ = ()

    _env: AsyncStreamConnection
    _waiting: StreamAsyncioWaiting
    _new_future: Callable[[], AsyncioStreamFuture]

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _attach(self, first: bool, timeout: Optional[float] = None) -> None:
        """Declare the publisher on the stream's leader (and ask the broker for the last
        id it stored for the reference), then write what waits."""
        env = self._env
        link = await env._link_to(self.stream, True, timeout)
        if not first:
            with self._lock:
                if self._machine.state is not ProducerPhase.DOWN:
                    return
                self._machine.fire(ProducerSignal.RELOCATE)
        publisher_id = link._register(self, True)
        try:
            await link._request(lambda core: core.declare_publisher(publisher_id, self.reference, self.stream),
                                "declare_publisher", self.stream, timeout)
            sequence = None
            if self.reference is not None:
                reference = self.reference
                reply = await link._request(lambda core: core.query_publisher_sequence(reference, self.stream),
                                            "query_publisher_sequence", reference, timeout)
                sequence = reply.sequence
            if not self._declared(link, publisher_id, sequence):
                raise ConnectionLost(f"{link.params}: lost while declaring the producer")
        except BaseException:
            link._unregister(publisher_id, True)
            with self._lock:
                if self._machine.state is ProducerPhase.DECLARING and not first:
                    self._machine.fire(ProducerSignal.LOST)
            raise

    async def send(self, body: Any, properties: Any = None, application_properties: Optional[dict[Any, Any]] = None,
                   publishing_id: Optional[int] = None, *, timeout: Optional[float] = None) -> AsyncioStreamFuture:
        """Send one message; returns a future settled once with its publishing id when the
        broker confirms it, or with why it failed (StreamPublishFailed, ...).  ``body``:
        bytes (one data section) or an amqp10 body wrapper; ``properties``: AMQP 1.0
        properties (an ``amqp10.Properties`` or a dict of its fields);
        ``application_properties``: a dict.  ``publishing_id``: this message's id (strictly
        above the last one sent; default: the next one).  Waits (up to ``timeout``) while
        ``max_in_flight`` sends are unconfirmed; asyncio: ``future = await p.send(...)``."""
        # the hot path: identity checks (an enum's hash is a Python call), the id inline; a
        # bytes body alone is kept as it is and encoded with its batch, in C, into the frame
        if self._machine.state is not _OPEN or len(self._unconfirmed) + len(self._pending) >= self.max_in_flight:
            await self._wait_room(timeout)
        if properties is None and application_properties is None and type(body) is bytes:
            message = body
            raw = True
        else:
            message = encode_message(body, properties=properties, application_properties=application_properties)
            raw = False
        size = len(message) + PUBLISH_MESSAGE_OVERHEAD
        if size > self._frame_limit - PUBLISH_FRAME_OVERHEAD:
            raise MessageTooLarge(size, self._frame_limit)
        future = self._new_future()
        written = schedule = False
        lock = self._lock
        lock.acquire()
        try:
            if raw is not self._pending_raw:
                message = self._same_kind(message, raw)
            if publishing_id is None and self._next_id > self._last_id:
                if self.subentry_size:  # the sub-entry's id, taken when it is written
                    pid = 0
                else:
                    pid = self._last_id = self._next_id
                    self._next_id = pid + 1
            else:
                pid = self._take_id(publishing_id)
            self._pending_ids.append(pid)
            self._pending.append(message)
            self._pending_tokens.append(future)
            self._pending_bytes += size
            if len(self._pending) >= self.batch_size or self._pending_bytes >= self._frame_limit:
                written = self._write_pending_locked()
            elif not self._write_scheduled:
                self._write_scheduled = schedule = True
            link = self._link
        finally:
            lock.release()
        if written:
            link._flush_quietly()
            await self._waiting.after_write(link)
        elif schedule:
            self._waiting.write_soon(self._write_pending)
        return future

    async def send_batch(self, bodies: Iterable[Any], *, timeout: Optional[float] = None) -> AsyncioStreamFuture:
        """Send several messages (bodies: bytes or amqp10 body wrappers) with consecutive
        publishing ids; returns one future, settled with the last id once all are
        confirmed, or with the first failure."""
        messages = list(bodies)
        raw = all(type(body) is bytes for body in messages)
        if not raw:
            messages = [encode_message(body) for body in messages]
        size = sum(len(message) for message in messages) + PUBLISH_MESSAGE_OVERHEAD * len(messages)
        largest = max((len(message) for message in messages), default=0) + PUBLISH_MESSAGE_OVERHEAD
        if largest > self._frame_limit - PUBLISH_FRAME_OVERHEAD:
            raise MessageTooLarge(largest, self._frame_limit)
        future = self._new_future()
        if not messages:
            self._waiting.settle(future, self.last_publishing_id)
            return future
        if len(self._unconfirmed) + len(self._pending) + len(messages) > max(self.max_in_flight, len(messages)) or \
                self._machine.state not in _ACCEPTING:
            await self._wait_room(timeout, len(messages))
        link = None
        with self._lock:
            if raw is not self._pending_raw:
                if not self._pending:
                    self._pending_raw = raw
                elif raw:
                    messages = [encode_message(body) for body in messages]
                else:
                    self._pending = [encode_message(body) for body in self._pending]
                    self._pending_raw = False
            if self.subentry_size:  # the ids are the sub-entries'
                token = _Batch(future, len(messages), -1)
                self._pending_ids.extend([0] * len(messages))
            else:
                first = self._take_id(None)
                last = first + len(messages) - 1
                self._last_id = last
                self._next_id = last + 1
                token = _Batch(future, len(messages), last)
                self._pending_ids.extend(range(first, last + 1))
            self._pending.extend(messages)
            self._pending_tokens.extend([token] * len(messages))
            self._pending_bytes += size
            written = False
            while len(self._pending) >= self.batch_size or self._pending_bytes >= self._frame_limit:
                written = self._write_pending_locked() or written
                if self._pending:  # not declared right now: the batch waits whole
                    break
            schedule = bool(self._pending) and not self._write_scheduled
            if schedule:
                self._write_scheduled = True
            link = self._link
        if written:
            link._flush_quietly()
        if schedule:
            self._waiting.write_soon(self._write_pending)
        return future

    async def _wait_room(self, timeout: Optional[float], count: int = 1) -> None:
        """Until the producer takes sends and has room for ``count`` more.  A full window
        waits until a quarter of it is confirmed, not for the first confirm: the sends
        then go on in batches, not one frame's worth at a time (a wake-up each)."""
        self._check_sending()
        window = max(self.max_in_flight, count)
        low = max(window - max(window // 4, count), 0)

        def ready() -> bool:
            if self._machine.state not in _ACCEPTING:
                return True
            in_flight = len(self._unconfirmed) + len(self._pending)
            return in_flight + count <= window and in_flight <= low

        self._flush_batch()
        await self._waits.wait_progress(ready, timeout, "room for a send (max_in_flight)")
        self._check_sending()

    def _flush_batch(self) -> None:
        with self._lock:
            written = self._write_pending_locked()
            link = self._link
        if written:
            link._flush_quietly()

    async def flush(self, timeout: Optional[float] = None) -> None:
        """Write what waits, then wait until every send so far is settled (confirmed or
        failed); OperationTimeout after ``timeout``."""
        self._flush_batch()
        await self._waits.wait_progress(lambda: not self._unconfirmed and not self._pending or
                                        self._machine.state in _ENDED, timeout, "the confirms of a flush")

    async def close(self, timeout: Optional[float] = 10.0) -> None:
        """Flush (waiting up to ``timeout`` for the confirms), then delete the publisher.
        Sends still unsettled then fail.  Safe to call twice."""
        with self._lock:
            old = self._machine.fire(ProducerSignal.CLOSE)
        if old is ProducerPhase.OPEN:
            try:
                await self.flush(timeout)
            except OperationTimeout as exc:
                log.warning("%r: closing with %d sends unconfirmed: %s", self, self.in_flight, exc)
            link = self._link
            if link is not None and link.usable:
                publisher_id = self._publisher_id
                try:
                    await link._request(lambda core: core.delete_publisher(publisher_id), "delete_publisher",
                                        self.stream, timeout)
                except (StreamResponseError, AMQPConnectionError, OperationTimeout, InvalidStateError) as exc:
                    log.debug("deleting %r: %r", self, exc)
                link._unregister(publisher_id, True)
            with self._lock:
                self._machine.fire(ProducerSignal.CLOSED)
        env = self._env
        with env._lock:
            if self in env._producers:
                env._producers.remove(self)
        self._fail_all(InvalidStateError(f"{self!r} was closed before the broker confirmed"))


_ACCEPTING = frozenset({ProducerPhase.OPEN, ProducerPhase.DOWN, ProducerPhase.DECLARING})


_OPEN = ProducerPhase.OPEN
_ENDED = frozenset({ProducerPhase.CLOSED, ProducerPhase.FAILED})


# --------------------------------------------------------------------------- consumers


class AsyncStreamConsumer(StreamConsumerBase):
    """Reads one stream (``Connection.consumer()``): iterate it (``async for`` on asyncio),
    or call ``get()``.  Each message is a ``StreamMessage`` (``.offset``,
    ``.chunk_timestamp``, ``.body``, ``.properties``, ``.application_properties``)."""

    __slots__ = ()

    _env: AsyncStreamConnection

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[StreamMessage]:
        return self

    async def __anext__(self) -> StreamMessage:
        item = await self._inbox.next(None)
        if type(item) is StreamMessage:
            self._taken(item)
            return item
        if item is END:
            raise StopAsyncIteration
        raise item

    async def get(self, timeout: Optional[float] = None) -> Optional[StreamMessage]:
        """The next message; None after ``timeout`` seconds without one, or at the end
        (end offset reached, closed); raises why the consumer failed."""
        item = await self._inbox.next(timeout)
        if item is None or item is END:
            return None
        if type(item) is StreamMessage:
            self._taken(item)
            return item
        raise item

    async def _attach(self, first: bool, timeout: Optional[float] = None) -> None:
        """Subscribe on a replica (else the leader), after the last message received."""
        env = self._env
        link = await env._link_to(self.stream, False, timeout)
        if self._inbox is None:
            self._inbox = env._waiting.new_inbox(self)
        properties = self._properties
        with self._lock:  # the credit granted for chunks taken meanwhile goes after the Subscribe
            if not first:
                if self._machine.state is not ConsumerPhase.DOWN:
                    return
                self._machine.fire(ConsumerSignal.RESUBSCRIBE)
            subscription_id = link._register(self, False)
            self._link = link
            self._subscription_id = subscription_id
            spec = self._subscribe_spec()
            credit = self._subscribe_credit()
            try:
                waiter, correlation = link._queue_request(
                    lambda core: core.subscribe(subscription_id, self.stream, spec.kind, spec.value, credit, properties),
                    "subscribe", self.stream)
            except BaseException:
                link._unregister(subscription_id, False)
                self._link = None
                if not first:
                    self._machine.fire(ConsumerSignal.LOST)
                raise
        try:
            await link._reply(waiter, correlation, "subscribe", self.stream, timeout)
        except BaseException:
            link._unregister(subscription_id, False)
            with self._lock:
                if self._link is link:
                    self._link = None
                if self._machine.state is ConsumerPhase.SUBSCRIBING and not first:
                    self._machine.fire(ConsumerSignal.LOST)
            raise
        with self._lock:
            state = self._machine.state
            if state is ConsumerPhase.SUBSCRIBING:
                self._machine.fire(ConsumerSignal.SUBSCRIBED)
        if state is ConsumerPhase.DOWN:
            raise ConnectionLost(f"{link.params}: lost while subscribing")

    async def _unsubscribe(self) -> None:
        with self._lock:
            link = self._link
            if link is None:
                return
            subscription_id = self._subscription_id
            self._link = None
        if link.usable:
            try:
                await link._request(lambda core: core.unsubscribe(subscription_id), "unsubscribe", self.stream)
            except (StreamResponseError, AMQPConnectionError, OperationTimeout, InvalidStateError) as exc:
                log.debug("unsubscribing %r: %r", self, exc)
        link._unregister(subscription_id, False)

    async def store_offset(self, offset: Optional[int] = None) -> None:
        """Store ``offset`` (default: the last one handed out) under this consumer's name."""
        if self.name is None:
            raise InvalidStateError(f"{self!r} has no name: give connect().consumer(..., name=...) to store offsets")
        if offset is None:
            offset = self.last_offset
            if offset is None:
                raise InvalidStateError(f"{self!r} has handed out no message yet: no offset to store")
        await self._env.store_offset(self.stream, self.name, offset)

    async def query_offset(self) -> Optional[int]:
        """The offset stored under this consumer's name; None when none is."""
        if self.name is None:
            raise InvalidStateError(f"{self!r} has no name: give connect().consumer(..., name=...) to query offsets")
        return await self._env.query_offset(self.stream, self.name)

    async def close(self) -> None:
        """Unsubscribe; the iterator then ends (messages not read yet are dropped).  Safe
        to call twice."""
        with self._lock:
            old = self._machine.fire(ConsumerSignal.CLOSE)
        if old is ConsumerPhase.ACTIVE:
            await self._unsubscribe()
            with self._lock:
                self._machine.fire(ConsumerSignal.CLOSED)
        elif old is ConsumerPhase.ENDED:
            await self._unsubscribe()
        env = self._env
        with env._lock:
            if self in env._consumers:
                env._consumers.remove(self)
        if self._inbox is not None:
            self._inbox.buffer.clear()  # what was received and not read is dropped: the iteration ends
            self._inbox.wake()
