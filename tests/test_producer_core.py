"""The Producer's transport-neutral policies (client/producer/), without a broker."""
from __future__ import annotations

import os
import random
import sys
import threading
import time
import zlib

import pytest
from conftest import Deadline

from amqwire.codec import AMQPSyntaxError, BasicProperties, UnsupportedValueError, encode_publish
from amqwire.client.errors import (
    AMQPConnectionError,
    ConnectionLost,
    InvalidStateError,
    MessageReturned,
    NotFound,
    PublishNacked,
    PublishUnconfirmed,
)
from amqwire.client.encoding import decode_body, zstd_available
from amqwire.client.message import Message, ReturnedMessage
from amqwire.client.lifecycle import ProducerSignal, SenderSignal
from amqwire.client.producer.compression import Compressor
from amqwire.client.producer.core import ProducerCore
from amqwire.client.producer.errors import BufferFullError, SendFailed, SendTimeout
from amqwire.client.producer.ids import MessageIds
from amqwire.client.producer.message import OutgoingMessage
from amqwire.client.producer.policy import (
    LATENCY_PENALTIES,
    LATENCY_THRESHOLDS,
    PINNED,
    ROUND_ROBIN,
    Broker,
    BrokerSelector,
    LatencyTable,
    retryable,
)
from amqwire.client.producer.stats import Latencies
from amqwire.client.url import ConnectionParameters


class _Future:
    def __init__(self) -> None:
        self.outcomes: list = []

    def done(self) -> bool:
        return bool(self.outcomes)


class RecordingBackend:
    """A Producer's backend that records instead of waiting."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wakes = 0
        self.notified = 0
        self.before_future = None  # called as each future is made: a test's race

    def new_future(self) -> _Future:
        if self.before_future is not None:
            self.before_future()
        return _Future()

    def resolve(self, future, result, error) -> None:
        future.outcomes.append((result, error))

    def resolve_all(self, futures, results) -> None:
        for future, result in zip(futures, results):
            self.resolve(future, result, None)

    def wake(self) -> None:
        self.wakes += 1

    def notify(self) -> None:
        self.notified += 1


def make_core(*urls: str, **options) -> ProducerCore:
    return ProducerCore(RecordingBackend(), list(urls) or None, **options)


def queue(core: ProducerCore, routing_key="rk", body=b"x", **kw):
    message = core._prepare("", routing_key, body, kw.pop("properties", None), kw.pop("mandatory", False),
                            kw.pop("timeout", None), kw.pop("oneway", False))
    with core._lock:
        assert core._admit(message)
    return message


def _broker(core: ProducerCore, index: int = 0) -> Broker:
    return core.brokers[index]


# --------------------------------------------------------------------------- message ids


def test_message_ids_are_unique_and_time_ordered_across_threads():
    """8 threads make ids at once, with the interpreter switching threads every microsecond
    (sys.setswitchinterval): a counter that is not atomic (a read-modify-write such as
    ``self.n += 1``) hands two threads the same value, and two ids repeat."""
    ids = MessageIds()
    threads_n, per_thread = 8, 5000
    made: list[list[str]] = [[] for _ in range(threads_n)]
    start = threading.Barrier(threads_n)

    def work(out: list[str]) -> None:
        start.wait(10)  # all at once
        for _ in range(per_thread):
            out.append(ids.next())

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(out,), daemon=True) for out in made]
        for t in threads:
            t.start()
        Deadline(60, f"{threads_n} threads making {per_thread} ids each").join(threads)
    finally:
        sys.setswitchinterval(interval)
    every = [i for out in made for i in out]
    repeated = len(every) - len(set(every))
    assert repeated == 0 and len(every) == threads_n * per_thread, f"{repeated} ids made twice"
    for out in made:  # one thread's ids sort in the order it made them
        assert out == sorted(out)
    first = ids.next()
    time.sleep(0.002)
    assert ids.next() > first > max(every)
    assert first[14] == "7" and first[19] in "89ab"  # the UUIDv7 version and variant
    ms = int(first.replace("-", "")[:12], 16)
    assert abs(ms / 1000 - time.time()) < 5


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize("method", ["zlib", "zstd", "auto"])
def test_compression_round_trips_above_the_threshold(method):
    assert zstd_available(), "zstandard is in the test extra: zstd and auto must be tested"
    c = Compressor(method, 1000)
    small = b"a" * 999
    assert c.apply(small, None) == (small, None)
    body = b"hello world " * 500
    packed, props = c.apply(body, BasicProperties(content_type="text/plain"))
    assert len(packed) < len(body)
    assert props.content_type == "text/plain"
    assert props.content_encoding == ("deflate" if method == "zlib" else "zstd")
    assert decode_body(packed, props.content_encoding) == body
    message = Message(1, 1, False, "", "q", props, packed)
    assert message.decoded_body() == body


def test_compression_leaves_encoded_or_incompressible_bodies_alone():
    c = Compressor("zlib", 10)
    body = b"z" * 100
    props = BasicProperties(content_encoding="gzip")
    assert c.apply(body, props) == (body, props)
    random_body = os.urandom(2000)  # does not shrink
    out, p = c.apply(random_body, None)
    assert out == random_body and p is None
    assert Compressor(None, 0).apply(body, None) == (body, None)
    with pytest.raises(ValueError, match="compression must be"):
        Compressor("lz4", 0)


def test_decode_body_knows_gzip_and_passes_unknown_encodings():
    import gzip

    assert decode_body(gzip.compress(b"abc"), "gzip") == b"abc"
    assert decode_body(b"abc", "utf-8") == b"abc"
    assert decode_body(b"abc", None) == b"abc"
    with pytest.raises(zlib.error):
        decode_body(b"not deflate", "deflate")


# --------------------------------------------------------------------------- brokers


def _brokers(n: int) -> list[Broker]:
    return [Broker(i, ConnectionParameters(port=5000 + i)) for i in range(n)]


def test_round_robin_takes_brokers_in_turn_and_avoids_a_failed_one():
    brokers = _brokers(3)
    s = BrokerSelector(brokers, ROUND_ROBIN, 1.0, 8.0)
    never = lambda b: False  # noqa: E731
    assert [s.choose(0.0, never)[0].index for _ in range(4)] == [0, 1, 2, 0]
    assert s.avoid(brokers[1], ConnectionLost("x"), 10.0) == 1.0
    assert [s.choose(10.5, never)[0].index for _ in range(4)] == [2, 0, 2, 0]
    assert s.choose(11.0, never)[0].index == 1  # the avoidance is over
    # consecutive failures double the period, up to the maximum
    assert [s.avoid(brokers[1], ConnectionLost("x"), 20.0) for _ in range(4)] == [2.0, 4.0, 8.0, 8.0]
    s.succeeded(brokers[1])
    assert s.avoid(brokers[1], ConnectionLost("x"), 30.0) == 1.0


def test_a_broker_down_for_hours_stays_avoided_at_the_cap():
    # 2.0 ** 1024 overflows: after ~1,025 failures in a row (hours of outage at the 30 s cap)
    # avoid() raised OverflowError, which killed the Producer's sender.
    brokers = _brokers(1)
    s = BrokerSelector(brokers, ROUND_ROBIN, 1.0, 30.0)
    periods = [s.avoid(brokers[0], ConnectionLost("x"), float(t)) for t in range(2000)]
    assert periods[-1] == 30.0 and brokers[0].failures == 2000


def test_every_broker_avoided_says_how_long_to_wait():
    brokers = _brokers(2)
    s = BrokerSelector(brokers, ROUND_ROBIN, 1.0, 8.0)
    s.avoid(brokers[0], ConnectionLost("x"), 0.0)
    s.avoid(brokers[1], ConnectionLost("x"), 0.5)
    broker, wait = s.choose(0.25, lambda b: False)
    assert broker is None and wait == pytest.approx(0.75)


def test_pinned_fails_over_in_order_and_goes_back():
    brokers = _brokers(3)
    s = BrokerSelector(brokers, PINNED, 1.0, 8.0)
    never = lambda b: False  # noqa: E731
    assert {s.choose(0.0, never)[0].index for _ in range(3)} == {0}
    s.avoid(brokers[0], ConnectionLost("x"), 0.0)
    assert s.choose(0.5, never)[0].index == 1
    s.avoid(brokers[1], ConnectionLost("x"), 0.5)
    assert s.choose(0.6, never)[0].index == 2
    assert s.choose(1.0, never)[0].index == 0


def test_a_blocked_broker_is_used_only_when_no_other_is_there():
    brokers = _brokers(2)
    s = BrokerSelector(brokers, PINNED, 1.0, 8.0)
    assert s.choose(0.0, lambda b: b.index == 0)[0].index == 1
    assert s.choose(0.0, lambda b: True)[0].index == 0
    with pytest.raises(ValueError, match="policy"):
        BrokerSelector(brokers, "random", 1.0, 1.0)


# --------------------------------------------------------------------------- latency avoidance


def test_the_latency_table_is_rocketmqs_by_default():
    table = LatencyTable()
    assert (table.thresholds, table.penalties) == (LATENCY_THRESHOLDS, LATENCY_PENALTIES)
    # RocketMQ's computeNotAvailableDuration: the penalty of the highest threshold reached
    cases = {0.0: 0, 0.049: 0, 0.05: 0, 0.3: 0, 0.55: 30, 0.9: 30, 1.0: 60, 2.5: 120, 3.0: 180, 14.0: 180,
             15.0: 600, 100.0: 600}
    assert {latency: table.penalty(latency) for latency in cases} == cases
    assert table.first_penalized == 0.55


@pytest.mark.parametrize("thresholds, penalties, field", [
    ((0.1, 0.2), (1.0,), "as long as each other"),
    ((), (), "as long as each other"),
    ((0.2, 0.1), (1.0, 2.0), "latency_thresholds must be >= 0 and increasing"),
    ((0.1, 0.2), (1.0, -2.0), "latency_penalties must be >= 0"),
])
def test_a_bad_latency_table_is_refused_naming_the_option(thresholds, penalties, field):
    with pytest.raises(ValueError, match=field):
        LatencyTable(thresholds, penalties)
    with pytest.raises(ValueError, match=field):
        make_core("amqp://127.0.0.1:1/", latency_thresholds=thresholds, latency_penalties=penalties)


def _slow_selector(n: int, policy: str = ROUND_ROBIN) -> tuple[list[Broker], BrokerSelector]:
    brokers = _brokers(n)
    # scaled down: from 0.2 s a broker is passed over for 2 s, from 1 s for 5 s
    table = LatencyTable((0.05, 0.2, 1.0), (0.0, 2.0, 5.0))
    return brokers, BrokerSelector(brokers, policy, 1.0, 8.0, table)


def _verdict(s: BrokerSelector, broker: Broker, written_at: float, now: float, error: bool = False) -> None:
    s.observe(broker, broker.written(1, written_at), now, True, 1, not error)


def test_a_slow_broker_is_passed_over_for_its_penalty_then_comes_back():
    brokers, s = _slow_selector(2)
    never = lambda b: False  # noqa: E731
    _verdict(s, brokers[1], 0.0, 0.5)  # 0.5 s from write to confirm: 2 s off
    assert brokers[1].latency == 0.5 and s.is_slow(brokers[1], 0.5)
    assert [s.choose(t, never)[0].index for t in (0.6, 0.7, 1.0, 2.4)] == [0, 0, 0, 0]
    assert [s.choose(2.5, never)[0].index for _ in range(4)] == [1, 0, 1, 0]  # back in turn
    _verdict(s, brokers[1], 3.0, 4.5)  # slower: 5 s off
    assert s.choose(9.4, never)[0].index == 0 and s.choose(9.5, never)[0].index == 1
    _verdict(s, brokers[1], 9.5, 9.51)  # a fast verdict ends the penalty at once (RocketMQ's rule)
    assert not s.is_slow(brokers[1], 9.51)
    assert s.broker_stats(9.51, never)[1].state == "available"


def test_a_send_unconfirmed_past_the_first_penalized_latency_makes_its_broker_slow_at_once():
    brokers, s = _slow_selector(2)
    never = lambda b: False  # noqa: E731
    write = brokers[1].written(10, 0.0)
    assert not s.is_slow(brokers[1], 0.19)
    assert s.is_slow(brokers[1], 0.2)  # no verdict yet: the wait itself is the latency
    assert [s.choose(0.3, never)[0].index for _ in range(3)] == [0, 0, 0]
    s.observe(brokers[1], write, 0.35, False, 10, False)  # lost: not a latency, not slow any more
    assert brokers[1].latency is None and brokers[1].failed == 10 and not s.is_slow(brokers[1], 0.35)
    brokers[0].written(1, 1.0)
    brokers[0].forget_unsettled()  # its connection failed: no verdict will come
    assert not s.is_slow(brokers[0], 5.0)


def test_every_broker_slow_uses_the_one_back_soonest_never_none():
    brokers, s = _slow_selector(3)
    never = lambda b: False  # noqa: E731
    _verdict(s, brokers[0], 0.0, 2.0)   # 5 s: until 7.0
    _verdict(s, brokers[1], 0.0, 0.5)   # 2 s: until 2.5
    _verdict(s, brokers[2], 1.0, 2.0)   # 5 s: until 7.0
    assert [s.choose(2.1, never)[0].index for _ in range(3)] == [1, 1, 1]
    # a failed broker is still avoided, a blocked one used only when nothing else is left
    s.avoid(brokers[1], ConnectionLost("x"), 2.2)
    assert s.choose(2.3, never)[0].index in (0, 2)
    assert s.choose(2.3, lambda b: b.index == 0)[0].index == 2
    stats = {b.url: b for b in s.broker_stats(2.3, never)}
    assert [stats[b.url].state for b in brokers] == ["slow", "failed", "slow"]
    assert stats[brokers[0].url].avoided_for == pytest.approx(4.7)


def test_a_retry_goes_to_another_broker_when_there_is_one():
    brokers, s = _slow_selector(3)
    never = lambda b: False  # noqa: E731
    for _ in range(6):
        assert s.choose(0.0, never, retry_of={brokers[1]})[0].index != 1
    assert s.choose(0.0, never, retry_of=set(brokers))[0] in brokers  # nowhere else: any
    s.avoid(brokers[0], ConnectionLost("x"), 0.0)
    s.avoid(brokers[2], ConnectionLost("x"), 0.0)
    assert s.choose(0.5, never, retry_of={brokers[1]})[0].index == 1  # the only one left


def test_pinned_ignores_slowness_and_retries_stay_on_the_pinned_broker():
    brokers, s = _slow_selector(2, PINNED)
    never = lambda b: False  # noqa: E731
    assert s.latency is None
    _verdict(s, brokers[0], 0.0, 3.0)
    assert not s.is_slow(brokers[0], 3.0)
    assert {s.choose(3.0, never, retry_of={brokers[0]})[0].index for _ in range(3)} == {0}
    assert brokers[0].latency == 3.0  # still recorded for the statistics


def test_without_latency_avoidance_round_robin_ignores_slowness():
    brokers = _brokers(2)
    s = BrokerSelector(brokers, ROUND_ROBIN, 1.0, 8.0, None)
    _verdict(s, brokers[1], 0.0, 100.0)
    assert [s.choose(100.0, lambda b: False)[0].index for _ in range(4)] == [0, 1, 0, 1]


def test_broker_counts_add_up_and_a_verdict_counts_once():
    brokers, s = _slow_selector(1)
    broker = brokers[0]
    first, second = broker.written(5, 0.0), broker.written(3, 0.0)
    s.observe(broker, first, 0.01, True, 5, True)
    s.observe(broker, first, 0.02, True, 5, True)  # a future's callback run twice
    s.observe(broker, second, 0.03, True, 3, False)  # nacked
    dropped = broker.written(2, 0.04)
    broker.unwritten(dropped, 2)  # the publish raised: never written
    assert (broker.sent, broker.confirmed, broker.failed) == (8, 5, 3)
    assert broker.latency == pytest.approx(0.03)
    assert broker.latency_avg == pytest.approx(0.01 + 0.2 * 0.02)


# --------------------------------------------------------------------------- retries


def test_what_is_retried():
    returned = MessageReturned(ReturnedMessage(1, 312, "NO_ROUTE", "", "rk", BasicProperties(), b""))
    assert retryable(PublishNacked(1), False)
    assert retryable(PublishUnconfirmed(1, ConnectionLost("gone")), False)
    assert retryable(AMQPConnectionError("refused"), False)
    assert not retryable(returned, False) and retryable(returned, True)
    missing = NotFound(404, "NOT_FOUND - no exchange 'x'", 60, 40, channel=1)
    assert not retryable(PublishUnconfirmed(1, missing), False)
    assert not retryable(ValueError("x"), False)


def test_backoff_is_exponential_capped_and_jittered():
    core = make_core(retry_backoff=0.1, retry_backoff_max=0.35)
    for attempt, base in ((1, 0.1), (2, 0.2), (3, 0.35), (6, 0.35)):
        values = [core._backoff(attempt) for _ in range(200)]
        assert all(base * 0.5 <= v <= base for v in values)
        assert len(set(values)) > 100  # jittered


def test_a_send_is_tried_at_most_retries_plus_one_times_then_fails_with_every_attempt():
    core = make_core(retries=2, retry_backoff=0.0, retry_backoff_max=0.0)
    message = queue(core)
    broker = _broker(core)
    core._attempt_failed(message, broker, PublishNacked(1))
    core._attempt_failed(message, broker, PublishUnconfirmed(2, ConnectionLost("gone")))
    assert not message.done and core._retried == 2 and core._backend.wakes == 2
    core._attempt_failed(message, broker, PublishNacked(3))
    assert message.done
    (result, error), = message.future.outcomes
    assert result is None and isinstance(error, SendFailed)
    assert isinstance(error.error, PublishNacked) and len(error.attempts) == 3
    assert [a.broker for a in error.attempts] == [broker.url] * 3
    assert "after 3 attempts" in str(error) and message.message_id in str(error)
    assert core.stats().failed == 1 and core.stats().pending == 0


def test_a_final_error_is_not_retried_and_is_the_brokers_own():
    core = make_core(retries=5)
    message = queue(core)
    missing = NotFound(404, "NOT_FOUND - no exchange 'x'", 60, 40, channel=1)
    core._attempt_failed(message, _broker(core), PublishUnconfirmed(1, missing))
    (result, error), = message.future.outcomes
    assert isinstance(error, SendFailed) and len(error.attempts) == 1
    # the broker's NotFound, and the PublishUnconfirmed it caused: one exception, both classes
    assert isinstance(error.error, NotFound) and isinstance(error.error, PublishUnconfirmed)
    assert error.error.cause is missing and (error.error.reply_code, error.error.channel) == (404, 1)


def test_a_retry_that_would_end_after_the_deadline_times_out_naming_the_back_off():
    core = make_core(retries=5, retry_backoff=10.0, retry_backoff_max=10.0)
    message = queue(core, timeout=1.0)
    core._attempt_failed(message, _broker(core), PublishNacked(1))
    (result, error), = message.future.outcomes
    assert isinstance(error, SendTimeout) and "back-off before retry 1" in str(error)
    assert len(error.attempts) == 1 and isinstance(error.error, PublishNacked)


def test_a_confirm_settles_once():
    core = make_core()
    message = queue(core)
    core._succeeded_all([message], _broker(core))
    core._succeeded_all([message], _broker(core))
    core._attempt_failed(message, _broker(core), PublishNacked(1))
    assert len(message.future.outcomes) == 1
    result, error = message.future.outcomes[0]
    assert error is None and result.attempts == 1 and result.message_id == message.message_id
    stats = core.stats()
    assert (stats.sent, stats.confirmed, stats.failed, stats.pending, stats.buffered_bytes) == (1, 1, 0, 0, 0)


# --------------------------------------------------------------------------- the accumulator


def test_linger_holds_a_batch_until_it_is_full_or_old_enough():
    core = make_core(linger=10.0, batch_size=3)
    queue(core)
    queue(core)
    now = time.monotonic()
    batch, wait = core._next_batch(now)
    assert batch == [] and 9 < wait <= 10.0
    queue(core)
    queue(core)
    batch, wait = core._next_batch(now)
    assert len(batch) == 3  # batch_size
    batch, wait = core._next_batch(now + 11)
    assert len(batch) == 1  # lingered long enough
    batch, wait = core._next_batch(now + 11)
    assert batch == [] and 18 < wait < 20  # nothing to write: wake up by the nearest deadline (30 s)


def test_batch_bytes_and_flush_end_the_linger():
    core = make_core(linger=10.0, batch_size=100, batch_bytes=250, compression=None)
    now = time.monotonic()
    for _ in range(3):
        queue(core, body=b"b" * 100)
    batch, _ = core._next_batch(now)
    assert len(batch) == 3  # 300 bytes >= batch_bytes: the batch stops past the limit
    queue(core)
    assert core._next_batch(now)[0] == []
    epoch = core._begin_flush()
    assert len(core._next_batch(now)[0]) == 1
    assert not core._flushed(epoch)  # written, not settled


def test_retries_go_first_once_their_back_off_is_over():
    core = make_core(retry_backoff=1.0, retry_backoff_max=1.0)
    first = queue(core)
    core._next_batch(time.monotonic())
    core._published([first], _broker(core))
    second = queue(core)
    core._attempt_failed(first, _broker(core), PublishNacked(1))
    now = time.monotonic()
    batch, _ = core._next_batch(now)
    assert batch == [second]
    batch, _ = core._next_batch(now + 1.01)
    assert batch == [first]


def test_the_sweep_fails_each_send_with_the_wait_it_was_in():
    core = make_core(retry_backoff=100.0, retry_backoff_max=100.0)
    queued = queue(core, timeout=0.5)
    inflight = queue(core, timeout=0.5)
    backing_off = queue(core, timeout=200.0)
    keep = queue(core, timeout=60.0)
    core._queue.remove(inflight)
    core._published([inflight], _broker(core))
    core._queue.remove(backing_off)
    core._attempt_failed(backing_off, _broker(core), PublishNacked(1))
    backing_off.deadline = time.monotonic()  # its deadline passes during the back-off
    core._waiting = "room in the confirm window"
    core._sweep(time.monotonic() + 1)
    waits = {m.message_id: m.future.outcomes[0][1] for m in (queued, inflight, backing_off)}
    assert all(isinstance(e, SendTimeout) for e in waits.values())
    assert waits[queued.message_id].operation == "room in the confirm window"
    assert waits[inflight.message_id].operation == "the broker's confirm"
    assert waits[backing_off.message_id].operation == "the back-off before retry 1"
    assert "timed out after 0.5 s waiting for the broker's confirm" in str(waits[inflight.message_id])
    assert not keep.done and list(core._queue) == [keep]


def test_buffer_memory_bounds_what_is_held():
    core = make_core(buffer_memory=250, compression=None)
    queue(core, body=b"a" * 100)
    queue(core, body=b"a" * 100)
    message = core._prepare("", "rk", b"a" * 100, None, False, None, False)
    with core._lock:
        assert core._admit(message) == 0
    raising = make_core(buffer_memory=250, buffer_full="raise", compression=None)
    queue(raising, body=b"a" * 200)
    with pytest.raises(BufferFullError, match="200 of 250 bytes"):
        queue(raising, body=b"a" * 100)
    assert raising.stats().sent == 1


def _offered(core: ProducerCore, body=b"x", **kw):
    message = core._prepare("", "rk", body, None, False, kw.pop("timeout", None), False)
    return message, core._offer(message)


def test_offers_wait_in_the_inbox_until_the_lock_holder_counts_them_in_order():
    core = make_core(compression=None)
    first, ok1 = _offered(core)
    second, ok2 = _offered(core, b"yy")
    assert ok1 and ok2 and list(core._inbox) == [first, second] and first.future is not None
    assert core.stats().sent == 2  # stats() counts the inbox in
    slow = core._prepare("", "rk", b"z", None, False, None, False)
    third, _ = _offered(core)
    with core._lock:
        assert core._admit(slow) == 1  # the slow path drains first: the call order holds
    batch, _ = core._next_batch(time.monotonic())
    assert batch == [first, second, third, slow]
    assert (core._pending, core._buffered, core._queued_bytes) == (4, 5, 0)
    assert not core._inbox


def test_an_offer_wakes_an_idle_sender_once():
    core = make_core()
    core._sender_fire(SenderSignal.WAIT)
    _offered(core)
    _offered(core)
    assert core._backend.wakes == 1 and not core._sender_idle


def test_whoever_moves_offers_found_by_no_one_awake_wakes_the_sender():
    # Offers made while the sender was busy woke nobody.  The sender goes idle having found
    # the inbox empty, because stats() (or a slow-path send) moved those offers to the queue
    # first.  Whoever moved them must wake it, or they wait for its next timeout.
    core = make_core(linger=0.005)
    _offered(core)
    _offered(core)
    assert core._backend.wakes == 0  # the sender was busy
    core._sender_fire(SenderSignal.WAIT)
    core.stats()
    assert core._backend.wakes == 1 and not core._sender_idle
    core.stats()  # nothing moved: no wake
    assert core._backend.wakes == 1

    core = make_core(linger=0.005, buffer_memory=290, compression=None)
    _offered(core, b"a" * 100)
    _offered(core, b"a" * 100)
    core._sender_fire(SenderSignal.WAIT)
    slow, ok = _offered(core, b"a" * 40)  # 3 x the largest > 290: the slow path
    assert not ok
    with core._lock:
        assert core._admit(slow) == 2  # the queue was empty: the sender must start the linger
    assert list(core._queue)[-1] is slow


def test_an_offer_goes_the_slow_way_when_the_buffer_may_be_full():
    core = make_core(buffer_memory=250, compression=None)
    assert _offered(core, b"a" * 100)[1]
    assert _offered(core, b"a" * 100)[1]
    message, ok = _offered(core, b"a" * 40)  # 3 x the largest (100) > 250: maybe full
    assert not ok and message.future is None and len(core._inbox) == 2
    with core._lock:
        assert core._admit(message) == 1  # exactly: 240 bytes fit
    assert core.stats().buffered_bytes == 240


def test_what_flush_waits_for_includes_every_earlier_offer():
    core = make_core()
    message, _ = _offered(core)
    epoch = core._begin_flush()
    assert message.epoch == epoch and not core._flushed(epoch)
    later, _ = _offered(core)
    core._next_batch(time.monotonic())
    core._succeeded_all([message], _broker(core))
    assert core._flushed(epoch) and later.epoch == epoch + 1


def test_settling_wakes_the_waiters_only_when_a_flush_or_a_caller_waiting_for_room_can_go_on():
    core = make_core()
    first, second, third = queue(core), queue(core), queue(core)
    core._begin_flush()  # the three are one epoch
    core._succeeded_all([first], _broker(core))
    core._settle(second, None, PublishNacked(2))
    assert core._backend.notified == 0  # the epoch is not over: a flush waiting for it would wake for nothing
    core._succeeded_all([third], _broker(core))
    assert core._backend.notified == 1
    with core._lock:
        core._room_waiters += 1  # a caller waits for room in the buffer: every settle may give it
    fourth = queue(core)
    queue(core)  # its epoch stays open
    core._succeeded_all([fourth], _broker(core))
    assert core._backend.notified == 2


def test_an_offer_racing_close_is_refused_or_settled_never_stranded():
    def close_now() -> None:  # close() runs between the offer's check and its append
        core._backend.before_future = None
        core._fire(ProducerSignal.CLOSE)
        core._fire(ProducerSignal.STOP)
        core._fail_all(InvalidStateError("the producer was closed before the send completed"))

    core = make_core()
    core._backend.before_future = close_now
    with pytest.raises(InvalidStateError, match="closed"):
        _offered(core)
    assert not core._inbox and core.stats().pending == 0
    core = make_core()
    queued, _ = _offered(core)
    core._fire(ProducerSignal.CLOSE)
    core._fire(ProducerSignal.STOP)
    core._fail_all(InvalidStateError("closed"))  # close() drains what was offered and fails it
    assert queued.done and isinstance(queued.future.outcomes[0][1], InvalidStateError)
    assert not core._inbox and core.stats().pending == 0


# --------------------------------------------------------------------------- validation


def test_bad_input_is_refused_at_the_call_with_the_codecs_typed_errors():
    core = make_core(max_body_size=1000, compression=None)
    with pytest.raises(AMQPSyntaxError, match="routing_key"):
        queue(core, routing_key="k" * 256)
    with pytest.raises(AMQPSyntaxError, match="exchange"):
        core._prepare("e" * 256, "rk", b"", None, False, None, False)
    with pytest.raises(AMQPSyntaxError, match="body: 1001 bytes, over max_body_size"):
        queue(core, body=b"x" * 1001)
    with pytest.raises(UnsupportedValueError, match=r"headers\['bad'\]"):
        queue(core, properties=BasicProperties(headers={"bad": object()}))
    with pytest.raises(TypeError, match="body must be"):
        queue(core, body=123)
    with pytest.raises(ValueError, match="timeout must be"):
        queue(core, timeout=0)
    assert core.stats().sent == 0 and not core._queue
    core._fire(ProducerSignal.CLOSE)
    with pytest.raises(InvalidStateError, match="closed"):
        queue(core)


def test_a_message_id_is_added_unless_the_caller_gave_one():
    core = make_core()
    mine = queue(core, properties=BasicProperties(message_id="mine", priority=3))
    assert mine.message_id == "mine" and mine.properties.priority == 3
    made = queue(core)
    assert made.properties.message_id == made.message_id and len(made.message_id) == 36
    assert queue(make_core(message_ids=False)).properties is None


def test_hooks_see_each_send_and_a_before_send_error_refuses_it():
    seen = []
    core = make_core(before_send=lambda m: seen.append(("before", m.routing_key)),
                after_send=lambda m, r, e: seen.append(("after", r is not None, e)))
    message = queue(core, routing_key="a")
    core._succeeded_all([message], _broker(core))
    assert seen == [("before", "a"), ("after", True, None)]

    def refuse(m):
        raise PermissionError("not this one")

    strict = make_core(before_send=refuse)
    with pytest.raises(PermissionError):
        queue(strict)
    assert strict.stats().sent == 0


def test_latency_percentiles():
    lat = Latencies(size=100)
    assert lat.percentiles(50) == [None]
    for i in range(1, 201):
        lat.add(i / 1000)
    p50, p99, pmax = lat.percentiles(50, 99, 100)
    assert (p50, p99, pmax) == (0.151, 0.2, 0.2)  # the last 100 values: 0.101 .. 0.200


def test_latencies_keep_the_last_values_whatever_mix_of_add_and_extend():
    rng = random.Random(7)
    for _ in range(500):
        size = rng.randint(1, 20)
        lat = Latencies(size=size)
        everything: list[float] = []
        for _ in range(rng.randint(0, 10)):
            values = [rng.random() for _ in range(rng.randint(0, 45))]  # longer than the ring too
            if rng.random() < 0.3:
                for value in values:
                    lat.add(value)
            else:
                lat.extend(values)
            everything += values
        kept = min(len(everything), size)
        assert sorted(lat._values[:kept]) == sorted(everything[len(everything) - kept:])
        assert lat._count == len(everything)


def test_a_batch_encodes_to_the_publishes_of_its_messages_one_after_the_other():
    ids = MessageIds()
    messages = [
        OutgoingMessage("", "q", b"plain", None, False, None, False, None),
        OutgoingMessage("ex", "rk", b"with id", None, False, ids.next(), False, None, with_id=True),
        OutgoingMessage("ex", "rk", b"x" * 10000, BasicProperties(content_type="text/plain", headers={"k": 1}),
                        False, ids.next(), False, None, with_id=True),
    ]
    expected = b"".join(encode_publish(3, m.exchange, m.routing_key, m.body, m.wire_properties(), False, False, 4096)
                        for m in messages)
    frames = ProducerCore._encode(None, messages, 3, 4096)  # type: ignore[arg-type]
    assert frames == expected  # the 10,000-byte body in frames of at most 4,096 bytes
    assert messages[1].message_id.encode() in frames and messages[2].message_id.encode() in frames


# --------------------------------------------------------------------------- typing

PRODUCER_USER_CODE = '''
import asyncio
from amqwire.client import Producer, SendFuture, SendResult, aio

def blocking_user() -> None:
    with Producer(["amqp://a/", "amqp://b/"], policy="pinned", linger=0.005) as producer:
        result: SendResult = producer.send("", "q", b"x")
        future: SendFuture = producer.send_async("", "q", b"x", callback=lambda f: None)
        latency: float = future.result().latency
        producer.send_oneway("", "q", b"x")
        producer.flush(5)

async def aio_user() -> None:
    async with aio.Producer("amqp://a/") as producer:
        result: SendResult = await producer.send("", "q", b"x")
        future: "asyncio.Future[SendResult]" = await producer.send_async("", "q", b"x")
        latency: float = (await future).latency
        forgotten: SendResult = producer.send("", "q", b"x")
'''


def test_the_producers_are_typed_and_a_missing_await_is_a_type_error(tmp_path):
    from test_typing import _mypy

    result = _mypy(tmp_path, PRODUCER_USER_CODE)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout + result.stderr
    assert "user.py:18:" in errors[0] and "Coroutine" in errors[0], errors  # the forgotten await
