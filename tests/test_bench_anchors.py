"""bench/anchors: the rabbitmq-c and amqp091-go programs the client benchmark runs as its
compiled rows, built by bench/compiled_anchors.py and run against the real broker.  Each
phase must do what its result line claims: the messages are in the queue after publish and
confirm, gone (acked) after consume, and ``done`` counts them exactly.  A missing toolchain
skips with the reason the benchmark prints (tests/ensure_anchors.sh installs them)."""
import sys
from pathlib import Path

import pytest

from amqwire.client import connect
from conftest import url_credentials, url_host_port

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench import compiled_anchors  # noqa: E402  (bench/ is not installed: it lives beside the tests)

sys.path.pop(0)

N = 2500  # not a multiple of the window nor of the ack interval: the last batch and ack are partial
WINDOW = 1000
ACK_EVERY = 100


@pytest.fixture(scope="module", params=sorted(compiled_anchors.BUILDERS))
def anchor(request):
    built = compiled_anchors.built(request.param)
    if built.binary is None:
        pytest.skip("%s: %s" % (request.param, built.version))
    return built.binary


def run(binary, phase, amqp_url, queue, n=N, ack_every=ACK_EVERY):
    host, port = url_host_port(amqp_url)
    user, password = url_credentials(amqp_url)
    return compiled_anchors.run_phase(binary, phase, host=host, port=port, username=user,
                                      password=password, vhost="/", queue=queue, n=n, prefetch=1000,
                                      ack_every=ack_every, window=WINDOW, timeout=120)


@pytest.fixture(scope="module")
def c_anchor():
    built = compiled_anchors.built("rabbitmq-c")
    if built.binary is None:
        pytest.skip("rabbitmq-c: %s" % built.version)
    return built.binary


def depth(amqp_url, queue):
    with connect(amqp_url, recovery=False) as conn, conn.channel() as ch:
        return ch.queue_declare(queue, passive=True).message_count


@pytest.mark.parametrize("phase", ["publish", "confirm"])
def test_publishing_phases_put_every_message_in_the_queue(anchor, phase, amqp_url, names):
    queue = names.queue()
    with connect(amqp_url, recovery=False) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
    wall, cpu, done = run(anchor, phase, amqp_url, queue)
    assert done == N
    assert wall > 0 and cpu >= 0
    assert settled_depth(amqp_url, queue, N) == N


def settled_depth(amqp_url, queue, expected, patience=10.0):
    """The queue's depth once it reaches ``expected`` or ``patience`` seconds pass: the
    broker's channel routes publishes to the queue asynchronously, so a declare-ok right
    after the last publish can count fewer (client_bench waits the same way)."""
    import time

    end = time.monotonic() + patience
    got = depth(amqp_url, queue)
    while got != expected and time.monotonic() < end:
        time.sleep(0.05)
        got = depth(amqp_url, queue)
    return got


def test_consume_receives_and_acks_every_message(anchor, amqp_url, names):
    queue = names.queue()
    with connect(amqp_url, recovery=False) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
        with ch.batch():
            for _ in range(N):
                ch.basic_publish("", queue, b"x" * 100)
        ch.queue_declare(queue, passive=True)
    _wall, _cpu, done = run(anchor, "consume", amqp_url, queue)
    assert done == N
    assert depth(amqp_url, queue) == 0  # the last, partial, multiple ack settled the rest


def test_the_pipelined_confirm_phase_settles_every_publish_once(c_anchor, amqp_url, names):
    queue = names.queue()
    with connect(amqp_url, recovery=False) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
    _wall, _cpu, done = run(c_anchor, "confirm-window", amqp_url, queue)
    assert done == N
    assert settled_depth(amqp_url, queue, N) == N


def test_consume_with_one_ack_per_delivery_acks_every_message(c_anchor, amqp_url, names):
    queue = names.queue()
    with connect(amqp_url, recovery=False) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
        with ch.batch():
            for _ in range(N):
                ch.basic_publish("", queue, b"x" * 100)
        ch.queue_declare(queue, passive=True)
    _wall, _cpu, done = run(c_anchor, "consume", amqp_url, queue, ack_every=1)
    assert done == N
    assert depth(amqp_url, queue) == 0


def test_a_broker_refusal_is_a_failure_naming_the_cause(anchor, amqp_url, names):
    missing = names.unique("q")  # never declared: basic.consume fails with 404
    with pytest.raises(compiled_anchors.AnchorFailed, match="NOT_FOUND"):
        run(anchor, "consume", amqp_url, missing)


def test_bad_arguments_are_refused_by_name(anchor, amqp_url):
    with pytest.raises(ValueError, match="phase"):
        run(anchor, "drain", amqp_url, "q")


def test_the_result_line_is_parsed_and_checked():
    fields = compiled_anchors.parse_result("AMQWIRE-ANCHOR phase=consume n=5 done=5 wall_s=0.5 cpu_s=0.1")
    assert fields["done"] == "5" and fields["wall_s"] == "0.5"
    with pytest.raises(compiled_anchors.AnchorFailed, match="cpu_s"):
        compiled_anchors.parse_result("AMQWIRE-ANCHOR phase=consume n=5 done=5 wall_s=0.5")
