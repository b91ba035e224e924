"""A connection's lifecycle: one state, one table (client/lifecycle.py), and what the
connection reads from it, on both transports."""
from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading

import pytest

from amqwire.client.errors import InvalidStateError
from amqwire.client.lifecycle import (
    ANSWERABLE_STATES,
    OPENED_STATES,
    RECOVERING_STATES,
    SOCKET_STATES,
    TRANSITIONS,
    USABLE_STATES,
    ConnectionSignal,
    ConnectionStatus,
    Lifecycle,
)

S, E = ConnectionStatus, ConnectionSignal


def at(state: ConnectionStatus) -> Lifecycle:
    """A lifecycle driven into ``state`` through the table (the shortest path)."""
    paths = {S.NEW: []}
    frontier = [S.NEW]
    while frontier:
        nxt = []
        for src in frontier:
            for (a, event), b in TRANSITIONS.items():
                if a is src and b not in paths:
                    paths[b] = paths[src] + [event]
                    nxt.append(b)
        frontier = nxt
    lifecycle = Lifecycle("test")
    for event in paths[state]:
        lifecycle.fire(event, RuntimeError("why"))
    assert lifecycle.state is state
    return lifecycle


def test_every_state_is_reachable_and_only_final_states_are_dead_ends():
    for state in S:
        at(state)
    for state in S:
        leaving = {b for (a, _), b in TRANSITIONS.items() if a is state and b is not state}
        if state in (S.CLOSED,):
            assert not leaving
        else:
            assert leaving, f"{state} has no way out"


@pytest.mark.parametrize("state", list(S), ids=str)
def test_an_event_the_table_does_not_allow_raises_naming_both(state):
    for event in E:
        lifecycle = at(state)
        if (state, event) in TRANSITIONS:
            old = lifecycle.fire(event)
            assert old is state and lifecycle.state is TRANSITIONS[state, event]
            continue
        with pytest.raises(InvalidStateError) as raised:
            lifecycle.fire(event)
        assert str(event) in str(raised.value) and str(state) in str(raised.value)
        assert lifecycle.state is state  # unchanged


def test_views_follow_the_state_and_error_is_kept_until_open():
    lifecycle = Lifecycle("test")
    first, second = ConnectionError("first"), ConnectionError("second")
    for event, error in [(E.SOCKET_UP, None), (E.HANDSHAKE_DONE, None), (E.LOST_RECOVERABLE, first),
                         (E.SOCKET_UP, None), (E.LOST, second), (E.SOCKET_UP, None), (E.HANDSHAKE_DONE, None)]:
        lifecycle.fire(event, error)
        state = lifecycle.state
        assert lifecycle.usable == (state in USABLE_STATES)
        assert lifecycle.answerable == (state in ANSWERABLE_STATES)
        assert lifecycle.has_socket == (state in SOCKET_STATES)
        assert lifecycle.opened == (state in OPENED_STATES)
        assert lifecycle.recovering == (state in RECOVERING_STATES)
        if state is S.DOWN or state is S.RECONNECTING:
            assert lifecycle.error is first  # the first loss stays the reason
    assert lifecycle.state is S.RESTORING and lifecycle.error is first
    assert not lifecycle.usable and lifecycle.answerable  # acks of re-subscribed consumers go ahead
    lifecycle.fire(E.RESTORED)
    assert lifecycle.state is S.OPEN and lifecycle.error is None


def test_transitions_are_logged_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="amqwire.client.lifecycle")
    lifecycle = Lifecycle("connection to x")
    lifecycle.fire(E.SOCKET_UP)
    lifecycle.fire(E.HANDSHAKE_DONE)
    lines = [r.getMessage() for r in caplog.records if r.name == "amqwire.client.lifecycle"]
    assert lines == ["connection to x: new -> connecting (socket up)",
                     "connection to x: connecting -> open (handshake done)"]


# --------------------------------------------------------------------------- on both transports
# (states compared with ==: the blocking transport's test proxy wraps what it returns)


def test_states_across_open_close_and_a_loss_without_recovery(run):
    async def scenario(api):
        E_ = api.errors
        conn = await api.connect()
        assert conn.state == S.OPEN and conn.is_open
        await conn.close()
        assert conn.state == S.CLOSED and not conn.is_open
        await conn.close()  # twice: nothing happens
        assert conn.state == S.CLOSED

        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=False)
        ch = await conn.channel()
        proxy.kill()
        with pytest.raises(E_.AMQPConnectionError):
            await asyncio.wait_for(ch.queue_declare("", exclusive=True), 10)
        assert conn.state == S.FAILED
        await conn.close()
        assert conn.state == S.CLOSED

    run(scenario)


def test_a_recovery_goes_down_and_comes_back_open(run):
    async def scenario(api):
        from amqwire.client import RecoveryPolicy

        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=RecoveryPolicy(initial_delay=0.5, max_delay=0.5))
        ch = await conn.channel()
        seen = []
        conn.add_recovery_started_listener(lambda event: seen.append(conn.state))
        proxy.kill()
        for _ in range(200):
            if conn.state != S.OPEN:
                break
            await asyncio.sleep(0.01)
        assert conn.state in RECOVERING_STATES, conn.state
        assert await conn.wait_recovered(20), "no recovery within 20 s"
        assert conn.state == S.OPEN and seen and seen[0] in RECOVERING_STATES
        await ch.queue_declare("", exclusive=True)

    run(scenario)


class _NotABroker:
    """Accepts connections and answers with bytes that are not AMQP, then closes."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            try:
                sock.recv(64)
                sock.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            except OSError:
                pass
            sock.close()

    def close(self):
        self.listener.close()


def test_a_broker_that_fails_the_handshake_does_not_spoil_the_next_one(run):
    """connect() with two URLs, the first not a broker: the failed handshake's error must not
    stay the connection's reason once the second broker opened it (it did: is_open False and
    every call raised the first broker's error)."""
    peer = _NotABroker()

    async def scenario(api):
        bad = api.url_with(host="127.0.0.1", port=peer.port)
        conn = await api.connect([bad, api.url])
        assert conn.state == S.OPEN and conn.is_open
        ch = await conn.channel()
        await ch.queue_declare("", exclusive=True)

    try:
        run(scenario)
    finally:
        peer.close()


# --------------------------------------------------------------------------- channels and consumers


def test_channel_and_consumer_tables_raise_naming_both_and_keep_the_first_reason():
    from amqwire.client.lifecycle import (
        CHANNEL_PHASES,
        CONSUMER_PHASES,
        HANDSHAKE_STEPS,
        PRODUCER_PHASES,
        REQUEST_PHASES,
        SENDER_PHASES,
        ChannelSignal,
        ChannelPhase,
        ConsumerSignal,
        ConsumerPhase,
        HandshakeSignal,
        HandshakeStep,
        Machine,
        ProducerPhase,
        ProducerSignal,
        RequestPhase,
        RequestSignal,
        SenderPhase,
        SenderSignal,
    )

    for table, states, events in ((CHANNEL_PHASES, ChannelPhase, ChannelSignal),
                                  (CONSUMER_PHASES, ConsumerPhase, ConsumerSignal),
                                  (REQUEST_PHASES, RequestPhase, RequestSignal),
                                  (PRODUCER_PHASES, ProducerPhase, ProducerSignal),
                                  (SENDER_PHASES, SenderPhase, SenderSignal),
                                  (HANDSHAKE_STEPS, HandshakeStep, HandshakeSignal)):
        for state in states:
            for event in events:
                machine = Machine(table, state, None, "thing 1")
                if (state, event) in table:
                    assert machine.fire(event) is state and machine.state is table[state, event]
                else:
                    with pytest.raises(InvalidStateError, match=re.escape(f"thing 1: {event} is not possible while {state}")):
                        machine.fire(event)
    channel = Machine(CHANNEL_PHASES, ChannelPhase.OPENING, ChannelPhase.CLOSED, "channel 1")
    channel.fire(ChannelSignal.OPENED)
    channel.fire(ChannelSignal.CONNECTION_DOWN, RuntimeError("lost"))
    assert channel.state is ChannelPhase.DOWN and channel.reason is None  # not an end
    channel.fire(ChannelSignal.REOPENED)
    first, second = RuntimeError("closed by the broker"), RuntimeError("then the connection")
    channel.fire(ChannelSignal.CLOSED, first)
    channel.fire(ChannelSignal.CONNECTION_GONE, second)
    assert channel.state is ChannelPhase.CLOSED and channel.reason is first


def test_a_request_given_up_on_is_waited_for_and_the_producer_closes_one_way():
    from amqwire.client.lifecycle import (
        PRODUCER_PHASES,
        REQUEST_PHASES,
        Machine,
        ProducerPhase as P,
        ProducerSignal as PS,
        RequestPhase as R,
        RequestSignal as RS,
    )

    request = Machine(REQUEST_PHASES, R.IDLE, None, "channel 1's request")
    for signal, state in ((RS.SEND, R.WAITING), (RS.ABANDON, R.ABANDONED), (RS.REPLY, R.IDLE),
                          (RS.SEND, R.WAITING), (RS.END, R.IDLE)):
        request.fire(signal)
        assert request.state is state
    with pytest.raises(InvalidStateError, match="channel 1's request: its caller gave up is not possible while idle"):
        request.fire(RS.ABANDON)
    closing = [PS.START, PS.CLOSE, PS.STOP, PS.FINISH]
    producer = Machine(PRODUCER_PHASES, P.NEW, P.CLOSED, "producer")
    assert [producer.fire(signal) for signal in closing] == [P.NEW, P.OPEN, P.CLOSING, P.STOPPING]
    assert producer.state is P.CLOSED
    # a sender that failed: refused at once, what it held failed, close() still closes
    producer = Machine(PRODUCER_PHASES, P.NEW, P.CLOSED, "producer")
    for signal in (PS.START, PS.SENDER_FAILED, PS.FINISH, PS.CLOSE, PS.STOP, PS.FINISH):
        producer.fire(signal)
    assert producer.state is P.CLOSED


def test_a_channel_goes_down_with_its_connection_and_comes_back_open(run):
    async def scenario(api):
        from amqwire.client import RecoveryPolicy
        from amqwire.client.lifecycle import ChannelPhase

        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), recovery=RecoveryPolicy(initial_delay=0.5, max_delay=0.5))
        ch = await conn.channel()
        await ch.confirm_select()
        closed = await conn.channel()
        assert ch._lifecycle.state == ChannelPhase.OPEN
        proxy.kill()
        for _ in range(500):
            if ch._lifecycle.state != ChannelPhase.OPEN:
                break
            await asyncio.sleep(0.01)
        assert ch._lifecycle.state == ChannelPhase.DOWN and not ch.is_open
        await closed.close()  # closed while down: stays closed
        assert await conn.wait_recovered(20), "no recovery within 20 s"
        # open, and watched until a publish is acked (RecoveryPolicy.renew_after_nacks)
        assert ch._lifecycle.state == ChannelPhase.RESTORED and ch.is_open
        assert ch._max_in_flight == 20, "until an ack, no more than renew_after_nacks publishes in flight"
        assert closed._lifecycle.state == ChannelPhase.CLOSED and not closed.is_open
        await api.wait(await ch.publish_async("", "amq.no-such-queue", b"x"), timeout=10)  # unroutable: acked
        assert ch._lifecycle.state == ChannelPhase.OPEN and ch.is_open
        assert ch._max_in_flight == 10000, "acked: the whole confirm window again"
        await conn.close()
        assert ch._lifecycle.state == ChannelPhase.CLOSED

    run(scenario)


def test_closing_a_dead_channel_never_closes_the_one_that_took_its_number(run):
    """A channel closed by the broker, its number taken by a new channel, then close() on
    the old object: that must leave the new channel alone (it closed it: the old object
    looked its number up in the core and found the new channel open)."""

    async def scenario(api):
        E_ = api.errors
        conn = await api.connect()
        old = await conn.channel()
        number = old.channel_id
        with pytest.raises(E_.NotFound):
            await old.queue_declare(api.names.queue(), passive=True)
        new = await conn.channel(channel_id=number)
        await old.close()
        assert new.is_open
        await new.queue_declare("", exclusive=True)

    run(scenario)


def test_a_queue_that_nacks_by_design_costs_a_bounded_number_of_renewals(run, names, caplog):
    """After a recovery, a channel whose publishes are only nacked is renewed (a fresh
    channel, a new number: RecoveryPolicy.renew_after_nacks); a queue that rejects every
    publish (x-max-length 0, x-overflow reject-publish) must not make it churn channels:
    ``max_renewals`` renewals, one WARNING, every publish's nack reported to its caller; the
    renewed channel keeps confirm mode, qos and its consumer."""
    caplog.set_level(logging.WARNING, logger="amqwire.client")  # whatever an earlier test left it at

    async def scenario(api):
        from amqwire.client import RecoveryPolicy
        from amqwire.client.lifecycle import ChannelPhase

        E = api.errors
        full, other = names.queue(), names.queue()
        proxy = api.proxy()
        policy = RecoveryPolicy(initial_delay=0.05, max_delay=0.1, renew_after_nacks=5, max_renewals=3)
        conn = await api.connect(api.proxy_url(proxy), recovery=policy)
        ch = await conn.channel()
        await ch.queue_declare(full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
        await ch.queue_declare(other)
        await ch.basic_qos(prefetch_count=7)
        consumer = await ch.consume(other)
        await ch.confirm_select()
        first = ch.channel_id
        with pytest.raises(E.PublishNacked):  # nacked before any recovery: no renewal
            await ch.basic_publish("", full, b"before")
        assert ch._lifecycle.state == ChannelPhase.OPEN and ch.channel_id == first
        proxy.kill()
        for _ in range(500):
            if ch._lifecycle.state == ChannelPhase.DOWN:
                break
            await asyncio.sleep(0.01)
        assert await conn.wait_recovered(20), "no recovery within 20 s"
        caplog.clear()
        outcomes = []
        for n in range(60):
            try:
                await api.wait(await ch.publish_async("", full, b"%d" % n), timeout=10)
                outcomes.append("ack")
            except E.PublishNacked:
                outcomes.append("nack")
        assert outcomes == ["nack"] * 60, "every publish to the full queue is nacked, and said so"
        assert ch._nack_watch.renewals == 3
        assert ch._lifecycle.state == ChannelPhase.OPEN, "given up: open, no longer watched"
        assert ch.channel_id != first, "renewed: a fresh channel number"
        given_up = [r for r in caplog.records if "still nacked after 3 renewals" in r.getMessage()]
        assert len(given_up) == 1 and given_up[0].levelname == "WARNING"
        # the renewed channel: confirm mode, its consumer and qos came along
        await api.wait(await ch.publish_async("", other, b"hello"), timeout=10)
        message = await api.next(consumer, timeout=10)
        assert bytes(message.body) == b"hello"
        await message.ack()
        assert ch._qos is not None and ch._qos[0] == 7
        await conn.close()

    run(scenario)


def test_a_renewal_cancelled_with_its_publish_leaves_the_channel_stalled_for_the_next(tcp_proxy, names):
    """asyncio: the publish that renews a stalled channel is cancelled during the renewal's
    back-off; the channel is not left holding publishes: it is stalled again, and the next
    publish renews it."""
    from amqwire.client import PublishNacked, RecoveryPolicy, aio
    from amqwire.client.lifecycle import ChannelPhase

    full = names.queue()

    async def scenario():
        proxy, url = tcp_proxy()
        policy = RecoveryPolicy(initial_delay=0.1, max_delay=0.1, renew_after_nacks=3, max_renewals=5)
        conn = await aio.connect(url, recovery=policy)
        ch = await conn.channel()
        await ch.queue_declare(full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
        await ch.confirm_select()
        proxy.kill()
        for _ in range(500):
            if ch._lifecycle.state is ChannelPhase.DOWN:
                break
            await asyncio.sleep(0.01)
        assert await conn.wait_recovered(20), "no recovery within 20 s"
        for n in range(3):
            with pytest.raises(PublishNacked):
                await asyncio.wait_for(ch.basic_publish("", full, b"%d" % n), 10)
        assert ch._lifecycle.state is ChannelPhase.STALLED
        task = asyncio.ensure_future(ch.publish_async("", full, b"cancelled"))
        await asyncio.sleep(0.02)  # inside the renewal's back-off (0.05 to 0.1 s)
        assert ch._lifecycle.state is ChannelPhase.RENEWING
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ch._lifecycle.state is ChannelPhase.STALLED and ch._flow_paused
        first = ch.channel_id
        with pytest.raises(PublishNacked):  # renewed first, then nacked by the full queue
            await asyncio.wait_for(ch.basic_publish("", full, b"next"), 10)
        assert ch.channel_id != first and ch._nack_watch.renewals == 2
        await conn.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
