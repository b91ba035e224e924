"""The running bridge: :class:`Bridge`, on the asyncio transport of ``amqwire.client``.

Why asyncio rather than the blocking transport: a bridge is two connections feeding each
other (and four channels with ``duplex``).  On asyncio one thread runs both sockets, the
consumer callbacks, the destination's confirms and the source's acks, with no handoff
between an I/O thread and a caller thread per delivery and no lock on the hot path; the
blocking transport would need a reader thread per connection plus a forwarding thread
per direction, and every delivery and confirm would cross threads.  The forwarding logic
itself (``forwarder.py``) does no I/O and would serve a blocking runner unchanged.

Per direction, deliveries are taken in the batches one read of the socket brings, turned
into one buffer of publish frames (the received content headers passed on, see
``path.py``) and written with one ``publish_encoded`` call; in on-confirm mode the
batch's confirm settles it at the source (``forwarder.py``).

On demand, a task per bridge reads the destination's consumer counts (at once on a
consumer event, else on a timer) and applies what ``demand.py`` decides: start the
source consumer, or cancel it and let the direction drain, which reports back through
``Bridge.demand_drained``.  :class:`~amqwire.bridge.connector.Connector` runs one bridge
per queue on one shared pair of connections (``Bridge.start_on``).
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import socket
import time
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, Iterable, Optional, Union

from amqwire.client import BasicProperties, aio
from amqwire.client.errors import (
    AccessRefused,
    AMQPConnectionError,
    AMQPError,
    AuthenticationError,
    ConnectionClosed,
    MessageReturned,
    NotFound,
    PublishNacked,
    ResourceLocked,
)
from amqwire.client.lifecycle import ConnectionStatus
from amqwire.client.recovery import RecoveryPolicy
from amqwire.client.url import parse_url

from .demand import MARK_EXPIRES_MS, START, STOP, Demand, DemandState, consumer_event_queue, mark_queue
from .errors import (
    BadConfiguration,
    BridgeError,
    BridgeFailed,
    BrokerAccessRefused,
    BrokerUnreachable,
    ConfigurationLoop,
    MissingResource,
)
from .filters import TopicFilter
from .forwarder import ACK, DEAD_LETTER, NACK, REJECT, Action, AckMode, BackOff, Batch, DeadLetter, Forwarder, Refused
from .frames import PublishFrames
from .path import PROBE_HEADER, with_headers
from .loops import Binding, Endpoint, find_loop, same_broker
from .stats import BridgeStats

log = logging.getLogger("amqwire.bridge")
_CLOSED_BY_USER = (ConnectionStatus.CLOSING, ConnectionStatus.CLOSED)

DEFAULT_RECOVERY = RecoveryPolicy(initial_delay=0.5, max_delay=10.0)
DEFAULT_BACKOFF = BackOff()
#: ``extra`` of the INFO lines the command shows without --verbose (what is bridged)
SUMMARY = {"amqwire_summary": True}
PROBE_TTL_MS = 10_000  # a probe that lands in other queues expires there (when it reaches their head)


def _display(url: str) -> str:
    try:
        return str(parse_url(url))
    except Exception:  # noqa: BLE001 - only for messages; a bad URL fails in connect
        return "<bad URL>"


def broker_name(connection: Any) -> str:
    """How ``x-amqwire-path`` names a broker: its cluster name and the vhost."""
    props = connection.server_properties or {}
    name = props.get("cluster_name")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    if not name:
        name = f"{connection.params.host}:{connection.params.port}"
    return f"{name}{connection.params.vhost if connection.params.vhost.startswith('/') else '/' + connection.params.vhost}"


async def _connect(url: str, role: str, recovery: RecoveryPolicy, connection_timeout: float, heartbeat: Optional[int]) -> Any:
    try:
        return await aio.connect(url, recovery=recovery, connection_timeout=connection_timeout, heartbeat=heartbeat,
                                 client_properties={"connection_name": f"amqwire.bridge {role}"})
    except AuthenticationError as exc:
        raise BrokerAccessRefused(f"{role} broker {_display(url)} refused the credentials: {exc}") from exc
    except ConnectionClosed as exc:
        if exc.reply_code in (402, 403, 530):
            raise BrokerAccessRefused(f"{role} broker {_display(url)} refused access: {exc}") from exc
        raise BrokerUnreachable(f"{role} broker {_display(url)} closed the connection: {exc}") from exc
    except (AMQPConnectionError, OSError, TimeoutError) as exc:
        raise BrokerUnreachable(f"cannot reach the {role} broker {_display(url)}: {exc}") from exc
    except ValueError as exc:
        raise BadConfiguration(f"bad {role} URL: {exc}") from exc


#: The queues the bridge makes for itself start with this (never forwarded by a glob).
OWN_QUEUES = "amqwire.bridge."


def subscription_queue(exchange: str, binding_key: str, name: Optional[str] = None) -> str:
    """The durable queue a bridge forwarding ``exchange`` owns: ``amqwire.bridge.NAME``."""
    return f"{OWN_QUEUES}{name or f'{exchange}.{binding_key}'}"


def _discard(message: Any) -> None:
    """A mark queue's consumer: nothing is published there; whatever is, goes."""


async def _close_quietly(connection: Any) -> None:
    if connection is not None:
        try:
            await connection.close()
        except AMQPError as exc:
            log.debug("close: %s", exc)


def _resource_error(exc: AMQPError, what: str) -> BridgeError:
    if isinstance(exc, NotFound):
        return MissingResource(f"{what} does not exist ({exc})")
    if isinstance(exc, AccessRefused):
        return BrokerAccessRefused(f"access to {what} refused ({exc})")
    return BridgeFailed(f"{what}: {exc}")


async def _same_broker_probe(source: Any, destination: Any) -> Optional[bool]:
    """Whether both connections reach the same broker (or cluster) and vhost: a queue
    declared exclusive through the source is locked (405) to the destination there, and
    missing (404) anywhere else.  None when the probe cannot run (say, the source user
    may not declare a queue)."""
    try:
        async with source.channel() as channel:
            name = (await channel.queue_declare("", exclusive=True, auto_delete=True)).queue
            try:
                probe = await destination.channel()
                try:
                    await probe.queue_declare(name, passive=True)
                    return True
                except ResourceLocked:
                    return True
                except NotFound:
                    return False
                finally:
                    if probe.is_open:
                        await probe.close()
            finally:
                await channel.queue_delete(name)
    except AMQPError as exc:
        log.info("same-broker probe not possible (%s): judging by address and cluster name", exc)
        return None


async def _endpoint(connection: Any) -> Endpoint:
    params = connection.params  # where it is connected (the URL, or the one of a list that answered)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(params.host, params.port, type=socket.SOCK_STREAM)
        addresses = frozenset((str(info[4][0]), params.port) for info in infos)
    except OSError:
        addresses = frozenset({(params.host, params.port)})
    props = connection.server_properties or {}
    name = props.get("cluster_name")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    vhost = params.vhost
    return Endpoint(addresses, vhost, name if isinstance(name, str) and name else None)


def _exchange_graph(params: Any, exchange: str, port: int) -> Optional[tuple[dict[str, str], dict[str, list[Binding]]]]:
    """The types and bindings of ``exchange`` and the exchanges it is bound to, from the
    management API on the connection's host (its credentials); None when it does not answer."""
    scheme = "https" if params.ssl else "http"
    auth = base64.b64encode(f"{params.username}:{params.password}".encode()).decode()
    vhost = urllib.parse.quote(params.vhost, safe="")
    types: dict[str, str] = {}
    bindings: dict[str, list[Binding]] = {}
    todo = [exchange]
    try:
        while todo and len(types) < 64:
            name = todo.pop()
            if name in types:
                continue
            base = f"{scheme}://{params.host}:{port}/api/exchanges/{vhost}/{urllib.parse.quote(name, safe='')}"
            info = _get_json(base, auth)
            types[name] = str(info.get("type", "direct"))
            found = [Binding(str(b["destination"]), str(b["destination_type"]), str(b["routing_key"]))
                     for b in _get_json(base + "/bindings/source", auth)]
            bindings[name] = found
            todo += [b.destination for b in found if b.destination_type == "exchange"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("management API: %s", exc)
        return None
    return types, bindings


def _get_json(url: str, auth: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(request, timeout=3) as response:
        return json.load(response)


class Direction:
    """One way across the bridge: a consumer on ``source``, publishes on ``destination``."""

    def __init__(self, bridge: "Bridge", source: Any, destination: Any, queue: str, exchange: str,
                 routing_key: Optional[str], label: str, *, source_exchange: Optional[str] = None,
                 binding_key: str = "") -> None:
        self.bridge = bridge
        self.source = source
        self.destination = destination
        self.queue = queue
        self.exchange = exchange
        self.routing_key = routing_key
        self.label = label
        # An exchange source: ``queue`` is the bridge's own subscription queue, bound to it.
        self.source_exchange = source_exchange
        self.binding_key = binding_key
        self.probe = False  # publish a probe at start: a loop it cannot see otherwise (Bridge._refuse_loops)
        self.loop_error: Optional[ConfigurationLoop] = None
        self.forwarder: Optional[Forwarder] = None
        self._src_ch: Any = None
        self._dest_ch: Any = None
        self._consumer: Any = None
        self._pending: list[Any] = []
        # The destination's answers and what else settles deliveries, in the order they came:
        # ("confirm", ack, tag, multiple), ("return", ReturnedMessage), ("lost", batch),
        # ("restart",), ("dead-lettered", tag, ok)
        self._events: list[tuple[Any, ...]] = []
        self._dead_letter_ch: Any = None
        self._dead_letter_frames: Optional[PublishFrames] = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._draining = False  # on demand: the consumer was cancelled, what it received is settling
        self.demand: Optional[Demand] = None  # on demand: consuming only while the destination has consumers
        self.task: Optional["asyncio.Task[None]"] = None
        self._side_tasks: set["asyncio.Task[None]"] = set()
        self._mark: Any = None  # the consumer on mark_queue(queue): says "a bridge consumes queue" (demand.py)

    async def open(self) -> None:
        bridge = self.bridge
        source, destination = self.source, self.destination
        self._src_ch = await source.channel()
        if self.source_exchange is not None:
            await self._subscribe()
        try:
            await self._src_ch.queue_declare(self.queue, passive=True)
        except AMQPError as exc:
            raise _resource_error(exc, f"queue {self.queue!r} on the {self.label.split(' ')[0]} broker") from exc
        self._dest_ch = await destination.channel()
        if self.exchange:
            try:
                await self._dest_ch.exchange_declare(self.exchange, passive=True)
            except AMQPError as exc:
                raise _resource_error(exc, f"exchange {self.exchange!r} on the {self.label.split(' ')[-1]} broker") from exc
        mode = bridge.ack_mode
        if mode.confirms:
            await self._dest_ch.confirm_select(max_in_flight=max(2 * bridge.prefetch, 1000))
            self._dest_ch.add_confirm_listener(self._on_confirm_event)
            self._dest_ch.add_close_listener(self._on_dest_closed)
            destination.add_recovery_succeeded_listener(self._on_dest_recovered)
        self._dest_ch.add_on_return_callback(self._on_return)
        if mode is not AckMode.NO_ACK:
            await self._src_ch.basic_qos(bridge.prefetch)
        if bridge.dead_letter_exchange is not None and mode.confirms:
            self._dead_letter_ch = await source.channel()
            try:
                await self._dead_letter_ch.exchange_declare(bridge.dead_letter_exchange, passive=True)
            except AMQPError as exc:
                raise _resource_error(exc, f"dead-letter exchange {bridge.dead_letter_exchange!r} on the "
                                      f"{self.label.split(' ')[0]} broker") from exc
            await self._dead_letter_ch.confirm_select()
            self._dead_letter_frames = PublishFrames(self._dead_letter_ch.channel_id, source.frame_max, mandatory=True)
        self.forwarder = Forwarder(
            exchange=self.exchange,
            routing_key=self.routing_key,
            source_name=broker_name(source),
            destination_name=broker_name(destination),
            ack_mode=mode,
            max_hops=bridge.max_hops,
            topic_filter=bridge.topic_filter,
            channel_id=self._dest_ch.channel_id,
            frame_max=destination.frame_max,
            refused=bridge.refused,
            max_attempts=bridge.max_attempts,
            dead_letter_exchange=bridge.dead_letter_exchange,
            backoff=bridge.backoff,
            label=self.label,
            owned_source=self.source_exchange is not None,
            probe_token=bridge.probe_token,
            name=bridge.name,
        )
        if self.probe:
            await self._publish_probe()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"amqwire.bridge {self.label}")
        if self.demand is None:
            await self.start_consuming()

    async def _subscribe(self) -> None:
        """The bridge's own durable queue bound to the source exchange (ActiveMQ's durable
        subscription): declared if missing, kept when the bridge stops (deleted only by
        ``delete_subscription``), so nothing published while the bridge is away is lost."""
        exchange = self.source_exchange or ""
        side = self.label.split(" ")[0]
        try:
            await self._src_ch.exchange_declare(exchange, passive=True)
        except AMQPError as exc:
            raise _resource_error(exc, f"exchange {exchange!r} on the {side} broker") from exc
        if self._src_ch is None or not self._src_ch.is_open:
            self._src_ch = await self.source.channel()
        try:
            await self._src_ch.queue_declare(self.queue, durable=True)
            await self._src_ch.queue_bind(self.queue, exchange, self.binding_key)
        except AMQPError as exc:
            raise _resource_error(exc, f"the bridge's queue {self.queue!r} bound to exchange {exchange!r} on the {side} "
                                  "broker") from exc
        log.info("%s: forwarding exchange %r (binding key %r) through the bridge's queue %r", self.label, exchange,
                 self.binding_key, self.queue)

    async def delete_subscription(self) -> None:
        """Delete the bridge's own queue of an exchange source (what it still holds goes)."""
        if self.source_exchange is None:
            return
        channel = await self.source.channel()
        try:
            await channel.queue_delete(self.queue)
            log.info("%s: deleted the bridge's queue %r", self.label, self.queue)
        finally:
            if channel.is_open:
                await channel.close()

    async def _publish_probe(self) -> None:
        """Publish one probe (mandatory, confirmed, marked with the bridge's token) the way
        this direction publishes: returned, it routes nowhere; confirmed, it may come back
        into a source queue of this bridge, whose forwarder then stops the bridge before
        any message looped.  A probe found by another bridge is removed there."""
        channel = await self.destination.channel()
        token = self.bridge.probe_token or ""
        props = BasicProperties(headers={PROBE_HEADER: token}, type="amqwire.bridge.probe", app_id="amqwire.bridge",
                                delivery_mode=1, expiration=str(PROBE_TTL_MS))
        key = self.routing_key or ""
        try:
            await channel.confirm_select()
            await channel.basic_publish(self.exchange, key, b"", props, mandatory=True)
            log.info("%s: a loop probe went to exchange %r with routing key %r and was routed: if it comes back into "
                     "a source queue of this bridge, the bridge stops", self.label, self.exchange, key)
        except MessageReturned:
            log.info("%s: the loop probe to exchange %r with routing key %r was returned: no route, no loop",
                     self.label, self.exchange, key)
        except AMQPError as exc:
            log.warning("%s: the loop probe to exchange %r could not be published (%s): a loop through its bindings is "
                        "found only when a message comes back", self.label, self.exchange, exc)
        finally:
            if channel.is_open:
                await channel.close()

    def _loop_found(self) -> None:
        """The forwarder found a loop: no more forwarding, what it holds settles, then the
        direction ends with ``ConfigurationLoop`` (the command exits 2)."""
        forwarder = self.forwarder
        if forwarder is None or forwarder.loop is None or self.loop_error is not None:
            return
        found = forwarder.loop
        route = f"exchange {self.exchange!r}" + (f" with routing key {self.routing_key!r}" if self.routing_key is not None
                                                  else " with each message's own routing key")
        if found.probe:
            what = (f"the probe this bridge published to {route} on the {self.label.split(' ')[-1]} broker came back "
                    f"into queue {self.queue!r}: the destination routes into a source queue of the bridge")
        else:
            what = (f"delivery {found.delivery_tag} (message id {found.message_id!r}) from queue {self.queue!r} has "
                    f"been on the destination {forwarder.destination_name} already (path {' -> '.join(found.path)}): "
                    f"forwarding it to {route} would loop")
        hint = self.bridge.route_hint(self)
        self.loop_error = ConfigurationLoop(
            f"loop: {what}{'; ' + hint if hint else ''}; nothing was acked that was not forwarded: the message stays in "
            f"the queue and the bridge stopped")
        self._stopping = True
        consumer = self._consumer
        if consumer is not None and consumer.active:
            task = asyncio.get_running_loop().create_task(self._cancel_quietly(consumer))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
        self._wake.set()

    async def _cancel_quietly(self, consumer: Any) -> None:
        try:
            await consumer.cancel()
        except AMQPError as exc:
            log.info("%s: cancelling the consumer: %s", self.label, exc)

    async def start_consuming(self) -> None:
        """Consume the source queue, marked as a bridge's consumer first (``demand.py``)."""
        try:
            if self._mark is None or not self._mark.active:
                name = mark_queue(self.queue)
                await self._src_ch.queue_declare(name, arguments={"x-expires": MARK_EXPIRES_MS})
                self._mark = await self._src_ch.consume(name, _discard, no_ack=True,
                                                        consumer_tag=f"amqwire.bridge.mark.{uuid.uuid4().hex}")
            self._consumer = await self._src_ch.consume(self.queue, self._on_message,
                                                        no_ack=self.bridge.ack_mode is AckMode.NO_ACK,
                                                        consumer_tag=f"amqwire.bridge.{uuid.uuid4().hex}")
        except AMQPError as exc:
            raise _resource_error(exc, f"consuming from queue {self.queue!r}") from exc

    async def pause_consuming(self) -> None:
        """Cancel the consumer and settle what it received (forwarded as ``stop`` does;
        held ones back to the source at once), then calls the bridge's ``demand_drained``.
        The mark goes after the consumer: never a bridge's consumer without its mark."""
        consumer, self._consumer = self._consumer, None
        mark, self._mark = self._mark, None
        for one in (consumer, mark):
            if one is not None and one.active:
                try:
                    await one.cancel()
                except AMQPError as exc:
                    log.info("%s: cancelling the consumer: %s", self.label, exc)
        self._draining = True
        self._wake.set()

    def _on_message(self, message: Any) -> None:
        self._pending.append(message)
        if not self._wake.is_set():
            self._wake.set()

    def _notify(self, event: tuple[Any, ...]) -> None:
        self._events.append(event)
        if not self._wake.is_set():
            self._wake.set()

    def _on_confirm_event(self, event: Any) -> None:
        self._notify(("confirm", event.ack, event.delivery_tag, event.multiple))

    def _on_return(self, returned: Any) -> None:
        self._notify(("return", returned))

    def _on_dest_closed(self, event: Any) -> None:
        self._notify(("restart",))

    def _on_dest_recovered(self, event: Any) -> None:
        self._notify(("restart",))

    def _on_batch_settled(self, batch: Batch, future: "asyncio.Future[None]") -> None:
        # Acks, nacks and returns arrive through the confirm listener and the return
        # callback, per publish; the batch's future matters only when the destination
        # never answered.
        if future.cancelled():
            self._notify(("lost", batch))
            return
        error = future.exception()
        if error is not None and not isinstance(error, (MessageReturned, PublishNacked)):
            self._notify(("lost", batch))

    def _on_dead_lettered(self, tag: int, future: "asyncio.Future[None]") -> None:
        self._notify(("dead-lettered", tag, not future.cancelled() and future.exception() is None))

    @property
    def consumer_ended(self) -> Optional[BaseException]:
        """Why the source consumer stopped without being asked to (None while it runs)."""
        consumer = self._consumer
        if consumer is None or consumer.active or self._stopping:
            return None
        reason = getattr(consumer, "_finished", None)
        return reason if isinstance(reason, BaseException) else BridgeFailed(f"the consumer on {self.queue!r} was cancelled")

    async def stop_consuming(self) -> None:
        self._stopping = True
        consumer = self._consumer
        if consumer is not None and consumer.active:
            try:
                await consumer.cancel()
            except AMQPError as exc:
                log.info("%s: cancelling the consumer: %s", self.label, exc)
        self._wake.set()

    async def _run(self) -> None:
        forwarder = self.forwarder
        if forwarder is None:
            raise BridgeError(f"{self.label}: not opened")
        wake = self._wake
        loop = asyncio.get_running_loop()
        while True:
            if self._events:
                await self._apply(self._settle_events(forwarder))
            now = time.monotonic()
            finishing = self._stopping or self._draining
            if forwarder.held:
                await self._apply(forwarder.release_held() if finishing else forwarder.due(now))
            if self._pending and (finishing or now >= forwarder.paused_until):
                messages, self._pending = self._pending, []
                step = self.bridge.max_batch
                for start in range(0, len(messages), step):
                    batch = forwarder.prepare(messages[start:start + step] if len(messages) > step else messages)
                    if batch.count:
                        if self.bridge.tracing is not None:
                            await self._publish_traced(batch, self.bridge.tracing)
                        else:
                            await self._publish(batch)
                    # Synchronously from the publish on: the forwarder numbers the batch's
                    # publishes after everything that happened before it (a channel reopened
                    # while the publish waited restarts the seqnos) and before anything after.
                    actions = self._settle_events(forwarder) if self._events else []
                    actions += forwarder.sent(batch)
                    await self._apply(actions)
                if forwarder.loop is not None and self.loop_error is None:
                    self._loop_found()
                continue
            if self._events:
                continue
            if self._stopping and forwarder.unsettled == 0:
                if self.loop_error is not None:
                    raise self.loop_error
                return
            if self._draining and forwarder.unsettled == 0:
                self._draining = False
                self.bridge.demand_drained(self)
            wake.clear()
            wait_until = forwarder.next_due
            if self._pending and not finishing:
                wait_until = forwarder.paused_until if wait_until is None else min(wait_until, forwarder.paused_until)
            if wait_until is None:
                await wake.wait()
                continue
            timer = loop.call_at(loop.time() + max(wait_until - time.monotonic(), 0.0), wake.set)
            try:
                await wake.wait()
            finally:
                timer.cancel()

    def _settle_events(self, forwarder: Forwarder) -> list[Action]:
        events, self._events = self._events, []
        actions: list[Action] = []
        for event in events:
            actions += self._settle(forwarder, event)
        return actions

    @staticmethod
    def _settle(forwarder: Forwarder, event: tuple[Any, ...]) -> list[Action]:
        kind = event[0]
        if kind == "confirm":
            return forwarder.confirm(event[1], event[2], event[3], time.monotonic())
        if kind == "return":
            returned = event[1]
            forwarder.returned(returned.routing_key, returned.properties, returned.body, returned.reply_code,
                               returned.reply_text, time.monotonic())
            return []
        if kind == "lost":
            return forwarder.lost(event[1])
        if kind == "restart":
            return forwarder.restart_seqnos()
        return forwarder.dead_lettered(event[1], event[2], time.monotonic())

    async def _publish(self, batch: Batch) -> None:
        channel = self._dest_ch
        while True:
            try:
                future = await channel.publish_encoded(batch.frames, batch.count)
                break
            except AMQPConnectionError as exc:
                if self.destination.recovery is None or self.destination.state in _CLOSED_BY_USER:
                    raise
                log.warning("%s: destination lost (%s): waiting for it to come back", self.label, exc)
                if not await self.destination.wait_recovered():
                    raise
        if future is not None:
            future.add_done_callback(lambda f, b=batch: self._on_batch_settled(b, f))

    async def _publish_traced(self, batch: Batch, tracing: Any) -> None:
        """``_publish`` with a span per forwarded message, from the decision to forward it
        to the batch's write; the headers (traceparent with them) go on unchanged."""
        spans = tracing.start_forwards(batch.messages, self.queue, self.exchange, self.routing_key, self.destination)
        try:
            await self._publish(batch)
        except BaseException as exc:
            tracing.end_all(spans, exc)
            raise
        tracing.end_all(spans)

    async def _apply(self, actions: list[Action]) -> None:
        channel = self._src_ch
        for op, tag, arg in actions:
            try:
                if op is ACK:
                    await channel.basic_ack(tag, arg)
                elif op is NACK:
                    await channel.basic_nack(tag, False, True)
                elif op is REJECT:
                    await channel.basic_nack(tag, False, False)
                elif op is DEAD_LETTER:
                    await self._dead_letter(tag, arg)
            except AMQPError as exc:
                # The source is gone: it requeues what was not acked and delivers it again.
                log.info("%s: %s of delivery %d not sent: %s", self.label, op, tag, exc)

    async def _dead_letter(self, tag: int, dead: DeadLetter) -> None:
        """Publish a refused message, as it came from the source with the reason in its
        headers, to the dead-letter exchange at the source; its confirm decides
        (``Forwarder.dead_lettered``)."""
        frames = self._dead_letter_frames
        if frames is None:
            raise BridgeError(f"{self.label}: no dead-letter exchange")
        parts: list[Any] = []
        message = dead.message
        wire = with_headers(message.properties, dead.headers)
        frames.append(parts, self.bridge.dead_letter_exchange or "", message.routing_key, wire, message.body)
        try:
            future = await self._dead_letter_ch.publish_encoded(b"".join(parts), 1)
        except AMQPError as exc:
            log.warning("%s: dead-lettering delivery %d failed: %s", self.label, tag, exc)
            self._notify(("dead-lettered", tag, False))
            return
        future.add_done_callback(lambda f, t=tag: self._on_dead_lettered(t, f))

    def stats(self) -> BridgeStats:
        stats = self.forwarder.counters.snapshot() if self.forwarder is not None else BridgeStats()
        if self.demand is not None and self.demand.state is not DemandState.CONSUMING:
            stats = dataclasses.replace(stats, without_demand=1)
        return stats

    async def close_channels(self) -> None:
        for channel in (self._src_ch, self._dest_ch, self._dead_letter_ch):
            if channel is not None and channel.is_open:
                try:
                    await channel.close()
                except AMQPError as exc:
                    log.debug("%s: closing a channel: %s", self.label, exc)


class Bridge:
    """Forward messages from a queue on one broker to an exchange on another.

    ``dest_routing_key``: the routing key to publish with; default: the source queue's
    name when ``dest_exchange`` is the default exchange, else each message's own routing
    key (``keep_routing_key=True``: always the message's own).  ``duplex``: also forward
    from ``reverse_queue`` (default: the same queue name) on the destination broker to
    ``reverse_exchange`` (default: the same exchange name) on the source broker, over the
    same two connections.  ``include``/``exclude``: topic patterns on the routing key the
    message was delivered with.  ``max_hops``: drop messages that crossed that many
    bridges already.  ``stats_interval``: log the statistics every that many seconds
    (and call ``on_stats(bridge)``).  ``max_batch``: deliveries published together
    under one confirm (on-confirm acks them at the source together: smaller batches are
    acked sooner).

    Every publish is ``mandatory``.  A message the destination refuses (returns it: no
    route; or nacks it: ``reject-publish``) is never acked at the source in on-confirm
    mode: ``refused`` says what follows (``"requeue"``, the default: back to the source
    after a ``backoff`` that doubles per refusal of that message, for ever;
    ``"dead-letter"``: the same, and after ``max_attempts`` refusals to
    ``dead_letter_exchange`` at the source, or without one with ``basic.nack(requeue=False)``
    to the source queue's own dead-letter exchange; ``"drop"``: acked after
    ``max_attempts``, counted).  ``start`` refuses a configuration that routes back into
    its source queue (``ConfigurationLoop``, see ``loops.py``; exchange bindings are read
    from the management API at ``management_port`` on the source's host, None: not read).
    ``demand``: consume only while the destination has consumers on the queue of the
    source queue's name (see ``demand.py``; learned from the ``rabbitmq_event_exchange``
    plugin's events where the destination has it, and every ``demand_interval`` seconds).
    ``tracing``: OpenTelemetry (True, a TracerProvider or an ``amqwire.client.tracing.Tracing``;
    see docs/tracing.md): one ``send`` span per forwarded message, a child of the context in
    its ``traceparent`` header, which goes on unchanged.

        async with Bridge(src, "orders", dest, dest_exchange="orders") as bridge:
            ...                      # runs until the block ends; stop() drains
            print(bridge.stats())
    """

    def __init__(
        self,
        src: str,
        src_queue: Optional[str],
        dest: str,
        *,
        src_exchange: Optional[str] = None,
        src_binding_key: str = "#",
        name: Optional[str] = None,
        delete_subscription: bool = False,
        probe: bool = True,
        dest_exchange: str = "",
        dest_routing_key: Optional[str] = None,
        keep_routing_key: bool = False,
        ack_mode: Union[AckMode, str] = AckMode.ON_CONFIRM,
        prefetch: int = 1000,
        duplex: bool = False,
        reverse_queue: Optional[str] = None,
        reverse_exchange: Optional[str] = None,
        max_hops: Optional[int] = None,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        stats_interval: Optional[float] = None,
        on_stats: Optional[Callable[["Bridge"], Any]] = None,
        recovery: RecoveryPolicy = DEFAULT_RECOVERY,
        connection_timeout: float = 10.0,
        heartbeat: Optional[int] = None,
        max_batch: int = 512,
        refused: Union[Refused, str] = Refused.REQUEUE,
        max_attempts: int = 5,
        dead_letter_exchange: Optional[str] = None,
        backoff: BackOff = DEFAULT_BACKOFF,
        management_port: Optional[int] = 15672,
        demand: bool = False,
        demand_interval: float = 2.0,
        tracing: Any = False,
    ) -> None:
        try:
            self.ack_mode = AckMode(ack_mode)
        except ValueError:
            raise ValueError(f"ack_mode must be one of {', '.join(m.value for m in AckMode)}, not {ack_mode!r}") from None
        if not isinstance(prefetch, int) or not 1 <= prefetch <= 65535:
            raise ValueError(f"prefetch must be an int from 1 to 65535, not {prefetch!r}")
        if max_hops is not None and (not isinstance(max_hops, int) or max_hops < 1):
            raise ValueError(f"max_hops must be a positive int, not {max_hops!r}")
        if stats_interval is not None and not stats_interval > 0:
            raise ValueError(f"stats_interval must be a positive number of seconds, not {stats_interval!r}")
        if src_exchange is not None:
            if src_queue:
                raise ValueError("src_queue and src_exchange: the bridge forwards a queue, or an exchange through a queue "
                                 "of its own, not both")
            if not isinstance(src_exchange, str) or not src_exchange:
                raise ValueError("src_exchange must name an exchange (the default exchange cannot be bound)")
            src_queue = subscription_queue(src_exchange, src_binding_key, name)
            if duplex and not dest_exchange:
                raise ValueError("duplex with src_exchange needs dest_exchange: the reverse direction forwards that "
                                 "exchange back")
        elif not src_queue:
            raise ValueError("src_queue must name a queue (or src_exchange an exchange)")
        elif delete_subscription:
            raise ValueError("delete_subscription applies to an exchange source: the bridge deletes only a queue it owns")
        if demand and duplex:
            raise ValueError("demand and duplex: the reverse direction's consumer would count as demand")
        if not demand_interval > 0:
            raise ValueError(f"demand_interval must be a positive number of seconds, not {demand_interval!r}")
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, not {max_batch!r}")
        try:
            self.refused = Refused(refused)
        except ValueError:
            raise ValueError(f"refused must be one of {', '.join(r.value for r in Refused)}, not {refused!r}") from None
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive int, not {max_attempts!r}")
        if dead_letter_exchange is not None and self.refused is not Refused.DEAD_LETTER:
            raise ValueError("dead_letter_exchange needs refused='dead-letter'")
        if self.refused is not Refused.REQUEUE and not self.ack_mode.confirms:
            raise ValueError(f"refused={self.refused.value!r} needs ack_mode 'on-confirm' or 'auto': only they learn "
                             "of refusals before acking")
        for side, url in (("src", src), ("dest", dest)):
            if isinstance(url, str):
                try:
                    parse_url(url)
                except ValueError as exc:
                    raise BadConfiguration(f"bad {side} URL: {exc}") from None
        self.src, self.dest = src, dest
        self.src_queue: str = src_queue or ""
        self.src_exchange = src_exchange
        self.src_binding_key = src_binding_key
        #: in the x-amqwire-bridge header of what it dead-letters: ``name``, else what it forwards
        self.name = name or (f"{src_exchange}.{src_binding_key}" if src_exchange is not None else self.src_queue)
        self.delete_subscription = delete_subscription
        self.probe = probe
        self.probe_token: Optional[str] = None  # set at start when a direction publishes a probe
        self.dest_exchange = dest_exchange
        self.dest_routing_key = dest_routing_key
        self.keep_routing_key = keep_routing_key
        self.prefetch = prefetch
        self.duplex = duplex
        self.reverse_queue = reverse_queue or src_queue
        if reverse_exchange is None:
            reverse_exchange = dest_exchange if src_exchange is None else src_exchange
        self.reverse_exchange = reverse_exchange
        self.max_hops = max_hops
        self.topic_filter = TopicFilter(include, exclude)
        self.stats_interval = stats_interval
        self.on_stats = on_stats
        self.recovery = recovery
        self.connection_timeout = connection_timeout
        self.heartbeat = heartbeat
        self.max_batch = max_batch
        self.max_attempts = max_attempts
        self.dead_letter_exchange = dead_letter_exchange
        self.backoff = backoff
        self.management_port = management_port
        self.demand = demand
        self.demand_interval = demand_interval
        # OpenTelemetry (amqwire.client.tracing): a span per forwarded message; None: off
        self.tracing: Any = None
        if tracing is not None and tracing is not False:
            from amqwire.client.tracing import tracing_from_option

            self.tracing = tracing_from_option(tracing)
        self.demand_source: Optional[str] = None  # "events" or "polling", once started on demand
        self._demand_wake: Optional[asyncio.Event] = None
        self._demand_queues: set[str] = set()  # named by events since the last look
        self._demand_drained: list[Direction] = []  # stopped for want of demand, settled since the last look
        self._demand_task: Optional["asyncio.Task[None]"] = None
        self.directions: list[Direction] = []
        self._src_conn: Any = None
        self._dest_conn: Any = None
        self._watch: Optional["asyncio.Task[None]"] = None
        self._failure: Optional[BaseException] = None
        self._finished: Optional[asyncio.Event] = None
        self._stopped = False
        self._started_at = 0.0
        self._shared_connections = False
        self._unseen_routes: dict[str, str] = {}  # direction label -> what the start could not see

    def _routing_key(self, exchange: str, queue: str) -> Optional[str]:
        if self.dest_routing_key is not None:
            return self.dest_routing_key
        if self.keep_routing_key or exchange:
            return None
        return queue

    async def start(self) -> "Bridge":
        """Connect to both brokers, check the queue(s) and exchange(s), start forwarding.
        Raises a :class:`BridgeError` (one line saying what and where) and leaves nothing
        open if it cannot."""
        self._finished = asyncio.Event()
        try:
            self._src_conn = await _connect(self.src, "source", self.recovery, self.connection_timeout, self.heartbeat)
            self._dest_conn = await _connect(self.dest, "destination", self.recovery, self.connection_timeout,
                                             self.heartbeat)
        except BaseException:
            await self._close_connections()
            raise
        return await self._open()

    async def start_on(self, source: Any, destination: Any) -> "Bridge":
        """``start`` on two connections the caller opened (and closes: ``stop`` leaves
        them open), as :class:`~amqwire.bridge.connector.Connector` shares one pair among
        its bridges."""
        self._shared_connections = True
        self._finished = asyncio.Event()
        self._src_conn, self._dest_conn = source, destination
        return await self._open()

    async def _open(self) -> "Bridge":
        try:
            self.directions.append(Direction(
                self, self._src_conn, self._dest_conn, self.src_queue, self.dest_exchange,
                self._routing_key(self.dest_exchange, self.src_queue), "source -> destination",
                source_exchange=self.src_exchange, binding_key=self.src_binding_key))
            if self.duplex:
                self.directions.append(Direction(
                    self, self._dest_conn, self._src_conn, self.reverse_queue, self.reverse_exchange,
                    self._routing_key(self.reverse_exchange, self.reverse_queue), "destination -> source",
                    source_exchange=None if self.src_exchange is None else self.dest_exchange,
                    binding_key=self.src_binding_key))
            await self._refuse_loops()
            if self.demand:
                for direction in self.directions:
                    direction.demand = Demand(direction.queue)
            for direction in self.directions:
                await direction.open()
            if self.demand:
                self._demand_wake = asyncio.Event()
                self.demand_source = await self._subscribe_to_consumer_events()
                self._demand_task = asyncio.get_running_loop().create_task(self._follow_demand(),
                                                                           name="amqwire.bridge demand")
        except BaseException:
            if self._demand_task is not None:
                self._demand_task.cancel()
            for direction in self.directions:
                if direction.task is not None:
                    direction.task.cancel()
            await self._close_connections()
            raise
        for direction in self.directions:
            if direction.task is not None:
                direction.task.add_done_callback(self._direction_done)
        if self._demand_task is not None:
            self._demand_task.add_done_callback(self._direction_done)
        self._started_at = time.monotonic()
        self._watch = asyncio.get_running_loop().create_task(self._watchdog(), name="amqwire.bridge watch")
        source = (f"exchange {self.src_exchange!r} (binding key {self.src_binding_key!r}, through queue "
                  f"{self.src_queue!r})" if self.src_exchange is not None else f"queue {self.src_queue!r}")
        log.info("bridge started: %s %s -> %s exchange %r (%s, prefetch %d%s, %s)", _display(self.src), source,
                 _display(self.dest), self.dest_exchange, self.ack_mode.value, self.prefetch,
                 ", duplex" if self.duplex else "",
                 f"on demand ({self.demand_source})" if self.demand else "always", extra=SUMMARY)
        if self.ack_mode is AckMode.ON_PUBLISH or self.ack_mode is AckMode.NO_ACK:
            log.warning("ack mode %s: messages the destination does not store (its connection lost, a refusal, no "
                        "route) are lost; on-confirm loses none", self.ack_mode.value)
        return self

    # ------------------------------------------------------------------ on demand

    async def _subscribe_to_consumer_events(self) -> str:
        """Follow consumer.created / consumer.deleted on the destination's
        ``amq.rabbitmq.event`` exchange (the ``rabbitmq_event_exchange`` plugin) when it
        is there: "events"; else "polling"."""
        destination = self._dest_conn
        queues = ", ".join(repr(d.queue) for d in self.directions)
        channel = await destination.channel()
        try:
            await channel.exchange_declare("amq.rabbitmq.event", passive=True)
            name = (await channel.queue_declare("", exclusive=True, auto_delete=True)).queue
            for key in ("consumer.created", "consumer.deleted"):
                await channel.queue_bind(name, "amq.rabbitmq.event", key)
            await channel.consume(name, self._on_consumer_event, no_ack=True)
        except AMQPError as exc:
            log.info("demand for %s: polling the destination's consumer count every %g s (no consumer events from "
                     "the rabbitmq_event_exchange plugin: %s)", queues, self.demand_interval, exc)
            if channel.is_open:
                await channel.close()
            return "polling"
        destination.add_recovery_succeeded_listener(lambda event: self._look_again(None))
        log.info("demand for %s: following consumer events on the destination's amq.rabbitmq.event exchange "
                 "(and polling every %g s)", queues, self.demand_interval)
        return "events"

    def _on_consumer_event(self, message: Any) -> None:
        queue = consumer_event_queue(message.properties.headers, self._dest_conn.params.vhost)
        for direction in self.directions:
            if queue is not None and queue in (direction.queue, mark_queue(direction.queue)):
                self._look_again(direction.queue)

    def _look_again(self, queue: Optional[str]) -> None:
        """Read the consumer count of ``queue`` (None: of all) at once."""
        self._demand_queues.update([queue] if queue is not None else (d.queue for d in self.directions))
        if self._demand_wake is not None:
            self._demand_wake.set()

    def demand_drained(self, direction: Direction) -> None:
        """``direction``'s consumer, stopped for want of demand, has settled what it had."""
        self._demand_drained.append(direction)
        if self._demand_wake is not None:
            self._demand_wake.set()

    async def _follow_demand(self) -> None:
        wake = self._demand_wake
        if wake is None:
            raise BridgeError("demand: not started")
        directions = [d for d in self.directions if d.demand is not None]
        channel: Any = None
        todo = {d.queue for d in directions}
        while not self._stopped:
            drained, self._demand_drained = self._demand_drained, []
            for direction in drained:
                if direction.demand is not None:  # demand that came back while it drained starts it again
                    await self._act_on_demand(direction, direction.demand.drained())
            for direction in directions:
                if direction.queue not in todo or direction.demand is None or self._stopped:
                    continue
                try:
                    if channel is None or not channel.is_open:
                        channel = await self._dest_conn.channel()
                    consumers: Optional[int] = (await channel.queue_declare(direction.queue, passive=True)).consumer_count
                    if consumers:  # less the bridges' own (their marks)
                        try:
                            marks = (await channel.queue_declare(mark_queue(direction.queue), passive=True)).consumer_count
                        except NotFound:
                            marks = 0
                            channel = None
                        consumers = max(consumers - marks, 0)
                except NotFound:
                    consumers = None
                    channel = None
                except AMQPError as exc:  # the destination is away: nothing known, nothing changes
                    log.debug("demand for %r: %s", direction.queue, exc)
                    continue
                await self._act_on_demand(direction, direction.demand.observed(consumers))
            todo = set()
            wake.clear()
            if not self._demand_queues and not self._demand_drained:
                try:
                    await asyncio.wait_for(wake.wait(), self.demand_interval)
                except asyncio.TimeoutError:
                    todo = {d.queue for d in directions}
            todo |= self._demand_queues
            self._demand_queues = set()

    async def _act_on_demand(self, direction: Direction, action: Optional[str]) -> None:
        demand = direction.demand
        if self._stopped:
            return
        if action is START and demand is not None:
            log.info("%s: %d consumer(s) on %r at the destination: forwarding", direction.label, demand.consumers,
                     direction.queue)
            try:
                await direction.start_consuming()
            except BridgeError as exc:
                if not isinstance(exc.__cause__, AMQPConnectionError):
                    raise
                log.warning("%s: consuming from %r: %s: trying again at the next look", direction.label,
                            direction.queue, exc)
                demand.start_failed()
        elif action is STOP:
            log.info("%s: no consumer on %r at the destination: stopping (what was received is forwarded)",
                     direction.label, direction.queue)
            await direction.pause_consuming()

    async def _refuse_loops(self) -> None:
        """ConfigurationLoop when a direction's destination routes into a queue the bridge
        consumes and does not own: its own source on the same broker and vhost, or with
        ``duplex`` the other direction's (see ``loops.py``).  Where the exchange's bindings
        cannot be read, the direction publishes a probe at start (``Direction.probe``)."""
        same = await _same_broker_probe(self._src_conn, self._dest_conn)
        if same is None:  # could not probe: by address and cluster name
            same = same_broker(await _endpoint(self._src_conn), await _endpoint(self._dest_conn))
        where = f"{_display(self.src)} and {_display(self.dest)} are the same broker and vhost"
        if self.duplex and same:
            raise ConfigurationLoop(f"loop: {where}, and --duplex forwards queue {self.reverse_queue!r} back onto it")
        owned = self.src_exchange is not None
        forward, reverse = self.directions[0], self.directions[1] if self.duplex else None
        # (direction, the queue it must not route into, the connection of the broker where both live, why)
        checks: list[tuple[Direction, str, Any, str]] = []
        if same and not owned:
            checks.append((forward, forward.queue, self._src_conn, where))
        if reverse is not None and not owned:
            checks.append((forward, reverse.queue, self._dest_conn,
                           f"--duplex: on {_display(self.dest)} the bridge forwards queue {reverse.queue!r} back to the source"))
            checks.append((reverse, forward.queue, self._src_conn,
                           f"--duplex: on {_display(self.src)} the bridge forwards queue {forward.queue!r} to the destination"))
        for direction, queue, connection, why in checks:
            exchange, key = direction.exchange, direction.routing_key
            bindings = types = None
            if exchange and self.management_port is not None:
                found = await asyncio.to_thread(_exchange_graph, connection.params, exchange, self.management_port)
                if found is None:
                    log.warning("%s: could not read the bindings of exchange %r from the management API (port %d): %s",
                                direction.label, exchange, self.management_port,
                                "a probe message looks for a loop through them" if self.probe else
                                "a loop through them is found when a message comes back (the bridge stops, the "
                                "message stays)")
                else:
                    types, bindings = found
            loop = find_loop(queue=queue, exchange=exchange, routing_key=key, exchange_types=types or {},
                             bindings=bindings)
            if loop is not None:
                raise ConfigurationLoop(f"loop: {why}: {loop}")
            if exchange and bindings is None:
                direction.probe = self.probe  # with each message's own key: probed with "" (fanout, headers, #)
                self._unseen_routes[direction.label] = f"the bindings of exchange {exchange!r} could not be read"
        if any(d.probe for d in self.directions):
            self.probe_token = uuid.uuid4().hex

    def route_hint(self, direction: Direction) -> str:
        """What the start knew of the routes of ``direction`` (for the loop's line)."""
        return self._unseen_routes.get(direction.label, "")

    def _direction_done(self, task: "asyncio.Task[None]") -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._failure is None:
            self._failure = error
            # A loop is reported by wait() (the command's one line); other failures here too.
            log.log(logging.INFO if isinstance(error, ConfigurationLoop) else logging.ERROR, "bridge failed: %s", error)
        if (error is not None or not self._stopped) and self._finished is not None:
            self._finished.set()

    async def _watchdog(self) -> None:
        interval = self.stats_interval
        next_stats = time.monotonic() + interval if interval else None
        while True:
            await asyncio.sleep(0.25 if interval is None else min(0.25, interval))
            for direction in self.directions:
                if direction.forwarder is not None:
                    direction.forwarder.counters.rate()  # a sample for msg/s
                ended = direction.consumer_ended
                if ended is not None and self._failure is None:
                    self._failure = ended
                    log.error("bridge failed: the consumer on %r ended: %s", direction.queue, ended)
                    if self._finished is not None:
                        self._finished.set()
            if next_stats is not None and time.monotonic() >= next_stats:
                next_stats += interval  # type: ignore[operator]
                for direction in self.directions:
                    log.info("%s (queue %r): %s", direction.label, direction.queue, direction.stats().line())
                if self.on_stats is not None:
                    try:
                        self.on_stats(self)
                    except Exception:  # noqa: BLE001 - a display must not stop the bridge
                        log.exception("on_stats callback failed")

    def stats(self) -> BridgeStats:
        """The counters summed over the directions (see :class:`BridgeStats`)."""
        total = BridgeStats()
        for direction in self.directions:
            total = total + direction.stats()
        return total

    async def wait(self) -> None:
        """Until the bridge fails (raises :class:`BridgeFailed`) or is stopped."""
        if self._finished is None:
            raise BridgeError("the bridge was not started")
        await self._finished.wait()
        self._raise_failure()

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is None:
            return
        if isinstance(failure, BridgeError):
            raise failure
        raise BridgeFailed(f"the bridge stopped: {failure}") from failure

    async def stop(self, timeout: Optional[float] = 60.0) -> None:
        """Stop consuming, forward what was received, wait for its confirms and ack it,
        then close.  When it returns, no message is acked at the source that was not
        forwarded, nor forwarded and left unacked -- unless ``timeout`` ran out first
        (logged): those are left unacked, so the source delivers them again."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self._demand_task is not None:  # no start on demand while stopping; one under way completes
                if self._demand_wake is not None:
                    self._demand_wake.set()
                done, _ = await asyncio.wait({self._demand_task}, timeout=10)
                if not done:
                    self._demand_task.cancel()
                    await asyncio.wait({self._demand_task})
            for direction in self.directions:
                await direction.stop_consuming()
            tasks = [d.task for d in self.directions if d.task is not None and not d.task.done()]
            if tasks:
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                if pending:
                    left = sum(d.forwarder.unsettled for d in self.directions if d.forwarder is not None)
                    log.warning("stop: %d messages were still unsettled after %s s; the source delivers them again",
                                left, timeout)
                    for task in pending:
                        task.cancel()
            if self.delete_subscription:
                for direction in self.directions:
                    try:
                        await direction.delete_subscription()
                    except AMQPError as exc:
                        log.warning("%s: deleting the bridge's queue %r: %s", direction.label, direction.queue, exc)
        finally:
            if self._watch is not None:
                self._watch.cancel()
            await self._close_connections()
            if self._finished is not None:
                self._finished.set()
        log.info("bridge stopped: %s", self.stats().line())

    async def _close_connections(self) -> None:
        if self._shared_connections:  # the connections stay: only this bridge's channels go
            for direction in self.directions:
                await direction.close_channels()
            return
        for connection in (self._dest_conn, self._src_conn):
            await _close_quietly(connection)

    async def __aenter__(self) -> "Bridge":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
