"""Who reads the blocking connection's socket: a thread waiting for deliveries reads it
itself while the I/O thread is parked; the I/O thread takes reading back when the socket
is left alone.  Real broker; each test checks an outcome the old hand-over design, or a
parked I/O thread that never came back, would get wrong."""
from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import pytest

from amqwire.client import blocking, connect
from amqwire.client.errors import AMQPConnectionError, ConnectionClosed
from conftest import fill_queue, with_query


@pytest.fixture
def reads_by_thread(monkeypatch):
    """Counts the socket reads dispatched, by the name of the thread that read them."""
    counts: dict[str, int] = {}
    original = blocking.Connection._data_received

    def counting(self: Any, data: Any) -> None:
        name = threading.current_thread().name
        counts[name] = counts.get(name, 0) + 1
        original(self, data)

    monkeypatch.setattr(blocking.Connection, "_data_received", counting)
    return counts


def test_a_consumer_iterator_reads_the_socket_in_its_own_thread(amqp_url, reads_by_thread):
    n = 5000
    with connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        fill_queue(ch, queue, n)
        ch.basic_qos(200)
        reads_by_thread.clear()
        got = 0
        with ch.consume(queue) as consumer:
            for message in consumer:
                got += 1
                if got % 50 == 0:
                    message.ack(multiple=True)
                if got == n:
                    break
        io_thread = conn._io.thread.name
        mine = reads_by_thread.get(threading.current_thread().name, 0)
        theirs = reads_by_thread.get(io_thread, 0)
    assert got == n
    # The I/O thread reads the consume-ok and what arrives before the iterator first waits.
    assert mine > 3 * theirs, reads_by_thread


def test_a_consumers_own_read_costs_few_calls_and_never_an_empty_read(amqp_url, reads_by_thread):
    # The per-read path of a consumer that reads for itself: it selects before reading (a
    # read that finds nothing raises BlockingIOError, the costliest way to learn it), and
    # each read's deliveries reach it through a few calls (17 Python calls a read, with an
    # empty read raised and caught for most of them, before this was counted).
    n = 3000
    calls = steps = empty_reads = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls, steps, empty_reads
        if event == "call" and "amqwire" in frame.f_code.co_filename:
            calls += 1
            if frame.f_code.co_name == "__next__":  # the iterator's step once its buffer is empty
                steps += 1
        elif event == "c_exception" and getattr(arg, "__name__", "") == "recv_into":
            empty_reads += 1

    with connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        fill_queue(ch, queue, n)
        reads_by_thread.clear()
        got = 0
        with ch.consume(queue) as consumer:
            iterator = iter(consumer)
            next(iterator)  # the consume-ok and what came with it may be the I/O thread's
            got = 1
            mine_before = reads_by_thread.get(threading.current_thread().name, 0)
            sys.setprofile(profile)
            try:
                for message in iterator:
                    got += 1
                    if got == n:
                        last = message
                        break
            finally:
                sys.setprofile(None)
            reads = reads_by_thread.get(threading.current_thread().name, 0) - mine_before
            last.ack(multiple=True)
    assert got == n
    assert reads > 0 and steps >= reads, (reads, steps, reads_by_thread)
    assert empty_reads == 0, (empty_reads, reads)
    # A step that reads: 10 calls today (the step, Inbox.next, read_while_waiting, _receive,
    # _data_received, receive_data, pending_output, _dispatch, _on_messages, deliver_run;
    # more for a read that ends inside a message); one that finds what the I/O thread read
    # (a loaded machine): 2.  The test's own counting wrapper of _data_received is not
    # amqwire's.
    assert calls / steps <= 12.5, (calls, steps, reads)


def test_rpcs_and_confirms_of_other_threads_go_on_while_a_slow_consumer_drives_reading(amqp_url):
    # The consumer sleeps in its loop (the socket is left alone then, for far longer than
    # the parked I/O thread's look) and waits in between (it reads then).  Other threads'
    # RPCs and confirmed publishes on the same connection must all complete.
    with connect(amqp_url) as conn:
        with conn.channel() as ch:
            queue = ch.queue_declare("", exclusive=True).queue
            other = ch.queue_declare("", exclusive=True).queue
            fill_queue(ch, queue, 60)
        stop = threading.Event()
        errors: list[BaseException] = []
        done = {"rpcs": 0, "confirmed": 0}

        def declare() -> None:
            try:
                with conn.channel() as ch2:
                    while not stop.is_set():
                        ch2.queue_declare(other, passive=True, timeout=10)
                        done["rpcs"] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def publish() -> None:
            try:
                with conn.channel() as ch3:
                    ch3.confirm_select()
                    while not stop.is_set():
                        ch3.basic_publish("", other, b"confirmed", timeout=10)
                        done["confirmed"] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        helpers = [threading.Thread(target=declare), threading.Thread(target=publish)]
        with conn.channel() as ch:
            ch.basic_qos(10)
            with ch.consume(queue) as consumer:
                for t in helpers:
                    t.start()
                got = 0
                for message in consumer:
                    got += 1
                    time.sleep(0.03 if got % 2 else 0.0)
                    message.ack()
                    if got == 60:
                        break
        stop.set()
        for t in helpers:
            t.join(30)
        assert not any(t.is_alive() for t in helpers), "timed out after 30 s waiting for the helper threads to stop"
        assert not errors, errors
        assert got == 60 and done["rpcs"] > 0 and done["confirmed"] > 0, done
        with conn.channel() as ch:
            assert ch.queue_declare(other, passive=True).message_count == done["confirmed"]


def test_heartbeats_go_on_while_a_consumer_waits_long_and_while_it_works_long(amqp_url):
    # heartbeat=1: the client gives the broker up after 2 s without data.  The consumer
    # first waits 3.5 s for a message that does not come (it reads the heartbeats itself),
    # then spends 3.5 s on a message without touching the connection (the parked I/O
    # thread must read again).  A reader that stopped reading would raise HeartbeatTimeout.
    url = with_query(amqp_url, heartbeat="1")
    with connect(url) as conn, conn.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        with ch.consume(queue) as consumer:
            assert consumer.get(timeout=3.5) is None
            ch.basic_publish("", queue, b"one")
            message = consumer.get(timeout=10)
            assert message is not None and message.body == b"one"
            time.sleep(3.5)
            message.ack()
            ch.basic_publish("", queue, b"two")
            message = consumer.get(timeout=10)
            assert message is not None and message.body == b"two"
            message.ack()
        assert conn.is_open


def test_iterators_in_two_threads_on_one_connection_each_get_their_messages(amqp_url):
    n = 3000
    with connect(amqp_url) as conn:
        with conn.channel() as ch:
            queues = [ch.queue_declare("", exclusive=True).queue for _ in range(2)]
            for queue in queues:
                fill_queue(ch, queue, n)
        got = [0, 0]
        errors: list[BaseException] = []

        def drain(k: int) -> None:
            try:
                with conn.channel() as chk:
                    chk.basic_qos(100)
                    with chk.consume(queues[k]) as consumer:
                        for message in consumer:
                            got[k] += 1
                            message.ack()
                            if got[k] == n:
                                break
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=drain, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), f"timed out after 60 s waiting for the 2 drains (got {got})"
        assert not errors, errors
        assert got == [n, n]
        with conn.channel() as ch:
            assert [ch.queue_declare(q, passive=True).message_count for q in queues] == [0, 0]


def _reading(conn: Any, also: Any = lambda: True, limit: float = 10.0) -> bool:
    """Whether a waiting thread holds the connection's socket (its read lock), within
    ``limit`` seconds: a loaded machine (CI runs Spark beside the suite) may need more than
    the 0.3 s the thread was given to begin."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if conn._io._read_lock.locked() and also():
            return True
        time.sleep(0.01)
    return False


def _iterating(consumer: Any) -> tuple[threading.Thread, list[Any]]:
    """A thread that lists what ``consumer`` yields, or the exception it raises; started,
    and given 0.3 s to begin waiting (and reading)."""
    outcome: list[Any] = []

    def iterate() -> None:
        try:
            outcome.append(list(consumer))
        except BaseException as exc:  # noqa: BLE001 - the test checks it
            outcome.append(exc)

    thread = threading.Thread(target=iterate)
    thread.start()
    time.sleep(0.3)
    return thread, outcome


def test_an_iterator_that_is_reading_ends_when_another_thread_closes_the_connection(amqp_url):
    conn = connect(amqp_url)
    ch = conn.channel()
    queue = ch.queue_declare("", exclusive=True).queue
    thread, outcome = _iterating(ch.consume(queue))
    assert _reading(conn, lambda: conn._io.parked)  # the iterator waits, holding the socket
    conn.close()
    thread.join(10)
    assert not thread.is_alive()
    assert outcome == [[]]


def test_an_iterator_that_is_reading_raises_when_the_broker_closes_the_connection(broker_node):
    # A private node: force-closing connections is never done to the shared broker.
    node = broker_node()
    rabbitmqctl = node.rabbitmqctl
    name = f"reading-{time.monotonic_ns()}"
    conn = connect(node.url, client_properties={"connection_name": name}, recovery=False)
    try:
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).queue
        thread, outcome = _iterating(ch.consume(queue))
        assert _reading(conn)
        listing = rabbitmqctl("-q", "list_connections", "--no-table-headers", "pid", "client_properties")
        pids = [line.partition("\t")[0].strip() for line in listing.splitlines() if name in line]
        assert len(pids) == 1, listing
        rabbitmqctl("close_connection", pids[0], "closed by the test")
        thread.join(15)
        assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed), outcome
        assert outcome[0].reply_code == 320
    finally:
        conn.close()


def test_an_interrupt_in_the_middle_of_a_dispatch_gives_the_connection_up(amqp_url, monkeypatch):
    # The iterating thread may be the main thread, where Ctrl-C lands.  If it lands between
    # a read and the end of its dispatch, what the read brought is gone: the connection is
    # given up (every waiter learns it) rather than left with replies nobody will see.
    conn = connect(amqp_url)
    try:
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).queue
        consumer = ch.consume(queue)
        outcome: list[Any] = []
        original = blocking.Connection._dispatch

        def interrupted(self: Any, events: Any, *args: Any) -> None:
            if threading.current_thread() is reader and any(type(e).__name__ == "Message" for e in events):
                raise KeyboardInterrupt
            original(self, events, *args)

        def iterate() -> None:
            try:
                outcome.append(consumer.get(timeout=10))
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome.append(exc)

        monkeypatch.setattr(blocking.Connection, "_dispatch", interrupted)
        reader = threading.Thread(target=iterate)
        reader.start()
        time.sleep(0.3)
        assert _reading(conn)
        with connect(amqp_url) as other, other.channel() as och:
            och.basic_publish("", queue, b"lost with the read")
        reader.join(15)
        assert len(outcome) == 1 and isinstance(outcome[0], KeyboardInterrupt), outcome
        assert not conn.is_open
        with pytest.raises(AMQPConnectionError):
            ch.queue_declare(queue, passive=True)
    finally:
        conn.close()


def test_closing_logs_no_error(amqp_url, caplog):
    # The broker closes the socket after close-ok; the reader that sees the end of the
    # stream then must end quietly (it once logged "I/O thread failed" with a traceback).
    caplog.set_level(logging.DEBUG, logger="amqwire")
    for _ in range(20):
        with connect(amqp_url) as conn, conn.channel() as ch:
            ch.queue_declare("", exclusive=True)
    time.sleep(0.2)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_for_loop_left_early_leaves_the_rest_in_order_for_get_and_the_next_loop(amqp_url):
    # The iterator takes messages from the consumer's buffer one at a time, never ahead:
    # after a break, get() and a new for loop go on with the next message.
    with connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        ch.confirm_select()
        with ch.batch():
            for i in range(300):
                ch.basic_publish("", queue, b"%d" % i)
        ch.wait_for_confirms()
        got = []
        with ch.consume(queue, no_ack=True) as consumer:
            iterator = iter(consumer)
            for message in iterator:
                got.append(message.body)
                if len(got) == 10:
                    break
            got.append(consumer.get(timeout=10).body)
            got.append(next(iterator).body)
            for message in consumer:
                got.append(message.body)
                if len(got) == 300:
                    break
            assert consumer.get(timeout=0.2) is None
    assert got == [b"%d" % i for i in range(300)]
