"""The stream protocol end to end: amqwire's stream client against the protocol's limits,
amqwire's 0-9-1 stream rows, rstream and rbfly, on a private RabbitMQ node, in one run.

Run from the repository root (RabbitMQ installed: tests/ensure_rabbitmq.sh)::

    python bench/stream_protocol_bench.py                  # 1,000,000 messages x 3 repeats per row
    python bench/stream_protocol_bench.py --quick          # CI smoke: 20,000 messages, 1 repeat, no verdict
    python bench/stream_protocol_bench.py --install        # first pip-install rstream and rbfly (see below)
    python bench/stream_protocol_bench.py --only read --count 200000 --json /tmp/stream.json

The benchmark starts its own node (tests/broker_node.py, never the shared broker) with the
rabbitmq_stream plugin, its stream listener on a free port, advertised as 127.0.0.1.
Messages are 100-byte bodies, each an AMQP 1.0 message of one data section (105 bytes),
no properties.

Rows, two cases:

  read     a stream filled once with N messages (by the bare publisher, not timed) is read
           from its first offset to its N-th message; the clock runs from the subscription
           until the N-th message was handled.
  publish  N messages into a fresh stream, every one confirmed; the clock runs from the
           first send until the last confirm; after each run the stream must hold exactly
           N messages (its last offset N - 1), else the run FAILED.

  bare ... (limit)   amqwire's codec (amqwire.codec.stream) on a plain socket, no client:
           the reader subscribes with 10 chunks of credit, counts the records of each
           chunk from its header (nothing decoded) and grants a chunk of credit back per
           chunk received, once per socket read; the publisher sends Publish frames of
           100 messages with publishing ids, all encoded before the clock, from a
           select() loop that also reads the confirms, until all N are confirmed (no
           window: TCP's back-pressure only)
  bare reader + codec decoding (info)
           the bare reader, decoding every message of each chunk with the codec
           (``chunk_messages``, CRC checked) and reading its body and properties: what
           decoding costs without a client around it (the bare reader decodes nothing)
  amqwire blocking / asyncio
           amqwire.client.stream: read with ``for`` / ``async for`` over
           ``conn.consumer(stream, offset="first", end=N - 1)`` touching ``body`` and
           ``properties`` of each message (the message decoded); publish with
           ``send_batch`` of --batch bodies at a time, then ``flush()`` (every confirm),
           and, as info rows, ``send`` of each message (pipelined), then ``flush()``;
           the producer's defaults (frames of 200, 10,000 unconfirmed at most)
  amqwire 0-9-1
           amqwire.client (AMQP 0-9-1) on the same node's AMQP port, blocking:
           ``consume_stream(stream, offset=0, end=N - 1)`` (prefetch 1000) touching
           ``body``; ``publish_async`` in ``batch()`` with confirms (10,000 unconfirmed
           at most), then ``wait_for_confirms()``
  rstream  ``Consumer.subscribe(..., callback, decoder=amqp_decoder)`` from the first
           offset (the body decoded as an AMQPMessage); ``Producer.send_batch`` of
           --batch AMQPMessages with an ``on_publish_confirm`` callback counting confirms
  rbfly    ``async for body in client.subscribe(stream, offset=Offset.FIRST)`` (AMQP
           decoding on, its default); ``PublisherBatchFast``: ``batch()`` --batch
           messages, then ``flush()``, which waits for their confirms

rstream (MIT) and rbfly (GPL-3.0) are never dependencies of amqwire: ``--install`` (or
``pip install -r bench/requirements-stream.txt``) puts them into the benchmark's Python;
when one is missing its rows say so in one line (``n/a: rstream is not installed``).

Every run executes in a subprocess of its own (a fresh interpreter: what one library
imports or leaves running cannot weigh on the next row), which connects before its
clock and reports its wall time, its own CPU time (``time.process_time``: every thread
of the process) and the broker's (utime + stime of the node's beam.smp process from
/proc/<pid>/stat) over the timed part.  Per row: msg/s best and median of the repeats,
the ratio to the bare row of the case (best / median), the broker's and the client's CPU
microseconds per message (medians).  Repeats go round-robin across the rows of a case.

Targets (judged on best; the line says when the median disagrees): amqwire's stream
client, blocking and asyncio, reads at >= 80% of the bare reader and publishes
(send_batch) at >= 80% of the bare publisher, and is ahead of rstream and of rbfly in
each case; an info line gives the reading rows against the bare reader that decodes.
``--quick`` runs are smoke tests: their targets are informational.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import select
import socket
import statistics
import struct
import subprocess
import sys
import time
import traceback
import uuid
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

try:
    from bench import charts
    from bench.rows import select_rows
except ImportError:  # run as a script: bench/ is sys.path[0]
    import charts  # type: ignore[no-redef]
    from rows import select_rows  # type: ignore[no-redef]

BODY = bytes((i * 7 + 13) % 256 for i in range(100))
FRAME_MESSAGES = 100       # the bare publisher: messages per Publish frame
CREDIT = 10                # chunks of credit a subscription starts with (amqwire's and rstream's default)
PREFETCH_091 = 1000
WINDOW_091 = 10_000
RECV_SIZE = 1 << 20
SEND_SLICE = 1 << 20
TARGET = 0.80
QUICK_NOTE = ("--quick: a smoke run (few messages, 1 repeat, start-up weighs in): "
              "its targets are informational, not a verdict")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """A run did not do what it was asked (a count, a refused request, a time limit)."""


# --------------------------------------------------------------------------- measuring

def beam_cpu_seconds(pid: int) -> float:
    """utime + stime of the broker's beam.smp so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()  # fields[0] is field 3: the name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class Clock:
    """Wall time, this process's CPU time and the broker's CPU time between start and stop."""

    def __init__(self, beam_pid: int) -> None:
        self.beam_pid = beam_pid
        self.wall = self.cpu = self.broker = 0.0

    def start(self) -> None:
        self._broker0 = beam_cpu_seconds(self.beam_pid)
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0
        self.broker = beam_cpu_seconds(self.beam_pid) - self._broker0


@dataclasses.dataclass
class Ctx:
    """What a run needs: where the node is, which stream, how many messages."""

    host: str
    stream_port: int
    amqp_port: int
    beam_pid: int
    stream: str
    count: int
    batch: int

    @property
    def stream_url(self) -> str:
        return f"rabbitmq-stream://guest:guest@{self.host}:{self.stream_port}/"

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.amqp_port}/"


# --------------------------------------------------------------------------- the bare rows

class BareLink:
    """One stream-protocol socket driven by amqwire's codec alone: the handshake (peer
    properties, SASL PLAIN, tune, open) and requests answered by correlation id."""

    def __init__(self, host: str, port: int, user: str = "guest", password: str = "guest", vhost: str = "/",
                 timeout: float = 30.0) -> None:
        from amqwire.codec.stream import frames as F

        self.F = F
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # no frame size limit: the limit rows must never fail on a large chunk
        self.parser = F.StreamParser(0, sender="server")
        self.pending: list[Any] = []  # commands read but not wanted yet
        self._correlation = 0
        self.request(F.PeerProperties, {"product": "amqwire stream_protocol_bench (bare)"})
        mechanisms = self.request(F.SaslHandshake).mechanisms
        if "PLAIN" not in mechanisms:
            raise BenchError(f"the broker offers {mechanisms}, not PLAIN")
        self.request(F.SaslAuthenticate, "PLAIN", b"\0" + user.encode() + b"\0" + password.encode())
        tune = self.wait(lambda c: type(c) is F.Tune)
        self.sock.sendall(F.TuneResponse(tune.frame_max, tune.heartbeat).encode())
        self.request(F.Open, vhost)

    def wait(self, wanted: Callable[[Any], bool]) -> Any:
        """Read until a command ``wanted`` accepts (heartbeats are skipped, anything else fails)."""
        F = self.F
        while True:
            if not self.pending:
                data = self.sock.recv(RECV_SIZE)
                if not data:
                    raise BenchError("the broker closed the connection")
                self.pending = self.parser.feed(data)
            while self.pending:
                command = self.pending.pop(0)
                if wanted(command):
                    return command
                if type(command) is F.Heartbeat:
                    continue
                if type(command) is F.Close:
                    raise BenchError(f"the broker closed the connection: {command.code} {command.reason}")
                raise BenchError(f"unexpected {command!r}")

    def request(self, command_class: Any, *args: Any) -> Any:
        """Send ``command_class(correlation_id, *args)``; return its response, which must be OK."""
        self._correlation += 1
        correlation = self._correlation
        self.sock.sendall(command_class(correlation, *args).encode())
        reply = self.wait(lambda c: getattr(c, "correlation_id", None) == correlation)
        code = getattr(reply, "response_code", self.F.RESPONSE_OK)
        if code != self.F.RESPONSE_OK:
            name = self.F.RESPONSE_CODES.get(code, hex(code))
            raise BenchError(f"{command_class.__name__}: the broker answered {name} ({code:#04x})")
        return reply

    def create(self, stream: str) -> None:
        self.request(self.F.Create, stream, {})

    def delete(self, stream: str) -> None:
        self.request(self.F.Delete, stream)

    def last_offset(self, stream: str) -> Optional[int]:
        """The offset of the stream's last message (its last chunk's first offset + records - 1);
        None when it is empty (nothing comes within a second)."""
        from amqwire.codec.stream import chunk as C

        F = self.F
        self.request(F.Subscribe, 200, stream, F.OFFSET_TYPE_LAST, 0, 1, {})
        self.sock.settimeout(1.0)
        try:
            deliver = self.wait(lambda c: type(c) is F.Deliver)
            last: Optional[int] = None
            parsed = C.decode_chunk(deliver.chunk)
            last = parsed.first_offset + parsed.num_records - 1
        except socket.timeout:
            last = None
        finally:
            self.sock.settimeout(30.0)
        self.request(F.Unsubscribe, 200)
        return last

    def close(self) -> None:
        try:
            self.request(self.F.Close, 1, "bench done")
        except (OSError, BenchError):
            pass
        self.sock.close()


def bare_read(ctx: Ctx, clock: Clock) -> int:
    """Subscribe from the first offset; count the records of each user chunk from its header."""
    link = BareLink(ctx.host, ctx.stream_port)
    F = link.F
    sock, feed = link.sock, link.parser.feed
    deliver_type, response_type = F.Deliver, F.SubscribeResponse
    records = struct.Struct(">I").unpack_from
    credit = {k: F.Credit(0, k).encode() for k in range(1, 256)}
    n = ctx.count
    count = 0
    clock.start()
    sock.sendall(F.Subscribe(1_000_000, 0, ctx.stream, F.OFFSET_TYPE_FIRST, 0, CREDIT, {}).encode())
    while count < n:
        data = sock.recv(RECV_SIZE)
        if not data:
            raise BenchError(f"the broker closed the connection after {count} messages")
        chunks = 0
        for command in feed(data):
            kind = type(command)
            if kind is deliver_type:
                chunk = command.chunk
                if chunk[1] == 0:  # a user chunk (not tracking)
                    count += records(chunk, 4)[0]
                chunks += 1
            elif kind is response_type:
                if command.response_code != F.RESPONSE_OK:
                    raise BenchError(f"subscribe: {F.RESPONSE_CODES.get(command.response_code)}")
        while chunks:
            step = min(chunks, 255)
            sock.sendall(credit[step])
            chunks -= step
    clock.stop()
    link.close()
    return count


def bare_read_decoded(ctx: Ctx, clock: Clock) -> int:
    """The bare reader, each chunk's messages decoded by the codec (``chunk_messages``, CRC
    checked) and their bodies and properties read: what decoding costs with no client around it."""
    from amqwire.codec.stream.chunk import chunk_messages

    link = BareLink(ctx.host, ctx.stream_port)
    F = link.F
    sock, feed = link.sock, link.parser.feed
    deliver_type = F.Deliver
    credit = {k: F.Credit(0, k).encode() for k in range(1, 256)}
    n = ctx.count
    count = size = with_properties = 0
    clock.start()
    sock.sendall(F.Subscribe(1_000_000, 0, ctx.stream, F.OFFSET_TYPE_FIRST, 0, CREDIT, {}).encode())
    while count < n:
        data = sock.recv(RECV_SIZE)
        if not data:
            raise BenchError(f"the broker closed the connection after {count} messages")
        chunks = 0
        for command in feed(data):
            if type(command) is deliver_type:
                chunk = command.chunk
                if chunk[1] == 0:
                    for message in chunk_messages(chunk, None, True)[2]:
                        size += len(message.body)
                        if message.properties is not None:
                            with_properties += 1
                        count += 1
                chunks += 1
            elif type(command) is F.SubscribeResponse and command.response_code != F.RESPONSE_OK:
                raise BenchError(f"subscribe: {F.RESPONSE_CODES.get(command.response_code)}")
        while chunks:
            step = min(chunks, 255)
            sock.sendall(credit[step])
            chunks -= step
    clock.stop()
    link.close()
    return _checked(count, size, with_properties)


def bare_publish_frames(publisher_id: int, n: int) -> bytes:
    from amqwire.codec.stream.amqp10 import encode_message
    from amqwire.codec.stream.frames import encode_publish

    message = encode_message(BODY)
    return b"".join(encode_publish(publisher_id, first, [message] * min(FRAME_MESSAGES, n - first))
                    for first in range(0, n, FRAME_MESSAGES))


def bare_publish(ctx: Ctx, clock: Optional[Clock]) -> int:
    """Pre-encoded Publish frames of 100 messages, written from a select() loop that reads
    the confirms, until every one is confirmed."""
    link = BareLink(ctx.host, ctx.stream_port)
    F = link.F
    link.request(F.DeclarePublisher, 0, "", ctx.stream)
    frames = memoryview(bare_publish_frames(0, ctx.count))
    sock, feed = link.sock, link.parser.feed
    confirm_type = F.PublishConfirm
    sock.setblocking(False)
    n, total = ctx.count, len(frames)
    sent = confirmed = 0
    if clock:
        clock.start()
    while confirmed < n:
        readable, writable, _ = select.select([sock], [sock] if sent < total else [], [], 60)
        if not readable and not writable:
            raise BenchError(f"nothing moved for 60 s: {sent} of {total} bytes sent, {confirmed} confirmed")
        if writable:
            try:
                sent += sock.send(frames[sent:sent + SEND_SLICE])
            except BlockingIOError:
                pass
        if readable:
            try:
                data = sock.recv(RECV_SIZE)
            except BlockingIOError:
                continue
            if not data:
                raise BenchError(f"the broker closed the connection after {confirmed} confirms")
            for command in feed(data):
                if type(command) is confirm_type:
                    confirmed += len(command.publishing_ids)
                elif type(command) is F.PublishError:
                    raise BenchError(f"publish errors: {command.errors[:3]}")
    if clock:
        clock.stop()
    sock.setblocking(True)
    link.close()
    return confirmed


# --------------------------------------------------------------------------- amqwire's stream client

def aw_read_blocking(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client import stream

    count = size = with_properties = 0
    with stream.connect(ctx.stream_url) as conn:
        clock.start()
        consumer = conn.consumer(ctx.stream, offset="first", end=ctx.count - 1)
        for message in consumer:
            size += len(message.body)
            if message.properties is not None:
                with_properties += 1
            count += 1
        clock.stop()
        consumer.close()
    return _checked(count, size, with_properties)


def aw_read_asyncio(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client.stream import aio

    async def main() -> int:
        count = size = with_properties = 0
        async with aio.connect(ctx.stream_url) as conn:
            clock.start()
            consumer = await conn.consumer(ctx.stream, offset="first", end=ctx.count - 1)
            async for message in consumer:
                size += len(message.body)
                if message.properties is not None:
                    with_properties += 1
                count += 1
            clock.stop()
            await consumer.close()
        return _checked(count, size, with_properties)

    return asyncio.run(main())


def _checked(count: int, size: int, with_properties: int = 0) -> int:
    """A reader's count, once its bodies added up to 100 bytes each (and none had properties)."""
    if size != count * len(BODY) or with_properties:
        raise BenchError(f"{count} messages read, {size} bytes of bodies, {with_properties} with properties: "
                         f"not the {len(BODY)}-byte bodies published without properties")
    return count


def _batches(n: int, size: int) -> list[list[bytes]]:
    return [[BODY] * min(size, n - first) for first in range(0, n, size)]


def _settled(futures: list[Any]) -> int:
    """Messages confirmed according to the futures (each the last id of its batch, or one send)."""
    failed = [f for f in futures if f.exception() is not None]
    if failed:
        raise BenchError(f"{len(failed)} sends failed, the first: {failed[0].exception()!r}")
    return len(futures)


def aw_publish_blocking(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client import stream

    batches = _batches(ctx.count, ctx.batch)
    with stream.connect(ctx.stream_url) as conn, conn.producer(ctx.stream) as producer:
        clock.start()
        futures = [producer.send_batch(batch) for batch in batches]
        producer.flush()
        clock.stop()
        _settled(futures)
    return ctx.count


def aw_publish_blocking_send(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client import stream

    with stream.connect(ctx.stream_url) as conn, conn.producer(ctx.stream) as producer:
        send = producer.send
        clock.start()
        futures = [send(BODY) for _ in range(ctx.count)]
        producer.flush()
        clock.stop()
        return _settled(futures)


def aw_publish_asyncio(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client.stream import aio

    batches = _batches(ctx.count, ctx.batch)

    async def main() -> int:
        async with aio.connect(ctx.stream_url) as conn, conn.producer(ctx.stream) as producer:
            clock.start()
            futures = [await producer.send_batch(batch) for batch in batches]
            await producer.flush()
            clock.stop()
            _settled(futures)
        return ctx.count

    return asyncio.run(main())


def aw_publish_asyncio_send(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client.stream import aio

    async def main() -> int:
        async with aio.connect(ctx.stream_url) as conn, conn.producer(ctx.stream) as producer:
            send = producer.send
            clock.start()
            futures = [await send(BODY) for _ in range(ctx.count)]
            await producer.flush()
            clock.stop()
            return _settled(futures)

    return asyncio.run(main())


# --------------------------------------------------------------------------- amqwire over AMQP 0-9-1

def aw091_read(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client import blocking

    count = size = 0
    last = -1
    with blocking.connect(ctx.amqp_url) as conn, conn.channel() as ch:
        clock.start()
        for message in ch.consume_stream(ctx.stream, offset=0, end=ctx.count - 1, prefetch=PREFETCH_091):
            size += len(message.body)
            last = message.stream_offset
            count += 1
        clock.stop()
    if last != ctx.count - 1:
        raise BenchError(f"consume_stream ended at offset {last}, not {ctx.count - 1}")
    return _checked(count, size)


def aw091_publish(ctx: Ctx, clock: Clock) -> int:
    from amqwire.client import blocking

    with blocking.connect(ctx.amqp_url) as conn, conn.channel() as ch:
        ch.confirm_select(max_in_flight=WINDOW_091)
        publish = ch.publish_async
        clock.start()
        with ch.batch():
            for _ in range(ctx.count):
                publish("", ctx.stream, BODY)
        ch.wait_for_confirms(timeout=600)
        clock.stop()
    return ctx.count


# --------------------------------------------------------------------------- rstream and rbfly

def rstream_read(ctx: Ctx, clock: Clock) -> int:
    import rstream

    async def main() -> int:
        done = asyncio.Event()
        state = {"count": 0, "size": 0, "with_properties": 0}
        n = ctx.count

        def on_message(message: Any, context: Any) -> None:
            state["size"] += len(message.body)
            if message.properties is not None:
                state["with_properties"] += 1
            state["count"] += 1
            if state["count"] >= n:
                done.set()

        consumer = rstream.Consumer(ctx.host, ctx.stream_port, username="guest", password="guest")
        await consumer.start()
        try:
            clock.start()
            await consumer.subscribe(ctx.stream, on_message, decoder=rstream.amqp_decoder,
                                     offset_specification=rstream.ConsumerOffsetSpecification(
                                         rstream.OffsetType.FIRST, None))
            await asyncio.wait_for(done.wait(), run_time_limit(n))
            clock.stop()
        finally:
            await consumer.close()
        return _checked(state["count"], state["size"], state["with_properties"])

    return asyncio.run(main())


def rstream_publish(ctx: Ctx, clock: Clock) -> int:
    import rstream

    async def main() -> int:
        done = asyncio.Event()
        state = {"confirmed": 0, "failed": 0}
        timed = ctx.count - 1  # rstream declares its publisher with the first send: one before the clock

        def on_confirm(status: Any) -> None:
            if status.is_confirmed:
                state["confirmed"] += 1
            else:
                state["failed"] += 1
            if state["confirmed"] + state["failed"] >= timed:
                done.set()

        batches = [[rstream.AMQPMessage(body=BODY) for _ in batch] for batch in _batches(timed, ctx.batch)]
        async with rstream.Producer(ctx.host, ctx.stream_port, username="guest", password="guest") as producer:
            await producer.send_wait(ctx.stream, rstream.AMQPMessage(body=BODY))
            clock.start()
            for batch in batches:
                await producer.send_batch(ctx.stream, batch, on_publish_confirm=on_confirm)
            if timed:
                await asyncio.wait_for(done.wait(), run_time_limit(timed))
            clock.stop()
        if state["failed"]:
            raise BenchError(f"rstream: {state['failed']} messages not confirmed")
        return state["confirmed"] + 1

    return asyncio.run(main())


def rbfly_read(ctx: Ctx, clock: Clock) -> int:
    import rbfly.streams as rbs

    async def main() -> int:
        client = rbs.streams_client(ctx.stream_url)
        await client.create_stream(ctx.stream)  # connects (the stream exists: a no-op)
        count = size = 0
        n = ctx.count
        clock.start()
        async with contextlib.aclosing(client.subscribe(ctx.stream, offset=rbs.Offset.FIRST)) as messages:
            async for body in messages:
                size += len(body)
                count += 1
                if count >= n:
                    clock.stop()
                    break
        await client.disconnect()
        return _checked(count, size)

    return asyncio.run(main())


def rbfly_publish(ctx: Ctx, clock: Clock) -> int:
    import rbfly.streams as rbs

    async def main() -> int:
        client = rbs.streams_client(ctx.stream_url)
        sizes = [len(batch) for batch in _batches(ctx.count, ctx.batch)]
        async with client.publisher(ctx.stream, cls=rbs.PublisherBatchFast) as publisher:
            clock.start()
            for size in sizes:
                for _ in range(size):
                    publisher.batch(BODY)
                await publisher.flush()
            clock.stop()
        await client.disconnect()
        return ctx.count

    return asyncio.run(main())


# --------------------------------------------------------------------------- the rows

@dataclasses.dataclass
class Row:
    case: str                 # "read" or "publish"
    label: str
    lib: str                  # "bare", "amqwire", "rstream", "rbfly"
    fn: Callable[[Ctx, Clock], int]
    info: bool = False        # no target, not an anchor
    needs: Optional[str] = None   # the package it imports
    na: Optional[str] = None
    error: Optional[str] = None
    runs: list[dict[str, float]] = dataclasses.field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.case}: {self.label}"

    @property
    def rates(self) -> list[float]:
        return [r["rate"] for r in self.runs]


BARE_READ = "bare stream reader (limit)"
BARE_READ_DECODED = "bare reader + codec decoding"
BARE_PUBLISH = "bare publisher (limit)"
AW_BLOCKING, AW_ASYNCIO = "amqwire blocking", "amqwire asyncio"
RSTREAM, RBFLY = "rstream", "rbfly"
CASE_TITLES = {
    "read": "(1) read N messages from the first offset, each decoded",
    "publish": "(2) publish N messages, every one confirmed",
}


def build_rows() -> list[Row]:
    return [
        Row("read", BARE_READ, "bare", bare_read),
        Row("read", BARE_READ_DECODED, "bare", bare_read_decoded, info=True),
        Row("read", AW_BLOCKING, "amqwire", aw_read_blocking),
        Row("read", AW_ASYNCIO, "amqwire", aw_read_asyncio),
        Row("read", "amqwire 0-9-1 consume_stream (blocking)", "amqwire", aw091_read),
        Row("read", RSTREAM, "rstream", rstream_read, needs="rstream"),
        Row("read", RBFLY, "rbfly", rbfly_read, needs="rbfly"),
        Row("publish", BARE_PUBLISH, "bare", bare_publish),
        Row("publish", AW_BLOCKING, "amqwire", aw_publish_blocking),
        Row("publish", AW_ASYNCIO, "amqwire", aw_publish_asyncio),
        Row("publish", "amqwire blocking, send() each", "amqwire", aw_publish_blocking_send, info=True),
        Row("publish", "amqwire asyncio, send() each", "amqwire", aw_publish_asyncio_send, info=True),
        Row("publish", "amqwire 0-9-1 confirmed publish (blocking)", "amqwire", aw091_publish),
        Row("publish", RSTREAM, "rstream", rstream_publish, needs="rstream"),
        Row("publish", RBFLY, "rbfly", rbfly_publish, needs="rbfly"),
    ]


ROW_FUNCTIONS = {row.key: row.fn for row in build_rows()}


def run_time_limit(n: int) -> float:
    return 120.0 + n / 2000.0


# --------------------------------------------------------------------------- one run in a subprocess

def worker(spec: dict[str, Any]) -> int:
    """The child's side: one run of one row; prints one RESULT line of JSON."""
    ctx = Ctx(**spec["ctx"])
    clock = Clock(ctx.beam_pid)
    done = ROW_FUNCTIONS[spec["row"]](ctx, clock)
    if done != ctx.count:
        raise BenchError(f"{done} messages handled, {ctx.count} asked")
    if clock.wall <= 0:
        raise BenchError("the clock never ran")
    print("RESULT " + json.dumps({"wall": clock.wall, "cpu": clock.cpu, "broker": clock.broker}), flush=True)
    return 0


def run_in_child(row: Row, ctx: Ctx) -> dict[str, float]:
    spec = {"row": row.key, "ctx": dataclasses.asdict(ctx)}
    command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    try:  # from /: amqwire is the installed one, never a source tree's
        done = subprocess.run(command, capture_output=True, text=True, timeout=run_time_limit(ctx.count), cwd="/")
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"no result within {exc.timeout:.0f} s") from None
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not results:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise BenchError(f"exit status {done.returncode}: {lines[-1] if lines else 'no output'}")
    got = json.loads(results[-1][len("RESULT "):])
    n = ctx.count
    return {"rate": n / got["wall"], "seconds": got["wall"], "client_us": got["cpu"] / n * 1e6,
            "broker_us": got["broker"] / n * 1e6}


# --------------------------------------------------------------------------- the parent

def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average %.2f %.2f %.2f" % os.getloadavg()


def start_node() -> tuple[Any, int]:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from broker_node import BrokerNode, _pick_ports

    (port,) = _pick_ports(1)
    node = BrokerNode(plugins=["rabbitmq_stream"], config={
        "stream.listeners.tcp.1": f"127.0.0.1:{port}",
        "stream.advertised_host": "127.0.0.1",
        "stream.advertised_port": str(port),
    })
    node.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                node.cleanup(graceful=False)
                raise BenchError(f"the stream listener on port {port} did not open within 30 s") from None
            time.sleep(0.1)
    if node.beam_pid is None:
        node.cleanup(graceful=False)
        raise BenchError("the node's beam.smp pid is not known: no broker CPU without it")
    return node, port


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version() + " (" + platform.python_implementation() + ")"}
    for name in ("amqwire", "rstream", "rbfly"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def mark_missing(rows: list[Row]) -> None:
    for row in rows:
        if row.needs and importlib.util.find_spec(row.needs) is None:
            row.na = f"n/a: {row.needs} is not installed"


def install_anchors() -> None:
    requirements = os.path.join(HERE, "requirements-stream.txt")
    print(f"installing the anchors: {sys.executable} -m pip install -r {requirements}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", requirements], check=True)


def run_rows(rows: list[Row], node: Any, stream_port: int, count: int, repeats: int, batch: int) -> None:
    host = "127.0.0.1"
    base = dict(host=host, stream_port=stream_port, amqp_port=node.port, beam_pid=node.beam_pid, count=count,
                batch=batch)
    admin = BareLink(host, stream_port)
    try:
        for case in ("read", "publish"):
            case_rows = [r for r in rows if r.case == case and not r.na]
            if not case_rows:
                continue
            read_stream = None
            if case == "read":
                read_stream = f"bench-read-{uuid.uuid4().hex[:8]}"
                admin.create(read_stream)
                print(f"filling {read_stream} with {count:,} messages (the bare publisher, not timed) ...",
                      file=sys.stderr, flush=True)
                bare_publish(Ctx(stream=read_stream, **base), None)
                last = admin.last_offset(read_stream)
                if last != count - 1:
                    raise BenchError(f"{read_stream}: its last offset is {last}, not {count - 1}")
            try:
                for rep in range(repeats):
                    for row in case_rows:
                        if row.error:
                            continue
                        stream = read_stream or f"bench-publish-{uuid.uuid4().hex[:8]}"
                        if case == "publish":
                            admin.create(stream)
                        try:
                            run = run_in_child(row, Ctx(stream=stream, **base))
                            if case == "publish":
                                last = admin.last_offset(stream)
                                if last != count - 1:
                                    raise BenchError(f"the stream's last offset is {last}, not {count - 1}: "
                                                     f"{'duplicates' if (last or 0) > count - 1 else 'missing'}")
                        except BenchError as exc:
                            row.error = str(exc)
                            print(f"  {row.key}: FAILED {row.error}", file=sys.stderr, flush=True)
                            continue
                        finally:
                            if case == "publish":
                                admin.delete(stream)
                        row.runs.append(run)
                        print(f"  run {rep + 1} {row.key:55s} {run['rate']:12,.0f} msg/s  broker "
                              f"{run['broker_us']:6.2f} us/msg  client {run['client_us']:6.2f} us/msg  "
                              f"(load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
            finally:
                if read_stream:
                    admin.delete(read_stream)
    finally:
        admin.close()


def best_median(row: Row) -> tuple[Optional[float], Optional[float]]:
    rates = row.rates
    return (max(rates), statistics.median(rates)) if rates else (None, None)


def _median_of(row: Row, key: str) -> Optional[float]:
    return statistics.median(r[key] for r in row.runs) if row.runs else None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _find(rows: list[Row], case: str, label: str) -> Optional[Row]:
    return next((r for r in rows if r.case == case and r.label == label), None)


def print_case(case: str, rows: list[Row], count: int) -> None:
    case_rows = [r for r in rows if r.case == case]
    if not case_rows:
        return
    bare = _find(rows, case, BARE_READ if case == "read" else BARE_PUBLISH)
    bare_best, bare_median = best_median(bare) if bare else (None, None)
    print()
    print(f"{CASE_TITLES[case]}  (N = {count:,})")
    print(f"  {'row':44s} {'best msg/s':>11s} {'median msg/s':>13s} {'% bare best/median':>19s} "
          f"{'broker us/msg':>14s} {'client us/msg':>14s}")
    for row in case_rows:
        name = row.label + (" (info)" if row.info else "")
        if row.na:
            print(f"  {name:44s} {row.na}")
            continue
        if not row.runs:
            print(f"  {name:44s} FAILED: {row.error}")
            continue
        best, median = best_median(row)
        rb, rm = _ratio(best, bare_best), _ratio(median, bare_median)
        pct = f"{rb:.0%} / {rm:.0%}" if rb is not None and rm is not None else "-"
        print(f"  {name:44s} {best:11,.0f} {median:13,.0f} {pct:>19s} {_median_of(row, 'broker_us'):14.2f} "
              f"{_median_of(row, 'client_us'):14.2f}" + (f"   FAILED later: {row.error}" if row.error else ""))


def target_lines(rows: list[Row]) -> list[tuple[str, str, str]]:
    """(status, target, detail) per target: status 'met', 'MISSED' or 'n/a'; 'info' lines carry no target."""
    out = []
    for case, bare_label, what in (("read", BARE_READ, "reads"), ("publish", BARE_PUBLISH, "publishes")):
        bare = _find(rows, case, bare_label)
        for transport in (AW_BLOCKING, AW_ASYNCIO):
            row = _find(rows, case, transport)
            if row is None:
                continue
            best, median = best_median(row)
            desc = f"{case}: {transport} {what} at >= {TARGET:.0%} of the {bare_label.split(' (')[0]}"
            if not best or not bare or not bare.runs:
                out.append(("n/a", desc, "not measured" if not bare or not bare.runs else row.error or "no run"))
            else:
                bb, bm = best_median(bare)
                rb, rm = best / bb, median / bm
                status = "met" if rb >= TARGET else "MISSED"
                detail = f"{rb:.0%} best ({best:,.0f} / {bb:,.0f}), {rm:.0%} median"
                if (rm >= TARGET) != (rb >= TARGET):
                    detail += f" (the median would say {'met' if rm >= TARGET else 'MISSED'})"
                out.append((status, desc, detail))
            decoded = _find(rows, case, BARE_READ_DECODED)
            if best and decoded is not None and decoded.runs:
                db, dm = best_median(decoded)
                out.append(("info", f"{case}: {transport} against the bare reader decoding with the codec",
                            f"{best / db:.0%} best ({best:,.0f} / {db:,.0f}), {median / dm:.0%} median"))
            for anchor_label in (RSTREAM, RBFLY):
                anchor = _find(rows, case, anchor_label)
                desc = f"{case}: {transport} ahead of {anchor_label}"
                if anchor is None:
                    continue
                if anchor.na:
                    out.append(("n/a", desc, anchor.na))
                    continue
                if not best or not anchor.runs:
                    out.append(("n/a", desc, f"{anchor_label}: {anchor.error}" if anchor.error else
                                "not measured"))
                    continue
                ab, am = best_median(anchor)
                rb, rm = best / ab, median / am
                status = "met" if rb > 1 else "MISSED"
                detail = f"{rb:.2f}x best ({best:,.0f} / {ab:,.0f}), {rm:.2f}x median"
                if (rm > 1) != (rb > 1):
                    detail += f" (the median would say {'met' if rm > 1 else 'MISSED'})"
                out.append((status, desc, detail))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/stream_protocol_bench.py", description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=None, help="messages per run (default 1,000,000; --quick 20,000)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 3; --quick 1)")
    ap.add_argument("--batch", type=int, default=1000,
                    help="messages per batch call of the clients (send_batch, rbfly's batch + flush; default 1000)")
    ap.add_argument("--quick", action="store_true", help="CI smoke: 20,000 messages, 1 repeat, no verdict")
    ap.add_argument("--only", metavar="SUBSTR", help="rows whose 'case: label' contains one of these "
                    "comma-separated substrings ('read', 'rstream', 'publish: amqwire'); '=case: label' that row only")
    ap.add_argument("--install", action="store_true",
                    help="pip-install rstream and rbfly (bench/requirements-stream.txt) into this Python first; "
                    "they are never dependencies of amqwire (rbfly is GPL)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    charts.add_output_options(ap)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    for option in ("count", "repeats", "batch"):
        value = getattr(args, option)
        if value is not None and value < 1:
            ap.error(f"--{option} must be a positive integer, not {value}")
    if args.install:
        install_anchors()
    count = args.count or (20_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    rows = select_rows(build_rows(), args.only)
    if not rows:
        ap.error(f"--only {args.only!r} matches no row")
    mark_missing(rows)
    versions = library_versions()
    load0, up0 = os.getloadavg(), uptime()
    print(f"amqwire stream protocol benchmark  {time.strftime('%Y-%m-%d %H:%M:%S')}")
    print(f"  machine : {platform.node()}, {platform.machine()}, {os.cpu_count()} CPUs")
    print(f"  uptime  : {up0}")
    if load0[0] > 0.5 * (os.cpu_count() or 1):
        print(f"  WARNING : the machine is busy (1-min load {load0[0]:.2f} on {os.cpu_count()} CPUs): rates are "
              "noisy, the ratios of one run are the figures to read")
    if args.quick:
        print("  NOTE    : " + QUICK_NOTE)
    print("  versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"  workload: {count:,} messages of 100 B (AMQP 1.0, one data section) per run, {repeats} run(s) per row, "
          f"batch calls of {args.batch:,}; each run in a subprocess of its own")
    print("  columns : % bare = row / the bare row of the case (best / median); broker us/msg = the node's beam.smp "
          "CPU per message, client us/msg = the run's process CPU per message (medians)")
    sys.stdout.flush()

    t_start = time.monotonic()
    node, stream_port = start_node()
    broker = "RabbitMQ"
    try:
        broker = "RabbitMQ " + node.rabbitmqctl("eval", "rabbit_misc:version().").strip().strip('"')
    except Exception:  # noqa: BLE001 - the version is for the header only
        pass
    print(f"  broker  : {broker}, a private node ({node.name}), stream port {stream_port}, AMQP port {node.port}; "
          "it shares the machine with the clients", flush=True)
    try:
        run_rows(rows, node, stream_port, count, repeats, args.batch)
    finally:
        node.cleanup(graceful=False)
    for case in ("read", "publish"):
        print_case(case, rows, count)
    verdicts = target_lines(rows)
    print()
    for status, desc, detail in verdicts:
        print(f"  {'info  ' if status == 'info' else 'target'} {'' if status == 'info' else status:7s} {desc}: {detail}")
    failed = [r for r in rows if r.error]
    for r in failed:
        print(f"  FAILED  {r.key}: {r.error}")
    load1 = os.getloadavg()
    print()
    print(f"uptime at the end: {uptime()}  (includes this benchmark and its broker)")
    print("targets%s: %d met, %d missed, %d not measured; %d rows failed; %.0f s in all"
          % (" (informational: --quick)" if args.quick else "", sum(v[0] == "met" for v in verdicts),
             sum(v[0] == "MISSED" for v in verdicts), sum(v[0] == "n/a" for v in verdicts), len(failed),
             time.monotonic() - t_start))
    if args.json or args.results or args.chart:
        doc = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"), "uptime_start": up0, "uptime_end": uptime(),
               "loadavg_start": load0, "loadavg_end": load1, "cpus": os.cpu_count(),
               "platform": platform.platform(), "broker": broker, "versions": versions, "count": count,
               "repeats": repeats, "batch": args.batch, "quick": args.quick,
               "results": [{"case": r.case, "row": r.label, "lib": r.lib, "info": r.info, "na": r.na,
                            "error": r.error, "best_msg_s": best_median(r)[0], "median_msg_s": best_median(r)[1],
                            "msg_s_all": r.rates, "seconds_all": [x["seconds"] for x in r.runs],
                            "broker_cpu_us_per_msg_all": [x["broker_us"] for x in r.runs],
                            "client_cpu_us_per_msg_all": [x["client_us"] for x in r.runs]} for r in rows],
               "targets": [{"status": s, "target": d, "detail": t} for s, d, t in verdicts]}
        charts.write_outputs("stream", doc, args)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        if "--worker" in sys.argv:
            traceback.print_exc()
        print(f"stream_protocol_bench: {exc}", file=sys.stderr)
        sys.exit(1)
