"""The sans-IO core amqwire.client.protocol.ConnectionProtocol, driven by scripted byte
exchanges: this file plays the broker with the codec (encoding what the broker sends,
parsing what the client sent).  No socket, no broker."""
import ast
import collections.abc
import logging
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amqwire.codec as codec
from amqwire.codec import (
    BasicAck,
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicQosOk,
    BasicReturn,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    CodecError,
    Command,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionSecure,
    ConnectionSecureOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    ExchangeDeclareOk,
    FrameWriter,
    ProtocolHeader,
    QueueDeclare,
    QueueDeclareOk,
)
from amqwire.client import protocol as proto
from amqwire.client.confirm_tracker import AckFrames, SeqnoRun
from amqwire.client.errors import AMQPError, AuthenticationError, InvalidStateError, NotFound
from amqwire.client.lifecycle import fire

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# the contract calls the channel.flow event ChannelFlow; the module names it ChannelFlowChanged
# (proto.ChannelFlow is the codec's method class there)
FLOW_EVENT = getattr(proto, "ChannelFlowChanged", None) or proto.ChannelFlow
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

SERVER_PROPERTIES = {
    "product": "RabbitMQ",
    "version": "3.10.0",
    "platform": "Erlang/OTP 24",
    "cluster_name": "rabbit@test",
    "capabilities": {
        "publisher_confirms": True,
        "exchange_exchange_bindings": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "connection.blocked": True,
        "consumer_priorities": True,
        "authentication_failure_close": True,
        "per_consumer_qos": True,
        "direct_reply_to": True,
    },
}


# --- the broker side -----------------------------------------------------------------------


class Broker:
    """Plays the server: parses what the client queued, encodes what the server sends."""

    def __init__(self, p, frame_max=131072):
        self.p = p
        self.frame_max = frame_max
        self.parser = codec.CommandParser(frame_max, expect_protocol_header=True)

    def sent(self):
        """Everything the client queued since the last call, parsed."""
        return self.parser.feed(self.p.data_to_send())

    def sent_methods(self):
        out = []
        for item in self.sent():
            assert isinstance(item, Command), item
            out.append((item.channel, item.method))
        return out

    def send(self, channel, method):
        return self.p.receive_data(method.encode(channel))

    def content_bytes(self, channel, method, properties, body, frame_max=None):
        writer = FrameWriter(frame_max or self.frame_max)
        writer.content(channel, method, properties, body)
        return writer.take()

    def send_content(self, channel, method, properties, body, frame_max=None):
        return self.p.receive_data(self.content_bytes(channel, method, properties, body, frame_max))


def of_type(events, cls):
    return [e for e in events if isinstance(e, cls)]


def one(events, cls):
    found = of_type(events, cls)
    assert len(found) == 1, (cls.__name__, events)
    return found[0]


def start_bytes(mechanisms=b"AMQPLAIN PLAIN", server_properties=None):
    if server_properties is None:
        server_properties = SERVER_PROPERTIES
    return ConnectionStart(0, 9, server_properties, mechanisms, b"en_US").encode(0)


def new_protocol(**kwargs):
    kwargs.setdefault("username", "guest")
    kwargs.setdefault("password", "guest")
    return proto.ConnectionProtocol(**kwargs)


def start(p, broker, mechanisms=b"AMQPLAIN PLAIN"):
    """initiate + connection.start; returns the client's start-ok."""
    p.initiate()
    assert broker.sent() == [ProtocolHeader(0, 9, 1)]
    assert p.receive_data(start_bytes(mechanisms)) == []
    [(channel, start_ok)] = broker.sent_methods()
    assert channel == 0 and isinstance(start_ok, ConnectionStartOk)
    return start_ok


def connect(tune=(2047, 131072, 60), vhost="/", **kwargs):
    """A protocol through the whole handshake. Returns (protocol, broker, ConnectionOpened)."""
    p = new_protocol(vhost=vhost, **kwargs)
    broker = Broker(p)
    start(p, broker)
    assert broker.send(0, ConnectionTune(*tune)) == []
    sent = broker.sent_methods()
    assert [type(m) for _, m in sent] == [ConnectionTuneOk, ConnectionOpen]
    assert sent[1][1].virtual_host == vhost
    events = broker.send(0, ConnectionOpenOk())
    opened = one(events, proto.ConnectionOpened)
    assert p.state == "open"
    return p, broker, opened


def open_channel(p, broker, channel_id=None):
    cid = p.open_channel() if channel_id is None else p.open_channel(channel_id)
    assert broker.sent_methods() == [(cid, ChannelOpen())]
    events = broker.send(cid, ChannelOpenOk())
    assert one(events, proto.ChannelOpened).channel_id == cid
    return cid


def rpc(p, broker, cid, method, reply):
    """send_method + the broker's reply; returns the events of the reply."""
    p.send_method(cid, method)
    assert broker.sent_methods() == [(cid, method)]
    return broker.send(cid, reply)


def confirm_mode(p, broker, cid):
    events = rpc(p, broker, cid, ConfirmSelect(), ConfirmSelectOk())
    reply = one(events, proto.MethodReply)
    assert reply.channel_id == cid and reply.method == ConfirmSelectOk()


def feed_fatal(p, broker, data):
    """Feed bytes the client must treat as a connection error: it either raises at once or
    reports a ConnectionClosedEvent.  Returns (exception or None, events, close sent or None)."""
    exc, events = None, []
    try:
        events = p.receive_data(data)
    except (AMQPError, CodecError) as e:  # a local error, possibly wrapping a codec error
        exc = e
    closes = [m for _, m in broker.sent_methods() if isinstance(m, ConnectionClose)]
    assert exc is not None or of_type(events, proto.ConnectionClosedEvent), events
    assert p.state in ("closing", "closed", "error")
    return exc, events, (closes[-1] if closes else None)


def assert_connection_error(p, broker, data, codes):
    exc, events, close = feed_fatal(p, broker, data)
    assert close is not None, "the client must send connection.close"
    assert close.reply_code in codes, close
    # and from now on nothing works
    with pytest.raises(InvalidStateError):
        p.open_channel()
    return exc, events, close


# --- handshake -------------------------------------------------------------------------------


def test_initiate_queues_the_protocol_header():
    p = new_protocol()
    assert p.state in ("new", "handshake")
    assert p.data_to_send() == b""
    p.initiate()
    assert p.state == "handshake"
    assert p.data_to_send() == PROTOCOL_HEADER
    assert p.data_to_send() == b""


def test_receive_nothing():
    p = new_protocol()
    p.initiate()
    assert p.receive_data(b"") == []


def test_start_ok_plain():
    p = new_protocol(username="guest", password="guest")
    start_ok = start(p, Broker(p))
    assert start_ok.mechanism == "PLAIN"
    assert start_ok.response == b"\x00guest\x00guest"
    assert start_ok.locale == "en_US"


def test_start_ok_plain_utf8_credentials():
    p = new_protocol(username="\u00fcser", password="p\u00e4ss:w@rd")
    start_ok = start(p, Broker(p))
    assert start_ok.response == b"\x00" + "\u00fcser".encode() + b"\x00" + "p\u00e4ss:w@rd".encode()


def test_start_ok_amqplain():
    p = new_protocol(username="alice", password="s3cret", auth_mechanism="AMQPLAIN")
    start_ok = start(p, Broker(p))
    assert start_ok.mechanism == "AMQPLAIN"
    # a field table without its 4-byte length prefix (what RabbitMQ, pika and py-amqp use)
    expected = codec.encode_table({"LOGIN": "alice", "PASSWORD": "s3cret"})[4:]
    assert start_ok.response == expected
    body = start_ok.response
    assert codec.decode_table(len(body).to_bytes(4, "big") + body) == {"LOGIN": "alice", "PASSWORD": "s3cret"}


def test_start_ok_amqplain_matches_py_amqp():
    from amqp import sasl  # py-amqp is in the test extra
    p = new_protocol(username="alice", password="s3cret", auth_mechanism="AMQPLAIN")
    start_ok = start(p, Broker(p))
    assert start_ok.response == sasl.AMQPLAIN("alice", "s3cret").start(None)


def test_start_ok_external():
    p = new_protocol(auth_mechanism="EXTERNAL")
    start_ok = start(p, Broker(p), mechanisms=b"PLAIN AMQPLAIN EXTERNAL")
    assert start_ok.mechanism == "EXTERNAL"
    assert start_ok.response == b""


@pytest.mark.parametrize(
    "mechanism, offered",
    [("PLAIN", b"AMQPLAIN"), ("EXTERNAL", b"PLAIN AMQPLAIN"), ("AMQPLAIN", b"PLAIN"), ("PLAIN", b"PLAINX")],
)
def test_mechanism_not_offered(mechanism, offered):
    p = new_protocol(auth_mechanism=mechanism)
    p.initiate()
    p.data_to_send()
    with pytest.raises(AuthenticationError) as info:
        p.receive_data(start_bytes(offered))
    assert mechanism in str(info.value)


def test_error_text_never_contains_the_password():
    p = new_protocol(username="bob", password="s3cr3t-pw", auth_mechanism="EXTERNAL")
    p.initiate()
    with pytest.raises(AuthenticationError) as info:
        p.receive_data(start_bytes(b"PLAIN"))
    assert "s3cr3t-pw" not in str(info.value)


def test_client_properties_capabilities():
    p = new_protocol()
    props = start(p, Broker(p)).client_properties
    caps = props["capabilities"]
    for name in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
    ):
        assert caps.get(name) is True, name
    assert props.get("product")


def test_client_properties_are_merged():
    p = new_protocol(client_properties={"connection_name": "orders-writer", "app": "x"})
    props = start(p, Broker(p)).client_properties
    assert props["connection_name"] == "orders-writer"
    assert props["app"] == "x"
    assert props["capabilities"]["publisher_confirms"] is True


def test_locale():
    p = new_protocol(locale="de_DE")
    assert start(p, Broker(p)).locale == "de_DE"


def test_connection_secure():
    challenges = []

    def on_secure(challenge):
        challenges.append(challenge)
        return b"answer:" + challenge

    p = new_protocol(on_secure=on_secure)
    broker = Broker(p)
    start(p, broker)
    assert broker.send(0, ConnectionSecure(b"challenge")) == []
    assert challenges == [b"challenge"]
    [(channel, secure_ok)] = broker.sent_methods()
    assert channel == 0 and secure_ok == ConnectionSecureOk(b"answer:challenge")
    # and the handshake goes on
    broker.send(0, ConnectionTune(2047, 131072, 60))
    assert [type(m) for _, m in broker.sent_methods()] == [ConnectionTuneOk, ConnectionOpen]


def test_connection_secure_without_a_handler():
    # PLAIN never needs a challenge; without a handler the client refuses it (or answers it)
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    try:
        broker.send(0, ConnectionSecure(b"challenge"))
    except AuthenticationError:
        assert p.state in ("closing", "closed", "error")
    else:
        assert isinstance(broker.sent_methods()[0][1], ConnectionSecureOk)


def test_empty_server_properties():
    # a broker may send an empty server-properties table; the handshake must still work
    p = new_protocol()
    broker = Broker(p)
    p.initiate()
    broker.sent()
    p.receive_data(start_bytes(server_properties={}))
    assert isinstance(broker.sent_methods()[0][1], ConnectionStartOk)
    broker.send(0, ConnectionTune(2047, 131072, 60))
    assert [type(m) for _, m in broker.sent_methods()] == [ConnectionTuneOk, ConnectionOpen]
    opened = one(broker.send(0, ConnectionOpenOk()), proto.ConnectionOpened)
    assert opened.server_properties == {}


def test_full_handshake_and_opened_event():
    p, broker, opened = connect(tune=(2047, 131072, 60), vhost="/")
    assert opened.server_properties == SERVER_PROPERTIES
    assert (opened.channel_max, opened.frame_max, opened.heartbeat) == (2047, 131072, 60)
    assert (p.channel_max, p.frame_max, p.heartbeat) == (2047, 131072, 60)
    assert p.server_properties == SERVER_PROPERTIES
    assert p.data_to_send() == b""


@pytest.mark.parametrize("vhost", ["/", "prod", "/with/slashes", "caf\u00e9"])
def test_vhost_in_connection_open(vhost):
    connect(vhost=vhost)


def tune_ok_for(server, client):
    """(tune-ok, ConnectionOpened) for server tune (channel_max, frame_max, heartbeat)
    and client settings (channel_max, frame_max, heartbeat)."""
    p = new_protocol(channel_max=client[0], frame_max=client[1], heartbeat=client[2])
    broker = Broker(p)
    start(p, broker)
    broker.send(0, ConnectionTune(*server))
    [(_, tune_ok), (_, open_)] = broker.sent_methods()
    opened = one(broker.send(0, ConnectionOpenOk()), proto.ConnectionOpened)
    return p, tune_ok, opened


# (server, client, negotiated): the lower non-zero value of both sides; 0 only if both are 0.
NEGOTIATION = [
    (60, 60, 60),
    (60, 10, 10),
    (10, 60, 10),
    (0, 60, 60),
    (60, 0, 60),
    (0, 0, 0),
]


@pytest.mark.parametrize("server, client, expected", NEGOTIATION)
def test_heartbeat_negotiation(server, client, expected):
    p, tune_ok, opened = tune_ok_for((2047, 131072, server), (2047, 131072, client))
    assert tune_ok.heartbeat == expected
    assert opened.heartbeat == expected
    assert p.heartbeat == expected


@pytest.mark.parametrize(
    "server, client, expected",
    [(2047, 2047, 2047), (100, 2047, 100), (2047, 100, 100), (0, 2047, 2047), (2047, 0, 2047), (0, 0, 0),
     (65535, 65535, 65535)],
)
def test_channel_max_negotiation(server, client, expected):
    p, tune_ok, opened = tune_ok_for((server, 131072, 60), (client, 131072, 60))
    if expected:
        assert tune_ok.channel_max == expected
        assert opened.channel_max == expected
        assert p.channel_max == expected
    else:  # no limit on either side: 0 ("no limit") or the protocol's own limit
        assert tune_ok.channel_max in (0, 65535)
        assert opened.channel_max in (0, 65535)


@pytest.mark.parametrize(
    "server, client, expected",
    [(131072, 131072, 131072), (4096, 131072, 4096), (131072, 8192, 8192), (0, 131072, 131072),
     (131072, 0, 131072), (0, 0, 0)],
)
def test_frame_max_negotiation(server, client, expected):
    p, tune_ok, opened = tune_ok_for((2047, server, 60), (2047, client, 60))
    if expected:
        assert tune_ok.frame_max == expected
        assert opened.frame_max == expected
        assert p.frame_max == expected
    else:  # no limit on either side: 0, or a size the client picks
        assert tune_ok.frame_max == 0 or tune_ok.frame_max >= 4096
        assert opened.frame_max == tune_ok.frame_max


@pytest.mark.parametrize("frame_max", [1, 512, 4095])
def test_frame_max_below_minimum_from_server(frame_max):
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    feed_fatal(p, broker, ConnectionTune(2047, frame_max, 60).encode(0))
    assert not any(isinstance(m, ConnectionOpen) for _, m in broker.sent_methods())


@pytest.mark.parametrize("frame_max", [1, 4095])
def test_frame_max_below_minimum_locally(frame_max):
    with pytest.raises(ValueError):
        new_protocol(frame_max=frame_max)


def test_negotiated_frame_max_splits_publishes():
    p, broker, _ = connect(tune=(2047, 4096, 60))
    cid = open_channel(p, broker)
    body = bytes(range(256)) * 40  # 10240 bytes: 3 body frames at frame_max 4096
    p.publish(cid, "ex", "rk", body)
    data = p.data_to_send()
    frames = codec.FrameParser(4096).feed(data)  # raises if a frame is over 4096
    assert [type(f).__name__ for f in frames] == ["MethodFrame", "HeaderFrame", "BodyFrame", "BodyFrame", "BodyFrame"]
    assert b"".join(f.data for f in frames[2:]) == body


def test_negotiated_frame_max_limits_incoming_frames():
    p, broker, _ = connect(tune=(2047, 4096, 60))
    cid = open_channel(p, broker)
    big = broker.content_bytes(cid, BasicDeliver("ctag", 1, False, "ex", "rk"), BasicProperties(), b"x" * 5000,
                               frame_max=131072)
    exc, _, close = assert_connection_error(p, broker, big, (501,))


def test_server_connection_close_during_handshake_is_auth_error():
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    close = ConnectionClose(403, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN", 0, 0)
    try:
        events = broker.send(0, close)
    except AuthenticationError as exc:
        assert "403" in str(exc) or "ACCESS_REFUSED" in str(exc)
    else:
        event = one(events, proto.ConnectionClosedEvent)
        assert event.reply_code == 403 and event.by_broker is True
    assert p.state == "closed"
    assert (0, ConnectionCloseOk()) in broker.sent_methods()


def test_server_refuses_the_protocol_with_its_header():
    p = new_protocol()
    p.initiate()
    p.data_to_send()
    with pytest.raises((AMQPError, CodecError)):
        p.receive_data(b"AMQP\x00\x00\x09\x01")
    assert p.state == "error"
    with pytest.raises(InvalidStateError):
        p.open_channel()


def test_no_method_frame_to_a_server_that_refused_the_protocol():
    # spec 4.2.2: the server answers with its header and closes the socket; it does not
    # speak 0-9-1, so the client has nothing to say in 0-9-1 (no connection.close frame)
    p = new_protocol()
    p.initiate()
    p.data_to_send()
    with pytest.raises((AMQPError, CodecError)):
        p.receive_data(b"AMQP\x00\x00\x09\x01")
    assert p.data_to_send() == b""


def test_unsupported_version_in_connection_start():
    p = new_protocol()
    broker = Broker(p)
    p.initiate()
    broker.sent()
    exc, events, close = feed_fatal(p, broker, ConnectionStart(0, 8, SERVER_PROPERTIES, b"PLAIN", b"en_US").encode(0))
    assert exc is not None
    assert not any(isinstance(m, ConnectionStartOk) for _, m in broker.sent_methods())


def test_handshake_byte_by_byte():
    p = new_protocol()
    broker = Broker(p)
    p.initiate()
    broker.sent()
    events = []
    for b in start_bytes():
        events += p.receive_data(bytes([b]))
    assert events == []
    assert isinstance(broker.sent_methods()[0][1], ConnectionStartOk)
    for b in ConnectionTune(2047, 131072, 60).encode(0) + ConnectionOpenOk().encode(0):
        events += p.receive_data(bytes([b]))
    assert len(of_type(events, proto.ConnectionOpened)) == 1
    assert p.state == "open"


# --- channel numbers -------------------------------------------------------------------------


def test_channel_numbers_are_allocated_from_one():
    p, broker, _ = connect()
    assert [open_channel(p, broker) for _ in range(3)] == [1, 2, 3]


def test_closed_channel_number_is_reused():
    p, broker, _ = connect()
    for _ in range(3):
        open_channel(p, broker)
    p.close_channel(2)
    [(cid, close)] = broker.sent_methods()
    assert cid == 2 and isinstance(close, ChannelClose) and close.reply_code == 200
    # not reusable before the broker's close-ok
    assert p.open_channel() == 4
    assert broker.sent_methods() == [(4, ChannelOpen())]
    broker.send(4, ChannelOpenOk())
    event = one(broker.send(2, ChannelCloseOk()), proto.ChannelClosedEvent)
    assert event.channel_id == 2 and event.by_broker is False and event.reply_code == 200
    assert open_channel(p, broker) == 2
    assert open_channel(p, broker) == 5


def test_channel_max_exhausted():
    p, broker, _ = connect(tune=(2, 131072, 60))
    assert open_channel(p, broker) == 1
    assert open_channel(p, broker) == 2
    with pytest.raises(AMQPError):
        p.open_channel()
    assert p.data_to_send() == b""


def test_explicit_channel_id():
    p, broker, _ = connect()
    assert open_channel(p, broker, channel_id=7) == 7
    with pytest.raises(InvalidStateError):
        p.open_channel(7)
    assert p.data_to_send() == b""
    # automatic allocation skips it
    assert [open_channel(p, broker) for _ in range(2)] == [1, 2]


def test_explicit_channel_id_while_opening():
    p, broker, _ = connect()
    cid = p.open_channel()
    broker.sent()
    with pytest.raises(InvalidStateError):
        p.open_channel(cid)


@pytest.mark.parametrize("channel_id", [0, 2048, 65536, -1])
def test_explicit_channel_id_out_of_range(channel_id):
    p, broker, _ = connect(tune=(2047, 131072, 60))
    with pytest.raises((InvalidStateError, ValueError)):
        p.open_channel(channel_id)
    assert p.data_to_send() == b""


def test_channel_open_before_handshake():
    p = new_protocol()
    with pytest.raises(InvalidStateError):
        p.open_channel()
    p.initiate()
    p.receive_data(start_bytes())
    with pytest.raises(InvalidStateError):
        p.open_channel()


# --- one outstanding synchronous request per channel ---------------------------------------------


def test_second_sync_request_refused():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.send_method(cid, QueueDeclare(queue="a"))
    with pytest.raises(InvalidStateError):
        p.send_method(cid, QueueDeclare(queue="b"))
    assert broker.sent_methods() == [(cid, QueueDeclare(queue="a"))]


def test_sync_requests_on_different_channels_are_independent():
    p, broker, _ = connect()
    c1, c2 = open_channel(p, broker), open_channel(p, broker)
    p.send_method(c1, QueueDeclare(queue="a"))
    p.send_method(c2, QueueDeclare(queue="b"))
    assert broker.sent_methods() == [(c1, QueueDeclare(queue="a")), (c2, QueueDeclare(queue="b"))]
    r2 = one(broker.send(c2, QueueDeclareOk("b", 0, 0)), proto.MethodReply)
    r1 = one(broker.send(c1, QueueDeclareOk("a", 1, 2)), proto.MethodReply)
    assert (r1.channel_id, r1.method) == (c1, QueueDeclareOk("a", 1, 2))
    assert (r2.channel_id, r2.method) == (c2, QueueDeclareOk("b", 0, 0))


def test_nowait_request_expects_no_reply():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.send_method(cid, QueueDeclare(queue="a", nowait=True))
    p.send_method(cid, QueueDeclare(queue="b"))  # allowed: nothing outstanding
    assert [m.queue for _, m in broker.sent_methods()] == ["a", "b"]


def test_reply_frees_the_channel():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    events = rpc(p, broker, cid, QueueDeclare(queue=""), QueueDeclareOk("amq.gen-1", 0, 0))
    reply = one(events, proto.MethodReply)
    assert reply.channel_id == cid
    assert reply.method == QueueDeclareOk("amq.gen-1", 0, 0)
    events = rpc(p, broker, cid, BasicQos(0, 10, False), BasicQosOk())
    assert one(events, proto.MethodReply).method == BasicQosOk()


def test_async_methods_while_a_sync_request_is_outstanding():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    broker.send_content(cid, BasicDeliver("c", 5, False, "", "a"), PROPS, b"m")
    p.send_method(cid, QueueDeclare(queue="a"))
    p.send_method(cid, BasicAck(5, False))
    p.publish(cid, "", "a", b"x")
    sent = broker.sent()
    assert [type(c.method) for c in sent] == [QueueDeclare, BasicAck, BasicPublish]


def test_ack_of_a_delivery_tag_never_delivered():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    broker.send_content(cid, BasicDeliver("c", 1, False, "", "a"), PROPS, b"m")
    p.send_method(cid, BasicAck(1, False))
    broker.sent()
    with pytest.raises(InvalidStateError):
        p.send_method(cid, BasicAck(2, False))
    assert p.data_to_send() == b""


def test_unsolicited_sync_reply_is_a_connection_error():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    assert_connection_error(p, broker, QueueDeclareOk("q", 0, 0).encode(cid), (503, 505))


def test_wrong_sync_reply_is_a_connection_error():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.send_method(cid, QueueDeclare(queue="a"))
    broker.sent()
    assert_connection_error(p, broker, ExchangeDeclareOk().encode(cid), (503, 505))


def test_method_on_a_channel_that_is_not_open_is_a_connection_error():
    p, broker, _ = connect()
    open_channel(p, broker)
    assert_connection_error(p, broker, BasicCancel("c1", True).encode(9), (503, 504))


def test_delivery_on_a_channel_that_was_never_opened():
    p, broker, _ = connect()
    open_channel(p, broker)
    deliver = broker.content_bytes(9, BasicDeliver("ctag", 1, False, "", "q"), BasicProperties(), b"x")
    try:
        events = p.receive_data(deliver)
    except (AMQPError, CodecError):
        return  # treated as a channel error (504): fine
    assert not of_type(events, proto.Message)  # or dropped: never handed out


# --- content assembly ----------------------------------------------------------------------------


PROPS = BasicProperties(
    content_type="application/json",
    delivery_mode=2,
    headers={"tenant": "acme", "attempt": 1, "nested": {"a": [1, "b"]}},
    correlation_id="c-1",
    message_id="m-1",
)


def assert_message(msg, channel, body, props=PROPS, **fields):
    assert msg.channel_id == channel
    assert msg.body == body
    assert isinstance(msg.body, bytes)
    assert msg.properties == props
    for name, value in fields.items():
        assert getattr(msg, name) == value, name


@pytest.mark.parametrize("size", [0, 1, 100, 4088, 4089, 20000])
def test_deliver_byte_by_byte(size):
    p, broker, _ = connect(tune=(2047, 4096, 60))
    cid = open_channel(p, broker)
    body = bytes((i * 7) & 0xFF for i in range(size))
    data = broker.content_bytes(cid, BasicDeliver("ctag-1", 42, True, "ex", "rk"), PROPS, body, frame_max=4096)
    events = []
    for i in range(len(data)):
        events += p.receive_data(data[i:i + 1])
    [msg] = events
    assert isinstance(msg, proto.Message)
    assert_message(msg, cid, body, consumer_tag="ctag-1", delivery_tag=42, redelivered=True,
                   exchange="ex", routing_key="rk")


def test_deliveries_in_one_chunk_on_two_channels():
    p, broker, _ = connect()
    c1, c2 = open_channel(p, broker), open_channel(p, broker)
    data = b"".join(
        broker.content_bytes(cid, BasicDeliver(f"t{cid}", tag, False, "", "q"), PROPS, b"body-%d" % tag)
        for tag, cid in [(1, c1), (1, c2), (2, c1)]
    )
    events = p.receive_data(data)
    assert [(e.consumer_tag, e.delivery_tag, e.body) for e in events] == [
        ("t1", 1, b"body-1"), ("t2", 1, b"body-1"), ("t1", 2, b"body-2")]


def test_runs_of_deliveries_in_one_read_keep_each_channels_last_tag():
    # One read: runs on two channels, a heartbeat inside a run, the broker closing channel
    # 2 between two of its deliveries (the later one is dropped), then channel 1 again.
    # The core checks a run's channel once and sets its last tag when the run ends: every
    # tag read is ackable on its own channel, none past it, and nothing of a closed channel
    # is handed out.
    p, broker, _ = connect()
    c1, c2 = open_channel(p, broker), open_channel(p, broker)
    deliver = broker.content_bytes
    data = b"".join([
        deliver(c1, BasicDeliver("t1", 1, False, "", "q"), PROPS, b"a"),
        deliver(c1, BasicDeliver("t1", 2, False, "", "q"), PROPS, b"b"),
        b"\x08\x00\x00\x00\x00\x00\x00\xce",  # a heartbeat
        deliver(c1, BasicDeliver("t1", 3, False, "", "q"), PROPS, b"c"),
        deliver(c2, BasicDeliver("t2", 1, False, "", "q"), PROPS, b"d"),
        ChannelClose(406, "PRECONDITION_FAILED", 60, 80).encode(c2),
        deliver(c2, BasicDeliver("t2", 2, False, "", "q"), PROPS, b"e"),
        deliver(c1, BasicDeliver("t1", 4, False, "", "q"), PROPS, b"f"),
    ])
    events = p.receive_data(data)
    assert [(e.channel_id, e.delivery_tag, e.body) for e in of_type(events, proto.Message)] == [
        (c1, 1, b"a"), (c1, 2, b"b"), (c1, 3, b"c"), (c2, 1, b"d"), (c1, 4, b"f")]
    assert p.channel_state(c1).last_delivery_tag == 4
    broker.sent()
    assert p.basic_ack(c1, 4, multiple=True)
    with pytest.raises(InvalidStateError):
        p.basic_ack(c1, 5)


def test_a_read_that_is_one_run_of_deliveries_comes_out_whole():
    # The hot path of consuming: a read holding only deliveries to one consumer on one
    # open channel.  It must give what the general path gives: every delivery once, in
    # order, the last tag recorded (ackable, nothing past it), the tags of a reopened
    # channel shifted by its base, and nothing of a channel being closed.
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    deliver = broker.content_bytes
    data = b"".join(deliver(cid, BasicDeliver("t", tag, False, "", "q"), PROPS, b"m%d" % tag) for tag in range(1, 201))
    events = p.receive_data(data)
    assert [(type(e), e.consumer_tag, e.delivery_tag, e.body) for e in events] == [
        (proto.Message, "t", tag, b"m%d" % tag) for tag in range(1, 201)]
    assert p.channel_state(cid).last_delivery_tag == 200
    broker.sent()
    assert p.basic_ack(cid, 200, multiple=True)
    with pytest.raises(InvalidStateError):
        p.basic_ack(cid, 201)
    # a channel reopened on a new connection goes on from its base
    reopened = p.open_channel(None, 1000)
    broker.sent()
    broker.send(reopened, ChannelOpenOk())
    events = p.receive_data(b"".join(deliver(reopened, BasicDeliver("u", tag, False, "", "q"), PROPS, b"x")
                                     for tag in (1, 2, 3)))
    assert [e.delivery_tag for e in events] == [1001, 1002, 1003]
    assert p.channel_state(reopened).last_delivery_tag == 3
    # a channel the client is closing: dropped
    p.close_channel(cid)
    broker.sent()
    assert p.receive_data(b"".join(deliver(cid, BasicDeliver("t", tag, False, "", "q"), PROPS, b"late")
                                   for tag in (201, 202))) == []


def test_get_ok():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.send_method(cid, BasicGet(queue="q"))
    broker.sent()
    events = broker.send_content(cid, BasicGetOk(7, False, "ex", "rk", 3), PROPS, b"payload")
    result = one(events, proto.GetResult)
    assert result.channel_id == cid
    msg = result.message
    assert_message(msg, cid, b"payload", delivery_tag=7, redelivered=False, exchange="ex", routing_key="rk",
                   message_count=3)
    # the request is answered: the channel takes another
    p.send_method(cid, BasicGet(queue="q"))


def test_get_ok_byte_by_byte():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.send_method(cid, BasicGet(queue="q"))
    broker.sent()
    data = broker.content_bytes(cid, BasicGetOk(1, True, "", "q", 0), PROPS, b"abc")
    events = []
    for i in range(len(data)):
        events += p.receive_data(data[i:i + 1])
    result = one(events, proto.GetResult)
    assert result.message.body == b"abc" and result.message.redelivered is True


def test_get_empty():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    events = rpc(p, broker, cid, BasicGet(queue="q"), BasicGetEmpty())
    result = one(events, proto.GetResult)
    assert result.channel_id == cid and result.message is None
    p.send_method(cid, BasicGet(queue="q"))


def test_consume_then_deliveries():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    events = rpc(p, broker, cid, BasicConsume(queue="q", consumer_tag="c1"), BasicConsumeOk("c1"))
    assert one(events, proto.MethodReply).method == BasicConsumeOk("c1")
    events = broker.send_content(cid, BasicDeliver("c1", 1, False, "", "q"), PROPS, b"m")
    assert one(events, proto.Message).consumer_tag == "c1"


# --- publisher confirms ----------------------------------------------------------------------------


def test_publish_without_confirms_returns_zero():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    assert p.publish(cid, "ex", "rk", b"x") == 0
    [cmd] = broker.sent()
    assert cmd.method == BasicPublish(0, "ex", "rk", False, False)
    assert cmd.body == b"x"


@pytest.mark.parametrize("size", [65535, 65536, 300000])
def test_large_publish_between_methods_keeps_the_order(size):
    p, broker, _ = connect(tune=(2047, 131072, 60))
    cid = open_channel(p, broker)
    body = bytes((i * 13) & 0xFF for i in range(size))
    broker.send_content(cid, BasicDeliver("c", 1, False, "", "a"), PROPS, b"m")
    p.send_method(cid, BasicAck(1, False))
    p.publish(cid, "ex", "big", body, PROPS)
    p.publish(cid, "ex", "small", b"s")
    p.publish(cid, "ex", "big2", body)
    p.send_method(cid, QueueDeclare(queue="after"))
    buffers = p.buffers_to_send() if hasattr(p, "buffers_to_send") else [p.data_to_send()]
    data = b"".join(bytes(b) for b in buffers)
    frames = codec.FrameParser(131072).feed(data)
    assert all(len(f.data) <= 131072 - 8 for f in frames if isinstance(f, codec.BodyFrame))
    commands = broker.parser.feed(data)
    assert [type(c.method).__name__ for c in commands] == [
        "BasicAck", "BasicPublish", "BasicPublish", "BasicPublish", "QueueDeclare"]
    assert [c.body for c in commands[1:4]] == [body, b"s", body]
    assert commands[1].properties == PROPS
    assert p.data_to_send() == b""


def test_publish_bytes():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.publish(cid, "ex", "rk", b"hello", PROPS, mandatory=True)
    [cmd] = broker.sent()
    assert cmd.channel == cid
    assert cmd.method == BasicPublish(0, "ex", "rk", True, False)
    assert cmd.properties == PROPS
    assert cmd.body == b"hello"


def published_in_confirm_mode(n, tokens=True):
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    confirm_mode(p, broker, cid)
    seqnos = [p.publish(cid, "ex", "rk", b"m%d" % i, token=(f"t{i + 1}" if tokens else None)) for i in range(n)]
    assert seqnos == list(range(1, n + 1))
    assert len(broker.sent()) == n
    return p, broker, cid


def confirmed(events):
    return [(e.channel_id, e.ack, list(e.seqnos), list(e.tokens)) for e in of_type(events, proto.Confirmed)]


def test_single_ack():
    p, broker, cid = published_in_confirm_mode(3)
    assert confirmed(broker.send(cid, BasicAck(1, False))) == [(cid, True, [1], ["t1"])]
    assert confirmed(broker.send(cid, BasicAck(2, False))) == [(cid, True, [2], ["t2"])]


def test_multiple_ack():
    p, broker, cid = published_in_confirm_mode(5)
    assert confirmed(broker.send(cid, BasicAck(3, True))) == [(cid, True, [1, 2, 3], ["t1", "t2", "t3"])]
    assert confirmed(broker.send(cid, BasicAck(5, True))) == [(cid, True, [4, 5], ["t4", "t5"])]


def test_multiple_nack():
    p, broker, cid = published_in_confirm_mode(4)
    assert confirmed(broker.send(cid, BasicNack(2, True, False))) == [(cid, False, [1, 2], ["t1", "t2"])]
    assert confirmed(broker.send(cid, BasicNack(3, False, False))) == [(cid, False, [3], ["t3"])]
    assert confirmed(broker.send(cid, BasicAck(4, False))) == [(cid, True, [4], ["t4"])]


def test_out_of_order_single_acks_then_multiple():
    p, broker, cid = published_in_confirm_mode(6)
    assert confirmed(broker.send(cid, BasicAck(3, False))) == [(cid, True, [3], ["t3"])]
    assert confirmed(broker.send(cid, BasicAck(1, False))) == [(cid, True, [1], ["t1"])]
    assert confirmed(broker.send(cid, BasicNack(5, False, False))) == [(cid, False, [5], ["t5"])]
    # the multiple ack covers only what is still outstanding: 2, 4 and 6, each once
    assert confirmed(broker.send(cid, BasicAck(6, True))) == [(cid, True, [2, 4, 6], ["t2", "t4", "t6"])]


def test_the_lowest_unsettled_seqno_skips_those_settled_out_of_order():
    p, broker, cid = published_in_confirm_mode(6)
    confirms = p.channel_state(cid).confirms
    broker.send(cid, BasicAck(4, False))
    assert confirms.base == 1
    broker.send(cid, BasicNack(3, True, False))  # 1..3, and 4 was settled already
    assert confirms.base == 5 and len(confirms) == 2
    assert (p.publishes_acked, p.publishes_nacked, p.publishes_returned) == (1, 3, 0)
    broker.send(cid, BasicAck(6, True))
    assert confirms.base == 7 and len(confirms) == 0 and p.publishes_acked == 3


@pytest.mark.parametrize("seed", range(20))
def test_the_confirm_tracker_settles_what_a_set_of_unconfirmed_seqnos_would(seed):
    """ConfirmTracker against the plainest model (a set): random interleavings of publishes,
    single and multiple acks (in and out of order, repeated, unknown) settle the same
    seqnos with their own tokens, each once, across the trimming of resolved slots."""
    import random

    rng = random.Random(seed)
    tracker = proto.ConfirmTracker()
    unconfirmed: set[int] = set()
    tokens_of: dict[int, str] = {}  # seqnos of add_run: their shared token
    published = 0
    for _ in range(3000):
        if rng.random() < 0.45 or not unconfirmed:
            for _ in range(rng.randint(1, 40)):
                published += 1
                assert tracker.add("t%d" % published) == published
                unconfirmed.add(published)
            if rng.random() < 0.1:  # a publish_encoded batch: one token for a run of seqnos
                count = rng.randint(0, 5)
                assert tracker.add_run("t", count) == published + 1
                tokens_of.update((published + 1 + i, "t") for i in range(count))
                unconfirmed.update(range(published + 1, published + 1 + count))
                published += count
            assert tracker
            continue
        low, high = min(unconfirmed), published
        tag = rng.randint(max(1, low - 3), high + 2)
        multiple = rng.random() < 0.4
        expected = sorted(s for s in unconfirmed if s <= tag) if multiple else ([tag] if tag in unconfirmed else [])
        seqnos, tokens = tracker.resolve(tag, multiple)
        assert list(seqnos) == expected
        assert tokens == [tokens_of.get(s, "t%d" % s) for s in expected]
        unconfirmed.difference_update(expected)
        assert len(tracker) == len(unconfirmed) and bool(tracker) == bool(unconfirmed)
        assert tracker.next_seqno == published + 1
        assert tracker.base == (min(unconfirmed) if unconfirmed else published + 1)
    seqnos, tokens = tracker.drain()
    assert seqnos == sorted(unconfirmed) and tokens == [tokens_of.get(s, "t%d" % s) for s in seqnos]
    assert len(tracker) == 0 and not tracker and tracker.next_seqno == published + 1


def _resolved(tracker, tag, multiple):
    seqnos, tokens = tracker.resolve(tag, multiple)
    return list(seqnos), tokens


@pytest.mark.parametrize("start,stop", [(1, 1), (1, 2), (5, 9), (2**40, 2**40 + 3), (7, 3)])
def test_a_seqno_run_is_the_sequence_its_range_is(start, stop):
    run, same = SeqnoRun(start, stop), range(start, max(start, stop))
    assert len(run) == len(same) and list(run) == list(same) and list(reversed(run)) == list(reversed(same))
    assert run == same and run == list(same) and run == tuple(same) and run == SeqnoRun(start, stop)
    assert run != list(same) + [0] and run != "x" and not (run == {start})
    for index in range(-len(same), len(same)):
        assert run[index] == same[index] and run.index(same[index]) == same.index(same[index])
        assert same[index] in run and run.count(same[index]) == 1
    assert run[1:] == same[1:] and (start - 1) not in run and run.count(start - 1) == 0
    if len(same) > 2:
        assert run.index(same[2], 1) == 2 and run.index(same[1], -3, -1) == 1
        with pytest.raises(ValueError):
            run.index(same[0], 1)
    with pytest.raises(IndexError):
        run[len(same)]
    assert isinstance(run, collections.abc.Sequence) and bool(run) == bool(same)
    assert pickle.loads(pickle.dumps(run)) == run and repr(run) == f"SeqnoRun({start}, {max(start, stop)})"
    with pytest.raises(TypeError):
        hash(run)


@pytest.mark.parametrize("count", [0, 1, 8, 9, 100])
def test_ack_frames_are_the_list_of_their_tuples(count):
    """A folded event's ``acks``: C values that read, compare and pickle as the list of
    (delivery_tag, multiple, end) tuples they stand for, however many frames it grew to."""
    same = [(2**63 - 1 - n if n % 3 else n, bool(n % 2), 2 * n + 1) for n in range(count)]
    frames = AckFrames(same)
    assert len(frames) == count and list(frames) == same and frames == same and frames == tuple(same)
    assert frames == AckFrames(same) and not (frames != same) and frames != same + [(1, True, 1)]
    assert frames != "x" and not (frames == {0})
    for index in range(-count, count):
        assert frames[index] == same[index]
    assert frames[1:] == same[1:] and frames[::-2] == same[::-2]
    for index in (count, -count - 1):
        with pytest.raises(IndexError):
            frames[index]
    assert isinstance(frames, collections.abc.Sequence) and bool(frames) == bool(same)
    assert pickle.loads(pickle.dumps(frames)) == same and repr(frames) == f"AckFrames({same!r})"
    with pytest.raises(TypeError):
        hash(frames)
    with pytest.raises(OverflowError):
        AckFrames([(-1, False, 0)])


def test_the_confirm_tracker_keeps_its_seqnos_when_it_cuts_its_resolved_head():
    """A long resolved head is cut from the slots while later seqnos are unresolved (one
    settled out of order among them): every seqno still maps to its own token."""
    tracker = proto.ConfirmTracker()
    for n in range(1, 10_001):
        tracker.add(n)
    assert _resolved(tracker, 7_000, False) == ([7_000], [7_000])  # out of order: marked, not cut
    assert _resolved(tracker, 5_000, True) == (list(range(1, 5_001)), list(range(1, 5_001)))  # the head is cut
    assert tracker.base == 5_001 and tracker.next_seqno == 10_001 and len(tracker) == 4_999
    assert _resolved(tracker, 7_000, False) == ([], [])  # settled before the cut: still settled
    assert _resolved(tracker, 5_001, False) == ([5_001], [5_001])
    assert _resolved(tracker, 8_000, True) == ([s for s in range(5_002, 8_001) if s != 7_000],
                                               [s for s in range(5_002, 8_001) if s != 7_000])
    assert tracker.add(10_001) == 10_001 and tracker.base == 8_001
    assert tracker.drain() == (list(range(8_001, 10_002)), list(range(8_001, 10_002)))


def test_the_confirm_tracker_gives_consecutive_seqnos_as_one_run():
    """In-order acks settle consecutive seqnos: a SeqnoRun, no int per publish; a run broken
    by a seqno settled out of order before is a list without it."""
    tracker = proto.ConfirmTracker()
    for n in range(1, 21):
        tracker.add(f"t{n}")
    seqnos, tokens = tracker.resolve(5, True)
    assert type(seqnos) is SeqnoRun and seqnos == range(1, 6) and tokens == ["t1", "t2", "t3", "t4", "t5"]
    assert tracker.resolve(6, False) == (range(6, 7), ["t6"])
    assert tracker.resolve(9, False) == (range(9, 10), ["t9"])  # out of order
    seqnos, tokens = tracker.resolve(12, True)
    assert type(seqnos) is list and seqnos == [7, 8, 10, 11, 12] and tokens == ["t7", "t8", "t10", "t11", "t12"]
    assert tracker.resolve(20, True) == (range(13, 21), [f"t{n}" for n in range(13, 21)])
    assert tracker.resolve(20, True) == (range(21, 21), [])


def test_each_seqno_resolved_exactly_once():
    p, broker, cid = published_in_confirm_mode(50)
    data = b"".join(
        [BasicAck(10, True).encode(cid), BasicAck(12, False).encode(cid), BasicNack(11, False, False).encode(cid),
         BasicAck(30, True).encode(cid), BasicNack(40, True, False).encode(cid), BasicAck(50, True).encode(cid)]
    )
    seen = []
    for _, _ack, seqnos, tokens in confirmed(p.receive_data(data)):
        assert tokens == [f"t{s}" for s in seqnos]
        seen += seqnos
    assert sorted(seen) == list(range(1, 51))
    assert len(seen) == 50


def test_the_acks_of_one_read_on_one_channel_are_one_event():
    """Consecutive basic.acks of one read on one channel come as one Confirmed (one settle
    step), ``acks`` listing each frame as it came with where its publishes end; a nack, or
    anything else between them, starts a new event."""
    p, broker, cid = published_in_confirm_mode(12)
    frames = [BasicAck(3, True), BasicAck(5, False), BasicAck(4, False), BasicNack(6, False, False),
              BasicAck(8, True), BasicAck(12, True)]
    events = p.receive_data(b"".join(frame.encode(cid) for frame in frames))
    assert confirmed(events) == [
        (cid, True, [1, 2, 3, 5, 4], ["t1", "t2", "t3", "t5", "t4"]),
        (cid, False, [6], ["t6"]),
        (cid, True, [7, 8, 9, 10, 11, 12], [f"t{s}" for s in range(7, 13)]),
    ]
    first, nack, last = events
    assert first.acks == [(3, True, 3), (5, False, 4), (4, False, 5)]
    assert (first.delivery_tag, first.multiple) == (4, False)  # the last frame's
    assert nack.acks is None and (nack.delivery_tag, nack.multiple) == (6, False)
    assert last.acks == [(8, True, 2), (12, True, 6)]
    assert (p.publishes_acked, p.publishes_nacked) == (11, 1)


def test_acks_on_other_channels_or_around_a_return_are_not_folded():
    p, broker, _ = connect()
    c1, c2 = open_channel(p, broker), open_channel(p, broker)
    confirm_mode(p, broker, c1)
    confirm_mode(p, broker, c2)
    for _ in range(3):
        p.publish(c1, "", "q", b"", token="a")
        p.publish(c2, "", "q", b"", token="b")
    p.publish(c1, "ex", "nowhere", b"lost", PROPS, mandatory=True, token="r")
    broker.sent()
    data = b"".join([BasicAck(1, False).encode(c1), BasicAck(1, False).encode(c2), BasicAck(2, False).encode(c1),
                     BasicAck(3, True).encode(c1)])
    data += broker.content_bytes(c1, BasicReturn(312, "NO_ROUTE", "ex", "nowhere"), PROPS, b"lost")
    data += BasicAck(4, False).encode(c1)
    events = p.receive_data(data)
    assert [type(e) for e in events] == [proto.Confirmed, proto.Confirmed, proto.Confirmed, proto.ReturnedMessage,
                                         proto.Confirmed]
    assert confirmed(events) == [(c1, True, [1], ["a"]), (c2, True, [1], ["b"]), (c1, True, [2, 3], ["a", "a"]),
                                 (c1, True, [4], ["r"])]
    assert events[2].acks == [(2, False, 1), (3, True, 2)]
    assert events[4].acks is None and events[4].returned == {4: events[3]}


def test_acks_folded_after_returns_of_an_earlier_read_keep_every_return():
    """Returns matched in an earlier read ride on the acks of a later one: folded into one
    event, each frame's returns are kept (the first frame's dict, then merged)."""
    p, broker, _ = connect()
    c1 = open_channel(p, broker)
    confirm_mode(p, broker, c1)
    p.publish(c1, "ex", "lost-1", b"one", PROPS, mandatory=True, token="r1")
    p.publish(c1, "", "q", b"kept", token="k")
    p.publish(c1, "ex", "lost-3", b"three", PROPS, mandatory=True, token="r3")
    p.publish(c1, "ex", "lost-4", b"four", PROPS, mandatory=True, token="r4")
    broker.sent()
    returns = p.receive_data(b"".join(
        broker.content_bytes(c1, BasicReturn(312, "NO_ROUTE", "ex", key), PROPS, body)
        for key, body in [("lost-1", b"one"), ("lost-3", b"three"), ("lost-4", b"four")]
    ))
    assert [type(e) for e in returns] == [proto.ReturnedMessage] * 3
    events = p.receive_data(b"".join([BasicAck(1, False).encode(c1), BasicAck(2, False).encode(c1),
                                      BasicAck(3, False).encode(c1), BasicAck(4, False).encode(c1)]))
    assert confirmed(events) == [(c1, True, [1, 2, 3, 4], ["r1", "k", "r3", "r4"])]
    (event,) = events
    assert event.acks == [(1, False, 1), (2, False, 2), (3, False, 3), (4, False, 4)]
    assert event.delivery_tag == 4 and event.multiple is False
    assert event.returned == {1: returns[0], 3: returns[1], 4: returns[2]}


def test_acks_folded_in_order_keep_one_run_and_out_of_order_a_list():
    """Folding in-order acks joins their runs; an ack that does not follow on (settled
    out of order) turns the event's seqnos into the list of exactly what was settled."""
    p, broker, cid = published_in_confirm_mode(10)
    (event,) = p.receive_data(b"".join([BasicAck(3, True).encode(cid), BasicAck(5, True).encode(cid)]))
    assert type(event.seqnos) is SeqnoRun and event.seqnos == range(1, 6) and event.tokens == [f"t{n}" for n in range(1, 6)]
    (event,) = p.receive_data(b"".join([BasicAck(8, False).encode(cid), BasicAck(7, True).encode(cid),
                                        BasicAck(10, True).encode(cid)]))
    assert type(event.seqnos) is list and event.seqnos == [8, 6, 7, 9, 10]
    assert event.tokens == ["t8", "t6", "t7", "t9", "t10"]
    assert event.acks == [(8, False, 1), (7, True, 3), (10, True, 5)]


def _model_confirms(publishes, reads):
    """What the core must report for ``reads`` (lists of (channel index, ack, tag, multiple))
    of ack and nack frames on channels with ``publishes`` unconfirmed each: the events, as
    (channel index, ack, seqnos, acks or None, delivery_tag, multiple), and the counts."""
    unsettled = [set(range(1, n + 1)) for n in publishes]
    events, acked, nacked = [], 0, 0
    for frames in reads:
        last = None
        for index, ack, tag, multiple in frames:
            pending = unsettled[index]
            settled = sorted(s for s in pending if s <= tag) if multiple else [tag]
            pending.difference_update(settled)
            if not settled:
                continue  # a multiple ack of what is settled already: nothing, and no fold ended
            acked, nacked = (acked + len(settled), nacked) if ack else (acked, nacked + len(settled))
            if ack and last is not None and last[0] == index and last[1]:
                seqnos, acks = last[2] + settled, last[3] or [(last[4], last[5], len(last[2]))]
                last = (index, True, seqnos, acks + [(tag, multiple, len(seqnos))], tag, multiple)
                events[-1] = last
            else:
                last = (index, ack, settled, None, tag, multiple)
                events.append(last)
    return events, acked, nacked


@st.composite
def _ack_reads(draw):
    """Reads of valid ack and nack frames on two channels: in-order and out-of-order singles,
    multiples (some covering what is settled already), nacks, cut into reads anywhere."""
    publishes = [draw(st.integers(1, 40)), draw(st.integers(0, 12))]
    unsettled = [set(range(1, n + 1)) for n in publishes]
    frames = []
    for _ in range(draw(st.integers(1, 40))):
        index = draw(st.sampled_from([i for i in (0, 1) if publishes[i]]))
        pending = unsettled[index]
        in_order = min(pending) if pending else None
        kind = draw(st.sampled_from(["next", "single", "multiple", "multiple"]))
        if kind != "multiple" and not pending:
            continue
        if kind == "next":
            tag, multiple = in_order, False
        elif kind == "single":
            tag, multiple = draw(st.sampled_from(sorted(pending))), False
        else:
            tag, multiple = draw(st.integers(1, publishes[index])), True
        pending.difference_update(s for s in list(pending) if s <= tag) if multiple else pending.discard(tag)
        frames.append((index, draw(st.booleans()) or draw(st.booleans()), tag, multiple))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(frames) - 1)), max_size=4)))
    reads = [frames[a:b] for a, b in zip([0] + cuts, cuts + [len(frames)])]
    return publishes, [read for read in reads if read]


@settings(max_examples=300, deadline=None)
@given(_ack_reads())
def test_every_read_of_acks_and_nacks_gives_what_the_model_says(case):
    """However a broker's acks and nacks fall into reads (in order or not, single or
    multiple, on two channels), the core's events (seqnos, tokens, the frames of a fold)
    and its counts are what a plain model of the frames says."""
    publishes, reads = case
    p, broker, _ = connect()
    cids = [open_channel(p, broker), open_channel(p, broker)]
    for cid in cids:
        confirm_mode(p, broker, cid)
    for cid, n in zip(cids, publishes):
        for i in range(n):
            p.publish(cid, "ex", "rk", b"m", token=(cid, i + 1))
    broker.sent()
    got = []
    for frames in reads:
        data = b"".join((BasicAck(tag, multiple) if ack else BasicNack(tag, multiple, False)).encode(cids[index])
                        for index, ack, tag, multiple in frames)
        for event in of_type(p.receive_data(data), proto.Confirmed):
            index = cids.index(event.channel_id)
            assert event.tokens == [(event.channel_id, s) for s in event.seqnos]
            got.append((index, event.ack, list(event.seqnos), event.acks, event.delivery_tag, event.multiple))
    events, acked, nacked = _model_confirms(publishes, reads)
    assert got == events
    assert (p.publishes_acked, p.publishes_nacked) == (acked, nacked)


def test_a_read_of_acks_alone_is_handled_without_the_python_loop(monkeypatch):
    """A read made only of ack/nack frames of open confirm-mode channels is handled in C
    (publish_path.core_confirm_run): _handle is never called for it."""
    p, broker, cid = published_in_confirm_mode(6)

    def refuse(self, items, events):
        raise AssertionError("_handle called for a read of acks")
    monkeypatch.setattr(proto.ConnectionProtocol, "_handle", refuse)
    events = p.receive_data(b"".join([BasicAck(2, True).encode(cid), BasicNack(3, False, True).encode(cid),
                                      BasicAck(4, False).encode(cid), BasicAck(6, True).encode(cid)]))
    assert confirmed(events) == [(cid, True, [1, 2], ["t1", "t2"]), (cid, False, [3], ["t3"]),
                                 (cid, True, [4, 5, 6], ["t4", "t5", "t6"])]
    assert (p.publishes_acked, p.publishes_nacked) == (5, 1)


def test_acks_around_other_frames_keep_the_order_of_the_read():
    """The leading acks are handled in C, the rest from the first other frame on by _handle
    (acks after it included): the events come in the order of the read."""
    p, broker, cid = published_in_confirm_mode(4)
    events = p.receive_data(b"".join([BasicAck(1, False).encode(cid), BasicCancel("gone", True).encode(cid),
                                      BasicAck(3, True).encode(cid), BasicAck(4, False).encode(cid)]))
    assert [type(e) for e in events] == [proto.Confirmed, proto.ConsumerCancelled, proto.Confirmed]
    assert confirmed(events) == [(cid, True, [1], ["t1"]), (cid, True, [2, 3, 4], ["t2", "t3", "t4"])]


def test_a_bad_ack_after_good_ones_in_one_read_settles_those_and_closes():
    """Acks before a bad one in the same read are settled (their events ride on the error or
    come back); the bad one closes the connection with 406; what follows is not settled."""
    p, broker, cid = published_in_confirm_mode(4)
    exc, events, close = feed_fatal(p, broker, b"".join([BasicAck(1, False).encode(cid), BasicAck(99, False).encode(cid),
                                                         BasicAck(4, True).encode(cid)]))
    if exc is not None:
        events = getattr(exc, "events", None) or events
    assert confirmed(events) == [(cid, True, [1], ["t1"])]
    assert close.reply_code == 406 and "delivery tag 99" in close.reply_text
    assert sorted(token for pairs in p.drain_unconfirmed().values() for _, token in pairs) == ["t2", "t3", "t4"]


@pytest.mark.parametrize("tag", [2**63, 2**64 - 1])
def test_an_ack_beyond_any_seqno_is_a_precondition_failed_not_an_overflow(tag):
    p, broker, cid = published_in_confirm_mode(2)
    exc, events, close = feed_fatal(p, broker, BasicAck(tag, True).encode(cid))
    assert close.reply_code == 406
    assert close.reply_text == f"basic.ack for delivery tag {tag} on channel {cid}, which is not an unconfirmed publish"


def test_acks_on_a_closing_channel_are_discarded_and_on_channel_zero_refused():
    p, broker, cid = published_in_confirm_mode(2)
    p.close_channel(cid)
    broker.sent()
    assert p.receive_data(BasicAck(2, True).encode(cid)) == []
    p, broker, cid = published_in_confirm_mode(2)
    exc, events, close = feed_fatal(p, broker, BasicAck(1, False).encode(0))
    assert close.reply_code == 504


def test_tokens_default_to_none():
    p, broker, cid = published_in_confirm_mode(2, tokens=False)
    assert confirmed(broker.send(cid, BasicAck(2, True))) == [(cid, True, [1, 2], [None, None])]


def test_seqnos_are_per_channel():
    p, broker, _ = connect()
    c1, c2 = open_channel(p, broker), open_channel(p, broker)
    confirm_mode(p, broker, c1)
    confirm_mode(p, broker, c2)
    assert [p.publish(c1, "", "q", b"") for _ in range(3)] == [1, 2, 3]
    assert [p.publish(c2, "", "q", b"") for _ in range(2)] == [1, 2]
    broker.sent()
    assert confirmed(broker.send(c2, BasicAck(2, True))) == [(c2, True, [1, 2], [None, None])]


def test_ack_for_unknown_tag_is_an_error():
    p, broker, cid = published_in_confirm_mode(2)
    exc, events, close = feed_fatal(p, broker, BasicAck(99, False).encode(cid))
    assert not confirmed(events)


def test_ack_for_an_already_confirmed_tag_is_an_error():
    p, broker, cid = published_in_confirm_mode(2)
    broker.send(cid, BasicAck(1, False))
    exc, events, close = feed_fatal(p, broker, BasicAck(1, False).encode(cid))
    assert not confirmed(events)


def test_a_bad_ack_closes_the_connection_saying_what_and_where():
    """The compiled _on_confirm (publish_path.pyx) closes as the Python one did: 406 naming
    the tag and the channel for a tag that is no unconfirmed publish, 503 for an ack on a
    channel not in confirm mode; a multiple ack of tags all confirmed one by one is no error."""
    p, broker, cid = published_in_confirm_mode(3)
    _, _, close = feed_fatal(p, broker, BasicAck(99, False).encode(cid))
    assert close.reply_code == 406
    assert close.reply_text == f"basic.ack for delivery tag 99 on channel {cid}, which is not an unconfirmed publish"
    assert (close.class_id, close.method_id) == (60, 80)

    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.publish(cid, "ex", "rk", b"m")
    broker.sent()
    _, _, close = feed_fatal(p, broker, BasicNack(1, False, False).encode(cid))
    assert close.reply_code == 503
    assert close.reply_text == f"basic.nack on channel {cid}, which is not in confirm mode"

    p, broker, cid = published_in_confirm_mode(3)
    assert confirmed(broker.send(cid, BasicAck(1, False))) == [(cid, True, [1], ["t1"])]
    assert confirmed(broker.send(cid, BasicAck(2, False))) == [(cid, True, [2], ["t2"])]
    assert broker.send(cid, BasicAck(2, True)) == []  # up to 2, each confirmed already
    assert (p.publishes_acked, p.state) == (2, "open")


# --- basic.return --------------------------------------------------------------------------------


def test_basic_return():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.publish(cid, "ex", "nowhere", b"lost", PROPS, mandatory=True)
    broker.sent()
    events = broker.send_content(cid, BasicReturn(312, "NO_ROUTE", "ex", "nowhere"), PROPS, b"lost")
    [ret] = events
    assert isinstance(ret, proto.ReturnedMessage)
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (312, "NO_ROUTE", "ex", "nowhere")
    assert ret.properties == PROPS and ret.body == b"lost"
    assert getattr(ret, "channel", getattr(ret, "channel_id", None)) == cid


def test_mandatory_return_before_ack():
    # RabbitMQ sends basic.return first, then basic.ack for the same publish
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    confirm_mode(p, broker, cid)
    assert p.publish(cid, "ex", "nowhere", b"lost", PROPS, mandatory=True, token="tok") == 1
    broker.sent()
    data = broker.content_bytes(cid, BasicReturn(312, "NO_ROUTE", "ex", "nowhere"), PROPS, b"lost")
    data += BasicAck(1, False).encode(cid)
    events = p.receive_data(data)
    assert [type(e) for e in events] == [proto.ReturnedMessage, proto.Confirmed]
    assert confirmed(events) == [(cid, True, [1], ["tok"])]
    if hasattr(events[1], "returned"):  # the module ties the return to its publish
        assert events[1].returned == {1: events[0]}


def test_return_is_tied_to_the_publish_it_belongs_to():
    # Two mandatory publishes to the same exchange and routing key (a headers exchange routes
    # by headers): the first is routed and waits for its queue, the second is unroutable.
    # RabbitMQ sends return(2), ack(2) at once, and ack(1) later.  The return belongs to 2:
    # its body and properties say so.
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    confirm_mode(p, broker, cid)
    routed = BasicProperties(headers={"kind": "routed"})
    unroutable = BasicProperties(headers={"kind": "nowhere"})
    assert p.publish(cid, "hdrs", "", b"routed", routed, mandatory=True, token="a") == 1
    assert p.publish(cid, "hdrs", "", b"unroutable", unroutable, mandatory=True, token="b") == 2
    broker.sent()
    data = broker.content_bytes(cid, BasicReturn(312, "NO_ROUTE", "hdrs", ""), unroutable, b"unroutable")
    data += BasicAck(2, False).encode(cid)
    events = p.receive_data(data)
    ret, conf2 = events
    assert confirmed([conf2]) == [(cid, True, [2], ["b"])]
    assert conf2.returned == {2: ret}
    [conf1] = broker.send(cid, BasicAck(1, False))
    assert confirmed([conf1]) == [(cid, True, [1], ["a"])]
    assert not conf1.returned


def test_confirms_before_a_protocol_error_are_not_lost():
    # one chunk: an ack, then something illegal.  The ack must still be reported: as an
    # event (returned, or attached to the exception) or among the unconfirmed publishes.
    p, broker, cid = published_in_confirm_mode(2)
    data = BasicAck(1, False).encode(cid) + QueueDeclareOk("q", 0, 0).encode(cid)  # unsolicited
    seen = []
    try:
        events = p.receive_data(data)
    except (AMQPError, CodecError) as exc:
        events = getattr(exc, "events", None) or []
    for _, _ack, _seqnos, tokens in confirmed(events):
        seen += tokens
    for pairs in p.drain_unconfirmed().values():
        seen += [token for seqno, token in pairs]
    assert sorted(seen) == ["t1", "t2"]


# --- broker-initiated notifications ----------------------------------------------------------------


def test_consumer_cancel_notification_with_reply():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    rpc(p, broker, cid, BasicConsume(queue="q", consumer_tag="c1"), BasicConsumeOk("c1"))
    event = one(broker.send(cid, BasicCancel("c1", False)), proto.ConsumerCancelled)
    assert (event.channel_id, event.consumer_tag) == (cid, "c1")
    assert broker.sent_methods() == [(cid, BasicCancelOk("c1"))]


def test_consumer_cancel_notification_nowait():
    # RabbitMQ sends basic.cancel with nowait=true: the spec says no reply then
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    rpc(p, broker, cid, BasicConsume(queue="q", consumer_tag="c1"), BasicConsumeOk("c1"))
    event = one(broker.send(cid, BasicCancel("c1", True)), proto.ConsumerCancelled)
    assert (event.channel_id, event.consumer_tag) == (cid, "c1")
    assert broker.sent_methods() == []


def test_consumer_cancel_from_broker_while_a_request_is_outstanding():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    rpc(p, broker, cid, BasicConsume(queue="q", consumer_tag="c1"), BasicConsumeOk("c1"))
    p.send_method(cid, QueueDeclare(queue="other"))
    broker.sent()
    events = broker.send(cid, BasicCancel("c1", True))
    assert one(events, proto.ConsumerCancelled).consumer_tag == "c1"
    assert not of_type(events, proto.MethodReply)
    # the queue.declare is still the outstanding request
    with pytest.raises(InvalidStateError):
        p.send_method(cid, QueueDeclare(queue="third"))
    assert one(broker.send(cid, QueueDeclareOk("other", 0, 0)), proto.MethodReply).method.queue == "other"


def test_client_cancel_gets_a_method_reply():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    rpc(p, broker, cid, BasicConsume(queue="q", consumer_tag="c1"), BasicConsumeOk("c1"))
    events = rpc(p, broker, cid, BasicCancel("c1"), BasicCancelOk("c1"))
    assert one(events, proto.MethodReply).method == BasicCancelOk("c1")
    assert not of_type(events, proto.ConsumerCancelled)


@pytest.mark.parametrize("active", [False, True])
def test_channel_flow_from_broker(active):
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    event = one(broker.send(cid, codec.ChannelFlow(active)), FLOW_EVENT)
    assert (event.channel_id, event.active) == (cid, active)
    assert broker.sent_methods() == [(cid, codec.ChannelFlowOk(active))]


def test_connection_blocked_and_unblocked():
    p, broker, _ = connect()
    event = one(broker.send(0, codec.ConnectionBlocked("low on memory")), proto.ConnectionBlocked)
    assert event.reason == "low on memory"
    one(broker.send(0, codec.ConnectionUnblocked()), proto.ConnectionUnblocked)
    assert broker.sent_methods() == []


def send_update_secret(p, secret, reason):
    if hasattr(p, "update_secret"):
        p.update_secret(secret, reason)
    else:
        p.send_method(0, ConnectionUpdateSecret(secret, reason))


def test_update_secret():
    p, broker, _ = connect()
    send_update_secret(p, "new-token", "token refresh")
    [(channel, method)] = broker.sent_methods()
    assert channel == 0
    assert method == ConnectionUpdateSecret(b"new-token", "token refresh")
    one(broker.send(0, ConnectionUpdateSecretOk()), proto.SecretUpdated)


# --- closes ----------------------------------------------------------------------------------------


def test_broker_closes_a_channel():
    p, broker, _ = connect()
    c1, c2 = open_channel(p, broker), open_channel(p, broker)
    p.send_method(c1, QueueDeclare(queue="missing", passive=True))
    broker.sent()
    text = "NOT_FOUND - no queue 'missing' in vhost '/'"
    events = broker.send(c1, ChannelClose(404, text, 50, 10))
    event = one(events, proto.ChannelClosedEvent)
    assert (event.channel_id, event.reply_code, event.reply_text, event.class_id, event.method_id, event.by_broker) == (
        c1, 404, text, 50, 10, True)
    assert not of_type(events, proto.MethodReply)
    assert broker.sent_methods() == [(c1, ChannelCloseOk())]
    # the channel is closed locally; later calls raise the broker's error again
    with pytest.raises(NotFound) as info:
        p.send_method(c1, QueueDeclare(queue="x"))
    assert (info.value.reply_code, info.value.channel, info.value.method_name) == (404, c1, "queue.declare")
    with pytest.raises(NotFound):
        p.publish(c1, "", "q", b"x")
    p.close_channel(c1)  # closed already: nothing to do
    assert p.data_to_send() == b""
    # other channels are unaffected
    events = rpc(p, broker, c2, QueueDeclare(queue="x"), QueueDeclareOk("x", 0, 0))
    assert one(events, proto.MethodReply).channel_id == c2
    assert p.state == "open"
    # and the number is free again
    assert open_channel(p, broker) == c1


def test_broker_closes_a_channel_in_confirm_mode():
    p, broker, cid = published_in_confirm_mode(3)
    events = broker.send(cid, ChannelClose(406, "PRECONDITION_FAILED - unknown delivery tag 9", 60, 80))
    assert one(events, proto.ChannelClosedEvent).reply_code == 406
    assert broker.sent_methods() == [(cid, ChannelCloseOk())]


def test_client_closes_a_channel():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close_channel(cid, 200, "bye")
    assert broker.sent_methods() == [(cid, ChannelClose(200, "bye", 0, 0))]
    with pytest.raises(InvalidStateError):
        p.send_method(cid, QueueDeclare(queue="x"))
    with pytest.raises(InvalidStateError):
        p.publish(cid, "", "q", b"x")
    event = one(broker.send(cid, ChannelCloseOk()), proto.ChannelClosedEvent)
    assert (event.channel_id, event.reply_code, event.by_broker) == (cid, 200, False)


def test_client_channel_close_event_carries_the_clients_code_and_text():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close_channel(cid, 320, "going away")
    assert broker.sent_methods() == [(cid, ChannelClose(320, "going away", 0, 0))]
    event = one(broker.send(cid, ChannelCloseOk()), proto.ChannelClosedEvent)
    assert (event.reply_code, event.reply_text, event.by_broker) == (320, "going away", False)


def test_close_a_channel_that_is_still_opening():
    p, broker, _ = connect()
    cid = p.open_channel()
    p.close_channel(cid)
    sent = broker.sent_methods()
    assert [(c, type(m)) for c, m in sent] == [(cid, ChannelOpen), (cid, ChannelClose)]
    assert sent[1][1].reply_code == 200
    events = broker.send(cid, ChannelOpenOk()) + broker.send(cid, ChannelCloseOk())
    assert not of_type(events, proto.ChannelOpened)
    assert one(events, proto.ChannelClosedEvent).channel_id == cid
    assert open_channel(p, broker) == cid


def test_deliveries_after_client_channel_close_are_dropped():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close_channel(cid)
    broker.sent()
    events = broker.send_content(cid, BasicDeliver("c1", 1, False, "", "q"), PROPS, b"late")
    assert not of_type(events, proto.Message)
    assert p.state == "open"
    one(broker.send(cid, ChannelCloseOk()), proto.ChannelClosedEvent)


def test_channel_close_crossing():
    # both sides send channel.close at the same time
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close_channel(cid)
    broker.sent()
    events = broker.send(cid, ChannelClose(406, "PRECONDITION_FAILED", 60, 80))
    assert (cid, ChannelCloseOk()) in broker.sent_methods()
    events += broker.send(cid, ChannelCloseOk())
    assert len(of_type(events, proto.ChannelClosedEvent)) == 1
    assert p.state == "open"
    assert open_channel(p, broker) == cid


def test_broker_closes_the_connection():
    p, broker, _ = connect()
    c1 = open_channel(p, broker)
    text = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    events = broker.send(0, ConnectionClose(320, text, 0, 0))
    event = one(events, proto.ConnectionClosedEvent)
    assert events[-1] is event
    assert (event.reply_code, event.reply_text, event.class_id, event.method_id, event.by_broker) == (
        320, text, 0, 0, True)
    assert broker.sent_methods() == [(0, ConnectionCloseOk())]
    assert p.state == "closed"
    with pytest.raises(InvalidStateError):
        p.open_channel()
    with pytest.raises(InvalidStateError):
        p.publish(c1, "", "q", b"x")
    with pytest.raises(InvalidStateError):
        p.send_method(c1, QueueDeclare(queue="x"))


def test_broker_connection_close_with_a_method():
    p, broker, _ = connect()
    open_channel(p, broker)
    event = one(broker.send(0, ConnectionClose(530, "NOT_ALLOWED - x", 20, 10)), proto.ConnectionClosedEvent)
    assert (event.reply_code, event.class_id, event.method_id) == (530, 20, 10)


def test_client_closes_the_connection():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close()
    [(channel, close)] = broker.sent_methods()
    assert channel == 0 and isinstance(close, ConnectionClose)
    assert (close.reply_code, close.class_id, close.method_id) == (200, 0, 0)
    assert p.state == "closing"
    with pytest.raises(InvalidStateError):
        p.open_channel()
    with pytest.raises(InvalidStateError):
        p.publish(cid, "", "q", b"x")
    with pytest.raises(InvalidStateError):
        p.send_method(cid, QueueDeclare(queue="x"))
    events = broker.send(0, ConnectionCloseOk())
    event = one(events, proto.ConnectionClosedEvent)
    assert (event.reply_code, event.by_broker) == (200, False)
    assert p.state == "closed"
    assert p.data_to_send() == b""
    with pytest.raises(InvalidStateError):
        p.open_channel()


def test_client_close_with_code_and_text():
    p, broker, _ = connect()
    p.close(320, "shutting down")
    assert broker.sent_methods() == [(0, ConnectionClose(320, "shutting down", 0, 0))]
    event = one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)
    assert (event.reply_code, event.reply_text, event.by_broker) == (320, "shutting down", False)


def test_methods_after_client_close_are_discarded():
    # spec: after sending connection.close, discard everything but close and close-ok
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close()
    broker.sent()
    events = broker.send_content(cid, BasicDeliver("c1", 1, False, "", "q"), PROPS, b"late")
    assert not of_type(events, proto.Message)
    assert broker.sent_methods() == []
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)


def test_connection_close_crossing():
    p, broker, _ = connect()
    p.close()
    broker.sent()
    events = broker.send(0, ConnectionClose(320, "CONNECTION_FORCED", 0, 0))
    assert (0, ConnectionCloseOk()) in broker.sent_methods()
    assert len(of_type(events, proto.ConnectionClosedEvent)) == 1
    assert p.state == "closed"


def test_close_during_handshake():
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    p.close()
    assert isinstance(broker.sent_methods()[-1][1], ConnectionClose)


# --- illegal calls raise at once -----------------------------------------------------------------------


def test_publish_on_an_unopened_channel():
    p, broker, _ = connect()
    with pytest.raises(InvalidStateError):
        p.publish(1, "", "q", b"x")
    assert p.data_to_send() == b""


def test_publish_on_channel_zero():
    p, broker, _ = connect()
    with pytest.raises((InvalidStateError, ValueError)):
        p.publish(0, "", "q", b"x")


def test_send_method_before_the_handshake():
    p = new_protocol()
    p.initiate()
    p.data_to_send()
    with pytest.raises(InvalidStateError):
        p.send_method(1, QueueDeclare(queue="x"))
    with pytest.raises(InvalidStateError):
        p.publish(1, "", "q", b"x")
    assert p.data_to_send() == b""


def test_send_method_on_a_channel_that_is_still_opening():
    p, broker, _ = connect()
    cid = p.open_channel()
    broker.sent()
    with pytest.raises(InvalidStateError):
        p.send_method(cid, QueueDeclare(queue="x"))


def test_close_channel_that_is_not_open():
    p, broker, _ = connect()
    with pytest.raises(InvalidStateError):
        p.close_channel(3)


def test_close_twice_or_after_closed():
    p, broker, _ = connect()
    p.close()
    broker.sent()
    with pytest.raises(InvalidStateError, match="already closing"):
        p.close()
    assert broker.sent_methods() == []  # never a second connection.close
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)
    with pytest.raises(InvalidStateError, match="already closed"):
        p.close()
    assert broker.sent_methods() == []


def test_initiate_twice():
    p = new_protocol()
    p.initiate()
    with pytest.raises(InvalidStateError):
        p.initiate()


# --- state machines: the transition tables ----------------------------------------------------------

ConnectionState = proto.ConnectionState
ChannelStatus = proto.ChannelStatus
ConnectionEvent = proto.WireSignal
ChannelEvent = proto.WireChannelSignal
TABLES = {"connection": proto.CONNECTION_TRANSITIONS, "channel": proto.CHANNEL_TRANSITIONS}
EVENTS = {"connection": ConnectionEvent, "channel": ChannelEvent}
INITIAL_STATES = {"connection": ConnectionState.NEW, "channel": ChannelStatus.OPENING}
FINAL_STATES = {"connection": ConnectionState.CLOSED, "channel": ChannelStatus.CLOSED}


def test_connection_state_is_a_str_enum_with_the_old_values():
    assert [state.value for state in ConnectionState] == ["new", "handshake", "open", "closing", "closed", "error"]
    p, broker, _ = connect()
    assert p.state is ConnectionState.OPEN
    assert p.state == "open" and str(p.state) == "open" and f"{p.state}" == "open"
    assert "ConnectionState" in proto.__all__ and "ChannelStatus" in proto.__all__


def test_channel_status_of_the_channel_record():
    p, broker, _ = connect()
    cid = p.open_channel()
    assert p.channel_state(cid).state is ChannelStatus.OPENING
    broker.send(cid, ChannelOpenOk())
    assert p.channel_state(cid).state is ChannelStatus.OPEN and p.channel_state(cid).is_open


def targets(table):
    """state -> the states the table lets it go to, on any event."""
    result = {}
    for (current, _), new in table.items():
        result.setdefault(current, set()).add(new)
    return result


@pytest.mark.parametrize("machine", sorted(TABLES))
def test_transition_table_has_no_dead_end_but_the_final_closed(machine):
    table, initial, final = TABLES[machine], INITIAL_STATES[machine], FINAL_STATES[machine]
    states = set(type(initial))
    assert all(current in states and event in EVENTS[machine] for current, event in table)
    assert set(table.values()) <= states
    ways = targets(table)
    assert states - set(ways) == {final}, "only the final state has no way out"
    assert all(state not in ways.get(state, ()) for state in states), "no state goes to itself"

    def reachable_from(start):
        seen, todo = {start}, [start]
        while todo:
            for target in ways.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    assert reachable_from(initial) == states, "no state is unreachable"
    for state in states:
        assert final in reachable_from(state), f"{state!r} cannot reach {final!r}"


def test_from_the_error_state_only_the_close_handshake_leads_on():
    error = {event: new for (current, event), new in proto.CONNECTION_TRANSITIONS.items() if current is ConnectionState.ERROR}
    assert error == {
        ConnectionEvent.RECV_CLOSE_OK: ConnectionState.CLOSED,
        ConnectionEvent.RECV_CLOSE: ConnectionState.CLOSED,
        ConnectionEvent.LOST: ConnectionState.CLOSED,
    }
    into_error = {event for (_, event), new in proto.CONNECTION_TRANSITIONS.items() if new is ConnectionState.ERROR}
    assert into_error == {ConnectionEvent.PROTOCOL_ERROR}


ILLEGAL_TRANSITIONS = [
    pytest.param(machine, current, event, id=f"{machine}-{current.name}-{event.name}")
    for machine, table in sorted(TABLES.items())
    for current in type(INITIAL_STATES[machine])
    for event in EVENTS[machine]
    if (current, event) not in table
]


@pytest.mark.parametrize("machine, current, event", ILLEGAL_TRANSITIONS)
def test_every_pair_not_in_the_table_raises_naming_state_and_event(machine, current, event):
    message = f"{machine}: {event.value} is not possible while {current.name.lower()}"
    with pytest.raises(InvalidStateError, match=f"^{message}$"):
        fire(TABLES[machine], machine, current, event)


@pytest.mark.parametrize("machine", sorted(TABLES))
def test_every_pair_in_the_table_goes_where_it_says(machine):
    for (current, event), new in TABLES[machine].items():
        assert fire(TABLES[machine], machine, current, event) is new


def test_the_core_refuses_an_illegal_state_change_and_keeps_its_state():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    with pytest.raises(InvalidStateError, match="the connection: send protocol header is not possible while open"):
        p._fire(ConnectionEvent.SEND_PROTOCOL_HEADER)
    assert p.state is ConnectionState.OPEN
    record = p.channel_state(cid)
    with pytest.raises(InvalidStateError, match=f"channel {cid}: recv open-ok is not possible while open"):
        record._fire(ChannelEvent.RECV_OPEN_OK)
    assert record.state is ChannelStatus.OPEN


# Every state change is logged at DEBUG by lifecycle.fire: record (from, signal, to) from the log.
class _TransitionLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.changes = []

    def emit(self, record):
        subject, current, new, signal = record.args
        if subject == "the connection" or subject.startswith("channel "):
            self.changes.append((current, signal, new))


@pytest.fixture
def state_changes():
    logger = logging.getLogger("amqwire.client.lifecycle")
    handler, level = _TransitionLog(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.changes
    logger.removeHandler(handler)
    logger.setLevel(level)


def initiate():
    new_protocol().initiate()


def close_before_initiate():
    new_protocol().close()


def finish_the_handshake():
    connect()


def close_during_the_handshake():
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    p.close()
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)


def broker_refuses_the_login():
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    event = one(broker.send(0, ConnectionClose(403, "ACCESS_REFUSED", 10, 11)), proto.ConnectionClosedEvent)
    assert event.handshake


def client_closes_the_connection():
    p, broker, _ = connect()
    p.close()
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)


def broker_closes_the_connection():
    p, broker, _ = connect()
    one(broker.send(0, ConnectionClose(320, "CONNECTION_FORCED", 0, 0)), proto.ConnectionClosedEvent)


def open_a_channel():
    p, broker, _ = connect()
    open_channel(p, broker)


def close_a_channel_while_opening():
    p, broker, _ = connect()
    cid = p.open_channel()
    p.close_channel(cid)
    broker.send(cid, ChannelOpenOk())
    one(broker.send(cid, ChannelCloseOk()), proto.ChannelClosedEvent)


def broker_refuses_channel_open():
    p, broker, _ = connect()
    cid = p.open_channel()
    one(broker.send(cid, ChannelClose(530, "NOT_ALLOWED - too many channels", 20, 10)), proto.ChannelClosedEvent)


def client_closes_a_channel():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close_channel(cid)
    one(broker.send(cid, ChannelCloseOk()), proto.ChannelClosedEvent)


def broker_closes_a_channel():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    one(broker.send(cid, ChannelClose(404, "NOT_FOUND", 50, 10)), proto.ChannelClosedEvent)


def client_closes_the_connection_under_an_open_channel():
    p, broker, _ = connect()
    open_channel(p, broker)
    p.close()
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)


def broker_closes_the_connection_under_closing_and_opening_channels():
    p, broker, _ = connect()
    closing = open_channel(p, broker)
    p.close_channel(closing)
    p.open_channel()
    one(broker.send(0, ConnectionClose(320, "CONNECTION_FORCED", 0, 0)), proto.ConnectionClosedEvent)


def mechanism_not_offered():
    p = new_protocol(auth_mechanism="EXTERNAL")
    p.initiate()
    with pytest.raises(AuthenticationError):
        p.receive_data(start_bytes(b"PLAIN"))


def broker_breaks_the_protocol_during_the_handshake():
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    with pytest.raises(CodecError, match="unexpected connection.open-ok during the handshake"):
        broker.send(0, ConnectionOpenOk())  # before connection.tune
    assert p.state is ConnectionState.ERROR


def broker_breaks_the_protocol_then_answers_our_close():
    p, broker, _ = connect()
    with pytest.raises(CodecError, match="unexpected connection.open on channel 0"):
        broker.send(0, ConnectionOpen("/"))
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)


def broker_breaks_the_protocol_then_closes_too():
    p, broker, _ = connect()
    with pytest.raises(CodecError):
        broker.send(0, ConnectionOpen("/"))
    one(broker.send(0, ConnectionClose(320, "CONNECTION_FORCED", 0, 0)), proto.ConnectionClosedEvent)


def both_close_the_connection_at_once():
    p, broker, _ = connect()
    p.close()
    one(broker.send(0, ConnectionClose(320, "CONNECTION_FORCED", 0, 0)), proto.ConnectionClosedEvent)


def broker_breaks_the_protocol_while_closing():
    p, broker, _ = connect()
    p.close()
    with pytest.raises(CodecError, match="channel 0"):
        broker.send(0, BasicQosOk())
    one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)


def socket_lost_before_initiate():
    new_protocol().connection_lost()


def socket_lost_during_the_handshake():
    p = new_protocol()
    start(p, Broker(p))
    p.connection_lost()


def socket_lost_under_an_open_channel():
    p, broker, _ = connect()
    open_channel(p, broker)
    p.connection_lost()
    p.connection_lost()  # once closed, nothing changes


def socket_lost_while_closing():
    p, broker, _ = connect()
    p.close()
    p.connection_lost()


def socket_lost_in_the_error_state():
    p, broker, _ = connect()
    with pytest.raises(CodecError):
        p.receive_data(b"\x09\x00\x00\x00\x00\x00\x00\xce")  # unknown frame type: nothing more can be read
    p.connection_lost()


HANDSHAKE = [(ConnectionState.NEW, ConnectionState.HANDSHAKE), (ConnectionState.HANDSHAKE, ConnectionState.OPEN)]
CHANNEL_OPENS = [(ChannelStatus.OPENING, ChannelStatus.OPEN)]
# (scenario through the public API, the state changes it makes in order)
SCENARIOS = [
    (initiate, [(ConnectionState.NEW, ConnectionState.HANDSHAKE)]),
    (close_before_initiate, [(ConnectionState.NEW, ConnectionState.CLOSED)]),
    (finish_the_handshake, HANDSHAKE),
    (
        close_during_the_handshake,
        [
            (ConnectionState.NEW, ConnectionState.HANDSHAKE),
            (ConnectionState.HANDSHAKE, ConnectionState.CLOSING),
            (ConnectionState.CLOSING, ConnectionState.CLOSED),
        ],
    ),
    (
        broker_refuses_the_login,
        [(ConnectionState.NEW, ConnectionState.HANDSHAKE), (ConnectionState.HANDSHAKE, ConnectionState.CLOSED)],
    ),
    (
        client_closes_the_connection,
        HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.CLOSING), (ConnectionState.CLOSING, ConnectionState.CLOSED)],
    ),
    (broker_closes_the_connection, HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.CLOSED)]),
    (open_a_channel, HANDSHAKE + CHANNEL_OPENS),
    (
        close_a_channel_while_opening,
        HANDSHAKE + [(ChannelStatus.OPENING, ChannelStatus.CLOSING), (ChannelStatus.CLOSING, ChannelStatus.CLOSED)],
    ),
    (broker_refuses_channel_open, HANDSHAKE + [(ChannelStatus.OPENING, ChannelStatus.CLOSED)]),
    (
        client_closes_a_channel,
        HANDSHAKE
        + CHANNEL_OPENS
        + [(ChannelStatus.OPEN, ChannelStatus.CLOSING), (ChannelStatus.CLOSING, ChannelStatus.CLOSED)],
    ),
    (broker_closes_a_channel, HANDSHAKE + CHANNEL_OPENS + [(ChannelStatus.OPEN, ChannelStatus.CLOSED)]),
    (
        client_closes_the_connection_under_an_open_channel,
        HANDSHAKE
        + CHANNEL_OPENS
        + [
            (ConnectionState.OPEN, ConnectionState.CLOSING),
            (ChannelStatus.OPEN, ChannelStatus.CLOSED),
            (ConnectionState.CLOSING, ConnectionState.CLOSED),
        ],
    ),
    (
        broker_closes_the_connection_under_closing_and_opening_channels,
        HANDSHAKE
        + CHANNEL_OPENS
        + [
            (ChannelStatus.OPEN, ChannelStatus.CLOSING),
            (ConnectionState.OPEN, ConnectionState.CLOSED),
            (ChannelStatus.CLOSING, ChannelStatus.CLOSED),
            (ChannelStatus.OPENING, ChannelStatus.CLOSED),
        ],
    ),
    (
        mechanism_not_offered,
        [(ConnectionState.NEW, ConnectionState.HANDSHAKE), (ConnectionState.HANDSHAKE, ConnectionState.CLOSED)],
    ),
    (
        broker_breaks_the_protocol_during_the_handshake,
        [(ConnectionState.NEW, ConnectionState.HANDSHAKE), (ConnectionState.HANDSHAKE, ConnectionState.ERROR)],
    ),
    (
        broker_breaks_the_protocol_then_answers_our_close,
        HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.ERROR), (ConnectionState.ERROR, ConnectionState.CLOSED)],
    ),
    (
        broker_breaks_the_protocol_then_closes_too,
        HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.ERROR), (ConnectionState.ERROR, ConnectionState.CLOSED)],
    ),
    (
        both_close_the_connection_at_once,
        HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.CLOSING), (ConnectionState.CLOSING, ConnectionState.CLOSED)],
    ),
    (
        broker_breaks_the_protocol_while_closing,
        HANDSHAKE
        + [
            (ConnectionState.OPEN, ConnectionState.CLOSING),
            (ConnectionState.CLOSING, ConnectionState.ERROR),
            (ConnectionState.ERROR, ConnectionState.CLOSED),
        ],
    ),
    (socket_lost_before_initiate, [(ConnectionState.NEW, ConnectionState.CLOSED)]),
    (
        socket_lost_during_the_handshake,
        [(ConnectionState.NEW, ConnectionState.HANDSHAKE), (ConnectionState.HANDSHAKE, ConnectionState.CLOSED)],
    ),
    (
        socket_lost_under_an_open_channel,
        HANDSHAKE + CHANNEL_OPENS + [(ConnectionState.OPEN, ConnectionState.CLOSED), (ChannelStatus.OPEN, ChannelStatus.CLOSED)],
    ),
    (
        socket_lost_while_closing,
        HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.CLOSING), (ConnectionState.CLOSING, ConnectionState.CLOSED)],
    ),
    (
        socket_lost_in_the_error_state,
        HANDSHAKE + [(ConnectionState.OPEN, ConnectionState.ERROR), (ConnectionState.ERROR, ConnectionState.CLOSED)],
    ),
]


@pytest.mark.parametrize("scenario, expected", [pytest.param(*case, id=case[0].__name__) for case in SCENARIOS])
def test_state_changes_of_a_scenario(state_changes, scenario, expected):
    scenario()
    assert [(current, new) for current, _, new in state_changes] == expected


def test_every_transition_in_the_tables_is_reachable_through_the_public_api(state_changes):
    for scenario, _ in SCENARIOS:
        scenario()
    in_tables = {(current, event, new) for table in TABLES.values() for (current, event), new in table.items()}
    assert set(state_changes) == in_tables


def test_a_protocol_violation_moves_the_connection_to_error_and_later_calls_name_it():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    with pytest.raises(CodecError, match="unexpected connection.open on channel 0") as caught:
        broker.send(0, ConnectionOpen("/"))
    assert caught.value.reply_code == 503
    assert p.state is ConnectionState.ERROR and p.state == "error"
    assert p.protocol_error == "unexpected connection.open on channel 0"
    [(channel, close)] = broker.sent_methods()
    assert channel == 0 and isinstance(close, ConnectionClose) and close.reply_code == 503
    assert (close.class_id, close.method_id) == (10, 40)
    assert p.channel_state(cid).state is ChannelStatus.CLOSED
    calls = [
        p.open_channel,
        lambda: p.publish(cid, "", "q", b"x"),
        lambda: p.send_method(cid, QueueDeclare(queue="q")),
        lambda: p.close_channel(cid),
        lambda: p.update_secret("s", "r"),
        p.close,
    ]
    for call in calls:
        with pytest.raises(InvalidStateError, match="the connection is in the error state: unexpected connection.open"):
            call()
    assert broker.sent() == []
    # only the close handshake goes on: the rest is discarded
    assert broker.send(cid, ChannelOpenOk()) == []
    assert broker.send(0, ConnectionUpdateSecretOk()) == []
    closed = one(broker.send(0, ConnectionCloseOk()), proto.ConnectionClosedEvent)
    assert (closed.reply_code, closed.by_broker) == (503, False)
    assert p.state is ConnectionState.CLOSED


def test_a_malformed_frame_moves_the_connection_to_error():
    p, broker, _ = connect()
    frame = bytearray(ConnectionUpdateSecretOk().encode(0))
    frame[-1] = 0  # not the frame end octet
    with pytest.raises(CodecError) as caught:
        p.receive_data(bytes(frame))
    assert p.state is ConnectionState.ERROR and p.protocol_error == str(caught.value)
    assert p.receive_data(ConnectionCloseOk().encode(0)) == []  # what follows a bad frame means nothing
    [(_, close)] = broker.sent_methods()
    assert isinstance(close, ConnectionClose) and close.reply_code == caught.value.reply_code
    with pytest.raises(InvalidStateError, match="error state"):
        p.open_channel()


def test_a_lost_connection_is_closed_and_still_reports_its_unconfirmed_publishes():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    confirm_mode(p, broker, cid)
    assert p.publish(cid, "", "q", b"x", token="t") == 1
    p.connection_lost()
    assert p.state is ConnectionState.CLOSED and p.channel_state(cid).state is ChannelStatus.CLOSED
    with pytest.raises(InvalidStateError, match="the connection is closed"):
        p.publish(cid, "", "q", b"y")
    assert p.drain_unconfirmed() == {cid: [(1, "t")]}
    assert p.receive_data(ConnectionCloseOk().encode(0)) == []

def test_data_before_initiate_is_refused():
    p = new_protocol()
    with pytest.raises(InvalidStateError, match="new: call initiate"):
        p.receive_data(start_bytes())
    assert p.state is ConnectionState.NEW


# The core's modules; every other module reads the core through its public names only.
CORE_MODULES = {"protocol.py", "events.py", "lifecycle.py"}
CORE_NAMES = {"core", "_core", "proto", "protocol"}


def _private_reads_of_the_core(source):
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
        if name in CORE_NAMES:
            yield node.lineno, ast.unparse(node)


def test_the_walk_finds_a_private_read_of_the_core():
    found = list(_private_reads_of_the_core("x = self._core._channels\ny = core._writer\nz = proto._text\nw = core.state"))
    assert [text for _, text in found] == ["self._core._channels", "core._writer", "proto._text"]


def test_no_module_outside_the_core_reads_a_private_attribute_of_the_core():
    repo = Path(__file__).resolve().parent.parent
    paths = [p for p in sorted((repo / "client").glob("*.py")) if p.name not in CORE_MODULES]
    paths += sorted((repo / "bridge").glob("*.py")) + sorted((repo / "spark").glob("*.py"))
    assert len(paths) > 20
    offenders = [
        f"{path.relative_to(repo)}:{line}: {text}"
        for path in paths
        for line, text in _private_reads_of_the_core(path.read_text())
    ]
    assert offenders == []


def test_open_channel_before_the_handshake():
    p = new_protocol()
    with pytest.raises(InvalidStateError, match="not open yet"):
        p.open_channel()
    broker = Broker(p)
    start(p, broker)
    with pytest.raises(InvalidStateError, match="not open yet"):
        p.open_channel()
    assert broker.sent() == []
    assert p.state == "handshake" and p.channels == []


def test_second_close_of_a_connection_the_broker_closed():
    p, broker, _ = connect()
    broker.send(0, ConnectionClose(320, "CONNECTION_FORCED", 0, 0))
    broker.sent()
    with pytest.raises(InvalidStateError, match="already closed"):
        p.close()
    assert broker.sent() == []


def test_second_close_before_initiate():
    p = new_protocol()
    p.close()
    with pytest.raises(InvalidStateError, match="already closed"):
        p.close()
    with pytest.raises(InvalidStateError):
        p.initiate()
    assert p.data_to_send() == b""


def test_second_close_of_a_channel():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.close_channel(cid)
    broker.sent()
    with pytest.raises(InvalidStateError, match=f"channel {cid} is closing"):
        p.close_channel(cid)
    assert broker.sent() == []
    assert p.channel_state(cid).state is ChannelStatus.CLOSING
    one(broker.send(cid, ChannelCloseOk()), proto.ChannelClosedEvent)
    with pytest.raises(InvalidStateError, match=f"channel {cid} is not open"):
        p.close_channel(cid)
    assert broker.sent() == []


def test_calls_on_a_closing_channel():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    broker.send_content(cid, BasicDeliver("c1", 1, False, "", "q"), PROPS, b"x")
    p.close_channel(cid)
    broker.sent()
    calls = [
        lambda: p.publish(cid, "", "q", b"x"),
        lambda: p.publish_encoded(cid, b"", 0),
        lambda: p.basic_ack(cid, 1),
        lambda: p.basic_nack(cid, 1),
        lambda: p.send_method(cid, QueueDeclare(queue="x")),
    ]
    for call in calls:
        with pytest.raises(InvalidStateError, match=f"channel {cid} is closing"):
            call()
    assert broker.sent() == []


def test_channels_are_closed_once_the_connection_is_closing():
    p, broker, _ = connect()
    opened, opening = open_channel(p, broker), p.open_channel()
    p.close()
    assert [p.channel_state(cid).state for cid in (opened, opening)] == [ChannelStatus.CLOSED, ChannelStatus.CLOSED]
    with pytest.raises(InvalidStateError, match="the connection is closing"):
        p.close_channel(opening)


def test_nothing_after_the_connection_close_in_the_same_read_is_handled():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.send_method(cid, QueueDeclare(queue="x"))
    broker.sent()
    data = (
        ConnectionClose(320, "CONNECTION_FORCED", 0, 0).encode(0)
        + ConnectionClose(320, "CONNECTION_FORCED", 0, 0).encode(0)
        + QueueDeclareOk("x", 0, 0).encode(cid)
        + broker.content_bytes(cid, BasicDeliver("c1", 1, False, "", "q"), PROPS, b"late")
    )
    events = p.receive_data(data)
    assert [type(event) for event in events] == [proto.ConnectionClosedEvent]
    assert broker.sent_methods() == [(0, ConnectionCloseOk())]
    assert p.state == "closed"


# --- malformed input from the broker -----------------------------------------------------------------


def test_bad_frame_end():
    p, broker, _ = connect()
    bad = bytearray(codec.ConnectionBlocked("x").encode(0))
    bad[-1] = 0x00
    exc, events, close = assert_connection_error(p, broker, bytes(bad), (501,))


def test_unknown_frame_type():
    p, broker, _ = connect()
    exc, events, close = assert_connection_error(p, broker, b"\x09\x00\x00\x00\x00\x00\x00\xce", (501,))


def test_body_frame_without_header():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    body = b"\x03" + cid.to_bytes(2, "big") + (3).to_bytes(4, "big") + b"abc\xce"
    exc, events, close = assert_connection_error(p, broker, body, (505,))


def test_malformed_method_arguments():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    # queue.declare-ok whose shortstr length runs past the frame
    payload = (50).to_bytes(2, "big") + (11).to_bytes(2, "big") + b"\xff" + b"abc"
    frame = b"\x01" + cid.to_bytes(2, "big") + len(payload).to_bytes(4, "big") + payload + b"\xce"
    p.send_method(cid, QueueDeclare(queue="abc"))
    broker.sent()
    exc, events, close = assert_connection_error(p, broker, frame, (501, 502))


def test_error_after_good_commands_keeps_their_events():
    p, broker, _ = connect()
    good = codec.ConnectionBlocked("mem").encode(0)
    try:
        events = p.receive_data(good + b"\x09\x00\x00\x00\x00\x00\x00\xce")
    except (AMQPError, CodecError) as exc:
        # the blocked event must not be lost: on the exception or delivered before
        parsed = getattr(exc, "events", None) or getattr(exc, "parsed", None) or getattr(
            getattr(exc, "__cause__", None), "parsed", [])
        assert parsed, "events parsed before the bad frame were lost"
    else:
        assert of_type(events, proto.ConnectionBlocked)
        assert of_type(events, proto.ConnectionClosedEvent)


def test_after_a_framing_error_the_client_reads_nothing_more():
    p, broker, _ = connect()
    exc, events, close = assert_connection_error(p, broker, b"\x09\x00\x00\x00\x00\x00\x00\xce", (501,))
    assert p.state == "error"  # its connection.close is out; what follows the bad frame cannot be parsed
    assert broker.send(0, ConnectionCloseOk()) == []
    assert p.state == "error"


# --- heartbeats ----------------------------------------------------------------------------------------


def test_send_heartbeat():
    p, broker, _ = connect()
    p.send_heartbeat()
    assert p.data_to_send() == HEARTBEAT_FRAME


def test_heartbeats_from_the_broker_produce_no_events():
    p, broker, _ = connect()
    assert p.receive_data(HEARTBEAT_FRAME) == []
    assert p.receive_data(HEARTBEAT_FRAME * 3) == []
    for b in HEARTBEAT_FRAME:
        assert p.receive_data(bytes([b])) == []
    assert p.data_to_send() == b""


def test_heartbeat_between_content_frames():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    data = broker.content_bytes(cid, BasicDeliver("c", 1, False, "", "q"), PROPS, b"abc")
    method_end = data.index(b"\xce") + 1
    events = p.receive_data(data[:method_end] + HEARTBEAT_FRAME + data[method_end:])
    assert one(events, proto.Message).body == b"abc"


def test_heartbeat_during_handshake():
    p = new_protocol()
    broker = Broker(p)
    start(p, broker)
    assert p.receive_data(HEARTBEAT_FRAME) == []


def test_repr_never_shows_the_password():
    p = new_protocol(username="bob", password="s3cr3t-pw")
    assert "s3cr3t-pw" not in repr(p) and "s3cr3t-pw" not in str(p)
    p, broker, _ = connect(password="s3cr3t-pw")
    assert "s3cr3t-pw" not in repr(p)


# --- HeartbeatMonitor (injected clock) --------------------------------------------------------------

Monitor = proto.HeartbeatMonitor


def test_heartbeat_only_after_a_silent_interval():
    """Without any write, one heartbeat per interval (not every half interval)."""
    m = Monitor(60, now=1000.0)
    assert not m.send_due(1000.0, 0)
    assert not m.send_due(1030.0, 0)
    assert not m.send_due(1059.9, 0)
    assert m.send_due(1060.0, 0)
    m.sent(1060.0, 8)  # the heartbeat frame itself is 8 bytes
    assert not m.send_due(1090.0, 8)
    assert m.send_due(1120.0, 8)


def test_no_heartbeat_while_anything_else_is_written():
    """Every look (at least each half interval) that sees the byte count grow counts as
    traffic: under steady writes no heartbeat ever goes out."""
    m = Monitor(10, now=0.0)
    written = 0
    for step in range(1, 100):
        written += 100  # something was written in each half interval
        assert not m.send_due(step * 5.0, written)
    # silence from here: due one interval after the last look that saw traffic
    assert not m.send_due(500.0, written)
    assert m.send_due(505.0, written)


def test_heartbeat_silence_never_reaches_two_intervals():
    """A write right after a look is seen at the next look (half an interval later): the
    broker sees at most 1.5 intervals without bytes, under its two-interval limit."""
    m = Monitor(10, now=0.0)
    assert not m.send_due(5.0, 0)
    written = 100  # written at 5.0 + epsilon
    assert not m.send_due(10.0, written)  # seen at 10.0
    assert not m.send_due(15.0, written)
    assert m.send_due(20.0, written)  # 15 s after the write at 5.0 + epsilon
    assert m.next_deadline(20.0) == 0.0


def test_heartbeat_dead_after_two_silent_intervals():
    m = Monitor(10, now=0.0)
    assert not m.timed_out(19.9)
    assert not m.timed_out(20.0)
    assert m.timed_out(20.1)
    m.last_received = 15.0  # any bytes from the peer count
    assert not m.timed_out(35.0)
    assert m.timed_out(35.5)


def test_heartbeat_next_deadline():
    m = Monitor(10, now=0.0)
    assert m.next_deadline(0.0) == pytest.approx(5.0)  # the next look for traffic
    assert not m.send_due(5.0, 0)
    assert m.next_deadline(5.0) == pytest.approx(5.0)  # the heartbeat due at 10 (no traffic)
    assert not m.send_due(6.0, 10)  # traffic seen at 6.0
    assert m.next_deadline(6.0) == pytest.approx(5.0)  # look again at 11.0
    m.last_received = 0.0
    assert m.next_deadline(19.5) == 0.0  # overdue: a look, then the silence deadline at 20
    assert m.next_deadline(100.0) == 0.0


def test_heartbeat_disabled():
    m = Monitor(0, now=0.0)
    assert not m.send_due(1e9)
    assert not m.timed_out(1e9)
    assert m.next_deadline(0.0) is None


# --- channel 0 carries connection methods only ---------------------------------------------------


def test_channel_method_on_channel_zero_is_a_channel_error():
    p, broker, _ = connect()
    exc, _, close = assert_connection_error(p, broker, BasicQosOk().encode(0), (504,))
    assert "channel 0" in str(exc) and close.class_id == 60


def test_publish_on_channel_zero_is_a_channel_error():
    """The peer sends basic.publish with content on channel 0 (a client-to-server method):
    504 CHANNEL_ERROR, as RabbitMQ answers a client that does it."""
    p, broker, _ = connect()
    data = broker.content_bytes(0, BasicPublish(0, "", "q"), BasicProperties(), b"body")
    exc, _, close = assert_connection_error(p, broker, data, (504,))
    assert "basic.publish on channel 0" in str(exc) and "content" in str(exc)


def test_delivery_on_channel_zero_is_a_channel_error():
    p, broker, _ = connect()
    open_channel(p, broker)
    data = broker.content_bytes(0, BasicDeliver("ctag", 1, False, "", "q"), BasicProperties(), b"x")
    exc, events, close = assert_connection_error(p, broker, data, (504,))
    assert not of_type(events, proto.Message)


def test_content_frame_without_a_method_on_channel_zero():
    """A content header that follows no content method is a framing error (the parser's 505)."""
    p, broker, _ = connect()
    data = broker.content_bytes(0, BasicDeliver("ctag", 1, False, "", "q"), BasicProperties(), b"x")
    header_and_body = data[len(BasicDeliver("ctag", 1, False, "", "q").encode(0)):]
    assert_connection_error(p, broker, header_and_body, (505, 504))


def test_the_client_never_sends_channel_methods_on_channel_zero():
    p, broker, _ = connect()
    with pytest.raises(InvalidStateError, match="channel 0"):
        p.publish(0, "", "q", b"x")
    with pytest.raises(InvalidStateError, match="channel 0"):
        p.send_method(0, BasicQos(0, 1, False))
    assert broker.sent() == []


def test_heartbeats_and_bytes_are_counted():
    p, broker, _ = connect()
    sent_before = p.bytes_sent
    p.send_heartbeat()
    p.send_heartbeat()
    assert p.heartbeats_sent == 2
    assert len(p.data_to_send()) == 16 and p.bytes_sent == sent_before + 16
    received = p.bytes_received
    p.receive_data(b"\x08\x00\x00\x00\x00\x00\x00\xce")
    assert p.bytes_received == received + 8


def test_the_core_counts_every_publish_it_queued_whichever_way_it_went():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    assert p.publishes_queued == 0
    p.publish(cid, "", "q", b"small")  # through the writer
    p.publish(cid, "", "q", b"x" * (proto.ZERO_COPY_THRESHOLD + 1))  # a big body, without a copy
    frames = codec.encode_publish(cid, "", "q", b"a") + codec.encode_publish(cid, "", "q", b"b")
    p.publish_encoded(cid, frames, 2)
    assert p.publishes_queued == 4
    p.buffers_to_send()
    assert p.publishes_queued == 4  # ever, not what is still queued


@pytest.mark.parametrize("how", ["writer", "big bodies", "encoded", "writer after a big body"])
def test_flush_due_says_when_publishes_queued_flush_at_bytes(how):
    """``flush_due`` (what a publisher reads after each publish) turns true once a publish
    leaves FLUSH_AT bytes queued, however they were queued, and false when they are taken."""
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.buffers_to_send()
    body = b"x" * 1000
    big = b"y" * (proto.ZERO_COPY_THRESHOLD + 1)
    encoded = codec.encode_publish(cid, "", "q", body)
    if how == "writer after a big body":
        p.publish(cid, "", "q", big)
    for _ in range(1000):
        assert p.flush_due == (p.pending_output >= proto.FLUSH_AT)
        if p.flush_due:
            break
        if how == "big bodies":
            p.publish(cid, "", "q", big)
        elif how == "encoded":
            p.publish_encoded(cid, encoded, 1)
        else:
            p.publish(cid, "", "q", body)
    assert p.flush_due
    assert p.pending_output < proto.FLUSH_AT + len(big) + 1000
    p.buffers_to_send()
    assert not p.flush_due
    for _ in range(300):
        p.publish(cid, "", "q", body)
    assert p.flush_due
    p.data_to_send()
    assert not p.flush_due


# What users imported from amqwire.client.protocol before the core was split by role.
PUBLIC_BEFORE_THE_SPLIT = [
    "ConnectionProtocol", "ConnectionState", "ChannelStatus", "CONNECTION_TRANSITIONS", "CHANNEL_TRANSITIONS",
    "ConfirmTracker", "HeartbeatMonitor", "ConnectionOpened", "ConnectionClosedEvent", "ConnectionBlocked",
    "ConnectionUnblocked", "SecretUpdated", "ChannelOpened", "ChannelClosedEvent", "MethodReply", "GetResult",
    "Confirmed", "ConsumerCancelled", "ChannelFlowChanged", "Message", "ReturnedMessage", "CLIENT_CAPABILITIES",
    "ChannelState", "Event", "VERSION", "ZERO_COPY_THRESHOLD",
]


def test_the_core_names_still_import_from_protocol():
    from amqwire.client import events, lifecycle

    for name in PUBLIC_BEFORE_THE_SPLIT:
        assert hasattr(proto, name), name
    wire = ["ConnectionState", "WireSignal", "ChannelStatus", "WireChannelSignal", "CONNECTION_TRANSITIONS",
            "CHANNEL_TRANSITIONS"]
    assert set(events.__all__) <= set(proto.__all__) and set(wire) <= set(proto.__all__)
    for module, names in ((events, events.__all__), (lifecycle, wire)):
        for name in names:
            assert getattr(proto, name) is getattr(module, name), name


@pytest.mark.parametrize("kind", ["bytes", "bytes subclass", "bytearray", "memoryview", "str"])
@pytest.mark.parametrize("with_properties", [False, True])
def test_the_compiled_publish_queues_what_the_encoder_makes_whatever_the_body(kind, with_properties):
    """``ConnectionProtocol.publish`` is compiled (publish_path.pyx) with a typed path for a
    ``bytes`` body and the writer's own for the rest: every body kind gives the codec's bytes."""
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.data_to_send()
    raw = b"body of a publish"
    body = {"bytes": raw, "bytes subclass": type("B", (bytes,), {})(raw), "bytearray": bytearray(raw),
            "memoryview": memoryview(raw), "str": raw.decode()}[kind]
    properties = codec.BasicProperties(content_type="text/plain", delivery_mode=2) if with_properties else None
    assert p.publish(cid, "ex", "rk", body, properties, True) == 0  # not in confirm mode
    assert p.data_to_send() == codec.encode_publish(cid, "ex", "rk", raw, properties, True)


def test_the_compiled_publish_refuses_bad_input_and_queues_nothing():
    p, broker, _ = connect()
    cid = open_channel(p, broker)
    p.data_to_send()
    with pytest.raises(TypeError):
        p.publish(cid, "", "q", b"x", {"content_type": "text/plain"})  # properties must be BasicProperties
    with pytest.raises(TypeError):
        p.publish(cid, "", "q", 42)  # not a buffer
    with pytest.raises(InvalidStateError, match="channel 9"):
        p.publish(9, "", "q", b"x")
    assert p.pending_output == 0 and p.publishes_queued == 0
    p.publish(cid, "", "q", b"x", mandatory=True)
    assert p.data_to_send() == codec.encode_publish(cid, "", "q", b"x", None, True)
