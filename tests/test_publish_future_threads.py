"""The blocking PublishFuture settles without a lock (on the I/O thread, the hot path of
confirms) while other threads add callbacks to it.  Whatever the order, each callback runs
once.

The race these tests pin down was real: the I/O thread's ack read ``_callbacks`` (empty),
the producer's sender thread added its callback and found the future still pending, then
the ack set the state: the callback never ran and a confirmed send waited for its deadline.

The futures are compiled (``client/thread_future.pyx``): another thread can get in only
where the compiled code waits for ``_ADDING_CALLBACKS`` or runs Python (a callback).  The
tests stop one side at each of those points, run the other side to its end there, then let
the first finish.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

from amqwire.client import thread_future
from amqwire.client.io_threads import ChannelWaits, PublishFuture

_FIELDS = ("_state", "_value", "_error", "_callbacks", "_waiter", "_channel", "delivery_tag", "count", "_pending",
           "_retrieved")


def _settlers() -> list[tuple[str, Callable[[PublishFuture], Any]]]:
    return [
        ("ack (the I/O thread's path)", lambda f: ChannelWaits.acked([f])),
        ("set_result", lambda f: f.set_result(None)),
        ("set_exception", lambda f: f.set_exception(RuntimeError("lost"))),
    ]


def _in_thread(target: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("settle", [s for _, s in _settlers()], ids=[name for name, _ in _settlers()])
def test_a_future_settled_while_an_adder_waits_for_the_lock_runs_its_callback_once(settle):
    """The adder saw the future pending, then waited for ``_ADDING_CALLBACKS`` (held by
    another thread adding or waiting): the future settles meanwhile and finds no callback
    to run.  The adder, once in, looks at the state again and runs it itself."""
    future = PublishFuture(None, 1)  # type: ignore[arg-type]
    runs: list[PublishFuture] = []
    lock = thread_future._ADDING_CALLBACKS
    with lock:
        adder = _in_thread(lambda: future.add_done_callback(runs.append))
        adder.join(0.2)  # it blocks on the lock this test holds
        assert adder.is_alive() and runs == []
        settle(future)
        assert future.done() and runs == []
    adder.join(10)
    assert not adder.is_alive()
    assert runs == [future]


@pytest.mark.parametrize("settle", [s for _, s in _settlers()], ids=[name for name, _ in _settlers()])
def test_a_callback_added_while_the_settling_thread_runs_callbacks_runs_once(settle):
    """Preempted inside the settling thread's first callback: another thread adds one, the
    settling thread goes on; every callback ran once, in order."""
    future = PublishFuture(None, 1)  # type: ignore[arg-type]
    runs: list[str] = []

    def first(_: Any) -> None:
        runs.append("first")
        adder = _in_thread(lambda: future.add_done_callback(lambda f: runs.append("added meanwhile")))
        adder.join(10)
        assert not adder.is_alive()

    future.add_done_callback(first)
    future.add_done_callback(lambda f: runs.append("second"))
    settler = _in_thread(lambda: settle(future))
    settler.join(10)
    assert not settler.is_alive()
    assert runs == ["first", "added meanwhile", "second"]


def _waited_in_place(future: PublishFuture) -> None:
    """``future``'s wait for the broker's confirm, without a channel: ThreadFuture's own."""
    waits = type("Waits", (), {"wait_progress": staticmethod(
        lambda ready, timeout, what: thread_future.ThreadFuture._wait(future, timeout))})
    future._channel = type("Channel", (), {"_waits": waits})


def test_a_waiter_and_a_settling_thread_meet_whatever_the_order():
    """A thread waiting for the result while another settles: the waiter always wakes."""
    for _ in range(200):
        future = PublishFuture(None, 1)  # type: ignore[arg-type]
        _waited_in_place(future)
        go = threading.Barrier(2)

        def settle(future: PublishFuture = future, go: threading.Barrier = go) -> None:
            go.wait()
            ChannelWaits.acked([future])

        settler = _in_thread(settle)
        go.wait()
        assert future.result(10) is None
        settler.join(10)


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


def test_acked_refuses_what_is_not_a_publish_future():
    with pytest.raises(TypeError):
        ChannelWaits.acked([object()])  # type: ignore[list-item]


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
    assert type(made) is PublishFuture
    for name in _FIELDS:
        assert getattr(made, name) == getattr(expected, name), name
    assert repr(made) == repr(expected) and made.done() == (count == 0)



class _Channel:
    """Stands for a channel: weakly referable, holds its unsettled futures (as the confirm
    tracker does) and its waits."""

    def __init__(self) -> None:
        self.unsettled: list[Any] = []
        self._waits = ChannelWaits.__new__(ChannelWaits)
        self._waits._channel = self


def test_a_publish_future_is_left_to_the_cycle_collector_only_once_it_can_be_in_a_cycle():
    """new_token's futures hold their channel weakly and are not tracked by the cycle
    collector (thousands in flight would be walked at every collection) until they hold
    what could lead back to them: a callback, a value, an error."""
    import gc

    channel = _Channel()
    plain = channel._waits.new_token(1, None)
    assert not gc.is_tracked(plain) and plain._channel is channel
    ChannelWaits.acked([plain])
    assert plain.done() and not gc.is_tracked(plain)  # acked: nothing new held
    assert gc.is_tracked(channel._waits.new_token(1, print))
    added = channel._waits.new_token(1, None)
    added.add_done_callback(lambda f: None)
    assert gc.is_tracked(added)
    failed = channel._waits.new_token(1, None)
    failed.set_exception(RuntimeError("nacked"))
    assert gc.is_tracked(failed)
    moved = channel._waits.new_token(1, None)
    moved._channel = channel  # held strongly now
    assert gc.is_tracked(moved)
    PublishFuture(None, 1).set_exception(RuntimeError("again"))  # tracked from the start: no double track
    waits = ChannelWaits.__new__(ChannelWaits)
    waits._channel = object()  # not weakly referable: held, and tracked as any object
    assert gc.is_tracked(waits.new_token(1, None))


def test_cycles_through_publish_futures_are_collected():
    """A channel dropped with unsettled futures (they lead to it, it holds them), a failed
    future in the cycle result() makes (error -> traceback -> caller's frame -> future), and
    one whose callback holds it: all freed by gc.collect()."""
    import gc
    import weakref

    def dropped_with_unsettled() -> Any:
        channel = _Channel()
        channel.unsettled = [channel._waits.new_token(1, None) for _ in range(3)]
        return weakref.ref(channel)

    def fail_and_look() -> Any:
        future = _Channel()._waits.new_token(1, None)
        future.set_exception(RuntimeError("nacked"))
        try:
            future.result()
        except RuntimeError:
            pass
        return weakref.ref(future)

    def call_back_to_itself() -> Any:
        future = _Channel()._waits.new_token(1, None)
        future.add_done_callback(lambda f, me=future: None)  # the callback holds the future
        return weakref.ref(future)

    refs = [dropped_with_unsettled(), fail_and_look(), call_back_to_itself()]
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


def test_a_recycled_future_is_a_new_one():
    """PublishFuture's memory is recycled (thread_future's freelist): a future made from a
    freed one's memory has every field of a new one, no weak reference or callback of the
    old one, and the cycle collector's watch as new_token leaves it; a subclass's
    instances are not recycled; the freelist is bounded."""
    import gc
    import weakref

    on, _ = thread_future._freelist()
    assert on, "PublishFuture's freelist is installed"
    gc.collect()  # no other test's futures freed in between: the next ones freed are these
    channel = _Channel()
    calls: list[Any] = []
    old = [channel._waits.new_token(2, lambda f: calls.append("ran")) for _ in range(8)]
    for future in old:
        future.set_exception(RuntimeError("nacked"))
        future.delivery_tag = 99
        future._retrieved = True
    seen = [weakref.ref(future, lambda ref: calls.append("gone")) for future in old]
    ids = {id(future) for future in old}
    del future, old  # freed now (nothing they hold leads back to them)
    assert [ref() for ref in seen] == [None] * 8 and calls == ["ran"] * 8 + ["gone"] * 8
    held = thread_future._freelist()[1]
    assert held >= 8
    fresh = [channel._waits.new_token(1, None) for _ in range(8)]
    assert {id(future) for future in fresh} == ids, "the freed futures' memory is used again"
    expected = PublishFuture(channel, 1)  # type: ignore[arg-type]
    for future in fresh:
        for name in _FIELDS:
            assert getattr(future, name) == getattr(expected, name), name
        assert not gc.is_tracked(future) and weakref.getweakrefcount(future) == 0
        ChannelWaits.acked([future])
        assert future.done() and future.result() is None

    class Sub(PublishFuture):
        pass

    subs = [Sub(channel, 1) for _ in range(4)]
    before = thread_future._freelist()[1]
    del subs
    gc.collect()
    assert thread_future._freelist()[1] == before, "a subclass's instances are freed as usual"
    many = [channel._waits.new_token(1, None) for _ in range(10_000)]
    del many
    assert thread_future._freelist()[1] <= 4096


def test_a_pending_future_whose_channel_is_gone_says_so():
    import gc

    future = _Channel()._waits.new_token(1, None)
    gc.collect()  # the channel and its waits: a cycle nothing else holds
    assert future._channel is None
    with pytest.raises(RuntimeError, match="channel is gone"):
        future.result(0)
