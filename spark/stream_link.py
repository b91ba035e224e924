"""One stream-protocol connection for one Spark task, driven in the task's own thread.

A Spark task reads one offset range of one stream, or writes one partition, and ends: it
needs no recovery (Spark runs a failed task again), no thread of its own, and no Python
object per message.  ``TaskLink`` is that: a blocking socket driven over the stream
client's sans-IO core (:mod:`amqwire.client.stream.protocol`), which runs the handshake,
numbers the requests and turns frames into events.  Chunks come as the core's
``Delivered`` events (the chunk's bytes, for the Cython builder as they are); the bulk
Publish frames a sink task encodes from Arrow are written as they are, with
:meth:`TaskLink.send`.

:meth:`TaskLink.open` places the link as the stream client places its members: a
publisher on the stream's leader, a consumer on a replica when one is reachable (else the
leader), from the Metadata the first reachable URL gives.
"""
from __future__ import annotations

import logging
import random
import select
import socket
import ssl
import time
from collections import deque
from typing import Any, Callable, Optional, Sequence

from amqwire.client.connect import open_socket
from amqwire.client.errors import AMQPConnectionError, ConnectionLost, OperationTimeout
from amqwire.client.stream import protocol as proto
from amqwire.client.stream.errors import StreamConnectionClosed, StreamNotAvailable, response_error
from amqwire.client.stream.url import StreamParameters

__all__ = ["TaskLink"]

log = logging.getLogger("amqwire.spark")

_READ_SIZE = 1 << 18
_NO_LEADER = 0xFFFF


class TaskLink:
    """A blocking stream-protocol connection (see the module's text).  Not thread-safe:
    one task's thread drives it."""

    def __init__(self, params: StreamParameters, *, timeout: float = 30.0, ssl_context: Any = None) -> None:
        self.params = params
        self.timeout = timeout
        self._core = proto.StreamProtocol(params.username, params.password, params.vhost,
                                          auth_mechanism=params.auth_mechanism, frame_max=params.frame_max,
                                          heartbeat=params.heartbeat,
                                          client_properties={"connection_name": "amqwire spark task"})
        self._events: deque[Any] = deque()
        self._buffer = bytearray(_READ_SIZE)
        self._view = memoryview(self._buffer)
        self._last_write = time.monotonic()
        self._sock: Optional[socket.socket] = None
        self.heartbeat = 0  # until Tune says
        self.frame_max = params.frame_max
        sock = open_socket(params, ssl_context)
        self._sock = sock
        try:
            self._core.initiate()
            self._flush()
            done = self._handshake(time.monotonic() + (params.connection_timeout or timeout))
        except BaseException:
            self._abort()
            raise
        self.frame_max = done.frame_max
        self.heartbeat = done.heartbeat
        host = done.connection_properties.get("advertised_host")
        port = done.connection_properties.get("advertised_port")
        #: The node as it advertises itself (what Metadata names); where it was reached until known.
        self.node = (host, int(port)) if host and port and port.isdigit() else (params.host, params.port)

    def __repr__(self) -> str:
        return f"<TaskLink {self.params} node {self.node[0]}:{self.node[1]}>"

    # ------------------------------------------------------------------------ placing

    @classmethod
    def open(cls, parameters: Sequence[StreamParameters], stream: str, *, leader: bool, timeout: float = 30.0,
             ssl_context: Any = None) -> "TaskLink":
        """A link for a publisher on ``stream`` (``leader``) or a consumer of it (a
        replica when one is reachable, else the leader): the first URL that answers, moved
        to the right node when it is another.  Raises the typed error of the stream's
        Metadata (StreamDoesNotExist ...), or AMQPConnectionError naming every URL tried."""
        link = cls._first(parameters, timeout, ssl_context)
        try:
            brokers, entry = link.metadata(stream)
        except BaseException:
            link.close()
            raise
        leader_node = brokers.get(entry.leader) if entry.leader != _NO_LEADER else None
        replicas = [brokers[ref] for ref in entry.replicas if ref in brokers]
        random.shuffle(replicas)
        # a publisher needs the leader; a consumer takes a replica, else the leader
        where: list[tuple[str, int]] = [] if leader else list(replicas)
        if leader_node is not None:
            where.append(leader_node)
        if not where:
            link.close()
            raise StreamNotAvailable(0x06, "metadata", stream)
        if link.node == where[0] or (not leader and link.node in replicas):
            return link
        for node in where:
            if node == link.node:
                return link
            try:
                moved = cls(link.params.replace(host=node[0], port=node[1]), timeout=timeout, ssl_context=ssl_context)
            except (OSError, AMQPConnectionError, TimeoutError) as exc:
                log.info("stream %r: node %s:%d is not reachable (%s); trying the next", stream, node[0], node[1], exc)
                continue
            if moved.node != node:  # a load balancer led elsewhere
                moved.close()
                continue
            link.close()
            return moved
        link.close()
        raise AMQPConnectionError(f"stream {stream!r}: none of its nodes ({', '.join(f'{h}:{p}' for h, p in where)}) "
                                  f"is reachable; set stream.advertised_host/port on the nodes if clients reach them "
                                  f"by other names")

    @classmethod
    def _first(cls, parameters: Sequence[StreamParameters], timeout: float, ssl_context: Any) -> "TaskLink":
        errors = []
        for params in parameters:
            try:
                return cls(params, timeout=timeout, ssl_context=ssl_context)
            except (OSError, AMQPConnectionError, TimeoutError) as exc:
                errors.append(f"{params}: {exc or type(exc).__name__}")
        raise AMQPConnectionError("could not connect: " + "; ".join(errors))

    def metadata(self, stream: str) -> tuple[dict[int, tuple[str, int]], Any]:
        """(broker reference -> (host, port), the stream's entry); its error when it has one."""
        reply = self.request(lambda core: core.metadata([stream]), "metadata", stream)
        brokers = {broker.reference: (broker.host, broker.port) for broker in reply.brokers}
        for entry in reply.streams:
            if entry.stream == stream:
                if entry.response_code != proto.OK:
                    raise response_error(entry.response_code, "metadata", stream)
                return brokers, entry
        raise response_error(0x02, "metadata", stream)

    # ------------------------------------------------------------------------ requests

    def request(self, build: Callable[[proto.StreamProtocol], int], what: str, subject: str = "") -> Any:
        """Send a request and read until its response: the response command, or the typed
        error of its code.  Other events read meanwhile wait for :meth:`poll`."""
        correlation = build(self._core)
        self._flush()
        deadline = time.monotonic() + self.timeout
        reply = None
        while reply is None:
            for event in self._read(deadline, what):
                if type(event) is proto.Reply and event.correlation_id == correlation:
                    reply = event
                else:
                    self._keep(event)  # everything of the read, the events after the reply too
            if reply is None and time.monotonic() >= deadline:
                raise OperationTimeout(what, self.timeout)
        if reply.code != proto.OK:
            raise response_error(reply.code, what, subject)
        return reply.command

    def send_now(self, build: Callable[[proto.StreamProtocol], Any]) -> None:
        """A command without a response (Credit, StoreOffset), written now."""
        build(self._core)
        self._flush()

    def credit(self, subscription_id: int, credit: int) -> None:
        self._core.credit(subscription_id, credit)
        self._flush()

    def send(self, data: Any) -> None:
        """Frames encoded elsewhere (Publish), written as they are.  While the socket takes
        no more, what the broker sends (confirms) is read and kept for :meth:`poll`: a
        broker blocked on writing confirms to a client that does not read could otherwise
        stop reading, and both would wait for ever."""
        self._flush()  # what the core holds goes first
        sock = self._sock
        if sock is None:
            raise ConnectionLost(f"{self.params}: the connection is closed")
        view = memoryview(data).cast("B")
        deadline = time.monotonic() + self.timeout
        sock.settimeout(0.0)
        try:
            while view:
                try:
                    sent = sock.send(view)
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    sent = 0
                except OSError as exc:
                    self._abort()
                    raise ConnectionLost(f"writing to {self.params}: {exc}") from exc
                view = view[sent:]
                if not view:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    self._abort()
                    raise ConnectionLost(f"writing to {self.params}: the broker took no data for {self.timeout} s")
                readable, _, _ = select.select([sock], [sock], [], min(left, 1.0))
                if readable:
                    for event in self._read(time.monotonic(), "confirms"):
                        self._keep(event)
                    sock.settimeout(0.0)
        finally:
            if self._sock is not None:
                self._sock.settimeout(self.timeout)
        self._last_write = time.monotonic()

    # ------------------------------------------------------------------------ events

    def poll(self, timeout: float) -> list[Any]:
        """The events that arrive within ``timeout`` seconds (at most one read; [] when
        nothing came): Delivered, Confirmed, PublishErrors, CreditRefused, MetadataChanged.
        A Close from the broker raises StreamConnectionClosed."""
        if self._events:
            events = list(self._events)
            self._events.clear()
            return events
        return [event for event in self._read(time.monotonic() + timeout, None) if self._usable(event)]

    def _keep(self, event: Any) -> None:
        if self._usable(event):
            self._events.append(event)

    def _usable(self, event: Any) -> bool:
        if type(event) is proto.Reply:
            log.debug("%r: a stray reply %r", self, event)
            return False
        return True

    # ------------------------------------------------------------------------ the socket

    def _handshake(self, deadline: float) -> Any:
        while True:
            for event in self._read(deadline, "the handshake"):
                if type(event) is proto.HandshakeDone:
                    return event
                if type(event) is proto.HandshakeFailed:
                    raise event.error
            if time.monotonic() >= deadline:
                raise AMQPConnectionError(f"handshake with {self.params} timed out")

    def _read(self, deadline: float, what: Optional[str]) -> list[Any]:
        """One read (waiting until ``deadline``) turned into events; [] on a timeout."""
        sock = self._sock
        if sock is None:
            raise ConnectionLost(f"{self.params}: the connection is closed")
        self._beat()
        left = deadline - time.monotonic()
        sock.settimeout(max(left, 0.001))
        try:
            n = sock.recv_into(self._buffer)
        except socket.timeout:
            return []
        except OSError as exc:
            self._abort()
            raise ConnectionLost(f"reading from {self.params}: {exc}") from exc
        if n == 0:
            self._abort()
            raise ConnectionLost(f"the broker at {self.params} closed the socket"
                                 + (f" (waiting for {what})" if what else ""))
        events = self._core.receive(self._view[:n])
        if self._core.pending_output:
            self._flush()
        for event in events:
            if type(event) is proto.BrokerClosed:
                self._abort()
                raise StreamConnectionClosed(event.code, event.reason, str(self.params))
        return events

    def _beat(self) -> None:
        """A heartbeat when nothing was written for half the interval (the broker closes a
        connection it hears nothing from)."""
        if self.heartbeat and time.monotonic() - self._last_write > self.heartbeat / 2:
            self._core.send_heartbeat()
            self._flush()

    def _flush(self) -> None:
        for data in self._core.buffers_to_send():
            self._write(data)

    def _write(self, data: Any) -> None:
        sock = self._sock
        if sock is None:
            raise ConnectionLost(f"{self.params}: the connection is closed")
        sock.settimeout(self.timeout)
        try:
            sock.sendall(data)
        except OSError as exc:
            self._abort()
            raise ConnectionLost(f"writing to {self.params}: {exc}") from exc
        self._last_write = time.monotonic()

    def _abort(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
            self._core.connection_lost()

    def close(self) -> None:
        """Close with the protocol's Close (briefly waiting for its response); safe twice."""
        if self._sock is None:
            return
        try:
            if self._core.state is proto.LinkState.OPEN:
                saved, self.timeout = self.timeout, min(self.timeout, 2.0)
                try:
                    self.request(lambda core: core.close(proto.OK, "done"), "close")
                finally:
                    self.timeout = saved
        except Exception as exc:  # the task's outcome is decided: a failing close adds nothing
            log.debug("closing %r: %r", self, exc)
        finally:
            self._abort()
