"""The stream client's sans-IO core and lifecycle tables, without a broker.

The broker's side is played with the codec's own commands (amqwire.codec.stream.frames),
each fed whole, byte by byte, and with the next frame's first bytes behind it.
"""
from __future__ import annotations

import pytest

from amqwire.client.errors import InvalidStateError
from amqwire.client.lifecycle import Machine
from amqwire.client.stream import errors as E
from amqwire.client.stream import lifecycle as L
from amqwire.client.stream import protocol as P
from amqwire.codec.stream import frames as F

CLIENT = "client"


def client_frames(core):
    """What the core wrote, decoded as the broker reads it."""
    parser = F.StreamParser(0, sender=CLIENT)
    out = []
    for piece in core.buffers_to_send():
        out += parser.feed(piece)
    return out


def feed(core, data, how):
    if how == "whole":
        return core.receive(data)
    events = []
    for i in range(len(data)):
        events += core.receive(data[i:i + 1])
    return events


def open_core(how="whole", **options):
    """A core taken through the handshake; the broker's frames fed ``how``."""
    core = P.StreamProtocol("bob", "s3cret", "/v", frame_max=131072, heartbeat=30, **options)
    core.initiate()
    (peer,) = client_frames(core)
    assert type(peer) is F.PeerProperties and peer.properties["product"] == "amqwire"
    assert feed(core, F.PeerPropertiesResponse(peer.correlation_id, 1, {"version": "3.10.8"}).encode(), how) == []
    (sasl,) = client_frames(core)
    assert type(sasl) is F.SaslHandshake
    assert feed(core, F.SaslHandshakeResponse(sasl.correlation_id, 1, ["AMQPLAIN", "PLAIN"]).encode(), how) == []
    (auth,) = client_frames(core)
    assert (auth.mechanism, auth.data) == ("PLAIN", b"\x00bob\x00s3cret")
    assert feed(core, F.SaslAuthenticateResponse(auth.correlation_id, 1).encode(), how) == []
    assert client_frames(core) == []
    assert feed(core, F.Tune(1048576, 60).encode(), how) == []
    tune, open_ = client_frames(core)
    assert type(tune) is F.TuneResponse and (tune.frame_max, tune.heartbeat) == (131072, 30)
    assert type(open_) is F.Open and open_.virtual_host == "/v"
    (done,) = feed(core, F.OpenResponse(open_.correlation_id, 1, {"advertised_host": "node-1",
                                                                  "advertised_port": "5552"}).encode(), how)
    assert type(done) is P.HandshakeDone
    assert (done.frame_max, done.heartbeat) == (131072, 30)
    assert done.connection_properties == {"advertised_host": "node-1", "advertised_port": "5552"}
    assert done.server_properties == {"version": "3.10.8"} and core.state is P.LinkState.OPEN
    return core


@pytest.mark.parametrize("how", ["whole", "byte by byte"])
def test_the_handshake(how):
    open_core(how)


@pytest.mark.parametrize("client, server, agreed", [(131072, 1048576, 131072), (0, 1048576, 1048576),
                                                    (60, 0, 60), (0, 0, 0), (30, 60, 30)])
def test_tune_takes_the_smaller_limit_and_0_means_none(client, server, agreed):
    assert P.negotiate(client, server) == agreed


@pytest.mark.parametrize("step, code, error", [
    ("sasl", 0x08, E.StreamAuthenticationFailure),
    ("open", 0x0C, E.VirtualHostAccessFailure),
    ("mechanisms", None, E.SaslMechanismNotSupported),
])
def test_a_refused_login_is_a_typed_handshake_failure(step, code, error):
    core = P.StreamProtocol("bob", "s3cret", "/v")
    core.initiate()
    (peer,) = client_frames(core)
    core.receive(F.PeerPropertiesResponse(peer.correlation_id, 1, {}).encode())
    (sasl,) = client_frames(core)
    mechanisms = ["EXTERNAL"] if step == "mechanisms" else ["PLAIN"]
    events = core.receive(F.SaslHandshakeResponse(sasl.correlation_id, 1, mechanisms).encode())
    if step == "sasl":
        (auth,) = client_frames(core)
        events = core.receive(F.SaslAuthenticateResponse(auth.correlation_id, code).encode())
    elif step == "open":
        (auth,) = client_frames(core)
        core.receive(F.SaslAuthenticateResponse(auth.correlation_id, 1).encode())
        core.receive(F.Tune(0, 0).encode())
        _, open_ = client_frames(core)
        events = core.receive(F.OpenResponse(open_.correlation_id, code, {}).encode())
    (failed,) = events
    assert type(failed) is P.HandshakeFailed and type(failed.error) is error
    assert "s3cret" not in str(failed.error)


def test_requests_get_their_replies_by_correlation_id():
    core = open_core()
    a = core.create_stream("orders", {"max-age": "1h"})
    b = core.metadata(["orders", "other"])
    create, metadata = client_frames(core)
    assert (create.stream, create.arguments, metadata.streams) == ("orders", {"max-age": "1h"}, ["orders", "other"])
    reply_b = F.MetadataResponse(b, [(0, "node-1", 5552)], [("orders", 1, 0, []), ("other", 2, 0xFFFF, [])])
    reply_a = F.CreateResponse(a, 5)
    data = reply_b.encode() + reply_a.encode()
    events = feed(core, data[:7], "whole") + feed(core, data[7:], "whole")
    assert [(e.correlation_id, e.code) for e in events] == [(b, 1), (a, 5)]  # Metadata has no code: OK
    assert events[0].command.brokers[0].host == "node-1"


def test_what_the_broker_sends_unasked_becomes_events():
    core = open_core()
    data = (F.PublishConfirm(3, [1, 2, 3]).encode() + F.PublishError(3, [(4, 0x10)]).encode()
            + F.MetadataUpdate(6, "orders").encode() + F.CreditResponse(4, 7).encode() + F.Heartbeat().encode())
    events = core.receive(data)
    assert [type(e) for e in events] == [P.Confirmed, P.PublishErrors, P.MetadataChanged, P.CreditRefused]
    assert (events[0].publisher_id, events[0].publishing_ids) == (3, [1, 2, 3])
    assert events[1].errors == [(4, 0x10)]
    assert (events[2].stream, events[2].code) == ("orders", 6)
    assert (events[3].subscription_id, events[3].code) == (7, 4)


def test_the_brokers_close_is_answered_and_ends_the_core():
    core = open_core()
    (closed,) = core.receive(F.Close(9, 0x0D, "unknown frame").encode() + F.Heartbeat().encode())
    assert (type(closed), closed.code, closed.reason) == (P.BrokerClosed, 0x0D, "unknown frame")
    (answer,) = client_frames(core)
    assert type(answer) is F.CloseResponse and (answer.correlation_id, answer.response_code) == (9, 1)
    assert core.state is P.LinkState.CLOSED and core.receive(F.Heartbeat().encode()) == []
    with pytest.raises(InvalidStateError, match="closed"):
        core.metadata(["x"])


def test_publish_writes_one_frame_of_the_messages():
    core = open_core()
    core.publish(2, [10, 11], [b"\x00Su\xa0\x01a", b"\x00Su\xa0\x01b"])
    (publish,) = client_frames(core)
    assert type(publish) is F.Publish and publish.publisher_id == 2
    assert publish.messages == [(10, b"\x00Su\xa0\x01a"), (11, b"\x00Su\xa0\x01b")]


def test_nothing_is_sent_before_the_handshake_or_after_a_loss():
    core = P.StreamProtocol()
    with pytest.raises(InvalidStateError, match="handshake"):
        core.declare_publisher(0, None, "s")
    core = open_core()
    core.connection_lost()
    assert core.buffers_to_send() == [] and core.receive(F.Heartbeat().encode()) == []
    with pytest.raises(InvalidStateError):
        core.publish(0, [1], [b"x"])


def test_ids_are_the_lowest_free_and_run_out_with_a_clear_error():
    core = open_core()
    assert [core.new_publisher_id() for _ in range(3)] == [0, 1, 2]
    core.release_publisher_id(1)
    assert core.new_publisher_id() == 1
    for _ in range(P.SUBSCRIPTION_IDS):
        core.new_subscription_id()
    with pytest.raises(InvalidStateError, match="all 256 subscription ids"):
        core.new_subscription_id()


def test_a_malformed_frame_raises_the_codecs_error():
    from amqwire.codec import CodecError

    core = open_core()
    with pytest.raises(CodecError):
        core.receive(b"\x00\x00\x00\x04\x7f\xff\x00\x01")  # an unknown key


def test_the_heartbeat_goes_out_only_when_open():
    core = P.StreamProtocol()
    core.send_heartbeat()
    assert core.buffers_to_send() == []
    core = open_core()
    core.send_heartbeat()
    assert [type(c) for c in client_frames(core)] == [F.Heartbeat]


# --------------------------------------------------------------------------- lifecycle tables


@pytest.mark.parametrize("table, phases, signals", [
    (L.PRODUCER_PHASES, L.ProducerPhase, L.ProducerSignal),
    (L.CONSUMER_PHASES, L.ConsumerPhase, L.ConsumerSignal),
])
def test_the_tables_only_name_their_own_states_and_events(table, phases, signals):
    for (state, event), target in table.items():
        assert type(state) is phases and type(target) is phases and type(event) is signals


def test_a_producers_life():
    machine = L.new_producer_machine("p")
    for signal, expected in [(L.ProducerSignal.DECLARED, "open"), (L.ProducerSignal.LOST, "down"),
                             (L.ProducerSignal.RELOCATE, "declaring"), (L.ProducerSignal.DECLARED, "open"),
                             (L.ProducerSignal.CLOSE, "closing"), (L.ProducerSignal.CLOSED, "closed"),
                             (L.ProducerSignal.LOST, "closed")]:
        machine.fire(signal)
        assert str(machine.state) == expected


def test_a_failed_producer_keeps_why_and_refuses_to_come_back():
    machine = L.new_producer_machine("p")
    error = E.StreamDeleted("orders")
    machine.fire(L.ProducerSignal.FAIL, error)
    assert machine.reason is error and machine.state is L.ProducerPhase.FAILED
    with pytest.raises(InvalidStateError, match="declaring again on the leader is not possible while failed"):
        machine.fire(L.ProducerSignal.RELOCATE)


def test_a_consumers_life():
    machine = L.new_consumer_machine("c")
    for signal, expected in [(L.ConsumerSignal.SUBSCRIBED, "active"), (L.ConsumerSignal.LOST, "down"),
                             (L.ConsumerSignal.RESUBSCRIBE, "subscribing"), (L.ConsumerSignal.SUBSCRIBED, "active"),
                             (L.ConsumerSignal.END, "ended"), (L.ConsumerSignal.LOST, "ended"),
                             (L.ConsumerSignal.CLOSE, "closed")]:
        machine.fire(signal)
        assert str(machine.state) == expected
    assert isinstance(machine, Machine)
    assert L.ConsumerPhase.DOWN in L.CONSUMER_LIVE_PHASES and L.ConsumerPhase.ENDED not in L.CONSUMER_LIVE_PHASES


# --------------------------------------------------------------------------- errors


def test_every_response_code_has_its_class_and_one_clear_line():
    for code, name in E.RESPONSE_CODE_NAMES.items():
        if code == 0x01:
            continue
        error = E.response_error(code, "subscribe", "orders")
        assert type(error) is not E.StreamResponseError and error.code == code
        assert str(error) == f"subscribe 'orders': the broker answered {name} (0x{code:02x})"
        assert "\n" not in str(error)
    unknown = E.response_error(0x99, "credit")
    assert type(unknown) is E.StreamResponseError and str(unknown) == (
        "credit: the broker answered unknown response code (0x99)")
    assert set(E.RESPONSE_CODE_NAMES) >= set(F.RESPONSE_CODES) - {0x14, 0x15}  # 3.11's SASL codes aside


def test_the_login_codes_are_authentication_errors():
    from amqwire.client.errors import AMQPConnectionError, AuthenticationError

    for code in (0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C):
        assert isinstance(E.response_error(code), AuthenticationError)
    assert isinstance(E.StreamConnectionClosed(0x0D, "unknown frame"), AMQPConnectionError)
    assert not isinstance(E.response_error(0x02), AMQPConnectionError)


def test_publish_batches_are_cut_to_the_frame_max():
    from amqwire.client.stream.session import _runs

    overhead = P.PUBLISH_FRAME_OVERHEAD
    assert _runs([10] * 5, 1000, 200) == [(0, 5)]
    assert _runs([10] * 5, 1000, 2) == [(0, 2), (2, 4), (4, 5)]  # at most 2 a frame
    assert _runs([400, 400, 400], 800 + overhead, 10) == [(0, 2), (2, 3)]  # 2 fit, the third not
    assert _runs([400, 400, 400], 800 + overhead - 1, 10) == [(0, 1), (1, 2), (2, 3)]
    assert _runs([5000, 10], 1000, 10) == [(0, 1), (1, 2)]  # one over the limit: alone
