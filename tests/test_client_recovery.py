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
