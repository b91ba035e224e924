"""The stream protocol's sans-IO core: bytes in, events out; calls in, bytes out.  No sockets.

One ``StreamProtocol`` per socket.  It runs the handshake by itself (PeerProperties, SASL
PLAIN or EXTERNAL, Tune, Open), numbers requests (correlation ids) and hands each response
back as a ``Reply`` to the request that asked; it allocates publisher and subscription ids
(0-255 each, per connection), answers the broker's Close and Heartbeat, and turns what the
broker sends unasked into events: ``Confirmed``, ``PublishErrors``, ``Delivered``,
``MetadataChanged``, ``CreditRefused``, ``BrokerClosed``.  What the client writes queues
in ``buffers_to_send()``.  The frames themselves are the codec's
(``amqwire.codec.stream.frames``); this module never packs a byte.

Only commands RabbitMQ 3.10 knows are ever sent: 3.10 closes the connection of a client
that sends one it does not know (``UnknownFrame``).
"""
from __future__ import annotations

import enum
import logging
from typing import Any, Optional

from amqwire.codec.stream import frames as F

from ..errors import InvalidStateError
from .errors import response_error

__all__ = [
    "StreamProtocol", "LinkState", "Reply", "HandshakeDone", "HandshakeFailed", "Confirmed", "PublishErrors",
    "Delivered", "MetadataChanged", "CreditRefused", "BrokerClosed", "OK", "negotiate",
    "PUBLISHER_IDS", "SUBSCRIPTION_IDS",
]

log = logging.getLogger("amqwire.client.stream")

OK = 0x01
#: The largest frame read from the broker (a chunk): a bound on memory, 512 MiB.
MAX_FRAME_READ = 512 << 20
#: What a Publish frame holds besides its messages (size, key, version, publisher id, count),
#: and each message besides its bytes (publishing id, size; a bare body's data section header).
PUBLISH_FRAME_OVERHEAD = 13
PUBLISH_MESSAGE_OVERHEAD = 8 + 4 + 8
PUBLISHER_IDS = 256  # a publisher id is a uint8
SUBSCRIPTION_IDS = 256  # as is a subscription id
_MAX_CORRELATION = 0xFFFFFFFF
#: What the client tells the broker about itself (PeerProperties), shown by the management UI.
CLIENT_PROPERTIES = {"product": "amqwire", "platform": "Python", "copyright": "MIT licence",
                     "information": "https://github.com/amqwire"}


class LinkState(enum.Enum):
    """Where the core is in the protocol (the link's lifecycle is the session's)."""

    HANDSHAKE = "handshake"
    OPEN = "open"
    CLOSING = "closing"  # Close sent, its response not read yet
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


class Reply:
    """The broker's response to request ``correlation_id``: ``code`` (a response code,
    OK = 1) and the response ``command`` (its other fields)."""

    __slots__ = ("correlation_id", "code", "command")

    def __init__(self, correlation_id: int, code: int, command: Any) -> None:
        self.correlation_id = correlation_id
        self.code = code
        self.command = command

    def __repr__(self) -> str:
        return f"Reply({self.correlation_id}, {self.code}, {self.command!r})"


class HandshakeDone:
    """The connection is open: the negotiated ``frame_max`` and ``heartbeat``, what the broker
    said of itself (``server_properties``) and of the connection (``connection_properties``:
    ``advertised_host``, ``advertised_port``)."""

    __slots__ = ("frame_max", "heartbeat", "server_properties", "connection_properties")

    def __init__(self, frame_max: int, heartbeat: int, server_properties: dict[str, str],
                 connection_properties: dict[str, str]) -> None:
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.server_properties = server_properties
        self.connection_properties = connection_properties


class HandshakeFailed:
    """The broker refused the login or the virtual host: ``error`` (a typed response error)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Confirmed:
    """The broker stored (and replicated) the messages ``publishing_ids`` of ``publisher_id``."""

    __slots__ = ("publisher_id", "publishing_ids")

    def __init__(self, publisher_id: int, publishing_ids: list[int]) -> None:
        self.publisher_id = publisher_id
        self.publishing_ids = publishing_ids


class PublishErrors:
    """The broker refused messages of ``publisher_id``: ``errors``, (publishing id, code) pairs."""

    __slots__ = ("publisher_id", "errors")

    def __init__(self, publisher_id: int, errors: list[tuple[int, int]]) -> None:
        self.publisher_id = publisher_id
        self.errors = errors


class Delivered:
    """A chunk for ``subscription_id`` (the Osiris chunk's bytes, not copied out)."""

    __slots__ = ("subscription_id", "chunk")

    def __init__(self, subscription_id: int, chunk: Any) -> None:
        self.subscription_id = subscription_id
        self.chunk = chunk


class MetadataChanged:
    """MetadataUpdate: ``stream`` is no longer served here (``code``: 0x06 stream not
    available: deleted, or its leader moved); the broker dropped this connection's
    publishers and subscriptions of it."""

    __slots__ = ("stream", "code")

    def __init__(self, stream: str, code: int) -> None:
        self.stream = stream
        self.code = code


class CreditRefused:
    """The broker answered a Credit (it only does so for an error, e.g. an unknown subscription)."""

    __slots__ = ("subscription_id", "code")

    def __init__(self, subscription_id: int, code: int) -> None:
        self.subscription_id = subscription_id
        self.code = code


class BrokerClosed:
    """The broker closed the connection (its Close is answered already)."""

    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


def negotiate(client: int, server: int) -> int:
    """Tune's rule for frame_max and heartbeat: 0 means no limit, else the smaller value."""
    if client == 0 or server == 0:
        return max(client, server)
    return min(client, server)


class _IdPool:
    """Ids 0 .. size-1, the lowest free one first."""

    __slots__ = ("_used", "_size", "_what")

    def __init__(self, size: int, what: str) -> None:
        self._used: set[int] = set()
        self._size = size
        self._what = what

    def take(self) -> int:
        for candidate in range(self._size):
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate
        raise InvalidStateError(f"all {self._size} {self._what} ids of the connection are in use")

    def release(self, value: int) -> None:
        self._used.discard(value)

    def __len__(self) -> int:
        return len(self._used)


class StreamProtocol:
    """One socket's worth of the stream protocol (see the module's text)."""

    __slots__ = (
        "state", "username", "password", "vhost", "auth_mechanism", "frame_max", "heartbeat", "server_properties",
        "connection_properties", "_parser", "_out", "pending_output", "bytes_sent", "_correlation", "_handshake",
        "_handshake_ids", "_client_properties", "_publishers", "_subscriptions", "_close_id", "_requests",
    )

    def __init__(
        self,
        username: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        *,
        auth_mechanism: str = "PLAIN",
        frame_max: int = 1048576,
        heartbeat: int = 60,
        client_properties: Optional[dict[str, str]] = None,
    ) -> None:
        self.state = LinkState.HANDSHAKE
        self.username = username
        self.password = password
        self.vhost = vhost
        self.auth_mechanism = auth_mechanism
        self.frame_max = frame_max  # what the client asks; negotiated by Tune
        self.heartbeat = heartbeat
        self.server_properties: dict[str, str] = {}
        self.connection_properties: dict[str, str] = {}
        self._client_properties = dict(CLIENT_PROPERTIES, **(client_properties or {}))
        # A bound on memory, not Tune's frame_max: RabbitMQ holds what it receives to
        # frame_max, not the Deliver frames it sends (a chunk gathers what publishers wrote
        # meanwhile; 3.10.8 sent 10 MB frames with a frame_max of 1 MiB).
        self._parser = F.StreamParser(MAX_FRAME_READ, sender="server")
        self._out: list[Any] = []
        self.pending_output = 0
        self.bytes_sent = 0
        self._correlation = 0
        self._handshake = "peer-properties"
        self._handshake_ids: dict[int, str] = {}
        self._publishers = _IdPool(PUBLISHER_IDS, "publisher")
        self._subscriptions = _IdPool(SUBSCRIPTION_IDS, "subscription")
        self._close_id = -1
        self._requests: dict[int, str] = {}  # correlation id -> what was asked (for the error of a stray reply)

    # output ----------------------------------------------------------------------------------

    def _send(self, frame: Any) -> None:
        self._out.append(frame)
        self.pending_output += len(frame)

    def buffers_to_send(self) -> list[Any]:
        """What to write, in order; the core forgets it."""
        out = self._out
        if not out:
            return out
        self._out = []
        self.bytes_sent += self.pending_output
        self.pending_output = 0
        return out

    def send_heartbeat(self) -> None:
        if self.state is LinkState.OPEN:
            self._send(F.Heartbeat().encode())

    def _next_correlation(self) -> int:
        self._correlation = self._correlation % _MAX_CORRELATION + 1
        return self._correlation

    # the handshake -----------------------------------------------------------------------------

    def initiate(self) -> None:
        """Start the handshake (the first bytes of a new socket)."""
        correlation = self._next_correlation()
        self._handshake_ids[correlation] = "peer_properties"
        self._send(F.PeerProperties(correlation, self._client_properties).encode())

    def _handshake_reply(self, step: str, command: Any, events: list[Any]) -> None:
        code = command.response_code
        if step == "peer_properties":
            if code != OK:
                events.append(HandshakeFailed(response_error(code, "peer_properties")))
                return
            self.server_properties = dict(command.properties)
            correlation = self._next_correlation()
            self._handshake_ids[correlation] = "sasl_handshake"
            self._send(F.SaslHandshake(correlation).encode())
        elif step == "sasl_handshake":
            mechanisms = list(command.mechanisms)
            if code != OK or self.auth_mechanism not in mechanisms:
                error = response_error(code if code != OK else 0x07, "sasl_handshake", self.auth_mechanism)
                events.append(HandshakeFailed(error))
                return
            if self.auth_mechanism == "PLAIN":
                response = b"\x00" + self.username.encode() + b"\x00" + self.password.encode()
            else:  # EXTERNAL: the TLS client certificate says who
                response = b""
            correlation = self._next_correlation()
            self._handshake_ids[correlation] = "sasl_authenticate"
            self._send(F.SaslAuthenticate(correlation, self.auth_mechanism, response).encode())
        elif step == "sasl_authenticate":
            if code != OK:
                subject = self.username if self.auth_mechanism == "PLAIN" else "EXTERNAL"
                events.append(HandshakeFailed(response_error(code, "sasl_authenticate", subject)))
            # OK: the broker sends Tune next
        elif step == "open":
            if code != OK:
                events.append(HandshakeFailed(response_error(code, "open", self.vhost)))
                return
            self.connection_properties = dict(command.properties or {})
            self.state = LinkState.OPEN
            events.append(HandshakeDone(self.frame_max, self.heartbeat, self.server_properties,
                                        self.connection_properties))

    def _tune(self, command: Any) -> None:
        self.frame_max = negotiate(self.frame_max, command.frame_max)
        self.heartbeat = negotiate(self.heartbeat, command.heartbeat)
        self._send(F.TuneResponse(self.frame_max, self.heartbeat).encode())
        correlation = self._next_correlation()
        self._handshake_ids[correlation] = "open"
        self._send(F.Open(correlation, self.vhost).encode())

    # input -------------------------------------------------------------------------------------

    def receive(self, data: Any) -> list[Any]:
        """What ``data`` (any slice of the byte stream) brings, as events.  Raises the
        codec's ``StreamFrameError`` for bytes that are not the stream protocol."""
        if self.state is LinkState.CLOSED:
            return []
        commands: list[Any] = self._parser.feed(data)
        if not commands:
            return commands
        events: list[Any] = []
        for command in commands:
            kind = type(command)
            if kind is F.Deliver:
                events.append(Delivered(command.subscription_id, command.chunk))
            elif kind is F.PublishConfirm:
                events.append(Confirmed(command.publisher_id, command.publishing_ids))
            elif kind is F.PublishError:
                events.append(PublishErrors(command.publisher_id, list(command.errors)))
            elif kind is F.Heartbeat:
                continue
            elif kind is F.MetadataUpdate:
                events.append(MetadataChanged(command.stream, command.response_code))
            elif kind is F.CreditResponse:
                events.append(CreditRefused(command.subscription_id, command.response_code))
            elif kind is F.Tune:
                self._tune(command)
            elif kind is F.Close:  # the broker closes
                self._send(F.CloseResponse(command.correlation_id, OK).encode())
                self.state = LinkState.CLOSED
                events.append(BrokerClosed(command.code, command.reason))
                return events
            else:
                correlation = command.correlation_id
                step = self._handshake_ids.pop(correlation, None)
                if step is not None:
                    self._handshake_reply(step, command, events)
                    continue
                self._requests.pop(correlation, None)
                if correlation == self._close_id:
                    self.state = LinkState.CLOSED
                events.append(Reply(correlation, getattr(command, "response_code", OK), command))  # Metadata has none
        return events

    def connection_lost(self) -> None:
        """The socket is gone: nothing more is read or written."""
        self.state = LinkState.CLOSED
        self._out = []
        self.pending_output = 0

    # requests (each returns its correlation id; the Reply comes with it) -----------------------

    def _request(self, command: Any, what: str) -> int:
        if self.state is not LinkState.OPEN:
            raise InvalidStateError(f"{what}: the connection is {self.state}")
        self._requests[command.correlation_id] = what
        self._send(command.encode())
        return int(command.correlation_id)

    def declare_publisher(self, publisher_id: int, reference: Optional[str], stream: str) -> int:
        return self._request(F.DeclarePublisher(self._next_correlation(), publisher_id, reference or "", stream),
                             "declare_publisher")

    def delete_publisher(self, publisher_id: int) -> int:
        return self._request(F.DeletePublisher(self._next_correlation(), publisher_id), "delete_publisher")

    def query_publisher_sequence(self, reference: str, stream: str) -> int:
        return self._request(F.QueryPublisherSequence(self._next_correlation(), reference, stream),
                             "query_publisher_sequence")

    def subscribe(self, subscription_id: int, stream: str, offset_type: int, offset: int, credit: int,
                  properties: dict[str, str]) -> int:
        return self._request(F.Subscribe(self._next_correlation(), subscription_id, stream, offset_type, offset,
                                                credit, properties), "subscribe")

    def unsubscribe(self, subscription_id: int) -> int:
        return self._request(F.Unsubscribe(self._next_correlation(), subscription_id), "unsubscribe")

    def credit(self, subscription_id: int, credit: int) -> None:
        if self.state is LinkState.OPEN:
            self._send(F.Credit(subscription_id, credit).encode())

    def store_offset(self, reference: str, stream: str, offset: int) -> None:
        if self.state is not LinkState.OPEN:
            raise InvalidStateError(f"store_offset: the connection is {self.state}")
        self._send(F.StoreOffset(reference, stream, offset).encode())

    def query_offset(self, reference: str, stream: str) -> int:
        return self._request(F.QueryOffset(self._next_correlation(), reference, stream), "query_offset")

    def create_stream(self, stream: str, arguments: dict[str, str]) -> int:
        return self._request(F.Create(self._next_correlation(), stream, arguments), "create_stream")

    def delete_stream(self, stream: str) -> int:
        return self._request(F.Delete(self._next_correlation(), stream), "delete_stream")

    def metadata(self, streams: list[str]) -> int:
        return self._request(F.Metadata(self._next_correlation(), streams), "metadata")

    def close(self, code: int = OK, reason: str = "") -> int:
        """Send Close; its response ends the connection (a Reply with the returned id)."""
        correlation = self._request(F.Close(self._next_correlation(), code, reason), "close")
        self._close_id = correlation
        self.state = LinkState.CLOSING
        return correlation

    def publish(self, publisher_id: int, publishing_ids: list[int], messages: list[Any]) -> None:
        """One Publish frame: ``messages`` (AMQP 1.0 encoded) with their ids."""
        if self.state is not LinkState.OPEN:
            raise InvalidStateError(f"publish: the connection is {self.state}")
        frame = F.encode_publish(publisher_id, publishing_ids, messages)
        self._out.append(frame)
        self.pending_output += len(frame)

    def publish_bodies(self, publisher_id: int, first_id: int, bodies: list[Any]) -> None:
        """One Publish frame of bare bodies (each one AMQP 1.0 data section, encoded by the
        codec straight into the frame) with ids ``first_id``, +1, ..."""
        if self.state is not LinkState.OPEN:
            raise InvalidStateError(f"publish: the connection is {self.state}")
        frame = F.encode_publish_values(publisher_id, first_id, bodies)
        self._out.append(frame)
        self.pending_output += len(frame)

    def publish_subentries(self, publisher_id: int, entries: list[tuple[int, list[Any]]], compression: int) -> None:
        """One Publish frame of sub-entries: each (publishing id, its messages, AMQP 1.0
        encoded), compressed with ``compression`` (a COMPRESSION_* code)."""
        if self.state is not LinkState.OPEN:
            raise InvalidStateError(f"publish: the connection is {self.state}")
        frame = F.Publish(publisher_id, [(pid, F.encode_subentry(messages, compression))
                                         for pid, messages in entries]).encode()
        self._out.append(frame)
        self.pending_output += len(frame)

    # ids -----------------------------------------------------------------------------------------

    def new_publisher_id(self) -> int:
        return self._publishers.take()

    def release_publisher_id(self, publisher_id: int) -> None:
        self._publishers.release(publisher_id)

    def new_subscription_id(self) -> int:
        return self._subscriptions.take()

    def release_subscription_id(self, subscription_id: int) -> None:
        self._subscriptions.release(subscription_id)
