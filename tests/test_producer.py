"""The Producer against the shared broker, on both transports: the send modes, many
threads or tasks, compression, bad input refused at the call, failures that cannot be
retried, deadlines.  Every scenario is written once against ``P`` (an async face of either
Producer: the blocking one's calls run in a thread)."""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from amqwire.codec import AMQPSyntaxError, BasicProperties, UnsupportedValueError
from amqwire.client import (
    AMQPConnectionError,
    InvalidStateError,
    MessageReturned,
    NotFound,
    Producer,
    PublishNacked,
    PublishUnconfirmed,
    SendFailed,
    SendResult,
    SendTimeout,
    aio,
    connect,
)
from amqwire.client.encoding import zstd_available
from conftest import Deadline, closed_port, in_thread, masked

TRANSPORTS = ("blocking", "aio")


class P:
    """One face for both Producers: ``await p.send(...)``, ``fut = await p.send_async(...)``
    then ``await p.result(fut)``..."""

    def __init__(self, transport: str, producer) -> None:
        self.transport = transport
        self.producer = producer

    @classmethod
    async def open(cls, transport: str, url, **options) -> "P":
        if transport == "aio":
            return cls(transport, await aio.Producer(url, **options))
        return cls(transport, await in_thread(Producer, url, **options))

    async def _call(self, name: str, *args, **kwargs):
        method = getattr(self.producer, name)
        if self.transport == "aio":
            return await method(*args, **kwargs)
        return await in_thread(method, *args, **kwargs)

    async def send(self, *args, **kwargs) -> SendResult:
        return await self._call("send", *args, **kwargs)

    async def send_async(self, *args, **kwargs):
        return await self._call("send_async", *args, **kwargs)

    async def send_oneway(self, *args, **kwargs) -> None:
        return await self._call("send_oneway", *args, **kwargs)

    async def flush(self, timeout=None) -> None:
        return await self._call("flush", timeout)

    async def close(self, timeout=None) -> None:
        return await self._call("close", timeout)

    async def result(self, future) -> SendResult:
        if self.transport == "aio":
            return await future
        return await in_thread(future.result)

    async def many(self, count: int, exchange: str, routing_key: str, body: bytes, **kwargs) -> list:
        """``count`` send_async calls (in one thread for the blocking Producer): their futures."""
        if self.transport == "aio":
            return [await self.producer.send_async(exchange, routing_key, body, **kwargs) for _ in range(count)]
        return await in_thread(lambda: [self.producer.send_async(exchange, routing_key, body, **kwargs)
                                        for _ in range(count)])

    def stats(self):
        return self.producer.stats()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def queue_messages(url: str, queue: str) -> list:
    """Every message in the queue, taken off it."""
    out = []
    with connect(url) as conn, conn.channel() as ch:
        while True:
            message = ch.basic_get(queue, no_ack=True)
            if message is None:
                return out
            out.append(message)


def declare(url: str, queue: str) -> None:
    with connect(url) as conn, conn.channel() as ch:
        ch.queue_declare(queue)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_three_send_modes(transport, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    called = []

    async def scenario():
        p = await P.open(transport, amqp_url)
        try:
            result = await p.send("", queue, b"sync", BasicProperties(content_type="text/plain"))
            assert isinstance(result, SendResult)
            assert result.broker == masked(amqp_url).rstrip("/") or "guest@" in result.broker
            assert "guest:" not in result.broker  # never the password
            assert result.attempts == 1 and result.latency > 0 and len(result.message_id) == 36
            future = await p.send_async("", queue, b"async", callback=called.append)
            async_result = await p.result(future)
            assert async_result.message_id != result.message_id
            await p.send_oneway("", queue, b"oneway")
            await p.flush(10)
            stats = p.stats()
            assert (stats.sent, stats.confirmed, stats.oneway, stats.failed, stats.pending) == (3, 2, 1, 0, 0)
            assert stats.bytes == len(b"syncasynconeway")
            assert stats.latency_p50 is not None and stats.latency_p99 >= stats.latency_p50
            return result, async_result
        finally:
            await p.close()

    result, async_result = run(scenario())
    assert len(called) == 1 and called[0].done()  # the callback ran once, with the future
    messages = queue_messages(amqp_url, queue)
    assert sorted(m.body for m in messages) == [b"async", b"oneway", b"sync"]
    by_body = {m.body: m for m in messages}
    assert by_body[b"sync"].properties.message_id == result.message_id
    assert by_body[b"sync"].properties.content_type == "text/plain"
    assert by_body[b"async"].properties.message_id == async_result.message_id


def test_one_producer_fed_by_many_threads(amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    results: list = []
    errors: list = []
    with Producer(amqp_url, linger=0.002) as producer:
        def work(n: int) -> None:
            try:
                for i in range(100):
                    if i % 2:
                        results.append(producer.send("", queue, f"{n}-{i}"))
                    else:
                        results.append(producer.send_async("", queue, f"{n}-{i}").result(30))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,), daemon=True, name=f"sender {n}") for n in range(8)]
        for t in threads:
            t.start()
        Deadline(60, "the 8 threads' 100 sends each").join(threads)
        stats = producer.stats()
    assert errors == []
    assert len(results) == 800 and stats.confirmed == 800 and stats.pending == 0
    bodies = [m.body for m in queue_messages(amqp_url, queue)]
    assert sorted(bodies) == sorted(f"{n}-{i}".encode() for n in range(8) for i in range(100))
    assert len({r.message_id for r in results}) == 800


def test_close_racing_sends_from_many_threads_leaves_no_future_unsettled(amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    futures: list = []
    refused: list = []
    producer = Producer(amqp_url)
    started = threading.Barrier(9)

    def work() -> None:
        started.wait(10)
        while True:
            try:
                futures.append(producer.send_async("", queue, b"race"))
            except InvalidStateError:
                refused.append(1)
                return

    threads = [threading.Thread(target=work, daemon=True, name=f"sender {k}") for k in range(8)]
    for t in threads:
        t.start()
    started.wait(10)  # BrokenBarrierError if the 8 threads never got there
    time.sleep(0.05)
    producer.close(timeout=30)
    Deadline(30, "the 8 senders to be refused after the close").join(threads)
    assert len(refused) == 8  # every thread was told, at its call
    outcomes = [f.exception(10) for f in futures]  # OperationTimeout here: one left unsettled
    confirmed = sum(e is None for e in outcomes)
    assert all(e is None or isinstance(e, InvalidStateError) for e in outcomes)
    with connect(amqp_url) as conn, conn.channel() as ch:
        assert ch.queue_declare(queue, passive=True).message_count == confirmed
    stats = producer.stats()
    assert stats.pending == 0 and stats.sent == len(futures) and stats.confirmed == confirmed
    print(f"close racing 8 threads: {len(futures)} sends, {confirmed} confirmed, "
          f"{len(futures) - confirmed} failed at close")


def test_one_aio_producer_fed_by_many_tasks(amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)

    async def scenario():
        async with aio.Producer(amqp_url, linger=0.002, batch_size=64) as producer:
            async def work(n: int) -> list:
                return [await producer.send("", queue, f"{n}-{i}") for i in range(100)]
            done = await asyncio.gather(*(work(n) for n in range(8)))
            return [r for rs in done for r in rs]

    results = run(scenario())
    assert len({r.message_id for r in results}) == 800
    assert len(queue_messages(amqp_url, queue)) == 800


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_callers_far_ahead_of_the_sender_wait_for_it(transport, amqp_url, names):
    # max_in_flight 1 and batch_size 1: the sender writes one message per round trip, so a
    # caller that never waited would queue all 300 at once (the sender getting a turn
    # only now and then; in asyncio, not until the loop of awaits ends).
    queue = names.queue()
    declare(amqp_url, queue)
    backlog: list[int] = []

    async def scenario():
        p = await P.open(transport, amqp_url, max_in_flight=1, batch_size=1,
                         before_send=lambda m: backlog.append(len(p.producer._inbox) + len(p.producer._queue)))
        try:
            futures = await p.many(300, "", queue, b"paced")
            confirmed_when_the_loop_ended = p.stats().confirmed
            await p.flush(30)
            return futures, confirmed_when_the_loop_ended
        finally:
            await p.close()

    futures, confirmed_early = run(scenario())
    pace_at = 2  # 2 * max(max_in_flight, batch_size)
    print(f"pacing, {transport}: largest backlog seen by a send {max(backlog)}, "
          f"{confirmed_early} confirmed when the caller's loop ended")
    assert max(backlog) <= pace_at  # after waiting down to pace_at // 2, one more send
    assert confirmed_early >= 300 - 10  # the sender ran while the caller waited (not 0)
    assert all(f.exception() is None for f in futures)
    stored = queue_messages(amqp_url, queue)
    assert len({m.properties.message_id for m in stored}) == len(stored) == 300  # each send once


def test_a_callback_on_the_reader_thread_is_never_paced(amqp_url, names):
    # A confirm callback runs on the connection's reader thread, which the sender needs
    # (its acks open the window): were it to wait for the sender, both would stall until
    # the deadline.  Each of 100 sends chains another from its callback, while the backlog
    # is far over the pacing threshold (2).
    queue = names.queue()
    declare(amqp_url, queue)
    chained: list = []
    errors: list = []
    with Producer(amqp_url, max_in_flight=1, batch_size=1, timeout=20) as producer:
        def chain(future) -> None:
            try:
                chained.append(producer.send_async("", queue, b"chained"))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        started = time.monotonic()
        first = [producer.send_async("", queue, b"first", callback=chain) for _ in range(100)]
        producer.flush(20)
        for future in first + chained:
            future.result(20)
        elapsed = time.monotonic() - started
    assert errors == [] and len(chained) == 100
    assert elapsed < 15, f"{elapsed:.1f} s: the reader thread waited"
    bodies = sorted(m.body for m in queue_messages(amqp_url, queue))
    assert bodies == [b"chained"] * 100 + [b"first"] * 100


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_compressed_body_is_decoded_on_the_consumer_side(transport, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)
    text = ("a line of text that repeats\n" * 400).encode()

    async def scenario():
        p = await P.open(transport, amqp_url, compress_threshold=1024)
        try:
            await p.send("", queue, text)
            await p.send("", queue, b"short")
            return p.stats()
        finally:
            await p.close()

    stats = run(scenario())
    big, small = queue_messages(amqp_url, queue)
    assert big.properties.content_encoding == ("zstd" if zstd_available() else "deflate")
    assert len(big.body) < len(text) // 10 and big.decoded_body() == text
    assert small.properties.content_encoding is None and small.decoded_body() == b"short"
    assert stats.bytes == len(big.body) + 5  # counted as sent: compressed


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bad_input_is_a_typed_error_at_the_call_and_nothing_is_queued(transport, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)

    async def scenario():
        p = await P.open(transport, amqp_url, max_body_size=1000, compression=None)
        try:
            with pytest.raises(AMQPSyntaxError, match="routing_key"):
                await p.send("", "k" * 256, b"x")
            with pytest.raises(AMQPSyntaxError, match="max_body_size"):
                await p.send_async("", queue, b"x" * 1001)
            with pytest.raises(UnsupportedValueError, match=r"headers\['when'\]"):
                await p.send_oneway("", queue, b"x", BasicProperties(headers={"when": object()}))
            assert p.stats().sent == 0
        finally:
            await p.close()
        with pytest.raises(InvalidStateError, match="closed"):
            await p.send("", queue, b"x")
        with pytest.raises(InvalidStateError, match="closed"):
            await p.send_oneway("", queue, b"x")
        assert p.stats().sent == 0

    run(scenario())
    assert queue_messages(amqp_url, queue) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_missing_exchange_fails_at_once_and_the_producer_goes_on(transport, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)

    async def scenario():
        p = await P.open(transport, amqp_url, retries=3)
        try:
            with pytest.raises(SendFailed) as info:
                await p.send(names.exchange(), "rk", b"lost")
            assert isinstance(info.value.error, NotFound) and len(info.value.attempts) == 1
            # the broker's 404, and the publish it left unconfirmed: one exception, both classes
            assert isinstance(info.value.error, PublishUnconfirmed) and info.value.error.reply_code == 404
            assert "404" in str(info.value)
            await p.send("", queue, b"after")
            return p.stats()
        finally:
            await p.close()

    stats = run(scenario())
    assert (stats.failed, stats.confirmed, stats.retried) == (1, 1, 0)
    assert [m.body for m in queue_messages(amqp_url, queue)] == [b"after"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_in_a_batch_only_the_send_to_a_missing_exchange_fails(transport, amqp_url, names):
    """The broker closes the channel at the bad publish, failing every publish of the batch
    not confirmed yet: those are sent again one by one and only the bad one fails."""
    queue = names.queue()
    declare(amqp_url, queue)
    missing = names.exchange()

    async def scenario():
        p = await P.open(transport, amqp_url, linger=30.0, batch_size=1000, retries=0)
        try:
            good = await p.many(20, "", queue, b"good")
            bad = await p.many(1, missing, "rk", b"bad")
            more = await p.many(20, "", queue, b"good")
            await p.flush(30)
            outcomes = []
            for f in good + bad + more:
                try:
                    outcomes.append(await p.result(f))
                except SendFailed as exc:
                    outcomes.append(exc)
            return outcomes, p.stats()
        finally:
            await p.close()

    outcomes, stats = run(scenario())
    failed = [o for o in outcomes if isinstance(o, SendFailed)]
    assert len(failed) == 1 and outcomes[20] is failed[0] and isinstance(failed[0].error, NotFound)
    assert stats.confirmed == 40 and stats.failed == 1
    stored = [m.properties.message_id for m in queue_messages(amqp_url, queue)]
    # the publishes the broker routed before the close were not confirmed: sent again, they
    # are there twice (at least once); consumers drop them by message_id
    assert set(stored) == {o.message_id for o in outcomes if isinstance(o, SendResult)}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unroutable_mandatory_send_is_returned_and_retried_only_when_asked(transport, amqp_url, names):
    nowhere = names.queue()  # never declared: the default exchange cannot route to it

    async def scenario():
        p = await P.open(transport, amqp_url, retries=2, retry_backoff=0.01)
        try:
            with pytest.raises(SendFailed) as once:
                await p.send("", nowhere, b"x", mandatory=True)
        finally:
            await p.close()
        p = await P.open(transport, amqp_url, retries=2, retry_backoff=0.01, retry_on_return=True)
        try:
            with pytest.raises(SendFailed) as thrice:
                await p.send("", nowhere, b"x", mandatory=True)
            return once.value, thrice.value, p.stats()
        finally:
            await p.close()

    once, thrice, stats = run(scenario())
    assert isinstance(once.error, MessageReturned) and len(once.attempts) == 1
    assert isinstance(thrice.error, MessageReturned) and len(thrice.attempts) == 3
    assert stats.retried == 2 and stats.failed == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_deadline_covers_every_wait_and_names_it(transport, amqp_url, names, tcp_proxy):
    queue = names.queue()
    declare(amqp_url, queue)
    proxy, url = tcp_proxy()

    async def scenario():
        p = await P.open(transport, url, timeout=1.5, avoid_backoff=0.2, connection_timeout=1)
        try:
            await p.send("", queue, b"before")
            proxy.freeze()  # a broker that stops answering: the confirm never comes
            with pytest.raises(SendTimeout) as silent:
                await p.send("", queue, b"unanswered", timeout=0.5)
            proxy.target = ("127.0.0.1", closed_port())  # from now on nothing answers behind it
            proxy.kill()
            futures = await p.many(20, "", queue, b"during", timeout=1.0)
            with pytest.raises(SendTimeout) as reconnecting:
                await p.send("", queue, b"during")
            outcomes = []
            for f in futures:
                try:
                    outcomes.append(await p.result(f))
                except SendTimeout as exc:
                    outcomes.append(exc)
            return silent.value, reconnecting.value, outcomes, p.stats()
        finally:
            await p.close(5)

    silent, reconnecting, outcomes, stats = run(scenario())
    assert silent.operation == "the broker's confirm" and "timed out after 0.5 s" in str(silent)
    assert "timed out after 1.5 s" in str(reconnecting)
    assert all(isinstance(o, SendTimeout) for o in outcomes)  # every one reported, none lost silently
    # (a send that went out just before the producer saw the connection drop may time out
    # in flight instead: the others waited for a connection)
    assert any("connection" in o.operation for o in outcomes + [reconnecting]), [o.operation for o in outcomes]
    assert stats.confirmed == 1 and stats.failed == 22 and stats.pending == 0


def test_no_broker_at_all_is_an_error_at_once(amqp_url):
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    with pytest.raises(AMQPConnectionError, match="could not connect"):
        Producer(url, connection_timeout=1)

    async def scenario():
        with pytest.raises(AMQPConnectionError, match="could not connect"):
            await aio.Producer([url, url], connection_timeout=1)

    run(scenario())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_linger_and_flush(transport, amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)

    async def scenario():
        p = await P.open(transport, amqp_url, linger=30.0, batch_size=100)
        try:
            futures = await p.many(250, "", queue, b"lingering")
            await asyncio.sleep(0.2)
            waiting = sum(not f.done() for f in futures)  # the last 50 wait for the linger
            await p.flush(10)
            assert all(f.done() for f in futures)
            return waiting
        finally:
            await p.close()

    waiting = run(scenario())
    assert waiting >= 50
    assert len(queue_messages(amqp_url, queue)) == 250


def test_the_aio_producer_is_awaited_or_entered(amqp_url, names):
    queue = names.queue()
    declare(amqp_url, queue)

    async def scenario():
        producer = await aio.Producer(amqp_url)
        await producer.send("", queue, b"1")
        await producer.close()
        await producer.close()  # twice: nothing more happens
        with pytest.raises(InvalidStateError):
            await producer.send_async("", queue, b"2")
        assert "closed" in repr(producer)

    run(scenario())
    assert len(queue_messages(amqp_url, queue)) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sender_that_dies_while_writing_fails_the_batch_it_held(transport, amqp_url, names, monkeypatch, caplog):
    """The sender died with a batch in hand (an OverflowError in the broker avoidance did
    it): the batch was in no queue, its futures never settled and close() waited forever.
    Every one of them now fails, saying why; the failure is logged once (ERROR, with its
    traceback), not also printed by the thread's or the loop's unhandled-exception hook."""
    from amqwire.client.errors import InvalidStateError
    from amqwire.client.producer import aio as producer_aio
    from amqwire.client.producer import blocking as producer_blocking

    queue = names.queue()
    declare(amqp_url, queue)
    cls = producer_aio.Producer if transport == "aio" else producer_blocking.Producer

    async def boom(self, batch):
        raise RuntimeError("boom while writing")

    def boom_sync(self, batch):
        raise RuntimeError("boom while writing")

    monkeypatch.setattr(cls, "_write", boom if transport == "aio" else boom_sync)

    async def scenario():
        p = await P.open(transport, amqp_url)
        try:
            futures = await p.many(20, "", queue, b"x")
            for future in futures:
                with pytest.raises(InvalidStateError, match="sender failed.*boom while writing"):
                    await asyncio.wait_for(p.result(future), 10)
            assert p.stats().pending == 0
        finally:
            await asyncio.wait_for(p.close(5), 15)

    caplog.set_level(logging.ERROR, logger="amqwire.client")
    run(scenario())
    failed = [r for r in caplog.records if r.getMessage() == "producer: the sender failed"]
    assert len(failed) == 1 and "boom while writing" in str(failed[0].exc_info[1])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_queue_that_nacks_by_design_costs_a_bounded_number_of_channels(transport, amqp_url, names, caplog):
    """A channel whose publishes are only nacked is renewed before the next batch (RabbitMQ
    3.10 keeps nacking a channel whose first publish to a quorum queue came while the queue
    had no known leader: docs/faults.md); a queue that rejects every publish by design must
    not make the Producer open channels forever: policy.MAX_RENEWALS, one WARNING, every
    send failed with its nacks; an ack starts the count again."""
    from amqwire.client.producer import policy

    full, ok = names.queue(), names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
        ch.queue_declare(ok)

    async def scenario():
        p = await P.open(transport, amqp_url, retries=1, retry_backoff=0.01, retry_backoff_max=0.02, batch_size=10)
        try:
            broker = p.producer.brokers[0]
            first = broker.channel
            failures = []
            for _ in range(2 * policy.MAX_RENEWALS):  # waves: each one's nacks are in before the next
                failures += [await _failure(p, f) for f in await p.many(policy.RENEW_AFTER_NACKS, "", full, b"x")]
            assert all(isinstance(e, SendFailed) and isinstance(e.error, PublishNacked) for e in failures), failures[:3]
            assert broker.renewals == policy.MAX_RENEWALS, "renewed, but no more than MAX_RENEWALS times"
            assert broker.channel is not first
            await p.send("", ok, b"acked")  # an ack: the count starts again
            assert broker.renewals == 0 and broker.nacked_in_row == 0
        finally:
            await p.close()

    with caplog.at_level(logging.INFO, logger="amqwire.client.producer"):
        run(scenario())
    renewed = [r for r in caplog.records if "was nacked: renewed as channel" in r.getMessage()]
    assert len(renewed) == policy.MAX_RENEWALS
    assert [r.levelname for r in renewed].count("WARNING") == 1


async def _failure(p: P, future):
    try:
        await p.result(future)
    except SendFailed as exc:
        return exc
    return None
