"""The private RabbitMQ node of the fault tests (tests/broker_node.py, fixture
``broker_node``): it starts, takes connections, restarts on the same URL with the same
data, crashes, raises a memory alarm that blocks publishers, force-closes connections,
and is always cleaned up, while the shared broker at AMQP_URL is never disturbed (a
connection to it, opened before the first test, stays open throughout)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import broker_node as broker_node_module
from broker_node import BrokerNodeError, _arg, _marked_processes, _node_pids

HERE = Path(__file__).resolve().parent


def wait_until(predicate, timeout: float = 10.0, conn=None) -> bool:
    """Poll ``predicate`` (running ``conn``'s queued events meanwhile) until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        if conn is not None:
            try:
                conn.process_events(timeout=0.05)
            except Exception:  # noqa: BLE001 - a lost connection is what some tests wait for
                time.sleep(0.05)
        else:
            time.sleep(0.05)
    return True


# --------------------------------------------------------------------------- the shared broker


@pytest.fixture(scope="module")
def shared(amqp_url):
    """(connection, channel, queue) on the shared broker, open for the whole module."""
    from amqwire.client import connect

    conn = connect(amqp_url)
    ch = conn.channel()
    queue = ch.queue_declare("", exclusive=True).queue
    yield conn, ch, queue
    conn.close()


def assert_shared_untouched(shared) -> None:
    """The connection opened before the first test is still open and answers.  (No
    publish and no check of ``blocked``: other test runs may legitimately alarm the
    shared broker meanwhile, and a publish would then wait.)"""
    conn, ch, queue = shared
    assert conn.is_open, "the connection to the shared broker was closed"
    assert ch.queue_declare(queue, passive=True).queue == queue


@pytest.fixture(autouse=True)
def shared_broker_untouched(shared):
    """Set up before ``broker_node``, so checked after its teardown: the shared broker
    still serves the connection opened before the first test (so it was never stopped
    nor force-closed), and no private node of this process is left running."""
    assert_shared_untouched(shared)
    yield
    assert_shared_untouched(shared)
    mine = [_arg(argv, "-amqwire_node") for pid, argv in _marked_processes()
            if _arg(argv, "-amqwire_owner") == str(os.getpid())]
    assert not mine, f"private nodes left running: {mine}"


# --------------------------------------------------------------------------- tests


def test_private_node_takes_connections_and_is_isolated(broker_node, shared):
    from amqwire.client import connect
    import amqwire.client.errors as errors

    node = broker_node(plugins=["rabbitmq_shovel"])
    assert node.name.startswith("amqwire-test-") and node.name.endswith("@localhost")
    assert node.port not in (5672, 25672) and node.url == f"amqp://guest:guest@127.0.0.1:{node.port}/"
    assert node.eval("node().") == f"'{node.name}'"             # rabbitmqctl targets this node
    assert "rabbitmq_shovel" in node.eval("application:which_applications().")
    with pytest.raises(ValueError):
        node.rabbitmqctl("-n", "rabbit@localhost", "status")  # the shared node is out of reach

    conn = connect(node.url)
    try:
        ch = conn.channel()
        queue = f"amqwire-test-q-{uuid.uuid4().hex[:12]}"
        assert ch.queue_declare(queue, durable=True).queue == queue
        assert queue in node.rabbitmqctl("-q", "list_queues", "name")
    finally:
        conn.close()
    # ... and the shared broker has no such queue
    shared_ch = shared[0].channel()
    with pytest.raises(errors.NotFound):
        shared_ch.queue_declare(queue, passive=True)


def test_restart_same_url_same_data(broker_node):
    """restart() (new VM) and restart_app() (same VM): the old connection is closed by
    the broker, a new one to the same URL works and the durable queue is still there."""
    from amqwire.client import connect
    import amqwire.client.errors as errors

    node = broker_node()
    url = node.url
    for restart in (node.restart, node.restart_app):
        old = connect(url, recovery=False)  # the old connection must stay closed
        ch = old.channel()
        ch.queue_declare("kept", durable=True)
        beam = node.beam_pid
        restart()
        assert node.url == url
        if restart == node.restart:
            assert node.beam_pid != beam and beam not in _node_pids(node.name)
        assert wait_until(lambda old=old: not old.is_open, 10, old), "the old connection survived the restart"
        with pytest.raises(errors.AMQPError):
            ch.queue_declare("kept", passive=True)
        new = connect(url)
        try:
            assert new.channel().queue_declare("kept", passive=True).queue == "kept"
        finally:
            new.close()
        old.close()


def test_kill_then_start(broker_node):
    """kill(): SIGKILL, no connection.close; start() again on the same port and data."""
    from amqwire.client import connect
    import amqwire.client.errors as errors

    node = broker_node()
    conn = connect(node.url, recovery=False)  # a dead connection, not one coming back
    ch = conn.channel()
    ch.queue_declare("survivor", durable=True)
    # The declare is in Mnesia's transaction log, which disk_log caches in the VM for up to
    # a couple of seconds: a SIGKILL right away can lose it (seen in CI). Flush it first.
    node.eval("mnesia:sync_log().")
    beam = node.beam_pid
    node.kill()
    assert not node.is_running and beam not in _node_pids(node.name)
    assert wait_until(lambda: not conn.is_open, 10, conn)
    with pytest.raises(errors.AMQPError):
        ch.queue_declare("survivor", passive=True)
    with pytest.raises((OSError, errors.AMQPError)):             # nothing listens
        connect(node.url, connection_timeout=2)
    node.start()
    fresh = connect(node.url)
    try:
        assert fresh.channel().queue_declare("survivor", passive=True).queue == "survivor"
    finally:
        fresh.close()
        conn.close()


def test_memory_alarm_blocks_publishers(broker_node, shared):
    from amqwire.client import connect

    node = broker_node()
    conn = connect(node.url)
    try:
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).queue
        assert not conn.blocked
        node.set_memory_alarm()
        assert "resource_limit,memory" in node.alarms()
        ch.basic_publish("", queue, b"during the alarm")     # RabbitMQ blocks on a publish
        assert wait_until(lambda: conn.blocked, 10, conn), "no connection.blocked after a publish"
        assert_shared_untouched(shared)
        node.clear_memory_alarm()
        assert node.alarms() == "[]"
        assert wait_until(lambda: not conn.blocked, 10, conn), "no connection.unblocked"
        ch.basic_publish("", queue, b"after the alarm")
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            msg = ch.basic_get(queue, no_ack=True)
            if msg is not None:
                got.append(msg.body)
        assert got == [b"during the alarm", b"after the alarm"]
    finally:
        conn.close()


def test_close_all_connections(broker_node):
    from amqwire.client import connect
    import amqwire.client.errors as errors

    node = broker_node()
    conns = [connect(node.url, recovery=False) for _ in range(2)]  # 320 would start a recovery
    channels = [c.channel() for c in conns]
    assert wait_until(lambda: len(node.list_connections()) == 2, 10)
    node.close_all_connections("amqwire test: bye")
    for conn, ch in zip(conns, channels):
        assert wait_until(lambda conn=conn: not conn.is_open, 10, conn)
        with pytest.raises(errors.ConnectionClosed) as ei:
            ch.queue_declare("", exclusive=True)
        assert ei.value.reply_code == 320 and "amqwire test: bye" in ei.value.reply_text
        conn.close()
    again = connect(node.url)                                 # the node itself is fine
    assert again.channel().queue_declare("", exclusive=True).queue
    again.close()


def test_teardown_after_a_failing_test(tmp_path):
    """A test using broker_node fails: its node is still stopped and removed, the logs
    are kept and their tail printed (run in a separate pytest process)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(HERE / "conftest.py", suite)
    shutil.copy(HERE / "broker_node.py", suite)
    marker = tmp_path / "node.txt"
    (suite / "test_failing.py").write_text(textwrap.dedent(f"""
        def test_fails(broker_node):
            node = broker_node()
            with open({str(marker)!r}, "w") as f:
                f.write(node.name + "\\n" + str(node.base_dir) + "\\n" + str(node.beam_pid))
            assert False, "deliberate failure"
    """))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "timeout=120",
         f"--basetemp={tmp_path / 'basetemp'}", str(suite)],
        cwd=suite, capture_output=True, text=True, timeout=180,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "1 failed" in out, out[-3000:]
    assert "deliberate failure" in out
    name, base_dir, beam = marker.read_text().split("\n")
    assert not _node_pids(name), f"{name} still runs after the failed test"
    assert not os.path.exists(f"/proc/{beam}") or not broker_node_module._pid_alive(int(beam))
    assert not Path(base_dir).exists()
    assert "logs kept in" in out and "Server startup complete" in out, out[-3000:]
    kept = list((tmp_path / "basetemp").glob(f"broker-node-logs*/{name}/{name}.log"))
    assert kept, "the failed test's node log was not kept"


def test_failed_start_reports_the_cause(broker_node):
    """A node that cannot boot: BrokerNodeError names the cause from its logs; nothing
    of it keeps running."""
    node = broker_node(config={"no_such.setting": 1}, start=False)
    with pytest.raises(BrokerNodeError) as ei:
        node.start()
    assert "exited with status" in str(ei.value)
    assert "unknown variable: no_such.setting" in str(ei.value)
    assert not node.is_running and not _node_pids(node.name)


def test_missing_rabbitmq_fails_instead_of_skipping(broker_node, monkeypatch, tmp_path):
    monkeypatch.delenv(broker_node_module.SCRIPTS_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(broker_node_module, "_SBIN_PATH", str(tmp_path))
    monkeypatch.setattr(broker_node_module, "_SCRIPT_DIRS", ())
    with pytest.raises(pytest.fail.Exception) as ei:
        broker_node()
    assert "tests/ensure_rabbitmq.sh" in str(ei.value)
