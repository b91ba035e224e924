"""The recovery plan without a broker: what Topology records and replays, and the back-off."""
from amqwire.client.recovery import RecoveryPolicy, Topology, recoverable
from amqwire.client.errors import ConnectionClosed, ConnectionLost, HeartbeatTimeout
from amqwire.codec import (
    ExchangeBind, ExchangeDeclare, ExchangeDelete, QueueBind, QueueDeclare, QueueDeclareOk,
    QueueDelete, QueueUnbind,
)


def drive(topology, replies):
    """Run the replay plan; replies maps a server-named declare to the new name."""
    sent = []
    plan = topology.replay()
    method = next(plan, None)
    while method is not None:
        sent.append(method)
        reply = QueueDeclareOk(replies.pop(0), 0, 0) if isinstance(method, QueueDeclare) and not method.queue else None
        try:
            method = plan.send(reply)
        except StopIteration:
            break
    return sent


def test_replay_declares_in_order_and_follows_renamed_queues():
    t = Topology()
    t.record(ExchangeDeclare(exchange="ex", exchange_type="topic", durable=True), None)
    t.record(ExchangeDeclare(exchange="gone"), None)
    t.record(ExchangeDeclare(exchange="ex", exchange_type="topic", passive=True), None)  # not recorded
    t.record(QueueDeclare(queue="named", durable=True, arguments={"x-max-length": 5}), QueueDeclareOk("named", 0, 0))
    t.record(QueueDeclare(queue="", exclusive=True), QueueDeclareOk("amq.gen-old", 0, 0))
    t.record(QueueBind(queue="named", exchange="ex", routing_key="a.*"), None)
    t.record(QueueBind(queue="amq.gen-old", exchange="ex", routing_key="b", arguments={"k": 1}), None)
    t.record(QueueBind(queue="named", exchange="ex", routing_key="unbound"), None)
    t.record(QueueUnbind(queue="named", exchange="ex", routing_key="unbound"), None)
    t.record(ExchangeBind(destination="ex", source="gone", routing_key="#"), None)
    t.record(ExchangeDelete(exchange="gone"), None)  # drops its bindings too

    sent = drive(t, ["amq.gen-new"])
    assert sent == [
        ExchangeDeclare(exchange="ex", exchange_type="topic", durable=True),
        QueueDeclare(queue="named", durable=True, arguments={"x-max-length": 5}),
        QueueDeclare(queue="", exclusive=True),
        QueueBind(queue="named", exchange="ex", routing_key="a.*"),
        QueueBind(queue="amq.gen-new", exchange="ex", routing_key="b", arguments={"k": 1}),
    ]
    assert t.renamed == {"amq.gen-old": "amq.gen-new"}
    assert set(t.queues) == {"named", "amq.gen-new"}
    # a second recovery replays the new name
    sent = drive(t, ["amq.gen-newer"])
    assert sent[-1] == QueueBind(queue="amq.gen-newer", exchange="ex", routing_key="b", arguments={"k": 1})


def test_deleted_queue_is_not_replayed():
    t = Topology()
    t.record(QueueDeclare(queue="q"), QueueDeclareOk("q", 0, 0))
    t.record(QueueBind(queue="q", exchange="amq.direct", routing_key="q"), None)
    t.record(QueueDelete(queue="q"), None)
    assert drive(t, []) == []


def test_backoff_grows_to_the_cap_with_jitter():
    policy = RecoveryPolicy(initial_delay=0.5, max_delay=4.0)
    for attempt, base in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        for _ in range(20):
            assert base / 2 <= policy.delay(attempt) <= base


def test_what_is_recoverable():
    assert recoverable(ConnectionLost("socket closed"))
    assert recoverable(HeartbeatTimeout("silent"))
    assert recoverable(ConnectionClosed(320, "CONNECTION_FORCED"))
    assert not recoverable(ConnectionClosed(530, "NOT_ALLOWED"))
    assert not recoverable(ConnectionClosed(503, "COMMAND_INVALID"))


# --------------------------------------------------------------------------- renewing a channel only nacked


def test_nack_watch_asks_for_a_renewal_after_a_run_of_nacks_a_bounded_number_of_times():
    from amqwire.client.recovery import NackWatch

    policy = RecoveryPolicy(renew_delay=0.1, max_delay=0.4, renew_after_nacks=10, max_renewals=3)
    watch = NackWatch(policy)
    watch.restored()
    assert not watch.nacked(4) and not watch.nacked(5)  # 9 in a row: not yet
    assert watch.nacked(1)  # the 10th
    delays = []
    for _ in range(3):
        delay = watch.next_renewal()
        assert delay is not None
        delays.append(delay)
        watch.renewed()  # a fresh channel: its own run of nacks
        assert not watch.nacked(9) and watch.nacked(1)
    assert 0.05 <= delays[0] <= 0.1 and 0.1 <= delays[1] <= 0.2 and 0.2 <= delays[2] <= 0.4  # backing off
    assert watch.next_renewal() is None, "a queue that nacks by design must not renew the channel forever"
    watch.restored()  # the next recovery starts a new count
    assert watch.next_renewal() is not None


def test_nack_watch_is_off_without_recovery_or_with_renew_after_nacks_0():
    from amqwire.client.recovery import NackWatch

    assert not NackWatch(None).nacked(10_000) and NackWatch(None).next_renewal() is None
    assert not NackWatch(RecoveryPolicy(renew_after_nacks=0)).nacked(10_000)
    for bad in (dict(renew_after_nacks=-1), dict(max_renewals=-1), dict(renew_delay=-0.1)):
        try:
            RecoveryPolicy(**bad)
        except ValueError as exc:
            assert next(iter(bad)) in str(exc)
        else:
            raise AssertionError(f"RecoveryPolicy({bad}) was accepted")


def test_only_a_channel_restored_by_a_recovery_is_watched_and_an_ack_ends_the_watch():
    """The channel table: a channel never recovered cannot stall (a nack there is the
    queue's answer, not a stale channel); after a recovery an ack ends the watch; a stalled
    channel is renewed and watched again; giving up leaves it open and unwatched."""
    import pytest

    from amqwire.client.errors import InvalidStateError
    from amqwire.client.lifecycle import CHANNEL_OPEN_PHASES, CHANNEL_PHASES, ChannelPhase as P, ChannelSignal as S, Machine

    def channel():
        m = Machine(CHANNEL_PHASES, P.OPENING, P.CLOSED, "channel 1")
        m.fire(S.OPENED)
        return m

    fresh = channel()
    with pytest.raises(InvalidStateError, match="publishes nacked in a row since the recovery is not possible while open"):
        fresh.fire(S.NACKED_RUN)
    recovered = channel()
    for signal in (S.CONNECTION_DOWN, S.REOPENED):
        recovered.fire(signal)
    assert recovered.state is P.RESTORED
    recovered.fire(S.ACKED)
    assert recovered.state is P.OPEN
    with pytest.raises(InvalidStateError):
        recovered.fire(S.NACKED_RUN)  # acked once: nacks no longer count
    stalled = channel()
    for signal, phase in ((S.CONNECTION_DOWN, P.DOWN), (S.REOPENED, P.RESTORED), (S.NACKED_RUN, P.STALLED),
                          (S.RENEW, P.RENEWING), (S.ACKED, P.RENEWING), (S.RENEWED, P.RESTORED),
                          (S.NACKED_RUN, P.STALLED), (S.RENEW_GIVEN_UP, P.OPEN)):
        stalled.fire(signal)
        assert stalled.state is phase, (signal, stalled.state)
        assert phase in CHANNEL_OPEN_PHASES or phase is P.DOWN
    renewing = channel()
    for signal in (S.CONNECTION_DOWN, S.REOPENED, S.NACKED_RUN, S.RENEW, S.CONNECTION_DOWN, S.RENEWED):
        renewing.fire(signal)  # a loss overtakes the renewal: the recovery reopens it
    assert renewing.state is P.DOWN
