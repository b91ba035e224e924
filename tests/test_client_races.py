"""Races between the blocking client's I/O thread and the threads that use the connection,
forced with a real broker: the I/O thread is stopped at a chosen line (a trace function),
the other thread acts, then the I/O thread goes on."""
from __future__ import annotations

import inspect
import sys
import threading
import time
from typing import Any

import pytest

from amqwire.client import connect
from amqwire.client import protocol as proto
from amqwire.client.errors import ConnectionLost, PublishUnconfirmed
from amqwire.client.session import ConnectionBase


def _line_of(function: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    matches = [first + i for i, line in enumerate(lines) if text in line]
    assert len(matches) == 1, f"{text!r} in {function.__qualname__}: {matches}"
    return matches[0]


def _losing_thread(conn: Any, reason: str) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread that runs ``conn._on_lost`` (as a failing writer does) and stops right after
    its locked section (the drain of the confirm tracker), until ``go_on`` is set: the
    thread (not started), ``paused`` (set once it stopped there) and ``go_on``."""
    code = ConnectionBase._on_lost.__code__
    after_lock_line = _line_of(ConnectionBase._on_lost, "self._io.stop_io()")
    paused = threading.Event()
    go_on = threading.Event()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not code:
            return None
        if event == "line" and frame.f_lineno == after_lock_line:
            paused.set()
            go_on.wait(10)
        return tracer

    def lose() -> None:
        sys.settrace(tracer)
        try:
            conn._on_lost(ConnectionLost(reason))
        finally:
            sys.settrace(None)  # type: ignore[arg-type]

    return threading.Thread(target=lose), paused, go_on

def test_an_ack_read_before_another_thread_gives_the_connection_up_still_settles_its_future(amqp_url):
    # A sending thread's write fails (the broker is going away) and it gives the connection up
    # while the I/O thread holds a read with the broker's ack of a publish, not dispatched
    # yet.  That publish left the confirm tracker with the read: only the dispatch can settle
    # its future.  It once found no channel to dispatch to, and the future never settled
    # (a Producer's send then waited for its deadline, though the broker had the message).
    code = ConnectionBase._data_received.__code__
    dispatch_line = _line_of(ConnectionBase._data_received, "self._dispatch(")
    armed = threading.Event()
    paused = threading.Event()
    go_on = threading.Event()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not code:
            return None
        if event == "line" and frame.f_lineno == dispatch_line and armed.is_set():
            if any(type(e) is proto.Confirmed for e in frame.f_locals.get("events") or ()):
                armed.clear()
                paused.set()
                go_on.wait(10)
        return tracer

    threading.settrace(tracer)  # for the I/O thread that connect() starts
    try:
        conn = connect(amqp_url)
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
    try:
        ch = conn.channel()
        ch.confirm_select()
        queue = ch.queue_declare("", exclusive=True).queue
        armed.set()
        future = ch.publish_async("", queue, b"acked, then the connection given up")
        assert paused.wait(10), "the I/O thread never read the ack"
        conn._on_lost(ConnectionLost("the test's write failed"))  # as a failing writer does
        go_on.set()
        assert future.exception(timeout=10) is None  # settled, and as the broker said: acked
    finally:
        go_on.set()
        conn.close()



def test_a_close_racing_the_loss_of_the_connection_still_fails_the_publishes_the_loss_drained(amqp_url):
    # Two threads give the connection up at once: one loses it (a failed write: it takes the
    # unconfirmed publishes out of the confirm tracker), the other closes it (which forgets
    # the channels).  The drained publishes were once failed on whatever channels were left
    # by then, none: their futures never settled, and a Producer's send waited for its
    # deadline (then failed with no attempt) instead of going on through another broker.
    conn = connect(amqp_url)
    loser, paused, go_on = _losing_thread(conn, "the test's write failed")
    try:
        ch = conn.channel()
        ch.confirm_select()
        queue = ch.queue_declare("", exclusive=True).queue
        with ch.batch():  # the publish waits in the tracker, not written: no ack can settle it
            future = ch.publish_async("", queue, b"drained by the loss")
            loser.start()
            assert paused.wait(10), "the losing thread never drained the tracker"
            closer = threading.Thread(target=conn.close)
            closer.start()
            deadline = time.monotonic() + 10
            while conn._channels and time.monotonic() < deadline:
                time.sleep(0.005)
            assert not conn._channels, "close() never gave the channels up"
            go_on.set()
            loser.join(10)
            closer.join(10)
        deadline = time.monotonic() + 5
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert future.done(), "a publish drained by the loss was failed on no channel: it would wait forever"
        with pytest.raises(PublishUnconfirmed):
            future.result()
    finally:
        go_on.set()
        conn.close()


def test_wait_recovered_seen_right_after_the_loss_waits_for_that_recovery(amqp_url):
    # A caller gets the connection error as soon as _on_lost has set it, and calls
    # wait_recovered().  The recovery was decided (and _recovered cleared) only later in
    # _on_lost, so wait_recovered found the flag of the last recovery still set and answered
    # False at once: "no recovery" (fault scenario 1 under load, about one CI run in two).
    # The loss here is our own side's (the shared broker is not touched): _on_lost is run
    # from a thread stopped right after its locked section.
    from amqwire.client import RecoveryPolicy

    conn = connect(amqp_url, recovery=RecoveryPolicy(initial_delay=0.05, max_delay=0.1))
    loser, paused, go_on = _losing_thread(conn, "the test's socket failed")
    answers: list[bool] = []
    try:
        conn.channel()
        loser.start()
        assert paused.wait(10)
        assert conn._lifecycle.error is not None  # what a caller sees now
        waiter = threading.Thread(target=lambda: answers.append(conn.wait_recovered(20)))
        waiter.start()
        waiter.join(0.5)
        assert not answers, "wait_recovered answered before the recovery even began"
        go_on.set()
        loser.join(10)
        waiter.join(20)
        assert answers == [True] and conn.is_open
    finally:
        go_on.set()
        conn.close()
