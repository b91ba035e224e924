"""amqwire.bridge's parts that need no broker: topic filters, the path header written into
received property bytes, the publish frames, the ack bookkeeping of each mode."""
from __future__ import annotations

import logging
import struct
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from amqwire.bridge import PATH_HEADER, AckMode, Forwarder, TopicFilter, read_path, topic_matches
from amqwire.bridge.forwarder import BackOff
from amqwire.bridge.frames import PublishFrames
from amqwire.bridge.path import PathError, PathWriter, _entry_span
from amqwire.client import Message
from amqwire.codec import BasicProperties, BasicPublish, CommandParser, encode_publish


@pytest.mark.parametrize(
    "pattern,key,expected",
    [
        ("orders.*", "orders.eu", True),
        ("orders.*", "orders.eu.new", False),
        ("orders.#", "orders", True),
        ("orders.#", "orders.eu.new", True),
        ("#", "", True),
        ("#", "a.b.c", True),
        ("*", "", True),
        ("*", "a.b", False),
        ("#.new", "orders.eu.new", True),
        ("#.new", "new", True),
        ("orders.#.new", "orders.new", True),
        ("orders.#.new", "orders.eu.x.new", True),
        ("orders.#.new", "orders.eu.x.old", False),
        ("*.eu.#", "orders.eu", True),
        ("a.#.#.b", "a.b", True),
        ("a.b", "a.b", True),
        ("a.b", "a.bb", False),
    ],
)
def test_topic_matches(pattern, key, expected):
    assert topic_matches(pattern, key) is expected


def test_topic_filter_include_exclude():
    f = TopicFilter(include=["orders.#", "audit.*"], exclude=["*.*.test", "orders.secret"])
    assert [f.allows(k) for k in ("orders.eu.new", "orders.eu.test", "audit.x", "audit.x.y", "orders.secret", "x")] == [
        True, False, True, False, False, False]
    assert TopicFilter().allows("anything") and not TopicFilter().active
    assert TopicFilter(exclude=["#"]).allows("a") is False
    with pytest.raises(TypeError, match="topic pattern"):
        TopicFilter(include=[b"orders"])


# Header field types a Python dict cannot produce (b, s, u, i, f, B), byte for byte.
RAW_TABLE = (
    b"\x02i8b\xfe" + b"\x03i16s\xff\x9c" + b"\x03u16u\xff\xff" + b"\x03u32i\xff\xff\xff\xff"
    + b"\x03f32f\x3f\xc0\x00\x00" + b"\x02u8B\xff"
)


def with_table(props: BasicProperties, table: bytes) -> bytes:
    """``props`` (without headers) encoded, with ``table`` as the raw headers table."""
    wire = props.encode()
    flags = struct.unpack_from(">H", wire)[0] | 0x2000
    pos = 2
    if props.content_type is not None:
        pos += 1 + wire[pos]
    if props.content_encoding is not None:
        pos += 1 + wire[pos]
    return struct.pack(">H", flags) + wire[2:pos] + struct.pack(">I", len(table)) + table + wire[pos:]


def received(wire: bytes) -> BasicProperties:
    return BasicProperties.decode(wire)


ALL = BasicProperties(
    content_type="application/json", content_encoding="gzip", delivery_mode=2, priority=7,
    correlation_id="c-1", reply_to="replies", expiration="60000", message_id="m-1",
    timestamp=datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc), type="order", user_id="guest",
    app_id="shop", cluster_id="eu",
)


def test_path_appended_to_the_received_table_byte_for_byte():
    wire = with_table(ALL, RAW_TABLE)
    props = received(wire)
    out = PathWriter("A/").add_hop(props, ())
    entry = bytes([len(PATH_HEADER)]) + PATH_HEADER.encode() + b"A" + struct.pack(">I", 7) + b"S" + struct.pack(">I", 2) + b"A/"
    assert out == with_table(ALL, RAW_TABLE + entry)
    again = received(out)
    assert again.headers.pop(PATH_HEADER) == ["A/"]
    assert again == props


def test_path_added_without_headers_and_with_nothing_set():
    for props in (ALL, BasicProperties()):
        wire = props.encode()
        out = PathWriter("A/").add_hop(received(wire), ())
        decoded = received(out)
        assert decoded.headers == {PATH_HEADER: ["A/"]}
        decoded.headers = None
        assert decoded == props


def test_path_replaced_on_the_next_hop_other_entries_untouched():
    first = PathWriter("A/").add_hop(received(with_table(ALL, RAW_TABLE)), ())
    props = received(first)
    path = tuple(read_path(props))
    second = PathWriter("B/").add_hop(props, path)
    entry = PathWriter("B/").entry(("A/",))
    assert second == with_table(ALL, RAW_TABLE + entry)
    assert read_path(received(second)) == ["A/", "B/"]


def test_path_from_properties_built_in_python_is_encoded():
    props = BasicProperties(headers={"k": 1}, delivery_mode=2)
    out = BasicProperties.decode(PathWriter("A/").add_hop(props, ()))
    assert out.headers == {"k": 1, PATH_HEADER: ["A/"]} and out.delivery_mode == 2


def test_a_malformed_table_is_a_path_error():
    with pytest.raises(PathError, match="past the table's end"):
        _entry_span(b"\x01xS\x00\x00\x00\x09a", b"\x0ex-amqwire-path")
    with pytest.raises(PathError, match="unknown field type"):
        _entry_span(b"\x01xZ\x00", b"\x0ex-amqwire-path")


@pytest.mark.parametrize("frame_max,size", [(4096, 0), (4096, 100), (4096, 4088), (4096, 4089), (4096, 20000)])
def test_publish_frames_parse_as_the_codec_encodes(frame_max, size):
    body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    out: list = []
    frames = PublishFrames(3, frame_max)
    frames.append(out, "ex", "rk", ALL.encode(), body)
    ours = b"".join(out)
    assert ours == encode_publish(3, "ex", "rk", body, ALL, frame_max=frame_max)
    (command,) = CommandParser(frame_max).feed(ours)
    assert command.method == BasicPublish(0, "ex", "rk", False, False) and command.body == body


def message(tag, key="k", headers=None, redelivered=False, body=b"body", message_id=None):
    props = BasicProperties.decode(BasicProperties(headers=headers, message_id=message_id or str(tag)).encode())
    return Message(1, tag, redelivered, "", key, props, body)


def forwarder(mode, **kw):
    return Forwarder(exchange="", routing_key="dst", source_name="A/", destination_name="B/", ack_mode=mode, **kw)


def test_on_confirm_acks_in_tag_order_with_multiple_and_requeues_what_was_lost():
    f = forwarder(AckMode.ON_CONFIRM, owned_source=True)  # an echo in the bridge's own queue: suppressed
    b1 = f.prepare([message(1), message(2)])
    b2 = f.prepare([message(3)])
    b3 = f.prepare([message(4), message(5, headers={PATH_HEADER: ["B/"]})])
    assert (b1.count, b2.count, b3.count) == (2, 1, 1) and b3.skipped_tags == [5]
    assert f.sent(b1) == f.sent(b2) == f.sent(b3) == []
    assert (b1.first_seqno, b2.first_seqno, b3.first_seqno) == (1, 3, 4)
    assert f.confirm(True, 3, False, NOW) == []  # b1 is still unconfirmed: nothing may be acked past it
    assert f.unsettled == 5
    assert f.confirm(True, 2, True, NOW) == [("ack", 3, True)]
    assert f.lost(b3) == [("nack", 4, False), ("ack", 5, False)]  # never answered: back at once
    s = f.counters.snapshot()
    assert (s.forwarded, s.acked, s.requeued, s.suppressed, s.in_flight, s.backed_off) == (3, 4, 1, 1, 0, 0)


NOW = 1000.0


def test_a_returned_message_is_never_acked_it_waits_then_goes_back_to_the_source():
    f = forwarder(AckMode.ON_CONFIRM, backoff=BackOff(1.0, 8.0))
    batch = f.prepare([message(1, body=b"a"), message(2, body=b"b"), message(3, body=b"c")])
    f.sent(batch)
    returned = BasicProperties.decode(batch.properties[1])
    assert f.returned("dst", returned, b"b", 312, "NO_ROUTE") is True
    # RabbitMQ: the return, then the (multiple) ack that covers it
    actions = f.confirm(True, 3, True, NOW)
    assert actions == [("ack", 1, False), ("ack", 3, False)]  # not a multiple ack: it would ack 2 too
    s = f.counters.snapshot()
    assert (s.forwarded, s.returned, s.backed_off, s.requeued, s.in_flight) == (2, 1, 1, 0, 1)
    assert f.paused_until == NOW + 1.0 and f.next_due == NOW + 1.0
    assert f.due(NOW + 0.5) == []
    assert f.due(NOW + 1.0) == [("nack", 2, False)]
    assert f.unsettled == 0 and f.counters.requeued == 1


def test_a_multiple_ack_never_covers_a_held_delivery():
    f = forwarder(AckMode.ON_CONFIRM)
    b1 = f.prepare([message(1, body=b"x")])
    b2 = f.prepare([message(2), message(3)])
    f.sent(b1), f.sent(b2)
    assert f.confirm(False, 1, False, NOW) == []  # nacked: held
    assert f.held == 1 and f.counters.nacked == 1
    assert f.confirm(True, 3, True, NOW) == [("ack", 2, False), ("ack", 3, False)]
    assert f.due(NOW + 60) == [("nack", 1, False)]
    b3 = f.prepare([message(4)])
    f.sent(b3)
    assert f.confirm(True, 4, False, NOW) == [("ack", 4, True)]  # nothing held any more


def test_back_off_grows_per_message_and_per_destination_bounded():
    backoff = BackOff(0.5, 4.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4, 5, 100)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    f = forwarder(AckMode.ON_CONFIRM, backoff=backoff)
    now = NOW
    for attempt in range(1, 6):  # the same message refused again and again (a new tag each time)
        batch = f.prepare([message(attempt, body=b"same", redelivered=attempt > 1, message_id="m")])
        f.sent(batch)
        f.confirm(False, attempt, False, now)
        assert f.next_due == now + backoff.delay(attempt)
        assert f.paused_until == now + backoff.delay(attempt)
        now = f.next_due
        assert f.due(now) == [("nack", attempt, False)]
    clean = f.prepare([message(9, body=b"other")])
    f.sent(clean)
    f.confirm(True, 6, False, now)
    assert f._refusal_streak == 0 and f.counters.backed_off == 5 and f.counters.paused == 5


@pytest.mark.parametrize("policy,dlx,last", [("dead-letter", None, ("reject", 3, False)),
                                             ("drop", None, ("ack", 3, False))])
def test_after_max_attempts_dead_letter_or_drop(policy, dlx, last):
    f = forwarder(AckMode.ON_CONFIRM, refused=policy, max_attempts=3, dead_letter_exchange=dlx)
    for attempt in (1, 2, 3):
        batch = f.prepare([message(attempt, body=b"poison", message_id="m")])
        f.sent(batch)
        f.returned("dst", BasicProperties.decode(batch.properties[0]), b"poison", 312, "NO_ROUTE")
        actions = f.confirm(True, attempt, False, NOW)
        if attempt < 3:
            assert actions == [] and f.due(NOW + 60) == [("nack", attempt, False)]
    assert actions == [last]
    s = f.counters.snapshot()
    assert (s.returned, s.dead_lettered, s.dropped, s.in_flight) == (3, policy == "dead-letter", policy == "drop", 0)


def test_dead_letter_exchange_acks_after_its_confirm_or_requeues():
    f = forwarder(AckMode.ON_CONFIRM, refused="dead-letter", max_attempts=1, dead_letter_exchange="dlx")
    batch = f.prepare([message(1), message(2)])
    f.sent(batch)
    actions = f.confirm(False, 2, True, NOW)
    assert [(op, tag) for op, tag, _ in actions] == [("dead-letter", 1), ("dead-letter", 2)]
    dead = actions[0][2]
    assert dead.message.delivery_tag == 1
    assert dead.headers == {"x-amqwire-attempts": 1, "x-amqwire-reply-code": 0,
                            "x-amqwire-reply-text": "nacked by the destination", "x-amqwire-bridge": "amqwire.bridge"}
    assert f.dead_lettered(1, True, NOW) == [("ack", 1, False)]
    assert f.dead_lettered(2, False, NOW) == []  # the exchange refused it too: a back-off, not a hot loop
    assert f.next_due == NOW + f.backoff.delay(1) and f.held == 1
    assert f.due(f.next_due) == [("nack", 2, False)]
    s = f.counters.snapshot()
    assert (s.dead_lettered, s.requeued, s.in_flight) == (1, 1, 0)


def test_a_return_matching_nothing_belongs_to_the_next_confirm():
    f = forwarder(AckMode.ON_CONFIRM)
    batch = f.prepare([message(1), message(2)])
    f.sent(batch)
    assert f.returned("other-key", BasicProperties(), b"?", 312, "NO_ROUTE") is False
    assert f.confirm(True, 2, False, NOW) == []
    assert f.confirm(True, 1, False, NOW) == [("ack", 1, False)]
    assert f.held == 1


def test_restart_seqnos_sends_back_what_was_unanswered_and_numbers_from_one():
    f = forwarder(AckMode.ON_CONFIRM)
    b1 = f.prepare([message(1), message(2)])
    f.sent(b1)
    f.confirm(True, 1, False, NOW)
    assert f.restart_seqnos() == [("ack", 1, False), ("nack", 2, False)]
    b2 = f.prepare([message(3)])
    f.sent(b2)
    assert b2.first_seqno == 1
    assert f.confirm(True, 1, False, NOW) == [("ack", 3, True)]


def test_on_confirm_a_batch_with_nothing_to_forward_settles_in_order():
    f = forwarder(AckMode.ON_CONFIRM, max_hops=1)
    b1 = f.prepare([message(1)])
    b2 = f.prepare([message(2, headers={PATH_HEADER: ["X/"]})])
    assert b2.count == 0
    assert f.sent(b1) == [] and f.sent(b2) == []
    assert f.confirm(True, 1, False, NOW) == [("ack", 2, True)]
    assert f.counters.hops_dropped == 1


def test_on_publish_acks_after_the_write_and_no_ack_never():
    f = forwarder(AckMode.ON_PUBLISH, topic_filter=TopicFilter(exclude=["secret.#"]))
    b = f.prepare([message(1), message(2, key="secret.x"), message(3, redelivered=True)])
    assert f.sent(b) == [("ack", 3, True)]
    s = f.counters.snapshot()
    assert (s.forwarded, s.acked, s.filtered, s.redelivered, s.in_flight) == (2, 3, 1, 1, 0)
    f = forwarder(AckMode.NO_ACK)
    assert f.sent(f.prepare([message(1)])) == []
    assert f.counters.snapshot().forwarded == 1 and f.unsettled == 0


def test_the_api_type_checks_strictly_and_a_missing_await_is_an_error(tmp_path):
    import subprocess
    import sys
    import textwrap

    (tmp_path / "user.py").write_text(textwrap.dedent(
        """
        from amqwire.bridge import AckMode, Bridge, BridgeStats

        async def good() -> None:
            async with Bridge("amqp://a/", "q", "amqp://b/", ack_mode=AckMode.ON_PUBLISH, include=["a.#"]) as bridge:
                stats: BridgeStats = bridge.stats()
                forwarded: int = stats.forwarded
                await bridge.wait()

        async def bad() -> None:
            bridge: Bridge = Bridge("amqp://a/", "q", "amqp://b/").start()
        """
    ))
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"],
                            capture_output=True, text=True, cwd=tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "user.py:11:" in errors[0] and "Coroutine" in errors[0], result.stdout


def endpoint(*addresses, vhost="/", cluster=None):
    from amqwire.bridge.loops import Endpoint

    return Endpoint(frozenset(addresses), vhost, cluster)


def test_same_broker_by_address_and_port_or_cluster_name_and_always_the_vhost():
    from amqwire.bridge.loops import same_broker

    local = endpoint(("127.0.0.1", 5672))
    assert same_broker(local, endpoint(("127.0.0.1", 5672), ("::1", 5672)))  # localhost resolves to both
    assert not same_broker(local, endpoint(("127.0.0.1", 5673)))  # another node on this machine
    assert not same_broker(local, endpoint(("127.0.0.1", 5672), vhost="other"))
    assert same_broker(endpoint(("10.0.0.1", 5672), cluster="c1"), endpoint(("10.0.0.2", 5672), cluster="c1"))
    assert not same_broker(endpoint(("10.0.0.1", 5672), cluster="c1"), endpoint(("10.0.0.2", 5672), cluster="c2"))


def test_find_loop_default_exchange_and_bindings():
    from amqwire.bridge.loops import Binding, find_loop

    assert "routes routing key 'q'" in find_loop(queue="q", exchange="", routing_key="q")
    assert find_loop(queue="q", exchange="", routing_key="other") is None
    assert "own routing key" in find_loop(queue="q", exchange="", routing_key=None)
    assert find_loop(queue="q", exchange="x", routing_key="k") is None  # bindings unknown: not detected
    bindings = {
        "orders": [Binding("q", "queue", "orders.#"), Binding("audit", "exchange", "#")],
        "audit": [Binding("q2", "queue", "")],
    }
    types = {"orders": "topic", "audit": "fanout"}
    assert "bound to queue 'q'" in find_loop(queue="q", exchange="orders", routing_key="orders.eu",
                                             exchange_types=types, bindings=bindings)
    assert find_loop(queue="q", exchange="orders", routing_key="billing", exchange_types=types, bindings=bindings) is None
    via = find_loop(queue="q2", exchange="orders", routing_key="billing", exchange_types=types, bindings=bindings)
    assert "bound to exchange 'audit'" in via and "queue 'q2'" in via
    assert find_loop(queue="q", exchange="direct", routing_key="a", bindings={"direct": [Binding("q", "queue", "b")]}) is None


def test_command_urls_from_files_and_environment_password_replaced(tmp_path):
    from amqwire.bridge.__main__ import broker_url, parser
    from amqwire.bridge.errors import BadConfiguration

    (tmp_path / "url").write_text("amqp://app:old@dest:5673/v\n")
    (tmp_path / "pw").write_text("n3w/p@ss\n")
    args = parser().parse_args(["--src-queue", "q", "--dest-url-file", str(tmp_path / "url"),
                                "--dest-password-file", str(tmp_path / "pw")])
    env = {"AMQWIRE_SRC_URL": "amqp://app@src/", "AMQWIRE_SRC_PASSWORD": "s3cret"}
    assert broker_url(args, "dest", env) == "amqp://app:n3w%2Fp%40ss@dest:5673/v"
    assert broker_url(args, "src", env) == "amqp://app:s3cret@src/"
    with pytest.raises(BadConfiguration, match="AMQWIRE_SRC_URL"):
        broker_url(args, "src", {})
    args = parser().parse_args(["--src-queue", "q", "--dest-url-file", str(tmp_path / "none")])
    with pytest.raises(BadConfiguration, match="--dest-url-file: cannot read"):
        broker_url(args, "dest", {})


def test_returns_are_logged_with_the_reason_without_flooding(caplog):
    caplog.set_level(logging.WARNING, logger="amqwire.bridge")
    f = forwarder(AckMode.ON_PUBLISH)
    for i in range(100):
        f.returned("dst", BasicProperties(), b"x", 312, "NO_ROUTE", NOW + i * 0.01)
    f.returned("dst", BasicProperties(), b"x", 312, "NO_ROUTE", NOW + 10.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "312 NO_ROUTE" in lines[0] and "99 more" in lines[1]
    assert f.counters.returned == 101


def test_the_amqwire_bridge_console_script_is_installed():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "amqwire-bridge"
    assert script.exists(), f"{script}: pyproject.toml's [project.scripts] did not install it"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith("usage: amqwire-bridge"), done.stdout + done.stderr
    assert "--src-password-file" in done.stdout and "--on-refused" in done.stdout


def persistent(tag, body=b"body"):
    props = BasicProperties.decode(BasicProperties(delivery_mode=2, message_id=str(tag)).encode())
    return Message(1, tag, False, "", "k", props, body)


def test_auto_acks_transient_messages_when_written_and_persistent_ones_on_their_confirm():
    f = forwarder(AckMode.AUTO, owned_source=True)
    b1 = f.prepare([persistent(1), message(2), persistent(3), message(4, headers={PATH_HEADER: ["B/"]})])
    assert b1.count == 3 and b1.early == {1}
    # the transient one and the suppressed one at once, one by one: 1 and 3 wait for their confirms
    assert f.sent(b1) == [("ack", 2, False), ("ack", 4, False)]
    assert f.counters.forwarded == 1 and f.unsettled == 2
    # seqnos count the transient publish too: 1, 2, 3
    b2 = f.prepare([message(5), message(6)])
    assert f.sent(b2) == [("ack", 5, False), ("ack", 6, False)]  # 1 and 3 are unacked: no multiple ack
    assert b2.first_seqno == 4
    assert f.confirm(True, 5, True, NOW) == [("ack", 3, True)]  # the highest unacked tag, never an acked one
    b3 = f.prepare([message(7), message(8)])
    assert f.sent(b3) == [("ack", 8, True)]  # nothing unsettled before them
    s = f.counters.snapshot()
    assert (s.forwarded, s.acked, s.suppressed, s.in_flight) == (7, 8, 1, 0)


def test_auto_a_refused_persistent_message_waits_a_refused_transient_one_is_gone():
    f = forwarder(AckMode.AUTO, backoff=BackOff(1.0, 8.0))
    batch = f.prepare([persistent(1, body=b"p"), message(2, body=b"t"), persistent(3, body=b"q")])
    assert f.sent(batch) == [("ack", 2, False)]
    assert f.returned("dst", BasicProperties.decode(batch.properties[1]), b"t", 312, "NO_ROUTE") is True
    assert f.confirm(False, 1, False, NOW) == []  # nacked: held
    assert f.confirm(True, 3, True, NOW) == [("ack", 3, False)]  # not multiple: 1 is held
    s = f.counters.snapshot()
    assert (s.forwarded, s.returned, s.nacked, s.backed_off, s.in_flight) == (2, 1, 1, 1, 1)
    assert f.due(NOW + 1.0) == [("nack", 1, False)]
    assert f.unsettled == 0


def test_auto_on_a_lost_destination_only_persistent_messages_go_back():
    f = forwarder(AckMode.AUTO)
    batch = f.prepare([message(1), persistent(2)])
    assert f.sent(batch) == [("ack", 1, False)]
    assert f.restart_seqnos() == [("nack", 2, False)]
    assert f.unsettled == 0 and f.counters.requeued == 1


def test_demand_starts_on_consumers_stops_when_they_go_and_drains_before_starting_again():
    from amqwire.bridge.demand import START, STOP, Demand, DemandState

    d = Demand("orders")
    assert d.observed(None) is None and d.observed(0) is None and d.state is DemandState.IDLE
    assert d.observed(2) == START and d.state is DemandState.CONSUMING
    assert d.observed(3) is None  # already consuming
    assert d.observed(0) == STOP and d.state is DemandState.DRAINING
    assert d.observed(None) is None  # the queue deleted at the destination: still no demand
    assert d.drained() is None and d.state is DemandState.IDLE
    assert d.observed(1) == START
    assert d.observed(0) == STOP
    assert d.observed(1) is None  # demand back while draining: never a second consumer...
    assert d.drained() == START and d.state is DemandState.CONSUMING  # ...it starts once drained
    assert d.drained() is None  # not draining: nothing to do
    assert (d.starts, d.stops) == (3, 2)
    d.start_failed()
    assert d.state is DemandState.IDLE and d.observed(1) == START


def test_consumer_events_name_their_queue_in_the_bridges_vhost_only():
    from amqwire.bridge.demand import consumer_event_queue

    assert consumer_event_queue({"queue": b"orders", "vhost": b"/"}, "/") == "orders"
    assert consumer_event_queue({"queue": "orders", "vhost": "/"}, "/") == "orders"
    assert consumer_event_queue({"queue": b"orders", "vhost": b"other"}, "/") is None
    assert consumer_event_queue({"consumer_tag": b"x"}, "/") is None
    assert consumer_event_queue(None, "/") is None


def write_config(tmp_path, text, name="bridges.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_config_file_bridges_with_globs_and_defaults_from_the_command_line(tmp_path):
    from amqwire.bridge import load_config
    from amqwire.bridge.connector import choose

    path = write_config(tmp_path, """
management_port = 15673

[[bridge]]
include = ["orders.*", "audit"]
exclude = ["orders.test*"]
dest_exchange = "orders"
ack_mode = "auto"
include_keys = ["eu.#"]

[[bridge]]
include = ["*"]
demand = true
""")
    specs, settings = load_config(path, {"ack_mode": "on-confirm", "prefetch": 100})
    assert settings == {"management_port": 15673}
    first, second = specs
    assert first.needs_listing and first.include == ("orders.*", "audit")
    assert first.options == {"ack_mode": "auto", "prefetch": 100, "dest_exchange": "orders", "include": ["eu.#"]}
    assert second.options == {"ack_mode": "on-confirm", "prefetch": 100, "demand": True}
    queues = ["audit", "orders.eu", "orders.test.1", "metrics"]
    assert [(q, s.name) for q, s in choose(specs, queues)] == [
        ("audit", "[[bridge]] 1"), ("orders.eu", "[[bridge]] 1"), ("orders.test.1", "[[bridge]] 2"),
        ("metrics", "[[bridge]] 2")]  # the first bridge that chooses a queue forwards it


@pytest.mark.parametrize("text,error", [
    ("", "no [[bridge]] table"),
    ("[[bridge]]\nexclude = ['x']\n", "include must be a non-empty list"),
    ("[[bridge]]\ninclude = ['q']\nack_mode = 'sometimes'\n", "ack_mode must be one of"),
    ("[[bridge]]\ninclude = ['q']\nprefetch = '10'\n", "prefetch must be an integer"),
    ("[[bridge]]\ninclude = ['q']\nqueue = 'q'\n", "unknown key 'queue'"),
    ("port = 1\n[[bridge]]\ninclude = ['q']\n", "unknown setting 'port'"),
    ("[[bridge]\n", "is not TOML"),
])
def test_a_bad_config_file_is_one_line_naming_the_file_and_key(tmp_path, text, error):
    from amqwire.bridge import BadConfiguration, load_config

    path = write_config(tmp_path, text)
    with pytest.raises(BadConfiguration, match=None) as info:
        load_config(path)
    assert error in str(info.value) and path in str(info.value) and "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_the_documented_config_example_loads(tmp_path):
    import re
    import textwrap
    from pathlib import Path

    from amqwire.bridge import load_config

    page = (Path(__file__).resolve().parent.parent / "docs" / "bridge.md").read_text()
    examples = [textwrap.dedent(block) for block in re.findall(r"```toml\n(.*?)```", page, flags=re.S)]
    assert examples
    for example in examples:
        specs, _ = load_config(write_config(tmp_path, example))
        assert specs


def test_command_bad_config_or_no_queue_exits_2_with_one_line(tmp_path, capsys):
    from amqwire.bridge.__main__ import main

    urls = ["--src", "amqp://guest:guest@127.0.0.1:1/", "--dest", "amqp://guest:guest@127.0.0.1:1/"]
    levels = {name: logging.getLogger(name).level for name in ("amqwire.client", "amqwire.bridge")}
    bad = write_config(tmp_path, "[[bridge]]\ninclude = ['q']\nack_mode = 'sometimes'\n")
    for args, text in [(["--config", bad], "ack_mode must be one of"),
                       ([], "give --src-queue (repeatable), --src-exchange or --config"),
                       (["--config", bad, "--src-queue", "q"], "give --src-queue (repeatable), --src-exchange or --config"),
                       (["--src-queue", "q", "--demand", "--duplex"], "--demand and --duplex"),
                       (["--config", write_config(tmp_path, "[[bridge]]\ninclude = ['q']\n\n[[bridge]]\n"
                                                  "include = ['r']\non_refused = 'drop'\nack_mode = 'no-ack'\n", "two.toml")],
                        "[[bridge]] 2: refused='drop' needs ack_mode")]:
        assert main(urls + args) == 2
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) == 1, err
    # run in-process, it leaves the loggers it quietened as they were (the client's WARNINGs
    # went missing from later tests' caplog when it did not)
    assert {name: logging.getLogger(name).level for name in levels} == levels


def test_command_tracing_without_opentelemetry_exits_2_with_one_line(tmp_path):
    """--tracing where opentelemetry-api cannot be imported: the usual one line and exit 2,
    before anything connects (the URLs point where nothing listens)."""
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"  # import opentelemetry -> ImportError
        "from amqwire.bridge.__main__ import main\n"
        "sys.exit(main(['--tracing', '--src-queue', 'q', '--src', 'amqp://guest:guest@127.0.0.1:1/',"
        " '--dest', 'amqp://guest:guest@127.0.0.1:1/'], prog='amqwire-bridge'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "amqwire-bridge: error: --tracing: tracing needs opentelemetry-api: pip install 'amqwire[otel]' (or opentelemetry-api)"
    ], done.stderr



# ---------------------------------------------------------------- a message that came back


@pytest.mark.parametrize("mode", [AckMode.ON_CONFIRM, AckMode.ON_PUBLISH, AckMode.AUTO])
def test_a_message_back_from_the_destination_is_requeued_never_acked_and_nothing_after_it_is_forwarded(mode):
    """It has been on the destination (its path names it), in a queue the bridge does not own:
    forwarding it would loop and acking it would lose it.  It and everything after it go
    back; what was forwarded before it settles as usual; no ack ever names a requeued tag."""
    f = forwarder(mode)
    b1 = f.prepare([persistent(1), message(2, headers={PATH_HEADER: ["B/"]}), persistent(3), message(4, key="x")])
    assert (b1.count, b1.forwarded_tags, b1.left_tags) == (1, [1], [2, 3, 4])
    assert f.loop is not None and (f.loop.delivery_tag, f.loop.path, f.loop.probe) == (2, ("B/",), False)
    actions = f.sent(b1)
    assert actions[:3] == [("nack", 2, False), ("nack", 3, False), ("nack", 4, False)]  # before any ack
    b2 = f.prepare([persistent(5)])
    assert (b2.count, b2.left_tags) == (0, [5])  # after a loop nothing more is forwarded
    actions += f.sent(b2)
    if mode.confirms:
        actions += f.confirm(True, 1, False, NOW)
    acks = [a for a in actions if a[0] == "ack"]
    assert acks == [("ack", 1, True)], actions
    assert [a[1] for a in actions if a[0] == "nack"] == [2, 3, 4, 5]
    s = f.counters.snapshot()
    assert (s.forwarded, s.acked, s.looped, s.requeued, s.suppressed, s.in_flight) == (1, 1, 1, 4, 0, 0)
    assert "looped 1" in s.line()


def test_a_multiple_ack_never_names_a_requeued_tag():
    """RabbitMQ closes the channel (406 unknown delivery tag) when a multiple ack names a
    tag that is no longer unacked: a batch whose last delivery came back acks up to the
    one before."""
    f = forwarder(AckMode.ON_PUBLISH)
    b = f.prepare([message(1), message(2), message(3, headers={PATH_HEADER: ["B/"]})])
    assert f.sent(b) == [("nack", 3, False), ("ack", 2, True)]
    f = forwarder(AckMode.ON_CONFIRM)
    b = f.prepare([message(1), message(2, headers={PATH_HEADER: ["B/"]})])
    assert f.sent(b) == [("nack", 2, False)]
    assert f.confirm(True, 1, False, NOW) == [("ack", 1, True)]
    f = forwarder(AckMode.ON_CONFIRM)
    b = f.prepare([message(1, headers={PATH_HEADER: ["B/"]})])
    assert f.sent(b) == [("nack", 1, False)] and f.unsettled == 0


def test_no_ack_mode_cannot_leave_a_message_says_so(caplog):
    caplog.set_level(logging.ERROR, logger="amqwire.bridge")
    f = forwarder(AckMode.NO_ACK)
    b = f.prepare([message(1), message(2, headers={PATH_HEADER: ["B/"]})])
    assert f.sent(b) == [] and f.loop is not None
    assert any("they are lost" in r.getMessage() for r in caplog.records)
    assert (f.counters.looped, f.unsettled) == (1, 0)


def test_an_echo_in_a_queue_the_bridge_owns_is_suppressed_and_forwarding_goes_on():
    f = forwarder(AckMode.ON_CONFIRM, owned_source=True)
    b = f.prepare([message(1, headers={PATH_HEADER: ["B/"]}), message(2)])
    assert (b.count, b.skipped_tags, b.left_tags, f.loop) == (1, [1], [], None)


def test_the_bridges_own_probe_found_in_its_source_is_a_loop_a_foreign_one_is_removed(caplog):
    from amqwire.bridge.path import PROBE_HEADER
    caplog.set_level(logging.WARNING, logger="amqwire.bridge")
    f = forwarder(AckMode.ON_CONFIRM, probe_token="tok-1")
    b = f.prepare([message(1, headers={PROBE_HEADER: "someone-else"}), message(2)])
    assert (b.skipped_tags, b.forwarded_tags, f.loop) == ([1], [2], None)
    assert any("another bridge" in r.getMessage() for r in caplog.records)
    b = f.prepare([message(3), message(4, headers={PROBE_HEADER: "tok-1"}), message(5)])
    assert (b.forwarded_tags, b.skipped_tags, b.left_tags) == ([3], [4], [5])
    assert f.loop is not None and f.loop.probe


def test_with_headers_adds_the_reason_and_keeps_every_other_byte():
    from amqwire.bridge.path import with_headers
    wire = BasicProperties(content_type="a/b", headers={"keep": 1, "x-amqwire-attempts": 9}, priority=3).encode()
    props = BasicProperties.decode(wire)
    out = with_headers(props, {"x-amqwire-attempts": 5, "x-amqwire-reply-text": "NO_ROUTE"})
    back = BasicProperties.decode(out)
    assert back.headers == {"keep": 1, "x-amqwire-attempts": 5, "x-amqwire-reply-text": "NO_ROUTE"}
    assert (back.content_type, back.priority) == ("a/b", 3)
    bare = BasicProperties.decode(BasicProperties(message_id="m").encode())
    assert BasicProperties.decode(with_headers(bare, {"x-amqwire-attempts": 1})).headers == {"x-amqwire-attempts": 1}


def test_config_table_with_an_exchange_source():
    from amqwire.bridge.connector import specs_from
    from amqwire.bridge.errors import BadConfiguration
    specs, _ = specs_from({"bridge": [{"src_exchange": "events", "binding_key": "a.#", "name": "mirror"},
                                      {"include": ["q1"]}]}, {})
    assert specs[0].exchange == "events" and specs[0].subscription == "amqwire.bridge.mirror"
    assert specs[0].options["src_binding_key"] == "a.#" and specs[1].exchange is None
    with pytest.raises(BadConfiguration, match="not both"):
        specs_from({"bridge": [{"src_exchange": "events", "include": ["q"]}]}, {})
