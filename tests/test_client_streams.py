"""Stream consumers (``Channel.consume_stream``) and ``Channel.stream_offsets`` against a
real RabbitMQ, on both transports.

Each test declares its own uniquely named stream queue (deleted after it by ``names``).
Every wait is bounded: ``get(timeout)``, ``within`` (the run fixture's bound) or a Deadline.
"""
from __future__ import annotations

import asyncio
import datetime
import logging
import threading
import time

import pytest

from conftest import Deadline

UTC = datetime.timezone.utc
STREAM = {"x-queue-type": "stream"}


async def declare_stream(ch, name, **arguments):
    await ch.queue_declare(name, durable=True, arguments={**STREAM, **arguments})
    return name


async def fill(ch, queue, count, start=0, size=0):
    """Publish ``count`` messages (bodies ``m<n>``, padded to ``size``) and wait for the
    broker's confirms: then they are in the stream, at offsets start .. start+count-1."""
    for n in range(start, start + count):
        body = b"m%d" % n
        await ch.publish_async("", queue, body.ljust(size, b".") if size else body)
    await ch.wait_for_confirms(timeout=30)


async def stream_with(api, count, **arguments):
    conn = await api.connect()
    ch = await conn.channel()
    await ch.confirm_select()
    queue = await declare_stream(ch, api.names.queue(), **arguments)
    if count:
        await fill(ch, queue, count)
    return conn, ch, queue


async def read_all(consumer, timeout=10.0):
    """Every message until the consumer ends (its end offset), as (offset, body) pairs."""
    got = []
    deadline = Deadline(timeout, "the stream consumer to reach its end")
    while True:
        message = await consumer.get(timeout=deadline.left(0.01))
        if message is None:
            if consumer.active:
                raise deadline.fail(f"read {len(got)} messages, the last {got[-1:]}")
            return got
        got.append((message.stream_offset, message.body))


# --------------------------------------------------------------------------- start specs


def test_start_at_an_offset_up_to_an_end_offset(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 100)
        reader = await conn.channel()
        consumer = await reader.consume_stream(queue, offset=10, end=20, prefetch=3)
        got = [(m.stream_offset, m.body) async for m in consumer]
        assert got == [(n, b"m%d" % n) for n in range(10, 21)]
        assert (consumer.first_offset, consumer.last_offset, consumer.truncated) == (10, 20, False)
        # ended cleanly: cancelled, the channel open, get() says the end
        assert not consumer.active and reader.is_open
        assert await consumer.get(timeout=0.1) is None
        # prefetch 3 over 11 messages only works if the consumer acked as it read; and
        # everything is acked: a new consumer on the channel gets its credit at once
        again = await reader.consume_stream(queue, offset=50, end=52, prefetch=3)
        assert [m.stream_offset async for m in again] == [50, 51, 52]

    run(scenario, timeout=60)


def test_start_last_and_next(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 30)
        reader = await conn.channel()
        last = await reader.consume_stream(queue, offset="last", end=29)
        got = await read_all(last)
        assert got[-1] == (29, b"m29") and got[0][0] <= 29
        assert [o for o, _ in got] == list(range(got[0][0], 30))  # the last chunk, then the tail
        nxt = await reader.consume_stream(queue, offset="next", end=31)
        assert await nxt.get(timeout=0.3) is None  # nothing new yet
        await fill(ch, queue, 2, start=30)
        assert await read_all(nxt) == [(30, b"m30"), (31, b"m31")]

    run(scenario, timeout=60)


def test_start_first_reads_from_offset_zero(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 10)
        reader = await conn.channel()
        consumer = await reader.consume_stream(queue, offset="first", end=4)
        assert await read_all(consumer) == [(n, b"m%d" % n) for n in range(5)]

    run(scenario, timeout=60)


def test_start_at_a_timestamp_and_an_interval(run, broker_clock):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 20)
        await api.sleep(1.2)
        # whole seconds of the broker's clock, after the first batch's chunk: the stream
        # starts at the next chunk
        since = datetime.datetime.fromtimestamp(int(broker_clock()), UTC)
        await fill(ch, queue, 5, start=20)
        reader = await conn.channel()
        by_time = await reader.consume_stream(queue, offset=since, end=24)
        assert await read_all(by_time) == [(n, b"m%d" % n) for n in range(20, 25)]
        naive = await reader.consume_stream(queue, offset=since.replace(tzinfo=None), end=24)
        assert [o for o, _ in await read_all(naive)] == list(range(20, 25))  # naive means UTC
        by_interval = await reader.consume_stream(queue, offset="1h", end=24)
        assert [o for o, _ in await read_all(by_interval)] == list(range(25))

    run(scenario, timeout=60)


def test_end_offset_not_written_yet_waits_for_it(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 5)
        reader = await conn.channel()
        consumer = await reader.consume_stream(queue, offset=3, end=7)
        assert [(await consumer.get(timeout=5)).stream_offset for _ in range(2)] == [3, 4]
        assert await consumer.get(timeout=0.2) is None and consumer.active
        await fill(ch, queue, 10, start=5)
        assert [o for o, _ in await read_all(consumer)] == [5, 6, 7]

    run(scenario, timeout=60)


def test_cancel_acks_and_the_channel_goes_on(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 50)
        reader = await conn.channel()
        consumer = await reader.consume_stream(queue, offset="first", prefetch=10)
        assert (await consumer.get(timeout=5)).stream_offset == 0
        await consumer.cancel()
        assert not consumer.active and await consumer.get(timeout=0.1) is None
        # the 10 it had received are acked: a consumer with prefetch 10 reads on
        again = await reader.consume_stream(queue, offset=consumer.last_offset + 1, end=49, prefetch=10)
        assert [o for o, _ in await read_all(again)] == list(range(1, 50))

    run(scenario, timeout=60)


# --------------------------------------------------------------------------- first / last offsets


def test_stream_offsets_of_an_empty_and_a_filled_stream(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 0)
        assert await ch.stream_offsets(queue, wait=0.5) == (None, None)
        await fill(ch, queue, 1)
        assert await ch.stream_offsets(queue) == (0, 0)
        await fill(ch, queue, 499, start=1)
        offsets = await ch.stream_offsets(queue)
        assert offsets == (0, 499) and (offsets.first, offsets.last) == (0, 499)
        assert ch.is_open  # its probes ran on a channel of their own

    run(scenario, timeout=60)


def test_stream_offsets_while_appended_never_report_an_offset_not_written(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 100)
        sent = 100  # messages handed to the socket: an offset >= this cannot exist
        confirmed_before = []
        stop = asyncio.Event()

        async def producer():
            nonlocal sent
            pub_conn = await api.connect()
            pub = await pub_conn.channel()
            await pub.confirm_select(max_in_flight=200)
            while not stop.is_set():
                sent += 50  # counted before the publish: a reader may see it before the confirm
                for n in range(sent - 50, sent):
                    await pub.publish_async("", queue, b"m%d" % n)
                await pub.wait_for_confirms(timeout=30)

        task = asyncio.ensure_future(producer())
        try:
            for _ in range(5):
                await api.sleep(0.05)
                confirmed_before.append(sent - 50)
                began = time.monotonic()
                offsets = await ch.stream_offsets(queue, quiet=0.05, wait=1.0)
                assert time.monotonic() - began < 1.0 + 3  # the last chunk is read for at most `wait`
                first, last = offsets.first, offsets.last
                sent_after = sent
                assert first == 0
                assert last < sent_after, (last, sent_after)  # exists
                assert last >= confirmed_before[-1] - 1 - 50, (last, confirmed_before[-1])
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    run(scenario, timeout=90)


# --------------------------------------------------------------------------- retention


async def truncated_stream(api):
    """A stream whose retention removed its first segments: 1 kB segments, 4 kB kept."""
    conn, ch, queue = await stream_with(api, 0, **{"x-max-length-bytes": 4000,
                                                  "x-stream-max-segment-size-bytes": 1000})
    deadline = Deadline(30, "retention to remove the stream's first offsets")
    published = 0
    while True:
        await fill(ch, queue, 100, start=published, size=100)
        published += 100
        offsets = await ch.stream_offsets(queue, wait=2)
        first, last = offsets.first, offsets.last
        if first is not None and first > 0:
            return conn, ch, queue, first, last
        if deadline.expired():
            raise deadline.fail(f"first offset still {first} after {published} messages")


def test_start_offset_removed_by_retention_is_said_plainly(run, caplog):
    async def scenario(api):
        conn, ch, queue, first, last = await truncated_stream(api)
        reader = await conn.channel()
        with caplog.at_level(logging.WARNING, logger="amqwire.client"):
            end = min(first + 4, last)
            consumer = await reader.consume_stream(queue, offset=0, end=end)
            got = await read_all(consumer)
        start = consumer.first_offset
        assert consumer.truncated and start == first  # no write since: retention has not gone on
        # Offsets are not dense (the stream's own entries take some): what was read is the
        # stream's from its first offset up to the end offset, in order, each once.
        offsets = [o for o, _ in got]
        assert offsets and offsets[0] == start and offsets == sorted(set(offsets)) and offsets[-1] <= end
        assert f"start offset 0 was removed by retention; reading starts at {start}" in caplog.text
        # a start that is still there is not truncated
        ok = await reader.consume_stream(queue, offset=offsets[-1], end=last)
        again = [o for o, _ in await read_all(ok)]
        assert again[0] == offsets[-1] and again[-1] == last and not ok.truncated

    run(scenario, timeout=90)


def test_start_offset_removed_by_retention_raises_when_asked(run):
    async def scenario(api):
        conn, ch, queue, first, _ = await truncated_stream(api)
        reader = await conn.channel()
        consumer = await reader.consume_stream(queue, offset=1, on_truncated="raise")
        with pytest.raises(api.errors.StreamTruncated) as info:
            await consumer.get(timeout=10)
        error = info.value
        assert (error.queue, error.requested) == (queue, 1) and error.first_offset >= first
        assert error.lost == error.first_offset - 1
        assert "offset 1 was removed by retention" in str(error)
        assert consumer.truncated and not consumer.active and reader.is_open

    run(scenario, timeout=90)


# --------------------------------------------------------------------------- errors


def test_a_classic_or_quorum_queue_is_not_a_stream(run):
    async def scenario(api):
        conn = await api.connect()
        ch = await conn.channel()
        classic = api.names.queue()
        await ch.queue_declare(classic)
        quorum = api.names.queue()
        await ch.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
        for queue in (classic, quorum):
            reader = await conn.channel()
            with pytest.raises(api.errors.NotAStream) as info:
                await reader.consume_stream(queue, offset="first")
            assert isinstance(info.value, api.errors.PreconditionFailed)
            assert "not a stream queue" in str(info.value) and queue in str(info.value)
            assert not reader.is_open and conn.is_open
        missing = await conn.channel()
        with pytest.raises(api.errors.NotFound):
            await missing.consume_stream(api.names.unique("q"), offset="first")
        # stream_offsets probes on a channel of its own: the same errors, this channel stays open
        with pytest.raises(api.errors.NotAStream):
            await ch.stream_offsets(classic)
        with pytest.raises(api.errors.NotFound):
            await ch.stream_offsets(api.names.unique("q"))
        assert ch.is_open

    run(scenario, timeout=60)


def take_the_replica_down(node, queue):
    """Kill the node's replica (the writer) of ``queue`` with osiris's supervisor suspended,
    so that the stream coordinator cannot start it again until ``bring_the_replica_back``;
    returns once the coordinator knows it is down."""
    stream_id = ('begin {ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"%s">>)), '
                 '#{name := S} = amqqueue:get_type_state(Q), S end' % queue)
    state = node.eval(
        f"S = {stream_id}, {{ok, P}} = rabbit_stream_coordinator:local_pid(S), ok = sys:suspend(osiris_server_sup), "
        "exit(P, kill), Wait = fun W(0) -> still_running; W(N) -> case rabbit_stream_coordinator:local_pid(S) of "
        "{ok, _} -> timer:sleep(50), W(N - 1); _ -> down end end, Wait(200).")
    assert state == "down", state


def bring_the_replica_back(node):
    node.eval("sys:resume(osiris_server_sup).")


def test_a_node_without_a_running_replica_for_a_while_is_asked_again(run, transport, broker_node):
    """A node refuses a stream consumer with 406 "does not have a replica on the local node"
    while its replica is down; RabbitMQ 3.10 also says so when its stream coordinator is slow
    to answer (a loaded node: CI saw it).  consume_stream raises StreamReplicaUnavailable
    (its channel is closed, the connection goes on); stream_offsets and the Spark source's
    reader ask again on new channels until the replica is back, or say how long they asked."""
    node = broker_node()

    async def down_for(seconds, queue):
        await asyncio.to_thread(take_the_replica_down, node, queue)
        back = threading.Timer(seconds, bring_the_replica_back, [node])
        back.start()
        return back

    async def scenario(api):
        conn = await api.connect(node.url)
        ch = await conn.channel()
        await ch.confirm_select()
        queue = await declare_stream(ch, api.names.queue())
        await fill(ch, queue, 5)
        try:
            await asyncio.to_thread(take_the_replica_down, node, queue)
            reader = await conn.channel()
            with pytest.raises(api.errors.StreamReplicaUnavailable) as info:
                await reader.consume_stream(queue, offset="first")
            assert isinstance(info.value, api.errors.PreconditionFailed) and info.value.reply_code == 406
            assert "no running replica of the stream" in str(info.value) and queue in str(info.value)
            assert not reader.is_open and conn.is_open
            # asked again within its timeout, then said plainly
            started = time.monotonic()
            with pytest.raises(api.errors.StreamReplicaUnavailable) as info:
                await ch.stream_offsets(queue, timeout=2)
            assert 0.5 < info.value.waited < 2 and time.monotonic() - started < 3
            assert f"(still after {round(info.value.waited, 3)} s)" in str(info.value)
            assert ch.is_open
            bring_the_replica_back(node)

            # back while it asks: answered
            back = await down_for(2, queue)
            started = time.monotonic()
            assert await ch.stream_offsets(queue, timeout=30) == (0, 4)
            assert time.monotonic() - started > 1.5
            back.join()

            if transport == "blocking":  # the Spark source's reader (blocking client), the same way
                from amqwire.client import blocking
                from amqwire.spark.source import consume_stream

                back = await down_for(2, queue)
                with blocking.connect(node.url) as plain:
                    channel, consumer = await asyncio.to_thread(consume_stream, plain, queue, offset=0, end=4)
                    assert [m.stream_offset for m in consumer] == [0, 1, 2, 3, 4]
                    channel.close()
                back.join()
        finally:
            await asyncio.to_thread(bring_the_replica_back, node)

    run(scenario, timeout=90)


@pytest.mark.parametrize("options,option", [
    (dict(offset="bogus"), "offset"),
    (dict(offset="1x"), "offset"),
    (dict(offset=-1), "offset"),
    (dict(offset=1.5), "offset"),
    (dict(offset=True), "offset"),
    (dict(offset=datetime.datetime(2024, 1, 1, 0, 0, 0, 5, tzinfo=UTC)), "offset"),
    (dict(offset=5, end=4), "end"),
    (dict(end=-1), "end"),
    (dict(end="10"), "end"),
    (dict(prefetch=0), "prefetch"),
    (dict(prefetch=70000), "prefetch"),
    (dict(on_truncated="ignore"), "on_truncated"),
])
def test_bad_options_are_refused_before_anything_is_sent(run, options, option):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 0)
        with pytest.raises(api.errors.StreamOptionError) as info:
            await ch.consume_stream(queue, **options)
        assert info.value.option == option and str(info.value).startswith(f"{option}: ")
        assert isinstance(info.value, ValueError)
        assert ch.is_open and conn.is_open  # the broker would close the connection for some

    run(scenario, timeout=30)


# --------------------------------------------------------------------------- recovery


def test_recovery_ends_a_stream_reader_and_keeps_plain_consumers(run):
    async def scenario(api):
        conn, ch, queue = await stream_with(api, 20)
        proxy = api.proxy()
        recovering = await api.connect(api.proxy_url(proxy), recovery=True)
        reader_channel = await recovering.channel()
        reader = await reader_channel.consume_stream(queue, offset=0)
        assert [(await reader.get(timeout=5)).stream_offset for _ in range(5)] == [0, 1, 2, 3, 4]
        plain_channel = await recovering.channel()
        classic = api.names.queue()
        await plain_channel.queue_declare(classic)
        plain = await plain_channel.consume(classic)
        proxy.kill()
        # the reader ends with the loss at once (a resubscription would start again at 0) ...
        deadline = Deadline(15, "the stream reader to end with the connection's loss")
        with pytest.raises(api.errors.AMQPConnectionError):
            while True:
                message = await reader.get(timeout=deadline.left(0.01))
                if message is None:
                    raise deadline.fail(f"still active: {reader.active}")
        # (what it had received before the loss was still read: resume after it)
        assert not reader.active and reader.last_offset is not None
        # ... and the recovery restores the plain consumer, not the reader
        assert await recovering.wait_recovered(timeout=20)
        await ch.basic_publish("", classic, b"after")
        assert (await api.next(plain, timeout=10)).body == b"after"
        await fill(ch, queue, 5, start=20)
        resume = reader.last_offset + 1
        again = await reader_channel.consume_stream(queue, offset=resume, end=24)
        assert [o for o, _ in await read_all(again)] == list(range(resume, 25))

    run(scenario, timeout=60)
