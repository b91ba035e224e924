"""RocketMQ's delayed and ordered sends on the Producer, both transports: a delayed message
is served no sooner than asked and at most one delay step late (message TTL and
dead-lettering, no plugin), also across a broker restart when persistent; an ordered send's
key picks one broker, and its messages arrive in order.

The asked-versus-arrived table of the delays is printed (``-s``): timings are reported,
never asserted beyond "no sooner" and a bound that only catches a message that never came.
"""
from __future__ import annotations

import asyncio
import statistics
import threading
import time

import pytest

from amqwire.client import BasicProperties, Producer, aio, connect
from amqwire.client import delays
from conftest import url_host_port, with_netloc

from test_producer import TRANSPORTS, P, run

LEVELS = (1, 2, 4)


def _target(url: str, names) -> tuple[str, str]:
    """A direct exchange of this test bound to a queue of this test with key 'k'."""
    exchange, queue = names.exchange(), names.queue()
    with connect(url) as conn, conn.channel() as ch:
        ch.exchange_declare(exchange, "direct")
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange, "k")
    return exchange, queue


def _drop_routes(url: str, exchange: str, levels=LEVELS) -> None:
    with connect(url) as conn, conn.channel() as ch:
        for level in levels:
            r = delays.route(exchange, level, levels)
            ch.queue_delete(r.queue)
            ch.exchange_delete(r.exchange)


class Arrivals:
    """A consumer recording when each message id arrived."""

    def __init__(self, url: str, queue: str) -> None:
        self.at: dict[str, float] = {}
        self.order: list[str] = []
        self._conn = connect(url)
        self._channel = self._conn.channel()
        self._stop = threading.Event()

        def on_message(message) -> None:
            self.at[message.properties.message_id] = time.monotonic()
            self.order.append(message.properties.message_id)

        self._consumer = self._channel.consume(queue, on_message, no_ack=True)
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._stop.is_set():
            self._conn.process_events(timeout=0.02)

    def wait_for(self, n: int, limit: float) -> None:
        deadline = time.monotonic() + limit
        while len(self.at) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_delayed_send_arrives_no_sooner_than_asked_and_within_one_step(transport, amqp_url, names):
    exchange, queue = _target(amqp_url, names)
    asked = [0.3, 0.9, 1.0, 1.5, 2.0, 3.0, 3.9]  # steps 1, 1, 1, 2, 2, 4, 4 s
    arrivals = Arrivals(amqp_url, queue)
    sent_at: dict[str, tuple[float, float]] = {}

    async def scenario():
        p = await P.open(transport, amqp_url, delay_levels=LEVELS)
        try:
            for i, delay in enumerate(asked):
                mid = f"d{i}"
                sent_at[mid] = (time.monotonic(), delay)
                await p.send(exchange, "k", b"later", BasicProperties(message_id=mid, delivery_mode=2), delay=delay)
            now = await p.send(exchange, "k", b"now", BasicProperties(message_id="now"))
            assert now.attempts == 1
        finally:
            await p.close()

    try:
        run(scenario())
        arrivals.wait_for(len(asked) + 1, 30)
    finally:
        arrivals.close()
        _drop_routes(amqp_url, exchange)
    assert len(arrivals.at) == len(asked) + 1, f"missing: {set(sent_at) - set(arrivals.at)}"
    assert arrivals.order[0] == "now"  # not delayed: at once, ahead of every delayed one
    late = []
    for mid, (t, delay) in sent_at.items():
        took = arrivals.at[mid] - t
        step = delays.step_for(delay, LEVELS) / 1000
        late.append(took - delay)
        assert took >= delay, f"{mid}: asked {delay} s, arrived after {took:.3f} s"
        assert took < step + 20, f"{mid}: asked {delay} s (step {step} s), arrived after {took:.1f} s"
    print(f"\ndelays ({transport}): asked {asked}; arrived later than asked by min {min(late):.3f} s, "
          f"median {statistics.median(late):.3f} s, max {max(late):.3f} s (steps {LEVELS})")


@pytest.mark.timeout(150)
def test_a_persistent_delayed_message_survives_a_broker_restart(broker_node, names):
    node = broker_node()

    async def scenario():
        async with aio.connect(node.url) as conn, conn.channel() as ch:
            await ch.exchange_declare("orders", "direct", durable=True)
            await ch.queue_declare("orders.eu", durable=True)
            await ch.queue_bind("orders.eu", "orders", "eu")
        async with aio.Producer(node.url, delay_levels=(8,)) as producer:
            await producer.send("orders", "eu", b"kept", BasicProperties(delivery_mode=2, message_id="kept"), delay=8)
        t0 = time.monotonic()
        return t0

    t0 = asyncio.run(scenario())
    node.restart()  # the delay queue and its persistent message come back; the TTL still runs
    deadline = time.monotonic() + 60
    got = None
    with connect(node.url) as conn, conn.channel() as ch:
        while got is None and time.monotonic() < deadline:
            got = ch.basic_get("orders.eu", no_ack=True)
            if got is None:
                time.sleep(0.1)
    assert got is not None and got.properties.message_id == "kept", "the delayed message did not survive"
    print(f"\ndelayed 8 s across a restart: arrived after {time.monotonic() - t0:.1f} s")
    assert time.monotonic() - t0 >= 8


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_ordered_sends_key_keeps_one_broker_and_the_order(transport, amqp_url, names):
    """Two URLs of the shared broker are two brokers to the Producer (127.0.0.1 and
    localhost): each key's sends go to one of them, all of them, in order."""
    host, port = url_host_port(amqp_url)
    other = with_netloc(amqp_url, "localhost" if host != "localhost" else "127.0.0.1", port)
    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
    keys = [f"customer-{i}" for i in range(16)]
    per_key = 40

    async def scenario():
        p = await P.open(transport, [amqp_url, other])
        try:
            futures = []
            for n in range(per_key):
                for key in keys:
                    props = BasicProperties(message_id=f"{key}/{n}")
                    futures.append((key, await p.send_async("", queue, b"x", props, key=key)))
            results = [(key, await p.result(f)) for key, f in futures]
        finally:
            await p.close()
        return results

    results = run(scenario())
    brokers = {}
    for key, result in results:
        brokers.setdefault(key, set()).add(result.broker)
    assert all(len(b) == 1 for b in brokers.values()), brokers  # one broker per key
    assert len(set.union(*brokers.values())) == 2  # and the keys spread over both
    seen: dict[str, list[int]] = {}
    with connect(amqp_url) as conn, conn.channel() as ch:
        while (m := ch.basic_get(queue, no_ack=True)) is not None:
            key, n = m.properties.message_id.split("/")
            seen.setdefault(key, []).append(int(n))
    assert {k: v for k, v in seen.items()} == {k: list(range(per_key)) for k in keys}  # every one, in order


def test_bad_delay_and_key_are_refused_at_the_call(amqp_url):
    with Producer(amqp_url) as producer:
        for bad in (0, -1, float("nan"), float("inf"), True, "5"):
            with pytest.raises(ValueError, match="delay"):
                producer.send("", "q", b"x", delay=bad)
        with pytest.raises(TypeError, match="key"):
            producer.send("", "q", b"x", key=b"bytes")
    with pytest.raises(ValueError, match="strictly increasing"):
        Producer(amqp_url, delay_levels=(5, 1))
    assert delays.step_for(0.001) == 1000 and delays.step_for(7200) == 7_200_000 and delays.step_for(7201) == 7_201_000
