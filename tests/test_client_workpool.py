"""The consumer work pool of the blocking transport (``connect(..., consumer_workers=N)``):
callbacks on N worker threads, in delivery order per channel; a slow callback holds up
only its own channel and never the I/O thread (reading, acks, heartbeats)."""
from __future__ import annotations

import random
import threading
import time

import pytest

from amqwire.client.workpool import WorkPool


def test_work_pool_keeps_order_per_key_and_drains_on_stop():
    done: dict = {key: [] for key in range(10)}
    threads: set = set()

    def run(fn, arg, where, channel):
        fn(arg)

    def work(item):
        key, index = item
        threads.add(threading.current_thread().name)
        if random.random() < 0.05:
            time.sleep(0.001)
        done[key].append(index)

    pool = WorkPool(4, run, "test-worker")
    for index in range(300):
        for key in range(10):
            pool.submit(key, work, (key, index), "consumer", None)
    pool.stop(wait=30)
    assert all(done[key] == list(range(300)) for key in range(10))
    assert len(threads) > 1 and all(name.startswith("test-worker-") for name in threads)
    pool.submit(0, work, (0, 300), "consumer", None)  # after stop: refused, never run
    assert done[0][-1] == 299


def test_work_pool_size_is_checked():
    with pytest.raises(ValueError, match="consumer_workers"):
        WorkPool(0, lambda *a: None)


def test_asyncio_refuses_consumer_workers(amqp_url):
    import asyncio

    from amqwire.client import aio

    async def main():
        with pytest.raises(ValueError, match="blocking transport"):
            await aio.connect(amqp_url, consumer_workers=2)

    asyncio.run(main())


def test_a_slow_channel_holds_up_no_other_and_order_is_kept(amqp_url, names):
    from amqwire.client import connect

    count = 200
    with connect(amqp_url, consumer_workers=3) as conn:
        assert conn.consumer_workers == 3
        slow_ch, fast_ch = conn.channel(), conn.channel()
        slow_q, fast_q = names.queue(), names.queue()
        gate = threading.Event()
        slow: list = []
        fast: list = []
        where: set = set()

        def on_slow(message):
            if not slow:
                assert gate.wait(30), "never released"
            slow.append(int(message.body))
            message.ack()

        def on_fast(message):
            where.add(threading.current_thread().name)
            fast.append(int(message.body))
            message.ack()

        for ch, q, callback in ((slow_ch, slow_q, on_slow), (fast_ch, fast_q, on_fast)):
            ch.queue_declare(q)
            ch.basic_qos(prefetch_count=50)
            ch.confirm_select()
            with ch.batch():
                for i in range(count):
                    ch.publish_async("", q, b"%d" % i)
            ch.wait_for_confirms(timeout=30)
            ch.consume(q, callback)
        deadline = time.monotonic() + 30
        while len(fast) < count:  # nobody calls process_events: the pool runs the callbacks
            assert time.monotonic() < deadline, f"the fast channel got {len(fast)} of {count}"
            time.sleep(0.02)
        assert slow == []  # still stuck in its first callback
        gate.set()
        while len(slow) < count:
            assert time.monotonic() < deadline, f"the slow channel got {len(slow)} of {count}"
            time.sleep(0.02)
        assert fast == list(range(count)) and slow == list(range(count))  # delivery order
        assert all(name.startswith("amqwire-worker") for name in where)


def test_heartbeats_go_on_while_a_callback_sleeps_two_intervals(amqp_url, names):
    from amqwire.client import connect
    from conftest import with_query

    with connect(with_query(amqp_url, heartbeat=1), consumer_workers=2) as conn:
        assert conn.heartbeat == 1
        ch = conn.channel()
        q = names.queue()
        ch.queue_declare(q)
        finished = threading.Event()
        heartbeats: list = []

        def sleepy(message):
            heartbeats.append(conn._core.heartbeats_sent)
            time.sleep(2.5)  # longer than two heartbeat intervals
            heartbeats.append(conn._core.heartbeats_sent)
            message.ack()
            finished.set()

        ch.consume(q, sleepy)
        ch.basic_publish("", q, b"slow")
        assert finished.wait(30)
        assert heartbeats[1] > heartbeats[0], "no heartbeat was sent while the callback slept"
        assert conn.is_open
        other = conn.channel()
        assert other.queue_declare(q, passive=True).message_count == 0  # the ack went through
