"""The blocking PublishFuture settles without a lock (on the I/O thread, the hot path of
confirms) while other threads add callbacks to it.  These tests stop one side at every line
it runs, in turn, run the other side to the end at that point, then let the first finish:
every interleaving with one preemption.  Whatever the order, each callback runs once.

The race they pin down was real: the I/O thread's ack read ``_callbacks`` (empty), the
producer's sender thread added its callback and found the future still pending, then the
ack set the state: the callback never ran and a confirmed send waited for its deadline.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import pytest

from amqwire.client import io_threads
from amqwire.client.io_threads import ChannelWaits, PublishFuture

_FILE = io_threads.__file__


def _run_preempted(first: Callable[[], Any], second: Callable[[], Any], stop_at: int) -> bool:
    """Run ``first`` in a thread, stopping it at its ``stop_at``-th line in io_threads.py; run
    ``second`` to the end here; then let ``first`` finish.  False once ``first`` ends before
    reaching that line (every stop point has been tried)."""
    paused = threading.Event()
    resume = threading.Event()
    lines = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        if frame.f_code.co_filename != _FILE:
            return None
        if event == "line":
            lines += 1
            if lines == stop_at:
                paused.set()
                resume.wait(10)
        return tracer

    errors: list[BaseException] = []

    def target() -> None:
        sys.settrace(tracer)
        try:
            first()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            sys.settrace(None)
            paused.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    paused.wait(10)  # not set: the thread ran to its end first (reached is False, the caller goes on)
    reached = thread.is_alive() and lines == stop_at
    second()
    resume.set()
    thread.join(10)
    assert not thread.is_alive(), "timed out after 10 s waiting for the paused thread to finish"
    if errors:
        raise errors[0]
    return reached


def _settlers() -> list[tuple[str, Callable[[PublishFuture], Any]]]:
    return [
        ("ack (the I/O thread's inlined path)", lambda f: ChannelWaits.acked([f])),
        ("set_result", lambda f: f.set_result(None)),
        ("set_exception", lambda f: f.set_exception(RuntimeError("lost"))),
    ]


@pytest.mark.parametrize("settle", [s for _, s in _settlers()], ids=[name for name, _ in _settlers()])
@pytest.mark.parametrize("preempted", ["settling", "adding"])
def test_a_callback_added_while_another_thread_settles_runs_exactly_once(settle, preempted):
    stop_at = 1
    while True:
        future = PublishFuture(None, 1)  # type: ignore[arg-type]
        runs: list[PublishFuture] = []

        def add(future: PublishFuture = future, runs: list[PublishFuture] = runs) -> None:
            future.add_done_callback(runs.append)

        def settle_it(future: PublishFuture = future) -> None:
            settle(future)

        first, second = (settle_it, add) if preempted == "settling" else (add, settle_it)
        reached = _run_preempted(first, second, stop_at)
        assert future.done()
        assert runs == [future], f"stopped at line {stop_at} of the {preempted} side: ran {len(runs)} times"
        if not reached:
            break
        stop_at += 1
    assert stop_at > 2  # the stop points really were inside the code under test


def test_callbacks_given_at_publish_and_added_later_all_run_once_in_order():
    future = PublishFuture(None, 2)  # type: ignore[arg-type]
    runs: list[str] = []
    future._callbacks = [[lambda f: runs.append("given")]]  # as ChannelWaits.new_token attaches one
    future.add_done_callback(lambda f: runs.append("added"))
    ChannelWaits.acked([future])
    assert runs == [] and not future.done()  # one of two publishes acked
    ChannelWaits.acked([future])
    future.set_exception(RuntimeError("late"))  # a second settling does nothing
    assert runs == ["given", "added"] and future.exception() is None
    future.add_done_callback(lambda f: runs.append("after"))
    assert runs == ["given", "added", "after"]


@pytest.mark.parametrize("count", [0, 1, 3])
@pytest.mark.parametrize("callback", [None, print])
def test_new_token_makes_the_future_publish_future_init_would(count, callback):
    """ChannelWaits.new_token sets PublishFuture's fields itself (no __init__ call, the hot
    path of publish_async): the same fields, with the same values."""
    channel = object()
    waits = ChannelWaits.__new__(ChannelWaits)
    waits._channel = channel
    made = waits.new_token(count, callback)
    expected = PublishFuture(channel, count)  # type: ignore[arg-type]
    if callback is not None:
        expected._callbacks = [[callback]]
    assert isinstance(made, PublishFuture)
    for name in PublishFuture.__slots__:
        assert getattr(made, name) == getattr(expected, name), name
    assert repr(made) == repr(expected) and made.done() == (count == 0)
