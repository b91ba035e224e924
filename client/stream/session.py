"""The stream client's transport-neutral layer: what both transports do on events, written once.

Between the sans-IO core (``protocol.py``) and the transports sits this layer.  Nothing here
waits: the flows that wait (connecting, requests, sending under back-pressure, relocating,
closing) are in ``operations_async.py`` and its generated blocking twin.

- ``LinkBase``: one socket to one node, its core, its lifecycle (the 0-9-1 client's
  connection table, with no recovery of its own) and its I/O (the 0-9-1 client's
  ``io_threads.ThreadIO`` or ``io_asyncio.AsyncioIO``, owned by composition: this class
  gives them the connection interface they read).  It routes the core's events: replies
  to the requests waiting for them, confirms and errors to producers, chunks to
  consumers, MetadataUpdate and losses to the connection.
- ``ProducerBase``: the bookkeeping of sends (publishing ids, the batch being filled, the
  unconfirmed messages kept for a resend), settled by confirms and failures.
- ``StreamConsumerBase``: chunks into messages (records below the next offset skipped, the
  end offset), the credit (one chunk granted back per chunk the user has taken), where to
  resume after a loss.
- ``StreamConnectionBase``: the connection a user holds: its links (one per node, the
  locator among them), its producers and consumers, and what a lost link or a moved
  stream means for each (relocate, or fail).

Locks: a link's ``_lock`` guards its core; a producer's ``_lock`` its bookkeeping (taken
first when both are needed); the connection's ``_lock`` its links and members.  On asyncio
they are no-ops (everything runs in the loop's thread).
"""
from __future__ import annotations

import collections
import inspect
import logging
from typing import Any, Callable, Optional

from itertools import repeat

from amqwire.codec import CodecError
from amqwire.codec.stream.amqp10 import encode_message
from amqwire.codec.stream.chunk import chunk_messages

from ..io_contract import ConnectionIO
from ..errors import AMQPConnectionError, AuthenticationError, ConnectionLost, InvalidStateError
from ..lifecycle import OPENED_STATES, ConnectionSignal, ConnectionStatus, Lifecycle, Machine
from ..listeners import CallbackError, ExceptionHandler, log_callback_error
from ..recovery import END, RecoveryPolicy
from . import protocol as proto
from .errors import (
    StreamConnectionClosed,
    StreamDeleted,
    StreamPublishFailed,
    response_error,
)
from .lifecycle import (
    CONSUMER_LIVE_PHASES,
    ConsumerPhase,
    ConsumerSignal,
    ProducerPhase,
    ProducerSignal,
    new_consumer_machine,
    new_producer_machine,
)
from .message import StreamMessage
from .options import OFFSET, OffsetSpec
from .url import StreamParameters

log = logging.getLogger("amqwire.client.stream")

__all__ = ["LinkBase", "ProducerBase", "StreamConsumerBase", "StreamConnectionBase", "recoverable", "Node"]

#: A node, as the broker advertises it (Open's connection properties, Metadata): (host, port).
Node = tuple[str, int]


def recoverable(error: BaseException) -> bool:
    """A loss a recovery may repair: a socket lost, or closed by the broker (a node
    stopping, an operator closing connections); not a refused login."""
    if isinstance(error, AuthenticationError):
        return False
    return isinstance(error, (ConnectionLost, StreamConnectionClosed))


def _settle(waiter: Any, value: Any) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(value)


def _fail(waiter: Any, error: BaseException) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(error)
        waiter.exception()  # retrieved: whoever awaits it still gets it raised


# --------------------------------------------------------------------------- links


class LinkBase:
    """One socket to one node (see the module's text).  The attributes the I/O reads
    (``_core``, ``_lock``, ``_lifecycle``, ``params``, ``heartbeat``, ...) and the methods it
    calls (``_data_received``, ``_on_lost``, ``_socket_up``, ...) are the 0-9-1 connection's
    names, so the same I/O classes serve both protocols."""

    __slots__ = (
        "_env", "params", "_io", "_lock", "_core", "_lifecycle", "_ssl_context", "_peer", "_flush_later",
        "_observer", "_batched", "_writable", "heartbeat", "frame_max", "server_properties",
        "connection_properties", "node", "_waiters", "_handshake_waiter", "_producers", "_consumers",
        "exception_handler", "_owed_credit", "__weakref__",
    )

    _io: ConnectionIO

    def __init__(self, env: Any, params: StreamParameters, io: Callable[[Any], ConnectionIO]) -> None:
        self._env = env
        self.params = params
        self._ssl_context = env._ssl_context
        self.exception_handler: ExceptionHandler = env.exception_handler
        self._io = io(self)
        self._lock = self._io.new_lock()
        self._core = self._new_core()
        self._lifecycle = Lifecycle(f"stream link to {params}")
        self._peer: Any = None
        self._flush_later: Any = 0  # the batch() depth (threads), or a flush scheduled on the loop (asyncio)
        self._observer = None  # the I/O reads it: nothing watches a stream link's bytes
        self._batched: list[Any] = []  # inboxes holding deliveries of the current read (blocking)
        # (subscription, credit) the dispatch of a read gives back: queued on the core after it
        self._owed_credit: list[tuple[int, int]] = []
        self._writable = self._io.new_flag()
        self._writable.set()
        self.heartbeat = 0
        self.frame_max = 0
        self.server_properties: dict[str, str] = {}
        self.connection_properties: dict[str, str] = {}
        #: The node as it advertises itself (Open's advertised_host/port); where it was reached until then.
        self.node: Node = (params.host, params.port)
        self._waiters: dict[int, tuple[Any, str, str]] = {}  # correlation id -> (waiter, request, subject)
        self._handshake_waiter: Any = None
        self._producers: dict[int, Any] = {}  # publisher id -> producer
        self._consumers: dict[int, Any] = {}  # subscription id -> consumer

    def _new_core(self) -> proto.StreamProtocol:
        params = self.params
        return proto.StreamProtocol(
            params.username, params.password, params.vhost, auth_mechanism=params.auth_mechanism,
            frame_max=params.frame_max, heartbeat=params.heartbeat, client_properties=self._env._client_properties,
        )

    def __repr__(self) -> str:
        return f"<stream link {self.params} {self._lifecycle.state}>"

    @property
    def usable(self) -> bool:
        return self._lifecycle.usable

    @property
    def members(self) -> int:
        """Producers and consumers using this link."""
        return len(self._producers) + len(self._consumers)

    # what the I/O calls ------------------------------------------------------------------------

    def _socket_up(self, discard: Callable[[], Any]) -> None:
        try:
            self._lifecycle.fire(ConnectionSignal.SOCKET_UP)
        except InvalidStateError:
            discard()
            raise

    def _set_write_paused(self, paused: bool) -> None:
        if paused:
            self._writable.clear()
        else:
            self._writable.set()

    def _take_output(self) -> list[Any]:
        return self._core.buffers_to_send()

    def _call_user(self, fn: Callable[[Any], Any], arg: Any, where: str, channel: Any = None) -> None:
        try:
            result = fn(arg)
        except Exception as exc:
            self._callback_failed(exc, fn, where, channel, arg)
            return
        if result is not None and inspect.isawaitable(result):
            self._io.spawn(result, fn, where, channel, arg)

    def _callback_failed(self, error: BaseException, fn: Any, where: str, channel: Any, arg: Any) -> None:
        try:
            self.exception_handler(CallbackError(error, fn, where, self._env, channel, arg))
        except Exception:
            log.exception("the exception handler %r failed on an error of %r", self.exception_handler, fn)

    def _eof_error(self, detail: Any = None) -> BaseException:
        """The exception for a socket the peer closed (or that failed: ``detail``)."""
        lifecycle = self._lifecycle
        if lifecycle.closed_by_user:
            return InvalidStateError("the connection is closed")
        suffix = f": {detail}" if detail else ""
        if not lifecycle.opened:
            if self._core.server_properties:
                return ConnectionLost(f"{self.params}: the broker closed the socket during the handshake{suffix}")
            return ConnectionLost(f"{self.params}: the broker closed the socket before the handshake{suffix}")
        return ConnectionLost(f"the broker at {self.params} closed the socket{suffix}")

    def _fault(self, exc: BaseException, data: Any) -> BaseException:
        """The exception that bytes which are not the stream protocol mean."""
        if not self._core.server_properties:
            text = f"the peer at {self.params} is not speaking RabbitMQ's stream protocol (it sent {bytes(data[:32])!r})"
        else:
            text = f"stream connection to {self.params} failed: {exc}"
        error = ConnectionLost(text)
        error.__cause__ = exc
        return error

    def _flush_quietly(self) -> None:
        try:
            self._io.flush()
        except (OSError, AMQPConnectionError, InvalidStateError) as exc:
            log.debug("flush: %s", exc)

    # input -------------------------------------------------------------------------------------

    def _data_received(self, data: Any) -> None:
        """Feed what the socket read; route the events; a malformed input loses the link."""
        core = self._core
        error = None
        lock = self._lock
        lock.acquire()
        try:
            try:
                events = core.receive(data)
            except CodecError as exc:
                events = []
                error = self._fault(exc, data)
            else:
                for event in events:
                    if type(event) is proto.BrokerClosed:
                        self._lifecycle.fire(ConnectionSignal.BROKER_CLOSE,
                                             StreamConnectionClosed(event.code, event.reason, str(self.params)))
        finally:
            lock.release()
        if core.pending_output:
            self._flush_quietly()
        moved: list[tuple[str, int]] = []
        if events:
            lost = self._dispatch(events, moved)
            if lost is not None:  # the broker's close, before any fault of the same read
                error = lost
        if self._batched:
            batched, self._batched = self._batched, []
            for inbox in batched:
                inbox.hand_over()
        if self._owed_credit:
            self._pay_owed_credit()
        for stream, code in moved:
            self._env._on_stream_moved(self, stream, code)
        if error is not None:
            self._on_lost(error)

    def _pay_owed_credit(self) -> None:
        with self._lock:
            owed, self._owed_credit = self._owed_credit, []
            if self._lifecycle.usable:
                for subscription_id, credit in owed:
                    self._core.credit(subscription_id, credit)
        self._flush_quietly()

    def _dispatch(self, events: list[Any], moved: list[tuple[str, int]]) -> Optional[BaseException]:
        """Hand the core's events to producers, consumers and waiters, without calling the
        core: credit given back is queued after (_pay_owed_credit), the streams the broker
        moved go to ``moved``, and a close by the broker is returned, the loss to handle
        once the dispatch is over."""
        for event in events:
            kind = type(event)
            if kind is proto.Confirmed:
                producer = self._producers.get(event.publisher_id)
                if producer is not None:
                    producer._on_confirmed(event.publishing_ids)
            elif kind is proto.Delivered:
                consumer = self._consumers.get(event.subscription_id)
                if consumer is not None:
                    consumer._on_chunk(event.chunk, self)
            elif kind is proto.Reply:
                entry = self._waiters.pop(event.correlation_id, None)
                if entry is not None:
                    _settle(entry[0], event)
            elif kind is proto.PublishErrors:
                producer = self._producers.get(event.publisher_id)
                if producer is not None:
                    producer._on_publish_errors(event.errors)
            elif kind is proto.MetadataChanged:
                moved.append((event.stream, event.code))
            elif kind is proto.CreditRefused:
                log.warning("%s: the broker refused credit for subscription %d: %s", self.params,
                            event.subscription_id, response_error(event.code, "credit"))
            elif kind is proto.HandshakeDone:
                self._handshake_done(event)
            elif kind is proto.HandshakeFailed:
                _fail(self._handshake_waiter, event.error)
            elif kind is proto.BrokerClosed:
                return self._lifecycle.error or StreamConnectionClosed(event.code, event.reason, str(self.params))
        return None

    def _handshake_done(self, event: proto.HandshakeDone) -> None:
        self.frame_max = event.frame_max
        self.heartbeat = event.heartbeat
        self.server_properties = event.server_properties
        self.connection_properties = event.connection_properties
        host = event.connection_properties.get("advertised_host")
        port = event.connection_properties.get("advertised_port")
        if host and port and port.isdigit():
            self.node = (host, int(port))
        with self._lock:
            self._lifecycle.fire(ConnectionSignal.HANDSHAKE_DONE)
        _settle(self._handshake_waiter, event)

    # losing the link ---------------------------------------------------------------------------

    def _check(self) -> None:
        lifecycle = self._lifecycle
        if lifecycle.usable:
            return
        if lifecycle.error is not None:
            raise lifecycle.error
        raise InvalidStateError("the stream connection is closed")

    def _on_lost(self, error: BaseException) -> None:
        """The socket is gone: fail what waits on it, tell the connection (which relocates
        or fails the producers and consumers that used it).  Safe to call more than once."""
        with self._lock:
            lifecycle = self._lifecycle
            if not lifecycle.has_socket:
                return
            old = lifecycle.fire(ConnectionSignal.LOST, error)
            waiters, self._waiters = self._waiters, {}
            producers = list(self._producers.values())
            consumers = list(self._consumers.values())
            self._producers = {}
            self._consumers = {}
            self._core.connection_lost()
        self._io.stop_io()
        _fail(self._handshake_waiter, error)
        for waiter, _, _ in waiters.values():
            _fail(waiter, error)
        if old in OPENED_STATES:
            if old is not ConnectionStatus.CLOSING:
                log.warning("stream connection to %s lost: %s", self.params, error)
            self._env._on_link_lost(self, error, producers, consumers, old is ConnectionStatus.CLOSING)
        self._io.closed_for_good()

    # what members ask of their link (under no lock of theirs but their own) ---------------------

    def _register(self, member: Any, producer: bool) -> int:
        """A publisher or subscription id on this link for ``member``."""
        with self._lock:
            self._check()
            if producer:
                member_id = self._core.new_publisher_id()
                self._producers[member_id] = member
            else:
                member_id = self._core.new_subscription_id()
                self._consumers[member_id] = member
        return member_id

    def _unregister(self, member_id: int, producer: bool) -> None:
        with self._lock:
            if producer:
                self._producers.pop(member_id, None)
                self._core.release_publisher_id(member_id)
            else:
                self._consumers.pop(member_id, None)
                self._core.release_subscription_id(member_id)

    def _credit(self, subscription_id: int, credit: int) -> None:
        with self._lock:
            if not self._lifecycle.usable:
                return
            self._core.credit(subscription_id, credit)
        self._flush_quietly()

    def _queue_request(self, build: Callable[[proto.StreamProtocol], int], what: str, subject: str) -> tuple[Any, int]:
        """Queue a request in the core (written by the next flush): its waiter and
        correlation id."""
        waiter = self._io.new_waiter()
        with self._lock:
            self._check()
            correlation = build(self._core)
            self._waiters[correlation] = (waiter, what, subject)
        return waiter, correlation

    def _send_no_reply(self, build: Callable[[proto.StreamProtocol], Any]) -> None:
        """A command without a response (StoreOffset): written now."""
        with self._lock:
            self._check()
            build(self._core)
        self._io.flush()


# --------------------------------------------------------------------------- producers


class _Batch:
    """The future of one ``send_batch``: settled with the last publishing id once every
    message is confirmed, or failed at the first failure."""

    __slots__ = ("future", "pending", "last_id")

    def __init__(self, future: Any, count: int, last_id: int) -> None:
        self.future = future
        self.pending = count
        self.last_id = last_id


def _frame_limit(frame_max: int) -> int:
    return frame_max if frame_max else 2**31 - 1  # 0: no limit


def _runs(sizes: list[int], limit: int, most: int) -> list[tuple[int, int]]:
    """``sizes`` cut into runs (start, end) of at most ``most`` items whose sizes, with a
    Publish frame's own bytes, stay within ``limit`` (an item alone over it is a run of its own)."""
    runs = []
    start = 0
    total = proto.PUBLISH_FRAME_OVERHEAD
    for index, size in enumerate(sizes):
        if index > start and (total + size > limit or index - start >= most):
            runs.append((start, index))
            start = index
            total = proto.PUBLISH_FRAME_OVERHEAD
        total += size
    runs.append((start, len(sizes)))
    return runs


class _Group:
    """The sends of one sub-entry: one publishing id, one confirm for all of them."""

    __slots__ = ("tokens",)

    def __init__(self, tokens: list[Any]) -> None:
        self.tokens = tokens


class ProducerBase:
    """A producer's bookkeeping (see the module's text); the sending flows are in
    ``operations_async.py``."""

    __slots__ = (
        "_env", "stream", "reference", "_machine", "_lock", "_waiting", "_waits", "_link", "_publisher_id",
        "_next_id", "_last_id", "_unconfirmed", "_pending_ids", "_pending", "_pending_tokens", "batch_size",
        "max_in_flight", "_write_scheduled", "_sequence", "resent", "_new_future", "subentry_size", "compression",
        "_pending_raw", "_pending_bytes", "_frame_limit", "__weakref__",
    )

    def __init__(self, env: Any, stream: str, reference: Optional[str], batch_size: int, max_in_flight: int,
                 subentry_size: int = 0, compression: int = 0) -> None:
        self._env = env
        self.stream = stream
        self.reference = reference
        self._machine: Machine = new_producer_machine(f"producer of stream {stream!r}")
        self._waiting = env._waiting
        self._lock = env._waiting.new_lock()
        self._waits = self._waiting.producer_waits(self)
        self._new_future = self._waiting.future_maker(self)  # bound once: one call less a send
        self._link: Any = None
        self._publisher_id = -1
        self._next_id = 1  # automatic publishing ids: with a reference, after what the broker has
        self._last_id = 0  # the highest id sent so far: explicit ids must go above it
        # publishing id -> (future, _Batch or _Group; its message; whether that is a bare body,
        # not yet AMQP 1.0 encoded): written, not confirmed yet
        self._unconfirmed: dict[int, tuple[Any, Any, bool]] = {}
        # the batch being filled: written as one Publish frame.  Either every message in it is
        # a bare bytes body (``_pending_raw``: encoded with the frame, by the codec), or every
        # one is encoded already (a send with properties).
        self._pending_ids: list[int] = []
        self._pending: list[Any] = []
        self._pending_tokens: list[Any] = []
        self._pending_raw = True
        self._pending_bytes = 0  # what the batch being filled takes in a Publish frame
        #: The largest frame the broker takes (its frame_max; the last link's, else asked for).
        self._frame_limit = _frame_limit(env.params.frame_max)
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self._write_scheduled = False  # a write of the batch is scheduled (linger / end of the loop's pass)
        self._sequence: Optional[int] = None  # the broker's last stored id for the reference, at the last declare
        #: Messages written again after a relocation (unconfirmed at a loss; with a reference).
        self.resent = 0
        #: Sub-entry batching: this many messages under one publishing id (0: off), and their compression.
        self.subentry_size = subentry_size
        self.compression = compression

    @property
    def state(self) -> ProducerPhase:
        """DECLARING, OPEN, DOWN, CLOSING, CLOSED or FAILED (``amqwire.client.stream.lifecycle``)."""
        state: ProducerPhase = self._machine.state
        return state

    @property
    def last_publishing_id(self) -> int:
        """The highest publishing id this producer sent (or, with a reference, that the broker
        had stored for it when it was declared); 0 when none."""
        return max(self._last_id, self._next_id - 1)

    @property
    def in_flight(self) -> int:
        """Messages sent and not settled yet (written or waiting to be)."""
        return len(self._unconfirmed) + len(self._pending)

    def __repr__(self) -> str:
        reference = f" reference={self.reference!r}" if self.reference else ""
        return f"<stream producer {self.stream!r}{reference} {self._machine.state}>"

    def _reading_io(self) -> Any:
        link = self._link
        return None if link is None else link._io

    def _check_sending(self) -> None:
        """Raise why this producer takes no more sends, if it does not."""
        state = self._machine.state
        if state is ProducerPhase.FAILED:
            raise self._machine.reason or InvalidStateError(f"{self!r} failed")
        if state is ProducerPhase.CLOSED or state is ProducerPhase.CLOSING:
            raise InvalidStateError(f"{self!r} is closed")

    def _take_id(self, publishing_id: Optional[int]) -> int:
        """The id of the next message (under ``_lock``)."""
        if self.subentry_size:
            if publishing_id is not None:
                raise ValueError("publishing_id: a producer with sub-entry batching gives each sub-entry its id")
            return 0  # the sub-entry's, taken when it is written
        if publishing_id is None:
            pid = self._next_id
            if pid <= self._last_id:
                pid = self._last_id + 1
        else:
            if isinstance(publishing_id, bool) or not isinstance(publishing_id, int) or not 0 <= publishing_id < 2**64:
                raise ValueError(f"publishing_id must be an integer 0 .. 2**64-1, not {publishing_id!r}")
            pid = publishing_id
            if pid <= self._last_id and self._last_id:
                raise ValueError(f"publishing_id {pid} is not above the last one sent ({self._last_id}): "
                                 "publishing ids of a producer must strictly increase")
        self._last_id = pid
        self._next_id = pid + 1
        return pid

    # writing (under _lock) -------------------------------------------------------------------

    def _write_pending_locked(self) -> bool:
        """Write the batch being filled (one Publish frame, or several when it is over the
        broker's frame_max), if the producer is declared; returns whether something was
        queued on the link (flush it then)."""
        state = self._machine.state
        if not self._pending or (state is not ProducerPhase.OPEN and state is not ProducerPhase.CLOSING):
            return False
        link = self._link
        with link._lock:
            if not link._lifecycle.usable:
                return False  # lost meanwhile: the batch waits for the relocation
            ids, messages, tokens = self._pending_ids, self._pending, self._pending_tokens
            self._pending_ids, self._pending, self._pending_tokens = [], [], []
            raw = self._pending_raw
            fits = self._pending_bytes + proto.PUBLISH_FRAME_OVERHEAD <= self._frame_limit
            self._pending_bytes = 0
            if self.subentry_size > 1:
                if raw:
                    messages = [encode_message(body) for body in messages]
                self._write_subentries_locked(link, messages, tokens)
                return True
            runs = [(0, len(ids))] if fits else _runs([len(m) + proto.PUBLISH_MESSAGE_OVERHEAD for m in messages],
                                                       self._frame_limit, len(ids))
            if raw and ids[-1] - ids[0] == len(ids) - 1:  # consecutive ids: encoded into the frame
                self._unconfirmed.update(zip(ids, zip(tokens, messages, repeat(True))))
                for start, end in runs:
                    link._core.publish_bodies(self._publisher_id, ids[start], messages[start:end])
                return True
            if raw:
                messages = [encode_message(body) for body in messages]
            self._unconfirmed.update(zip(ids, zip(tokens, messages, repeat(False))))
            for start, end in runs:
                link._core.publish(self._publisher_id, ids[start:end], messages[start:end])
        return True

    def _same_kind(self, message: Any, raw: bool) -> Any:
        """A send whose message is not of the kind of the batch being filled (under
        ``_lock``): encode it, or the batch, so that the batch is of one kind."""
        if not self._pending:
            self._pending_raw = raw
            return message
        if raw:
            return encode_message(message)
        self._pending = [encode_message(body) for body in self._pending]
        self._pending_raw = False
        return message

    def _write_subentries_locked(self, link: Any, messages: list[Any], tokens: list[Any]) -> None:
        """Sub-entry batching: every ``subentry_size`` messages (fewer when they would not
        fit a frame) one sub-entry, compressed with ``compression``, under one publishing
        id, one confirm; as many in a frame as fit."""
        sizes = [len(m) + 4 for m in messages]
        entries = []
        entry_sizes = []
        for start, end in _runs(sizes, self._frame_limit - proto.PUBLISH_MESSAGE_OVERHEAD, self.subentry_size):
            group = messages[start:end]
            pid = self._next_id
            self._last_id = pid
            self._next_id = pid + 1
            self._unconfirmed[pid] = (_Group(tokens[start:end]), group, False)
            entries.append((pid, group))
            entry_sizes.append(sum(sizes[start:end]) + proto.PUBLISH_MESSAGE_OVERHEAD + 7)
        for start, end in _runs(entry_sizes, self._frame_limit, len(entries)):
            link._core.publish_subentries(self._publisher_id, entries[start:end], self.compression)

    def _write_pending(self) -> None:
        """The scheduled write of a batch that did not fill up (linger, the loop's pass)."""
        with self._lock:
            self._write_scheduled = False
            written = self._write_pending_locked()
            link = self._link
        if written:
            link._flush_quietly()

    def _write_resends_locked(self, messages: list[tuple[int, Any, Any, bool]]) -> None:
        """After a (re)declare: write ``messages`` ((id, token, message, bare), by id) in
        frames of at most ``batch_size`` messages and ``frame_max`` bytes."""
        link = self._link
        unconfirmed = self._unconfirmed
        messages = [(pid, token, encode_message(message) if raw else message, False)
                    for pid, token, message, raw in messages]
        if self.subentry_size > 1:  # each a sub-entry: (id, group, its messages)
            sizes = [sum(len(m) + 4 for m in entry[2]) + proto.PUBLISH_MESSAGE_OVERHEAD + 7 for entry in messages]
        else:
            sizes = [len(entry[2]) + proto.PUBLISH_MESSAGE_OVERHEAD for entry in messages]
        with link._lock:
            for start, end in _runs(sizes, self._frame_limit, self.batch_size):
                part = messages[start:end]
                for pid, token, message, raw in part:
                    unconfirmed[pid] = (token, message, raw)
                if self.subentry_size > 1:
                    link._core.publish_subentries(self._publisher_id, [(m[0], m[2]) for m in part], self.compression)
                else:
                    link._core.publish(self._publisher_id, [m[0] for m in part], [m[2] for m in part])

    # settling (the reading thread) -------------------------------------------------------------

    def _on_confirmed(self, publishing_ids: list[int]) -> None:
        settled: list[tuple[Any, int]] = []
        with self._lock:
            pop = self._unconfirmed.pop
            for pid in publishing_ids:
                entry = pop(pid, None)
                if entry is not None:
                    token = entry[0]
                    if type(token) is _Batch or type(token) is _Group:
                        self._confirm_locked(token, pid, settled)
                    else:
                        settled.append((token, pid))
        self._waiting.settle_many(settled)  # outside the lock: a future's callbacks run here
        self._waits.notify_progress()

    def _confirm_locked(self, token: Any, pid: int, settled: list[tuple[Any, int]]) -> None:
        """A confirm for ``token`` (a future, a send_batch's _Batch, a sub-entry's _Group),
        under ``_lock``: the futures it settles go to ``settled``."""
        kind = type(token)
        if kind is _Batch:
            token.pending -= 1
            if token.pending == 0:
                settled.append((token.future, token.last_id if token.last_id >= 0 else pid))
        elif kind is _Group:
            for member in token.tokens:
                self._confirm_locked(member, pid, settled)
        else:
            settled.append((token, pid))

    def _refuse_locked(self, token: Any, error: BaseException, failed: list[tuple[Any, BaseException]]) -> None:
        """A failure of ``token``, under ``_lock``: the futures it fails go to ``failed``."""
        kind = type(token)
        if kind is _Batch:
            if token.pending >= 0:
                token.pending = -1  # failed once: later confirms of the batch change nothing
                failed.append((token.future, error))
        elif kind is _Group:
            for member in token.tokens:
                self._refuse_locked(member, error, failed)
        else:
            failed.append((token, error))

    def _settle_all(self, settled: list[tuple[Any, int]], failed: list[tuple[Any, BaseException]]) -> None:
        """Settle what ``_confirm_locked`` and ``_refuse_locked`` collected (outside the lock)."""
        self._waiting.settle_many(settled)
        for future, error in failed:
            self._waiting.fail(future, error)
        self._waits.notify_progress()

    def _on_publish_errors(self, errors: list[tuple[int, int]]) -> None:
        failed: list[tuple[Any, BaseException]] = []
        with self._lock:
            for pid, code in errors:
                entry = self._unconfirmed.pop(pid, None)
                if entry is not None:
                    error = StreamPublishFailed(pid, self.stream, response_error(code, "publish", self.stream), code)
                    self._refuse_locked(entry[0], error, failed)
        self._settle_all([], failed)

    def _fail_all(self, error: BaseException) -> None:
        """Fail every send not settled yet (written or not): the producer ended."""
        failed: list[tuple[Any, BaseException]] = []
        with self._lock:
            for pid, (token, _, _) in self._unconfirmed.items():
                self._refuse_locked(token, StreamPublishFailed(pid, self.stream, error), failed)
            self._unconfirmed.clear()
            for pid, token in zip(self._pending_ids, self._pending_tokens):
                self._refuse_locked(token, StreamPublishFailed(pid, self.stream, error), failed)
            self._pending_ids, self._pending, self._pending_tokens = [], [], []
        self._settle_all([], failed)

    def _link_lost(self, error: BaseException, recovering: bool) -> bool:
        """Its link is gone (or its stream moved): returns True when a relocation should
        declare it again.  Without a reference, what was written and not confirmed fails
        (it may or may not be stored); with one it is resent after the relocation, and the
        broker drops what it stored already."""
        failed: list[tuple[Any, BaseException]] = []
        with self._lock:
            state = self._machine.state
            if recovering and state in (ProducerPhase.OPEN, ProducerPhase.DECLARING):
                # DECLARING: the flow declaring it sees its request fail and tries again itself
                relocate = state is ProducerPhase.OPEN
                self._machine.fire(ProducerSignal.LOST)
                self._link = None
                if self.reference is None:
                    for pid, (token, _, _) in self._unconfirmed.items():
                        self._refuse_locked(token, StreamPublishFailed(pid, self.stream, error), failed)
                    self._unconfirmed.clear()
            else:
                self._machine.fire(ProducerSignal.FAIL if state is not ProducerPhase.CLOSING else ProducerSignal.LOST,
                                   error)
                self._link = None
                recovering = relocate = False
        self._settle_all([], failed)
        if not recovering:
            self._fail_all(error)
        return relocate

    def _declared(self, link: Any, publisher_id: int, sequence: Optional[int]) -> bool:
        """Declared on ``link`` (the first time or after a relocation): settle what the
        broker has stored already (ids up to ``sequence``), write the rest again, then
        the batch being filled.  False when the link was lost meanwhile."""
        stored: list[tuple[Any, int]] = []
        with self._lock:
            if self._machine.state is not ProducerPhase.DECLARING:
                return False
            self._link = link
            self._publisher_id = publisher_id
            self._sequence = sequence
            self._frame_limit = _frame_limit(link.frame_max)
            if sequence is not None:
                if sequence >= self._next_id:
                    self._next_id = sequence + 1
                for pid in [pid for pid in self._unconfirmed if pid <= sequence]:
                    # stored before the loss: their confirms were lost with it
                    self._confirm_locked(self._unconfirmed.pop(pid)[0], pid, stored)
            resend = sorted(((pid, *entry) for pid, entry in self._unconfirmed.items()), key=lambda e: e[0])
            self._unconfirmed.clear()
            self._machine.fire(ProducerSignal.DECLARED)
            if resend:
                log.info("producer of stream %r: sending %d unconfirmed messages again", self.stream, len(resend))
                self.resent += len(resend)
                self._write_resends_locked(resend)
            self._write_pending_locked()
        link._flush_quietly()
        self._settle_all(stored, [])
        return True


# --------------------------------------------------------------------------- consumers


class StreamConsumerBase:
    """A consumer's bookkeeping (see the module's text); the iterating flows are in
    ``operations_async.py``.  ``callback``, ``channel``, ``active`` and ``_finished`` are
    what the transport's ``Inbox`` reads."""

    __slots__ = (
        "_env", "stream", "name", "_machine", "_lock", "_link", "_subscription_id", "_spec", "end", "credit",
        "_next_offset", "_chunk_ends", "_inbox", "last_offset", "first_offset", "callback", "channel",
        "_properties", "__weakref__",
    )

    def __init__(self, env: Any, stream: str, spec: OffsetSpec, end: Optional[int], name: Optional[str],
                 credit: int, properties: Optional[dict[str, str]]) -> None:
        self._env = env
        self.stream = stream
        self.name = name
        self._machine: Machine = new_consumer_machine(f"consumer of stream {stream!r}")
        self._lock = env._waiting.new_lock()
        self._link: Any = None
        self._subscription_id = -1
        self._spec = spec
        self.end = end
        self.credit = credit
        #: The offset after the last message received (None: nothing received yet, and no
        #: offset asked for): the records of a chunk below it are skipped.
        self._next_offset: Optional[int] = spec.value if spec.kind == OFFSET else None
        self._chunk_ends: collections.deque[int] = collections.deque()  # last offset of each chunk not yet taken
        self._inbox: Any = None
        #: The offset of the last message handed to the user (None: none yet).
        self.last_offset: Optional[int] = None
        #: The offset of the first message received (None: none yet).
        self.first_offset: Optional[int] = None
        self.callback = None
        self.channel = None
        self._properties = dict(properties or {})
        if name is not None:
            self._properties["name"] = name

    @property
    def state(self) -> ConsumerPhase:
        """SUBSCRIBING, ACTIVE, DOWN, ENDED, CLOSING, CLOSED or FAILED."""
        state: ConsumerPhase = self._machine.state
        return state

    @property
    def active(self) -> bool:
        return self._machine.state in CONSUMER_LIVE_PHASES

    @property
    def _finished(self) -> Any:
        """What the iterator ends with: END (the end offset, or closed), or the error."""
        machine = self._machine
        if machine.state is ConsumerPhase.FAILED:
            return machine.reason or InvalidStateError(f"{self!r} failed")
        return END

    def __repr__(self) -> str:
        return f"<stream consumer {self.stream!r} {self._machine.state}>"

    def _subscribe_spec(self) -> OffsetSpec:
        """Where a (re)subscription starts: after the last message received, else as asked."""
        if self._next_offset is not None:
            return OffsetSpec(OFFSET, self._next_offset)
        return self._spec

    def _subscribe_credit(self) -> int:
        """A subscription's first credit: what the buffer has room for (chunks received and
        not taken yet hold theirs until they are taken)."""
        return max(self.credit - len(self._chunk_ends), 0)

    # the reading thread --------------------------------------------------------------------

    def _on_chunk(self, chunk: Any, link: Any) -> None:
        """One chunk: the messages at or after the next offset (and up to ``end``) to the
        inbox; a chunk that brings none gives its credit back at once."""
        if self._machine.state not in CONSUMER_LIVE_PHASES or link is not self._link:
            return
        next_offset = self._next_offset
        try:
            first, timestamp, records = chunk_messages(chunk, next_offset or 0, False)
        except CodecError as exc:
            # A chunk that cannot be read (its CRC, a compression this Python cannot undo):
            # the consumer ends with why; the link and its other users go on.
            log.error("%r: a chunk cannot be read: %s", self, exc)
            self._fail(exc)
            self._env._unsubscribe_soon(self)
            return
        start = first  # the offset of records[0] (those below next_offset are skipped)
        end = self.end
        if end is not None and records and start + len(records) - 1 > end:
            records = records[:max(end - start + 1, 0)]
        if not records:
            if end is not None and next_offset is not None and next_offset > end:
                self._reach_end()
                return
            link._owed_credit.append((self._subscription_id, 1))  # queued once the dispatch is over
            return
        messages = [StreamMessage(start + index, timestamp, data) for index, data in enumerate(records)]
        last = start + len(records) - 1
        if self.first_offset is None:
            self.first_offset = start
        self._next_offset = last + 1
        self._chunk_ends.append(last)
        self._inbox.deliver_run(messages)
        if end is not None and last >= end:
            self._reach_end()

    def _reach_end(self) -> None:
        """The message at the end offset is in the inbox: nothing more is read."""
        with self._lock:
            ended = self._machine.state in CONSUMER_LIVE_PHASES
            if ended:
                self._machine.fire(ConsumerSignal.END)
        if ended:
            self._env._unsubscribe_soon(self)
            self._inbox.wake()

    # the iterating side --------------------------------------------------------------------

    def _taken(self, message: StreamMessage) -> None:
        """``message`` goes to the user: it is the last offset handed out, and the last of
        its chunk gives the chunk's credit back."""
        offset = message.offset
        self.last_offset = offset
        ends = self._chunk_ends
        if ends and offset >= ends[0]:
            with self._lock:
                ends.popleft()
                link = self._link
                if link is not None and self._machine.state in _SUBSCRIBED:
                    link._credit(self._subscription_id, 1)

    # losses --------------------------------------------------------------------------------

    def _link_lost(self, error: BaseException, recovering: bool) -> bool:
        """Its link is gone (or its stream moved): True when a relocation should subscribe
        it again (after the last offset received: none twice, none skipped)."""
        with self._lock:
            state = self._machine.state
            self._link = None
            if recovering and state in (ConsumerPhase.ACTIVE, ConsumerPhase.SUBSCRIBING):
                self._machine.fire(ConsumerSignal.LOST)
                # SUBSCRIBING: the flow subscribing it sees its request fail and tries again itself
                return state is ConsumerPhase.ACTIVE
            if state in CONSUMER_LIVE_PHASES:
                self._machine.fire(ConsumerSignal.FAIL, error)
            elif state is ConsumerPhase.CLOSING:
                self._machine.fire(ConsumerSignal.LOST)
        if self._inbox is not None:
            self._inbox.wake()
        return False

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._machine.state not in (ConsumerPhase.FAILED, ConsumerPhase.CLOSED):
                self._machine.fire(ConsumerSignal.FAIL, error)
        if self._inbox is not None:
            self._inbox.wake()


_SUBSCRIBED = frozenset({ConsumerPhase.SUBSCRIBING, ConsumerPhase.ACTIVE})


# --------------------------------------------------------------------------- the connection


class StreamConnectionBase:
    """The connection a user holds (see the module's text)."""

    __slots__ = (
        "_parameters", "params", "_ssl_context", "_client_properties", "exception_handler", "recovery",
        "rpc_timeout", "_lifecycle", "_waiting", "_lock", "_links", "_locator", "_producers", "_consumers",
        "_recovered", "_locator_mutex", "_known_nodes", "__weakref__",
    )

    def __init__(
        self,
        parameters: list[StreamParameters],
        waiting: Any,
        *,
        ssl_context: Any = None,
        client_properties: Optional[dict[str, str]] = None,
        recovery: Any = True,
        rpc_timeout: Optional[float] = 30.0,
        exception_handler: Optional[ExceptionHandler] = None,
    ) -> None:
        if not parameters:
            raise ValueError("no broker to connect to")
        if rpc_timeout is not None and rpc_timeout <= 0:
            raise ValueError(f"rpc_timeout must be positive or None, not {rpc_timeout!r}")
        if ssl_context is not None:
            parameters = [p if p.ssl else p.replace(ssl=True) for p in parameters]
        self._parameters = parameters
        self.params = parameters[0]
        self._ssl_context = ssl_context
        self._client_properties = client_properties
        self.exception_handler: ExceptionHandler = exception_handler or log_callback_error
        self.recovery: Optional[RecoveryPolicy] = RecoveryPolicy() if recovery is True else (recovery or None)
        self.rpc_timeout = rpc_timeout
        self._lifecycle = Lifecycle(f"stream connection to {parameters[0]}")
        self._waiting = waiting
        self._lock = self._new_lock()
        self._links: dict[Node, Any] = {}  # the open links, by the node each advertises
        self._locator: Any = None  # the link for requests about streams (create, metadata, ...)
        self._producers: list[Any] = []
        self._consumers: list[Any] = []
        self._recovered = waiting.new_flag()  # set while the locator is up (or the connection is over)
        self._recovered.set()
        self._locator_mutex = waiting.new_mutex()
        self._known_nodes: dict[Node, None] = {}  # nodes learnt from metadata: locators of last resort

    def _new_lock(self) -> Any:
        return self._waiting.new_lock()

    @property
    def state(self) -> ConnectionStatus:
        """NEW, CONNECTING, OPEN, DOWN (the locator lost, recovering), RECONNECTING,
        RESTORING, CLOSING, CLOSED or FAILED (``amqwire.client.lifecycle``)."""
        return self._lifecycle.state

    @property
    def is_open(self) -> bool:
        return self._lifecycle.usable

    @property
    def server_properties(self) -> dict[str, str]:
        """What the broker of the locator said about itself (PeerProperties: ``version``, ...)."""
        locator = self._locator
        return dict(locator.server_properties) if locator is not None else {}

    def __repr__(self) -> str:
        return f"<amqwire.client.stream.Connection {self.params} {self._lifecycle.state}>"

    def _check(self) -> None:
        lifecycle = self._lifecycle
        if lifecycle.usable or lifecycle.recovering:
            return
        if lifecycle.error is not None and lifecycle.state is ConnectionStatus.FAILED:
            raise lifecycle.error
        raise InvalidStateError("the stream connection is closed")

    def _link_params(self, node: Node) -> StreamParameters:
        """How to reach a node the broker advertised: its host and port, with the
        credentials, vhost and TLS settings of the first URL."""
        return self.params.replace(host=node[0], port=node[1])

    # what links report ---------------------------------------------------------------------------

    def _on_link_lost(self, link: Any, error: BaseException, producers: list[Any], consumers: list[Any],
                      closing: bool) -> None:
        node = link.node
        with self._lock:
            if self._links.get(node) is link:
                del self._links[node]
            was_locator = link is self._locator
            if was_locator:
                self._locator = None
            lifecycle = self._lifecycle
            over = lifecycle.closed_by_user or lifecycle.state is ConnectionStatus.FAILED
            recovering = self.recovery is not None and recoverable(error) and not over and not closing
            if was_locator and lifecycle.has_socket:
                self._recovered.clear()
                lifecycle.fire(ConnectionSignal.LOST_RECOVERABLE if recovering else ConnectionSignal.LOST, error)
        for producer in producers:
            if producer._link_lost(error, recovering):
                self._waiting.spawn(self._relocate, producer)
        for consumer in consumers:
            if consumer._link_lost(error, recovering):
                self._waiting.spawn(self._relocate, consumer)
        if was_locator:
            if recovering:
                self._waiting.spawn(self._recover_locator)
            elif not over and not closing:
                self._give_up(error)

    def _on_stream_moved(self, link: Any, stream: str, code: int) -> None:
        """MetadataUpdate: the broker dropped this link's producers and consumers of
        ``stream`` (deleted, or its leader moved): relocate them, or fail them."""
        log.info("stream %r: the broker says %s", stream, response_error(code, "metadata update", stream))
        recovering = self.recovery is not None
        error = ConnectionLost(f"stream {stream!r} is no longer available on {link.params} "
                               f"(MetadataUpdate: {response_error(code).code_name})")
        with link._lock:
            producers = [(pid, p) for pid, p in link._producers.items() if p.stream == stream]
            consumers = [(sid, c) for sid, c in link._consumers.items() if c.stream == stream]
            for pid, _ in producers:
                del link._producers[pid]
                link._core.release_publisher_id(pid)
            for sid, _ in consumers:
                del link._consumers[sid]
                link._core.release_subscription_id(sid)
        for _, producer in producers:
            if producer._link_lost(error, recovering):
                self._waiting.spawn(self._relocate, producer)
        for _, consumer in consumers:
            if consumer._link_lost(error, recovering):
                self._waiting.spawn(self._relocate, consumer)

    def _member_deleted(self, member: Any) -> None:
        """The stream of ``member`` is gone: it ends with StreamDeleted."""
        error = StreamDeleted(member.stream)
        if isinstance(member, ProducerBase):
            with member._lock:
                if member._machine.state not in (ProducerPhase.CLOSED, ProducerPhase.FAILED):
                    member._machine.fire(ProducerSignal.FAIL, error)
            member._fail_all(error)
        else:
            member._fail(error)

    def _give_up(self, error: BaseException) -> None:
        """No recovery: every producer and consumer ends with ``error``, the links close."""
        with self._lock:
            if self._lifecycle.recovering:
                self._lifecycle.fire(ConnectionSignal.GIVE_UP, error)
            links = list(self._links.values())
            self._links.clear()
            producers, consumers = list(self._producers), list(self._consumers)
        self._recovered.set()
        for producer in producers:
            producer._link_lost(error, False)
        for consumer in consumers:
            consumer._link_lost(error, False)
        for link in links:
            link._on_lost(error)
        self._waiting.stop()

    def _restored(self) -> bool:
        """A recovery's new locator is up: the connection is OPEN again (False: closed meanwhile)."""
        with self._lock:
            if self._lifecycle.state is not ConnectionStatus.RESTORING:
                return False
            self._lifecycle.fire(ConnectionSignal.RESTORED)
        self._recovered.set()
        return True

    def _unsubscribe_soon(self, consumer: Any) -> None:
        """A consumer reached its end offset: unsubscribe it in the background."""
        self._waiting.spawn(self._end_subscription, consumer)

    # to be defined by the flows (operations_async.py)
    _relocate: Callable[[Any], Any]
    _recover_locator: Callable[[], Any]
    _end_subscription: Callable[[Any], Any]

