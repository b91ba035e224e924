"""client.thread_lock: the blocking transport's connection lock, a compiled reentrant lock
that behaves as threading.RLock (taken again by its owner, released as often as taken, only
by its owner; waits without the GIL; a signal handler's exception ends a wait), and that
the compiled publish really takes."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from amqwire.client.thread_lock import ReentrantLock


def held_elsewhere(lock):
    """A thread that holds ``lock`` until the returned event is set."""
    taken, done = threading.Event(), threading.Event()

    def hold():
        with lock:
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    return thread, done


def test_taken_again_by_its_owner_and_released_as_often():
    lock = ReentrantLock()
    assert lock.acquire() is True
    assert lock.acquire(blocking=False) is True
    with lock:
        assert lock._is_owned()
    assert "2 time(s)" in repr(lock)
    lock.release()
    lock.release()
    assert not lock._is_owned()
    assert "free" in repr(lock)
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()


def test_only_its_owner_releases_it_and_others_wait():
    lock = ReentrantLock()
    thread, done = held_elsewhere(lock)
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    assert lock.acquire(blocking=False) is False
    assert lock.acquire(timeout=0) is False
    assert lock.acquire(timeout=0.05) is False
    assert not lock._is_owned()
    done.set()
    assert lock.acquire(timeout=30) is True  # given back by the holder: taken
    assert lock._is_owned()
    lock.release()
    thread.join(10)


def test_arguments_as_rlocks():
    lock = ReentrantLock()
    for kwargs in ({"blocking": False, "timeout": 1}, {"timeout": -2}, {"timeout": float("nan")}):
        with pytest.raises(ValueError):
            threading.RLock().acquire(**kwargs)
        with pytest.raises(ValueError):
            lock.acquire(**kwargs)
    with pytest.raises(OverflowError):
        lock.acquire(timeout=threading.TIMEOUT_MAX * 2)
    assert not lock._is_owned()


def test_waiting_lets_other_threads_run_and_counts_stay_exact():
    lock = ReentrantLock()
    total = [0]

    def work():
        for _ in range(20000):
            with lock:
                with lock:  # reentrant
                    value = total[0]
                    total[0] = value + 1
                    if value % 997 == 0:
                        time.sleep(0)  # give the GIL away while holding the lock

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert total[0] == 4 * 20000
    assert "free" in repr(lock)


def test_waiters_that_give_up_never_let_two_threads_in():
    """Threads that wait with short timeouts, some giving up while the lock is being given
    back (leaving the hand-over signal to the next waiter): never two inside at once, and
    whoever got in was counted."""
    lock = ReentrantLock()
    inside = [0]
    got = [0, 0]  # taken, gave up

    def work(seed):
        for i in range(3000):
            if lock.acquire(timeout=0.0005 * ((i + seed) % 4)) if (i + seed) % 5 else lock.acquire():
                try:
                    inside[0] += 1
                    if inside[0] != 1:
                        raise AssertionError("two threads inside the lock")
                    got[0] += 1
                    if i % 7 == 0:
                        time.sleep(0)  # give the GIL away while holding the lock
                    inside[0] -= 1
                finally:
                    lock.release()
            else:
                got[1] += 1

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert got[0] + got[1] == 5 * 3000 and got[0] > 0
    assert "free" in repr(lock) and lock.acquire(blocking=False)
    lock.release()


def test_a_waiter_takes_the_lock_its_holder_gives_back_in_time():
    lock = ReentrantLock()
    thread, done = held_elsewhere(lock)
    threading.Timer(0.05, done.set).start()
    started = time.monotonic()
    assert lock.acquire(timeout=20) is True
    assert time.monotonic() - started < 20
    lock.release()
    thread.join(10)


class Interrupted(Exception):
    pass


def signals_until(stop: threading.Event, target: int) -> threading.Thread:
    def send():
        while not stop.wait(0.02):
            signal.pthread_kill(target, signal.SIGUSR1)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_signal_handler_that_raises_ends_the_wait():
    lock = ReentrantLock()
    holder, done = held_elsewhere(lock)
    stop = threading.Event()

    def handler(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    sender = signals_until(stop, threading.main_thread().ident)
    try:
        with pytest.raises(Interrupted):
            lock.acquire()
    finally:
        stop.set()
        sender.join(10)  # no signal after the handler is put back (the default one ends the process)
        signal.signal(signal.SIGUSR1, previous)
    assert not lock._is_owned()
    done.set()
    holder.join(10)
    assert lock.acquire(timeout=30) and lock._is_owned()
    lock.release()


def test_a_wait_goes_on_through_signals_and_keeps_its_timeout():
    lock = ReentrantLock()
    holder, done = held_elsewhere(lock)
    stop = threading.Event()
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    sender = signals_until(stop, threading.main_thread().ident)
    try:
        assert lock.acquire(timeout=0.3) is False  # interrupted, resumed with what was left, timed out
        threading.Timer(0.3, done.set).start()
        assert lock.acquire() is True  # waits through the signals until the holder gives up
    finally:
        stop.set()
        sender.join(10)
        signal.signal(signal.SIGUSR1, previous)
    assert seen  # the handler ran while this thread waited
    assert lock._is_owned()
    lock.release()
    holder.join(10)


def test_the_compiled_publish_takes_the_connections_lock(amqp_url):
    """A confirmed publish with room (publish_path, lock_take in C) waits while another
    thread holds the blocking connection's lock, and goes on once it is given back."""
    from amqwire.client.blocking import connect

    with connect(amqp_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        ch.confirm_select()
        assert type(conn._lock) is ReentrantLock
        ch.publish_async("", queue, b"first").result(10)  # the channel's publisher is made
        futures = []
        publisher = threading.Thread(target=lambda: futures.append(ch.publish_async("", queue, b"second")))
        with conn._lock:
            publisher.start()
            publisher.join(0.3)
            assert publisher.is_alive() and futures == []  # waiting for the lock
        publisher.join(10)
        assert futures[0].result(10) is None
        assert ch.queue_declare(queue, passive=True).message_count == 2
