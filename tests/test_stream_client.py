"""amqwire.client.stream against a private RabbitMQ node with the rabbitmq_stream plugin.

Every scenario is written once (``async def scenario(api)``) and runs on both transports,
as the 0-9-1 client's tests do (conftest.py: blocking objects are driven through proxies
running each call in a thread).  The node is this module's own (``stream_node``): never
the shared broker, which has no stream plugin.
"""
from __future__ import annotations

import asyncio
import datetime
import time
import uuid

import pytest

from conftest import TRANSPORTS, Api, in_thread, within

pytestmark = pytest.mark.timeout(120)


class StreamApi(Api):
    """The scenario's view of the stream client on one transport."""

    def __init__(self, transport: str, url: str):
        super().__init__(transport, url, names=None)
        import amqwire.client.stream as blocking
        import amqwire.client.stream.aio as aio
        import amqwire.client.stream.errors as errors

        self.module = aio if transport == "aio" else blocking
        self.errors = errors
        self.streams: list[str] = []

    def stream_name(self, prefix: str = "s") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.streams.append(name)
        return name

    async def send_many(self, producer, bodies, at=None, **kwargs):
        """Send every body (one call of send each), in one thread on the blocking transport;
        returns the futures.  ``at``: {index: action}, each action called (no argument) just
        before the send of that index (e.g. a proxy's kill, mid-publish)."""
        actions = at or {}
        if self.name == "aio":
            futures = []
            for index, body in enumerate(bodies):
                if index in actions:
                    actions[index]()
                futures.append(await producer.send(body, **kwargs))
            return futures
        raw = producer._obj

        def loop():
            futures = []
            for index, body in enumerate(bodies):
                if index in actions:
                    actions[index]()
                futures.append(raw.send(body, **kwargs))
            return futures

        return [self.wrap(f) for f in await in_thread(loop)]

    async def read(self, consumer, count: int, timeout: float = 30.0):
        """``count`` messages from the consumer (in one thread on the blocking transport)."""
        if self.name == "aio":
            async def take():
                out = []
                async for message in consumer:
                    out.append(message)
                    if len(out) == count:
                        break
                return out
            return await within(take(), timeout, f"{count} messages")
        raw = consumer._obj

        def take_sync():
            out = []
            deadline = time.monotonic() + timeout
            while len(out) < count:
                message = raw.get(max(deadline - time.monotonic(), 0.01))
                if message is None:
                    if time.monotonic() > deadline or not raw.active and not raw._inbox.buffer:
                        break
                    continue
                out.append(message)
            return out
        return await in_thread(take_sync)

    async def read_all(self, consumer, timeout: float = 30.0):
        """Every message until the consumer's iteration ends (its end offset)."""
        if self.name == "aio":
            async def take():
                return [message async for message in consumer]
            return await within(take(), timeout, "the consumer's end")
        raw = consumer._obj
        return await in_thread(lambda: list(raw))

    async def settle(self, futures, timeout: float = 30.0):
        """Every future's outcome: its result, or the exception it failed with."""
        out = []
        for future in futures:
            try:
                out.append(await self.wait(future, timeout))
            except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
                out.append(exc)
        return out

    async def aclose(self):
        if self.streams and self._connections:
            conn = self._connections[0]
            for name in self.streams:
                try:
                    await asyncio.wait_for(conn.delete_stream(name, missing_ok=True), 5)
                except BaseException:  # noqa: BLE001 - clean-up, best effort
                    pass
        await super().aclose()


async def _equals(awaitable, expected) -> bool:
    return await awaitable == expected


async def until(check, timeout: float = 10.0) -> bool:
    """Polls ``await check()`` (for what has no event to wait on, e.g. an offset stored with
    StoreOffset, which has no response) until it is true or ``timeout`` passes."""
    for _ in range(int(timeout / 0.05)):
        if await check():
            return True
        await asyncio.sleep(0.05)
    return bool(await check())


@pytest.fixture(params=TRANSPORTS)
def srun(request, stream_url):
    """``srun(scenario, timeout=60)``: the scenario on this test's transport."""
    transport = request.param

    def runner(scenario, timeout: float = 80.0, url=None):
        async def main():
            api = StreamApi(transport, url or stream_url)
            try:
                await within(scenario(api), timeout, f"{scenario.__qualname__} ({transport})")
            finally:
                await api.aclose()

        asyncio.run(main())

    return runner


# --------------------------------------------------------------------------- streams


def test_create_exists_delete(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        assert await conn.stream_exists(name) is False
        retention = {"max_length_bytes": 10_000_000, "max_age": "1h", "max_segment_size_bytes": 1_000_000}
        await conn.create_stream(name, **retention)
        assert await conn.stream_exists(name) is True
        with pytest.raises(api.errors.StreamAlreadyExists) as raised:
            await conn.create_stream(name, **retention)
        assert raised.value.code == 0x05 and name in str(raised.value)
        await conn.create_stream(name, exist_ok=True, **retention)
        with pytest.raises(api.errors.StreamPreconditionFailed):  # exists, with other arguments
            await conn.create_stream(name, exist_ok=True, max_age="2h")
        where = await conn.metadata(name)
        assert where.leader is not None and where.leader[1] > 0
        await conn.delete_stream(name)
        assert await conn.stream_exists(name) is False
        with pytest.raises(api.errors.StreamDoesNotExist) as missing:
            await conn.delete_stream(name)
        assert str(missing.value) == f"delete_stream {name!r}: the broker answered stream does not exist (0x02)"
        await conn.delete_stream(name, missing_ok=True)

    srun(scenario)


def test_options_are_checked_before_anything_is_sent(srun):
    async def scenario(api):
        from amqwire.client.errors import StreamOptionError

        conn = await api.connect()
        name = api.stream_name()
        for bad in ({"max_age": "7 days"}, {"max_length_bytes": "10"}, {"max_length_bytes": 0}, {"retention": 1}):
            with pytest.raises(StreamOptionError) as raised:
                await conn.create_stream(name, **bad)
            assert next(iter(bad)) in str(raised.value)
        assert await conn.stream_exists(name) is False
        await conn.create_stream(name)
        with pytest.raises(StreamOptionError, match="offset"):
            await conn.consumer(name, offset="beginning")
        with pytest.raises(StreamOptionError, match="offset"):
            await conn.consumer(name, offset=-1)
        with pytest.raises(StreamOptionError, match="end"):
            await conn.consumer(name, end="last")
        assert await conn.stream_exists(name)  # the connection still works

    srun(scenario)


# --------------------------------------------------------------------------- publish and consume


def test_publish_and_consume_10000_from_every_kind_of_offset(srun):
    count = 10_000

    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        futures = await api.send_many(producer, [b"m-%d" % i for i in range(count)])
        await producer.flush()
        ids = await api.settle(futures)
        assert ids == list(range(1, count + 1))  # publishing ids, in order, all confirmed
        assert await conn.stream_stats(name) == (0, count - 1)

        consumer = await conn.consumer(name, offset="first")
        messages = await api.read(consumer, count)
        assert [m.offset for m in messages] == list(range(count))
        assert [m.body for m in messages] == [b"m-%d" % i for i in range(count)]
        assert all(m.properties is None and m.application_properties is None for m in messages[:10])
        await consumer.close()

        middle = await conn.consumer(name, offset=4321, end=4329)  # inside a chunk: the records before are skipped
        assert [m.offset for m in await api.read_all(middle)] == list(range(4321, 4330))

        last = await conn.consumer(name, offset="last")
        tail = await api.read(last, 1)
        assert tail and tail[0].offset <= count - 1
        await last.close()

        stamp = messages[0].chunk_timestamp
        assert abs((datetime.datetime.now(datetime.timezone.utc) - stamp).total_seconds()) < 120
        at_time = await conn.consumer(name, offset=stamp, end=2)
        assert [m.offset for m in await api.read_all(at_time)] == [0, 1, 2]

        after = await conn.consumer(name, offset="next")
        assert await after.get(0.3) is None  # nothing new yet
        more = await api.send_many(producer, [b"new-1", b"new-2"])
        await api.settle(more)
        fresh = await api.read(after, 2)
        assert [(m.offset, m.body) for m in fresh] == [(count, b"new-1"), (count + 1, b"new-2")]
        await after.close()
        await producer.close()

    srun(scenario, timeout=100)


def test_properties_and_application_properties_round_trip(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        future = await producer.send(b"payload", properties={"message_id": "m-1", "content_type": "text/plain"},
                                     application_properties={"tenant": "acme", "n": 7})
        assert await api.wait(future) == 1
        consumer = await conn.consumer(name, offset="first", end=0)
        (message,) = await api.read_all(consumer)
        assert message.body == b"payload"
        assert message.properties.message_id == "m-1" and message.properties.content_type == "text/plain"
        assert message.application_properties == {"tenant": "acme", "n": 7}

    srun(scenario)


def test_send_batch_settles_one_future_for_the_batch(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name, batch_size=50)
        future = await producer.send_batch([b"b-%d" % i for i in range(1234)])
        assert await api.wait(future) == 1234
        assert (await conn.stream_stats(name)).last_offset == 1233

    srun(scenario)


# --------------------------------------------------------------------------- deduplication


def test_deduplication_with_a_reference_stores_each_id_once(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name, reference="dedup-1")
        first = await api.send_many(producer, [b"x"] * 0)
        assert first == []
        futures = []
        for i in range(1, 101):
            futures.append(await producer.send(b"d-%d" % i, publishing_id=i))
        assert await api.settle(futures) == list(range(1, 101))
        await producer.close()

        again = await conn.producer(name, reference="dedup-1")
        assert again.last_publishing_id == 100  # what the broker stored for the reference
        resent = [await again.send(b"d-%d" % i, publishing_id=i) for i in range(1, 101)]
        assert await api.settle(resent) == list(range(1, 101))  # confirmed, not stored again
        more = await again.send(b"d-101")
        assert await api.wait(more) == 101
        await again.close()
        assert await conn.query_publisher_sequence(name, "dedup-1") == 101

        consumer = await conn.consumer(name, offset="first", end=100)
        bodies = [m.body for m in await api.read_all(consumer)]
        assert bodies == [b"d-%d" % i for i in range(1, 102)]

    srun(scenario)


def test_publishing_ids_must_increase(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.wait(await producer.send(b"a", publishing_id=10))
        with pytest.raises(ValueError, match="strictly increase"):
            await producer.send(b"b", publishing_id=10)
        assert await api.wait(await producer.send(b"c")) == 11

    srun(scenario)


# --------------------------------------------------------------------------- server-side offsets


def test_store_and_query_offset(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.settle(await api.send_many(producer, [b"o-%d" % i for i in range(50)]))
        consumer = await conn.consumer(name, offset="first", name="reader-1")
        assert await consumer.query_offset() is None
        taken = await api.read(consumer, 20)
        assert taken[-1].offset == 19
        await consumer.store_offset()
        assert await until(lambda: _equals(consumer.query_offset(), 19))  # StoreOffset has no response
        assert await consumer.query_offset() == 19
        assert await conn.query_offset(name, "reader-1") == 19
        await conn.store_offset(name, "reader-1", 42)
        assert await until(lambda: _equals(conn.query_offset(name, "reader-1"), 42))
        assert await conn.query_offset(name, "nobody") is None

    srun(scenario)


# --------------------------------------------------------------------------- typed errors


def test_a_missing_stream_is_stream_does_not_exist_on_both_transports(srun):
    async def scenario(api):
        conn = await api.connect()
        missing = f"missing-{uuid.uuid4().hex[:8]}"
        with pytest.raises(api.errors.StreamDoesNotExist) as as_producer:
            await conn.producer(missing)
        with pytest.raises(api.errors.StreamDoesNotExist) as as_consumer:
            await conn.consumer(missing)
        assert str(as_producer.value) == f"metadata {missing!r}: the broker answered stream does not exist (0x02)"
        assert str(as_consumer.value) == str(as_producer.value)
        assert await conn.stream_exists("another-" + missing) is False  # the connection goes on

    srun(scenario)


def test_bad_credentials_and_vhost_are_typed(srun, stream_node):
    async def scenario(api):
        from amqwire.client.errors import AuthenticationError

        with pytest.raises(api.errors.StreamAuthenticationFailure) as refused:
            await api.connect(api.url.replace("guest:guest@", "guest:wrong@"))
        assert isinstance(refused.value, AuthenticationError) and "wrong" not in str(refused.value)
        assert str(refused.value) == "sasl_authenticate 'guest': the broker answered authentication failure (0x08)"
        with pytest.raises(api.errors.VirtualHostAccessFailure) as vhost:
            await api.connect(api.url.rstrip("/") + "/no-such-vhost")
        assert str(vhost.value) == "open 'no-such-vhost': the broker answered virtual host access failure (0x0c)"

    srun(scenario)


def test_access_refused_on_a_stream(srun, stream_node):
    user = f"limited-{uuid.uuid4().hex[:6]}"
    stream_node.rabbitmqctl("add_user", user, "secret")
    stream_node.rabbitmqctl("set_permissions", "-p", "/", user, "^allowed-.*", "^allowed-.*", "^allowed-.*")

    async def scenario(api):
        admin = await api.connect()
        name = api.stream_name("forbidden")
        await admin.create_stream(name)
        conn = await api.connect(api.url.replace("guest:guest@", f"{user}:secret@"))
        with pytest.raises(api.errors.StreamAccessRefused) as create:
            await conn.create_stream(api.stream_name("denied"))
        assert create.value.code == 0x10
        with pytest.raises(api.errors.StreamAccessRefused):
            await conn.producer(name)
        with pytest.raises(api.errors.StreamAccessRefused):
            await conn.consumer(name)

    try:
        srun(scenario)
    finally:
        stream_node.rabbitmqctl("delete_user", user)


def test_bad_urls_are_typed_and_never_echo_the_password():
    from amqwire.client import stream

    for url, part in [
        ("amqp://guest:guest@localhost:5552/", "scheme"),
        ("rabbitmq-stream://guest:secret@localhost:99999/", "port"),
        ("rabbitmq-stream://guest:secret@localhost/?frame_max=abc", "frame_max"),
        ("rabbitmq-stream://guest:secret@localhost/?channel_max=1", "channel_max"),
        ("rabbitmq-stream://guest:secret@localhost/?cafile=/x", "cafile"),
        ("rabbitmq-stream://guest:se/cret@localhost/", "malformed"),
        ("rabbitmq-stream://guest:secret@localhost/a/b", "vhost"),
    ]:
        with pytest.raises(stream.InvalidStreamUrl) as raised:
            stream.connect(url)
        assert isinstance(raised.value, ValueError) and part in str(raised.value)
        assert "secret" not in str(raised.value) and "cret" not in str(raised.value)


def test_urls_parse_with_the_stream_defaults():
    from amqwire.client.stream import parse_stream_url

    plain = parse_stream_url("rabbitmq-stream://bob:s%40cret@broker/%2Fv?heartbeat=5&connection_timeout=2.5")
    assert (plain.host, plain.port, plain.vhost, plain.username, plain.password) == ("broker", 5552, "/v", "bob", "s@cret")
    assert (plain.heartbeat, plain.connection_timeout, plain.frame_max, plain.ssl) == (5, 2.5, 1048576, False)
    assert str(plain) == "rabbitmq-stream://bob@broker:5552/%2Fv" and "cret" not in repr(plain)
    tls = parse_stream_url("rabbitmq-stream+tls://broker?verify=false&server_hostname=b.example")
    assert (tls.port, tls.ssl, tls.verify, tls.server_hostname) == (5551, True, False, "b.example")
    assert str(tls) == "rabbitmq-stream+tls://guest@broker:5551"


def test_several_urls_fail_over_in_order(stream_url):
    from conftest import closed_port

    from amqwire.client import stream

    dead = f"rabbitmq-stream://guest:guest@127.0.0.1:{closed_port()}/"
    with stream.connect([dead, stream_url]) as conn:
        assert conn.stream_exists("whatever") is False
        assert conn._locator.params.port == int(stream_url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(stream.StreamClientError.__mro__[1]) as none:  # AMQPError: both dead
        stream.connect([dead, dead])
    assert "could not connect" in str(none.value)


# --------------------------------------------------------------------------- recovery


def test_a_consumer_goes_on_across_a_connection_loss(srun, stream_node):
    """The broker closes every connection while a consumer reads: it resumes after the last
    offset it received; none twice, none skipped."""
    total = 6000

    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.settle(await api.send_many(producer, [b"c-%d" % i for i in range(total // 2)]))
        consumer = await conn.consumer(name, offset="first", credit=2)
        seen = [m.offset for m in await api.read(consumer, 1000)]
        await in_thread(stream_node.close_all_connections, "a test closes every connection")
        seen += [m.offset for m in await api.read(consumer, total // 2 - 1000)]
        assert seen == list(range(total // 2))
        # the producer came back too: what it sends now reaches the consumer
        await api.settle(await api.send_many(producer, [b"c-%d" % i for i in range(total // 2, total)]))
        rest = await api.read(consumer, total // 2)
        assert [m.offset for m in rest] == list(range(total // 2, total))
        assert [m.body for m in rest[-3:]] == [b"c-%d" % i for i in range(total - 3, total)]
        assert consumer.last_offset == total - 1
        assert conn.is_open

    srun(scenario)


def test_a_producer_with_a_reference_loses_nothing_and_stores_nothing_twice(srun):
    """The connection is cut (a proxy drops it) while sends are in flight: each future
    settles once, confirmed (resent after the reconnection when it was unconfirmed: the
    broker drops what it had stored already), and the stream holds each message once."""

    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy))
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name, reference="resilient", max_in_flight=20_000)
        futures = await api.send_many(producer, [b"p-%d" % i for i in range(20_000)], at={10_000: proxy.kill})
        outcomes = await api.settle(futures, timeout=60)
        assert outcomes == list(range(1, 20_001))
        consumer = await conn.consumer(name, offset="first")
        bodies = [m.body for m in await api.read(consumer, 20_000, timeout=20)]
        assert bodies == [b"p-%d" % i for i in range(20_000)]
        assert await consumer.get(0.5) is None  # and nothing after: no message twice
        assert proxy.accepted >= 2  # it did reconnect
        print(f"{producer.resent} unconfirmed at the loss and sent again")

    srun(scenario, timeout=100)


def test_a_producer_without_reference_fails_what_it_cannot_know_stored(srun):
    """Without a reference nothing deduplicates a resend: a send in flight at the loss fails
    (StreamPublishFailed naming the loss), every other one is confirmed; none is left
    pending, and the producer goes on."""

    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy))
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name, max_in_flight=20_000)
        futures = await api.send_many(producer, [b"n-%d" % i for i in range(10_000)], at={9_000: proxy.kill})
        await asyncio.sleep(0.5)  # the loss is noticed: what is sent from now on is not in flight at it
        futures += await api.send_many(producer, [b"n-%d" % i for i in range(10_000, 20_000)])
        outcomes = await api.settle(futures, timeout=60)
        failed = [o for o in outcomes if isinstance(o, Exception)]
        confirmed = [o for o in outcomes if not isinstance(o, Exception)]
        assert all(isinstance(o, api.errors.StreamPublishFailed) and "lost" in str(o) for o in failed), failed[:3]
        assert len(confirmed) + len(failed) == 20_000 and len(confirmed) >= 10_000
        consumer = await conn.consumer(name, offset="first")
        stored = [m.body for m in await api.read(consumer, len(confirmed), timeout=20)]
        assert len(set(stored)) == len(stored)  # confirmed ones stored, each once
        after = await producer.send(b"after")
        assert isinstance(await api.wait(after), int)
        print(f"{len(failed)} failed (in flight at the loss), {len(confirmed)} confirmed")

    srun(scenario, timeout=100)


# --------------------------------------------------------------------------- metadata updates


def test_deleting_the_stream_ends_its_producer_and_consumer(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.wait(await producer.send(b"one"))
        consumer = await conn.consumer(name, offset="first")
        assert [m.body for m in await api.read(consumer, 1)] == [b"one"]
        other = await api.connect()
        await other.delete_stream(name)
        with pytest.raises(api.errors.StreamDeleted):
            await api.read(consumer, 1, timeout=20) and None
            await consumer.get(20)
        assert await until(lambda: _equals(asyncio.sleep(0, producer.state.value), "failed"), 20)
        with pytest.raises(api.errors.StreamDeleted):
            await producer.send(b"two")

    srun(scenario)


# --------------------------------------------------------------------------- a producer process killed


_PRODUCER_JOB = r"""
import sys
from amqwire.client import stream

url, name, reference, total, resume_margin = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with stream.connect(url) as conn:
    with conn.producer(name, reference=reference, max_in_flight=5000) as producer:
        start = max(1, producer.last_publishing_id - resume_margin)  # again from a little before: the broker drops those
        print("start", start, producer.last_publishing_id, flush=True)
        for pid in range(start, total + 1):
            producer.send(b"k-%d" % pid, publishing_id=pid)
            if pid % 5000 == 0:
                print("sent", pid, flush=True)
        producer.flush(60)
print("done", flush=True)
"""


def test_a_producer_process_killed_mid_publish_and_restarted_stores_each_message_once(stream_url):
    """SIGKILL a producer process mid-publish (messages in flight, some stored and never
    confirmed to it), restart it with the same reference: it resumes from the broker's last
    stored id (and resends 2,000 before it, which the broker drops): 0 duplicates, 0 lost."""
    import signal
    import subprocess
    import sys

    from amqwire.client import stream

    total = 60_000
    name = f"killed-{uuid.uuid4().hex[:8]}"
    with stream.connect(stream_url) as conn:
        conn.create_stream(name)
        try:
            job = subprocess.Popen([sys.executable, "-c", _PRODUCER_JOB, stream_url, name, "job-1", str(total), "2000"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for line in job.stdout:
                if line.startswith("sent") and int(line.split()[1]) >= 20_000:
                    break
            job.send_signal(signal.SIGKILL)
            job.communicate(timeout=30)
            assert job.returncode == -signal.SIGKILL
            stored_at_kill = conn.query_publisher_sequence(name, "job-1")
            assert 0 < stored_at_kill < total

            again = subprocess.run([sys.executable, "-c", _PRODUCER_JOB, stream_url, name, "job-1", str(total), "2000"],
                                   capture_output=True, text=True, timeout=120)
            assert again.returncode == 0, again.stderr[-2000:]
            start = int(again.stdout.split()[1])
            assert start == max(1, stored_at_kill - 2000)

            with conn.consumer(name, offset="first") as consumer:
                bodies = []
                while len(bodies) < total + 1:
                    message = consumer.get(2.0)
                    if message is None:
                        break
                    bodies.append(message.body)
            duplicates = len(bodies) - len(set(bodies))
            lost = total - len(set(bodies))
            print(f"killed after {stored_at_kill} stored; restarted from {start}: "
                  f"{len(bodies)} stored, {duplicates} duplicates, {lost} lost")
            assert (duplicates, lost) == (0, 0)
            assert bodies == [b"k-%d" % i for i in range(1, total + 1)]
            assert conn.query_publisher_sequence(name, "job-1") == total
        finally:
            conn.delete_stream(name, missing_ok=True)


# --------------------------------------------------------------------------- interop with AMQP 0-9-1


def test_published_over_the_stream_protocol_read_over_0_9_1_and_the_reverse(srun, stream_node):
    """The same stream over both protocols, as RabbitMQ 3.10 maps the messages: AMQP 1.0
    properties <-> basic properties, application properties <-> headers; 0-9-1's type and
    app_id become application properties (x-basic-type, x-basic-app-id), its priority,
    delivery mode, expiration, exchange and routing key message annotations."""
    from amqwire.client import BasicProperties
    from amqwire.client import connect as amqp_connect

    def over_0_9_1(name):
        with amqp_connect(stream_node.url) as conn, conn.channel() as ch:
            with ch.consume_stream(name, offset="first", end=0) as reader:
                (first,) = list(reader)
            ch.confirm_select()
            ch.basic_publish("", name, b"from-0-9-1", BasicProperties(
                message_id="m-2", content_type="application/json", correlation_id="c-2", type="order",
                app_id="shop", priority=3, delivery_mode=2, expiration="60000",
                timestamp=datetime.datetime(2024, 1, 1), headers={"tenant": "acme", "n": 7, "flag": True}))
        return first

    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name("interop")
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.wait(await producer.send(
            b"from-stream", properties={"message_id": "m-1", "content_type": "text/plain", "correlation_id": "c-9",
                                        "reply_to": "replies", "user_id": b"guest"},
            application_properties={"tenant": "acme", "n": 7, "f": 1.5, "yes": True}))
        first = await in_thread(over_0_9_1, name)
        assert (first.body, first.stream_offset) == (b"from-stream", 0)
        p = first.properties
        assert (p.message_id, p.content_type, p.correlation_id, p.reply_to, p.user_id) == (
            "m-1", "text/plain", "c-9", "replies", "guest")
        assert {k: v for k, v in p.headers.items() if k != "x-stream-offset"} == {
            "tenant": "acme", "n": 7, "f": 1.5, "yes": True}

        consumer = await conn.consumer(name, offset=1, end=1)
        (second,) = await api.read_all(consumer)
        assert (second.offset, second.body) == (1, b"from-0-9-1")
        props = second.properties
        assert (props.message_id, props.content_type, props.correlation_id) == ("m-2", "application/json", "c-2")
        assert props.creation_time == datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
        assert second.application_properties == {"x-basic-type": "order", "x-basic-app-id": "shop", "tenant": "acme",
                                                 "n": 7, "flag": True}
        annotations = {str(k): v for k, v in second.message_annotations.items()}
        assert annotations == {"x-routing-key": name, "x-exchange": "", "x-basic-priority": 3,
                               "x-basic-delivery-mode": 2, "x-basic-expiration": "60000"}

    srun(scenario)


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_sub_entry_batching_with_compression(srun, compression):
    """subentry_size messages stored as one entry under one publishing id (one confirm for
    all), compressed: a consumer reads every message with its own offset."""

    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name, subentry_size=100, compression=compression, reference="batcher")
        futures = await api.send_many(producer, [b"s-%d" % i for i in range(1050)])
        ids = await api.settle(futures)
        # one publishing id a sub-entry, at most 100 messages each (fewer when a batch was
        # written before it filled up), in order
        assert ids == sorted(ids) and ids[0] == 1 and set(ids) == set(range(1, ids[-1] + 1))
        assert max(ids.count(i) for i in set(ids)) <= 100 and len(set(ids)) >= 11
        batch = await producer.send_batch([b"t-%d" % i for i in range(150)])
        last = await api.wait(batch)
        assert last >= ids[-1] + 2
        with pytest.raises(ValueError, match="sub-entry"):
            await producer.send(b"x", publishing_id=99)
        consumer = await conn.consumer(name, offset="first")
        messages = await api.read(consumer, 1200)
        assert [m.offset for m in messages] == list(range(1200))
        assert [m.body for m in messages] == [b"s-%d" % i for i in range(1050)] + [b"t-%d" % i for i in range(150)]
        assert await conn.query_publisher_sequence(name, "batcher") == last

    srun(scenario)


def test_a_silent_broker_is_found_out_by_heartbeats_and_the_consumer_resumes(srun):
    """The proxy goes silent (a frozen connection, no FIN): two heartbeat intervals later
    the link counts as lost (HeartbeatTimeout, from the 0-9-1 client's I/O), the
    connection recovers through a new one, and the consumer resumes where it was."""

    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy), heartbeat=1)
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.settle(await api.send_many(producer, [b"h-%d" % i for i in range(100)]))
        consumer = await conn.consumer(name, offset="first")
        assert [m.offset for m in await api.read(consumer, 50)] == list(range(50))
        proxy.freeze()
        started = time.monotonic()
        assert await until(lambda: _equals(asyncio.sleep(0, conn.is_open), False), 10)
        assert 1.5 <= time.monotonic() - started <= 8
        assert await conn.wait_recovered(20)
        await api.settle(await api.send_many(producer, [b"h-%d" % i for i in range(100, 200)]))
        assert [m.offset for m in await api.read(consumer, 150, timeout=20)] == list(range(50, 200))
        assert conn.is_open and proxy.accepted >= 2

    srun(scenario)


def test_a_chunk_that_cannot_be_read_ends_its_consumer_not_the_connection(srun):
    """A chunk whose bytes are not an Osiris chunk (here a bad CRC, fed as the broker would
    deliver it): that consumer ends with the codec's error; the link and its other users
    go on."""

    async def scenario(api):
        from amqwire.codec import CodecError

        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.wait(await producer.send(b"fine"))
        broken = await conn.consumer(name, offset="first")
        other = await conn.consumer(name, offset="first")
        raw = broken if api.name == "aio" else broken._obj
        not_a_chunk = bytes(64)  # zeros: no chunk magic, no CRC that matches
        if api.name == "aio":
            raw._on_chunk(not_a_chunk, raw._link)
        else:
            await in_thread(raw._on_chunk, not_a_chunk, raw._link)
        with pytest.raises(CodecError):
            while True:
                if await broken.get(5) is None:
                    break
        assert (await api.read(other, 1))[0].body == b"fine"
        assert await api.wait(await producer.send(b"still")) == 2

    srun(scenario)


def test_large_messages_go_in_frames_within_the_brokers_frame_max(srun):
    """A batch over frame_max (1 MiB here) is written as several Publish frames (RabbitMQ
    closes the connection of a client that sends a larger one); a message that no frame
    can hold is refused at the send (MessageTooLarge), and the connection goes on."""

    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name, batch_size=100)
        bodies = [bytes([i]) * 300_000 for i in range(20)]  # 6 MB in all, 300 KB each
        futures = await api.send_many(producer, bodies)
        assert await api.settle(futures) == list(range(1, 21))
        batch = await producer.send_batch([b"b" * 200_000] * 12)
        assert await api.wait(batch) == 32
        with pytest.raises(api.errors.MessageTooLarge) as too_large:
            await producer.send(b"x" * 2_000_000)
        assert "1048576" in str(too_large.value) and isinstance(too_large.value, ValueError)
        consumer = await conn.consumer(name, offset="first", end=31)
        messages = await api.read_all(consumer)
        assert [m.body for m in messages[:20]] == bodies and len(messages) == 32
        assert await api.wait(await producer.send(b"small")) == 33

    srun(scenario)


# --------------------------------------------------------------------------- TLS


@pytest.fixture
def stream_tls_url(stream_node, stream_url, tmp_path_factory):
    """rabbitmq-stream+tls:// to a TLS terminator in front of the node (test_client_tls.py's,
    with its CA and a certificate for localhost), and the CA file."""
    from test_client_tls import TLSTerminator, make_pki

    from conftest import url_host_port

    authority = make_pki(tmp_path_factory.mktemp("stream-pki"))
    terminator = TLSTerminator(authority, url_host_port(stream_url.replace("rabbitmq-stream", "amqp")))
    yield f"rabbitmq-stream+tls://guest:guest@localhost:{terminator.port}/", authority / "ca.pem"
    terminator.close()


def test_tls_verifies_the_broker_and_carries_the_stream_protocol(srun, stream_tls_url):
    url, ca = stream_tls_url

    async def scenario(api):
        import ssl

        with pytest.raises(api.errors.StreamClientError.__mro__[1]) as unknown_ca:  # AMQPError: unverified
            await api.connect(url)
        assert "certificate" in str(unknown_ca.value).lower() or "ssl" in repr(unknown_ca.value).lower()
        conn = await api.connect(f"{url}?cafile={ca}")
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        assert await api.wait(await producer.send(b"over tls")) == 1
        consumer = await conn.consumer(name, offset="first", end=0)
        assert [m.body for m in await api.read_all(consumer)] == [b"over tls"]
        assert "<amqwire.client.stream.Connection rabbitmq-stream+tls://guest@localhost:" in repr(conn)
        context = ssl.create_default_context(cafile=str(ca))
        other = await api.connect(url, ssl_context=context)
        assert await other.stream_exists(name)

    srun(scenario)


def test_closing_a_consumer_ends_its_iteration_and_drops_what_it_holds(srun):
    async def scenario(api):
        conn = await api.connect()
        name = api.stream_name()
        await conn.create_stream(name)
        producer = await conn.producer(name)
        await api.wait(await producer.send_batch([b"z"] * 500))
        consumer = await conn.consumer(name, offset="first")
        assert len(await api.read(consumer, 10)) == 10
        await consumer.close()
        assert await consumer.get(0.5) is None  # nothing more, though 490 had come
        assert consumer.state.value == "closed"
        await consumer.close()  # twice: nothing happens
        assert await conn.stream_exists(name)

    srun(scenario)
