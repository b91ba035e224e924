"""End-to-end client benchmark: amqwire.client vs pika, py-amqp and aio-pika against a
real RabbitMQ, measured in one run, with a raw-socket limit for each case.

Run from the repository root (a broker at AMQP_URL or --url)::

    python -m bench.client_bench               # full run: 200,000 messages x 3 repeats per row
    python bench/client_bench.py --quick       # CI smoke: 5,000 messages, 1 repeat
    python -m bench.client_bench --only consume --count 50000 --json /tmp/client.json

Three cases, 100-byte bodies, no properties, the default exchange "" with routing key =
queue name, a fresh non-durable queue for every run (declared before, deleted after):

  publish  publish N messages without confirms; the clock stops after one synchronous
           round trip (queue.declare passive) made after the last publish, so it covers
           the broker having read everything (every row does the same round trip)
  confirm  publish N messages in confirm mode until every one is confirmed, the best way
           each client offers (see the docstring of each ``*_confirm`` function)
  consume  the queue is pre-filled with N messages (raw fast path, not timed); the clock
           runs from basic.consume until the N-th message is received and the last ack
           written: prefetch 1000 (basic.qos), basic.ack multiple=True every 100 messages

and the same two cases again in the two patterns compared with rabbitmq-c doing the same:

  confirm-batch   (2a) batches of 1000 publishes, each batch's confirms all waited for
                  before the next batch is published
  confirm-window  (2b) pipelined: publishing goes on while fewer than 1000 are unconfirmed
  consume-each    (3b) consume as (3) but each delivery acked by itself (multiple=False)
                  as it arrives ((3) is pattern (a): a multiple ack every 100)

Rows: ``raw socket`` (the limit: amqwire.codec frames on a bare socket, the handshake done
with codec methods and CommandParser), amqwire blocking and asyncio (amqwire.client), and
the anchors pika (BlockingConnection), py-amqp (the ``amqp`` package) and aio-pika, and the
compiled clients rabbitmq-c (C) and amqp091-go (Go): programs in bench/anchors/ doing the
same phases in a child process that times itself (compiled_anchors.py builds them, or says
in one line why their rows are skipped).  Rows marked ``info`` carry no target and are not
anchors.

Every row prints msg/s (best and median of the repeats) and ratios measured side by side:
``% raw`` = row / raw-socket row of the same case, ``x anchor`` = row / fastest anchor of
the case (pika, py-amqp, aio-pika), ``x C`` = row / rabbitmq-c, and for amqwire's confirmed
rows ``% unconf`` = row / the same transport's unconfirmed publish row.  Each ratio is given for best / median.
``cpu`` is the client process's CPU time / wall time over the timed part and ``us/msg`` its
CPU microseconds per message (medians): the broker shares the machine, so a row far below
100% cpu is waiting for the broker, and us/msg says what the client costs either way.
Targets (judged on best, the least noise-contaminated figure on a shared VM; the line
says when the median would disagree): publish >= 90% of raw and >= 2x the fastest anchor;
confirmed publish >= 80% of our own unconfirmed rate; consume >= 2x the fastest anchor;
confirmed publish and consume >= 1.00x rabbitmq-c (each pattern); amqwire blocking's CPU per
message <= rabbitmq-c's (each pattern); asyncio >= 90% of blocking in each case.

Checks: after every publish run the queue must hold exactly N messages, after every
consume run it must be empty (all acked); a row that fails a check, raises or exceeds its
time limit is reported FAILED with the reason and the benchmark goes on.  Each row first
runs once with a small count (warm-up + sanity), not timed.  A thread watches for broker
resource alarms (memory/disk: the broker blocks every publisher); a run that overlaps one is
discarded and done again (up to 3 times).

Timing: time.perf_counter around the client calls only (connecting, declaring, pre-filling
and closing are outside the clock).  Repeats run round-robin across the rows of a case so
a transient slowdown of a shared VM hits all rows alike.  gc runs a full collection
before every run and stays *enabled* while timing (unlike the codec benchmark): garbage
cycles made by a client are part of its real cost.  --no-gc disables it while timing.
Each run executes in a worker thread; the main thread prints progress to stderr every few
seconds (messages in the queue) and abandons a run that exceeds its time limit, printing
the worker's stack.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
from urllib.parse import unquote, urlsplit

# --------------------------------------------------------------------------- anchors
import pika
import amqp
import aio_pika

try:
    from bench import compiled_anchors
    from bench.rows import select_rows
except ImportError:  # run as a script: bench/ is sys.path[0]
    import compiled_anchors  # type: ignore[no-redef]
    from rows import select_rows  # type: ignore[no-redef]

try:  # importlib.metadata gives the installed distribution versions
    from importlib.metadata import version as _dist_version
except ImportError:  # pragma: no cover
    _dist_version = None

# --------------------------------------------------------------------------- amqwire
import amqwire.codec as aw  # the raw rows and all the set-up use the codec

try:
    from amqwire.client import aio as aw_aio
    from amqwire.client import blocking as aw_blocking
    AW_CLIENT_ERROR = None
except Exception as exc:  # the client may not be written yet
    aw_aio = aw_blocking = None
    AW_CLIENT_ERROR = "%s: %s" % (type(exc).__name__, exc)

# --------------------------------------------------------------------------- workload
BODY = bytes((i * 7 + 13) % 256 for i in range(100))  # 100-byte body, no properties
PREFETCH = 1000
ACK_EVERY = 100           # consume: basic.ack(multiple=True) every ACK_EVERY messages
CONFIRM_WINDOW = 1000     # aio-pika / py-amqp pipelined confirms: publishes per window
RAW_CHUNK = 1 << 20       # raw socket: bytes per send
RECV_SIZE = 1 << 18
FRAME_MAX = 131072
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
PROGRESS_EVERY = 5.0      # seconds between progress lines on stderr

ANCHORS = ("pika", "py-amqp", "aio-pika")
COMPILED = ("rabbitmq-c", "amqp091-go")  # compiled clients: the bar for CPU per message
C_ANCHOR = "rabbitmq-c"
CASE_ORDER = ("publish", "confirm", "confirm-batch", "confirm-window", "consume", "consume-each")
CASE_NAMES = {"publish": "publish", "confirm": "confirmed publish",
              "confirm-batch": "confirmed publish per batch", "confirm-window": "pipelined confirmed publish",
              "consume": "consume", "consume-each": "consume acking each"}
CASE_TITLES = {
    "publish": "(1) publish, no confirms, 100 B bodies                          msg/s",
    "confirm": "(2) publish with confirms (the best way each client offers)     msg/s",
    "confirm-batch": "(2a) confirms, batches of %d, each waited for before the next  msg/s"
                     % CONFIRM_WINDOW,
    "confirm-window": "(2b) confirms pipelined, at most %d unconfirmed              msg/s"
                      % CONFIRM_WINDOW,
    "consume": "(3) consume, prefetch %d, ack multiple every %d                msg/s"
               % (PREFETCH, ACK_EVERY),
    "consume-each": "(3b) consume, prefetch %d, one basic.ack per delivery         msg/s" % PREFETCH,
}
# What the compiled anchors run for each case: (their phase, acks every how many deliveries)
ANCHOR_PHASES = {"publish": ("publish", ACK_EVERY), "confirm": ("confirm", ACK_EVERY),
                 "confirm-batch": ("confirm", ACK_EVERY), "confirm-window": ("confirm-window", ACK_EVERY),
                 "consume": ("consume", ACK_EVERY), "consume-each": ("consume", 1)}


class SanityError(AssertionError):
    """A run did not do what it was asked (message count, broker state)."""


class RunTimeout(Exception):
    """A run exceeded its time limit (the worker thread is abandoned)."""


class BrokerAlarm(Exception):
    """The broker blocked publishers (a memory or disk alarm) during the run: its rate says
    nothing about the client; the run is done again."""


# =========================================================================== connection
class Ctx:
    """Where the broker is: the URL and its parts (for the clients that want them)."""

    def __init__(self, url):
        u = urlsplit(url)
        if u.scheme != "amqp":
            raise SystemExit("only amqp:// URLs are supported by the benchmark (got %r)" % u.scheme)
        self.url = url
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 5672
        self.username = unquote(u.username or "guest")
        self.password = unquote(u.password or "guest")
        path = u.path[1:] if u.path.startswith("/") else u.path
        self.vhost = unquote(path) if path else "/"

    def safe_url(self):
        return "amqp://%s:***@%s:%d/%s" % (self.username, self.host, self.port,
                                          "" if self.vhost == "/" else self.vhost)


class RawConnection:
    """An AMQP connection on a bare socket, with amqwire.codec only: the handshake with codec
    methods and CommandParser, channel 1 opened, no heartbeats.  Used for the raw-limit rows
    and for all set-up (declare, pre-fill, count, delete)."""

    def __init__(self, ctx, product="amqwire client_bench (raw socket)"):
        self.sock = socket.create_connection((ctx.host, ctx.port), timeout=30)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = aw.CommandParser()
        self.pending = []
        self.sock.sendall(aw.PROTOCOL_HEADER)
        start = self.expect(aw.ConnectionStart, channel=0)
        self.server_properties = start.server_properties
        self.send(0, aw.ConnectionStartOk(
            {"product": product, "platform": "Python " + platform.python_version(),
             "capabilities": {"publisher_confirms": True, "basic.nack": True,
                              "consumer_cancel_notify": True, "connection.blocked": True}},
            "PLAIN", ("\0%s\0%s" % (ctx.username, ctx.password)).encode(), "en_US"))
        tune = self.expect(aw.ConnectionTune, channel=0)
        self.frame_max = min(FRAME_MAX, tune.frame_max or FRAME_MAX)
        self.send(0, aw.ConnectionTuneOk(channel_max=tune.channel_max or 2047,
                                         frame_max=self.frame_max, heartbeat=0))
        self.parser.frame_max = self.frame_max
        self.send(0, aw.ConnectionOpen(virtual_host=ctx.vhost))
        self.expect(aw.ConnectionOpenOk, channel=0)
        self.send(1, aw.ChannelOpen())
        self.expect(aw.ChannelOpenOk)

    # ---- plumbing
    def send(self, channel, method):
        self.sock.sendall(method.encode(channel))

    def read(self):
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("raw connection closed by the broker")
        self.pending.extend(self.parser.feed(data))

    def expect(self, cls, channel=1):
        """Read until a command with method ``cls`` arrives on ``channel``; raise on a close."""
        while True:
            while self.pending:
                cmd = self.pending.pop(0)
                if not isinstance(cmd, aw.Command):
                    continue  # heartbeat
                m = cmd.method
                if isinstance(m, cls) and cmd.channel == channel:
                    return m
                if isinstance(m, (aw.ConnectionClose, aw.ChannelClose)):
                    raise ConnectionError("broker closed: %s %s (%s)"
                                          % (m.reply_code, m.reply_text, m.NAME))
                if isinstance(m, aw.ConnectionBlocked):
                    sys.stderr.write("  !! the broker blocked a set-up connection (%s): a resource "
                                     "alarm; rates measured now are not representative\n" % m.reason)
            self.read()

    def rpc(self, method, reply_cls):
        self.send(1, method)
        return self.expect(reply_cls)

    # ---- set-up helpers
    def declare(self, queue):
        self.rpc(aw.QueueDeclare(queue=queue, durable=False, auto_delete=False), aw.QueueDeclareOk)

    def count(self, queue):
        return self.rpc(aw.QueueDeclare(queue=queue, passive=True), aw.QueueDeclareOk).message_count

    def delete(self, queue):
        self.rpc(aw.QueueDelete(queue=queue), aw.QueueDeleteOk)

    def prefill(self, queue, n, batch=20000):
        """Publish n messages into ``queue`` (FrameWriter batches, unconfirmed) and wait until
        the queue holds them all."""
        w = aw.FrameWriter(frame_max=self.frame_max)
        left = n
        while left:
            k = min(batch, left)
            for _ in itertools.repeat(None, k):
                w.publish(1, "", queue, BODY)
            self.sock.sendall(w.take())
            left -= k
        wait_count(self, queue, n, what="pre-fill")

    def close(self):
        try:
            self.send(0, aw.ConnectionClose(reply_code=200, reply_text="bye"))
            self.expect(aw.ConnectionCloseOk, channel=0)
        except Exception:
            pass
        self.sock.close()


class AlarmWatch:
    """Watches for broker resource alarms (memory/disk), which block every publishing
    connection and would make a run measure the alarm instead of the client.

    A thread keeps its own raw connection (capability connection.blocked) and publishes a
    5-byte unroutable message 5 times a second (the default exchange drops it): a broker
    in alarm answers the next publish with connection.blocked, and connection.unblocked when
    the alarm clears.  ``overlaps(t0, t1)`` says whether an alarm touched that interval."""

    PERIOD = 0.2

    def __init__(self, ctx):
        self.conn = RawConnection(ctx, product="amqwire client_bench (alarm watch)")
        self.frame = aw.encode_publish(1, "", "amqwire-bench-alarm-probe-no-such-queue", b"probe")
        self.lock = threading.Lock()
        self.intervals = []  # [start, end or None, reason]
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="alarm watch", daemon=True)
        self.thread.start()

    def _loop(self):
        sock, feed = self.conn.sock, self.conn.parser.feed
        sock.settimeout(self.PERIOD)
        next_send = 0.0
        try:
            while not self.stopping:
                now = time.monotonic()
                if now >= next_send:
                    sock.sendall(self.frame)
                    next_send = now + self.PERIOD
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return
                for cmd in feed(data):
                    m = getattr(cmd, "method", None)
                    if isinstance(m, aw.ConnectionBlocked):
                        with self.lock:
                            self.intervals.append([time.monotonic(), None, m.reason])
                        sys.stderr.write("  !! broker resource alarm: publishers blocked (%s)\n"
                                         % m.reason)
                    elif isinstance(m, aw.ConnectionUnblocked):
                        with self.lock:
                            if self.intervals and self.intervals[-1][1] is None:
                                self.intervals[-1][1] = time.monotonic()
                        sys.stderr.write("  !! broker resource alarm cleared\n")
        except OSError:
            return

    def overlaps(self, t0, t1):
        """The reason of an alarm that overlapped [t0, t1] (monotonic), or None."""
        with self.lock:
            for start, end, reason in self.intervals:
                if start <= t1 and (end is None or end >= t0):
                    return reason or "alarm"
        return None

    def close(self):
        self.stopping = True
        self.thread.join(1.0)
        try:
            self.conn.sock.close()
        except OSError:
            pass


ALARMS = None  # the AlarmWatch of this run (main)


def wait_count(admin, queue, n, what, timeout=30.0):
    """Poll the queue's message count until it is n (the broker routes asynchronously)."""
    end = time.monotonic() + timeout
    got = admin.count(queue)
    while got != n and time.monotonic() < end:
        time.sleep(0.05)
        got = admin.count(queue)
    if got != n:
        raise SanityError("%s: queue %s holds %d messages, expected %d" % (what, queue, got, n))


def encode_all(queue, n, frame_max):
    """N publishes pre-encoded into one buffer (the same frames every client sends)."""
    w = aw.FrameWriter(frame_max=frame_max)
    for _ in itertools.repeat(None, n):
        w.publish(1, "", queue, BODY)
    return w.take()


_perf_counter, _process_time = time.perf_counter, time.process_time


def clock():
    """(wall, CPU of this process) now: every row reads it at the start and the end of what
    it times, so a row also reports how busy the client process was (all its threads)."""
    return _perf_counter(), _process_time()


def span(t0, t1):
    """(wall seconds, client CPU seconds) between two clock() readings."""
    return t1[0] - t0[0], t1[1] - t0[1]


# =========================================================================== raw rows
def raw_publish(ctx, queue, n):
    """Raw limit: the pre-encoded frames (FrameWriter.publish) sent with socket.sendall in
    1 MiB slices as fast as the broker reads them, then a queue.declare passive round trip."""
    conn = RawConnection(ctx)
    try:
        data = memoryview(encode_all(queue, n, conn.frame_max))
        sendall = conn.sock.sendall
        total = len(data)
        t0 = clock()
        for off in range(0, total, RAW_CHUNK):
            sendall(data[off:off + RAW_CHUNK])
        conn.rpc(aw.QueueDeclare(queue=queue, passive=True), aw.QueueDeclareOk)
        t1 = clock()
        return span(t0, t1)
    finally:
        conn.close()


def raw_confirm(ctx, queue, n):
    """Raw limit in confirm mode: confirm.select, then the pre-encoded frames sent from a
    non-blocking socket while acks are read and parsed (CommandParser) in the same select()
    loop, until the ack for sequence number n arrives.  No per-message Python on the send
    side, one ``for`` over the parsed acks on the receive side."""
    conn = RawConnection(ctx)
    try:
        conn.rpc(aw.ConfirmSelect(), aw.ConfirmSelectOk)
        data = memoryview(encode_all(queue, n, conn.frame_max))
        sock, feed = conn.sock, conn.parser.feed
        total, off, acked = len(data), 0, 0
        BasicAck = aw.BasicAck
        sock.setblocking(False)
        t0 = clock()
        try:
            while acked < n:
                r, w, _ = select.select([sock], [sock] if off < total else [], [])
                if w:
                    try:
                        off += sock.send(data[off:off + RAW_CHUNK])
                    except BlockingIOError:
                        pass
                if r:
                    chunk = sock.recv(RECV_SIZE)
                    if not chunk:
                        raise ConnectionError("broker closed the connection")
                    for cmd in feed(chunk):
                        m = cmd.method
                        if type(m) is BasicAck:
                            if m.delivery_tag > acked:
                                acked = m.delivery_tag
                        elif isinstance(m, (aw.BasicNack, aw.ChannelClose, aw.ConnectionClose)):
                            raise SanityError("raw confirm: broker sent %r" % (m,))
            t1 = clock()
        finally:
            sock.setblocking(True)
        return span(t0, t1)
    finally:
        conn.close()


def raw_consume(ctx, queue, n):
    """Raw limit for consuming: basic.qos(1000) (before the clock), basic.consume, then
    recv(256 KiB) -> CommandParser.feed -> a ``for`` over the commands counting deliveries;
    after each chunk, one basic.ack(multiple=True) for the last tag once >= 100 are unacked."""
    conn = RawConnection(ctx)
    try:
        conn.rpc(aw.BasicQos(prefetch_count=PREFETCH), aw.BasicQosOk)
        sock, feed, recv = conn.sock, conn.parser.feed, conn.sock.recv
        BasicAck = aw.BasicAck
        got = 0
        tag = acked = 0
        t0 = clock()
        conn.send(1, aw.BasicConsume(queue=queue, consumer_tag="raw-bench"))
        while got < n:
            chunk = recv(RECV_SIZE)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            for cmd in feed(chunk):
                if cmd.body is not None:
                    got += 1
                    tag = cmd.method.delivery_tag
            if tag - acked >= ACK_EVERY or (got >= n and tag > acked):
                sock.sendall(BasicAck(delivery_tag=tag, multiple=True).encode(1))
                acked = tag
        t1 = clock()
        if got != n:
            raise SanityError("raw consume received %d messages, expected %d" % (got, n))
        conn.rpc(aw.BasicCancel(consumer_tag="raw-bench"), aw.BasicCancelOk)
        return span(t0, t1)
    finally:
        conn.close()


# =========================================================================== amqwire
def aw_blocking_publish(ctx, queue, n, **options):
    """amqwire blocking: ``with ch.batch(): ch.basic_publish("", queue, body)`` N times,
    then ch.queue_declare(queue, passive=True)."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            publish = ch.basic_publish
            t0 = clock()
            with ch.batch():
                for _ in itertools.repeat(None, n):
                    publish("", queue, BODY)
            ch.queue_declare(queue, passive=True)
            t1 = clock()
    return span(t0, t1)


def aw_blocking_publish_nobatch(ctx, queue, n, **options):
    """amqwire blocking without batch(): ch.basic_publish N times (each written before it
    returns), then ch.queue_declare(queue, passive=True)."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            publish = ch.basic_publish
            t0 = clock()
            for _ in itertools.repeat(None, n):
                publish("", queue, BODY)
            ch.queue_declare(queue, passive=True)
            t1 = clock()
    return span(t0, t1)


def aw_blocking_confirm(ctx, queue, n, **options):
    """amqwire blocking confirmed: confirm_select() (before the clock), then
    ``with ch.batch(): ch.publish_async("", queue, body)`` N times, then
    ch.wait_for_confirms()."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            ch.confirm_select()
            publish = ch.publish_async
            t0 = clock()
            with ch.batch():
                for _ in itertools.repeat(None, n):
                    publish("", queue, BODY)
            ch.wait_for_confirms()
            t1 = clock()
    return span(t0, t1)


def aw_blocking_confirm_batches(ctx, queue, n, **options):
    """amqwire blocking, pattern (a): confirm_select() (before the clock), then batches of
    1000: ``with ch.batch(): ch.publish_async("", queue, body)`` x 1000, then
    ch.wait_for_confirms() before the next batch."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            ch.confirm_select()
            publish, wait = ch.publish_async, ch.wait_for_confirms
            sent = 0
            t0 = clock()
            while sent < n:
                k = min(CONFIRM_WINDOW, n - sent)
                with ch.batch():
                    for _ in itertools.repeat(None, k):
                        publish("", queue, BODY)
                wait()
                sent += k
            t1 = clock()
    return span(t0, t1)


def aw_blocking_confirm_window(ctx, queue, n, **options):
    """amqwire blocking, pattern (b): confirm_select(max_in_flight=1000) (before the clock),
    then ``with ch.batch(): ch.publish_async("", queue, body)`` N times (a publish finding
    1000 unconfirmed writes what the batch holds and waits for the window to half empty),
    then ch.wait_for_confirms()."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            ch.confirm_select(max_in_flight=CONFIRM_WINDOW)
            publish = ch.publish_async
            t0 = clock()
            with ch.batch():
                for _ in itertools.repeat(None, n):
                    publish("", queue, BODY)
            ch.wait_for_confirms()
            t1 = clock()
    return span(t0, t1)


def aw_blocking_confirm_window_nobatch(ctx, queue, n, **options):
    """amqwire blocking, pattern (b) without batch(): each publish_async is written before
    it returns (the I/O thread flushes), waiting while 1000 are unconfirmed."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            ch.confirm_select(max_in_flight=CONFIRM_WINDOW)
            publish = ch.publish_async
            t0 = clock()
            for _ in itertools.repeat(None, n):
                publish("", queue, BODY)
            ch.wait_for_confirms()
            t1 = clock()
    return span(t0, t1)


def aw_blocking_consume(ctx, queue, n, **options):
    """amqwire blocking: basic_qos(1000), ``for msg in ch.consume(queue)``, msg.ack(multiple=
    True) every 100th message and on the N-th; the clock stops after that last ack."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            ch.basic_qos(PREFETCH)
            got = 0
            t0 = clock()
            with ch.consume(queue) as consumer:
                for msg in consumer:
                    got += 1
                    if got % ACK_EVERY == 0 or got == n:
                        msg.ack(multiple=True)
                        if got >= n:
                            break
                t1 = clock()
    if got != n:
        raise SanityError("received %d messages, expected %d" % (got, n))
    return span(t0, t1)


def aw_blocking_consume_each(ctx, queue, n, **options):
    """amqwire blocking, pattern (b): basic_qos(1000), ``for msg in ch.consume(queue)``,
    msg.ack() for each message; the clock stops after the N-th ack."""
    with aw_blocking.connect(ctx.url, **options) as conn:
        with conn.channel() as ch:
            ch.basic_qos(PREFETCH)
            got = 0
            t0 = clock()
            with ch.consume(queue) as consumer:
                for msg in consumer:
                    got += 1
                    msg.ack()
                    if got >= n:
                        break
                t1 = clock()
    if got != n:
        raise SanityError("received %d messages, expected %d" % (got, n))
    return span(t0, t1)


async def _aw_aio_publish(ctx, queue, n, **options):
    async with aw_aio.connect(ctx.url, **options) as conn:
        async with conn.channel() as ch:
            publish = ch.basic_publish
            t0 = clock()
            for _ in itertools.repeat(None, n):
                await publish("", queue, BODY)
            await ch.queue_declare(queue, passive=True)
            t1 = clock()
    return span(t0, t1)


def aw_aio_publish(ctx, queue, n, **options):
    """amqwire asyncio: ``await ch.basic_publish("", queue, body)`` N times, then
    ``await ch.queue_declare(queue, passive=True)``."""
    return asyncio.run(_aw_aio_publish(ctx, queue, n, **options))


async def _aw_aio_confirm(ctx, queue, n, **options):
    async with aw_aio.connect(ctx.url, **options) as conn:
        async with conn.channel() as ch:
            await ch.confirm_select()
            publish = ch.publish_async
            t0 = clock()
            for _ in itertools.repeat(None, n):
                await publish("", queue, BODY)
            await ch.wait_for_confirms()
            t1 = clock()
    return span(t0, t1)


def aw_aio_confirm(ctx, queue, n, **options):
    """amqwire asyncio confirmed: confirm_select() (before the clock), ``await
    ch.publish_async("", queue, body)`` N times (each returns a future, not awaited), then
    ``await ch.wait_for_confirms()``."""
    return asyncio.run(_aw_aio_confirm(ctx, queue, n, **options))


async def _aw_aio_confirm_batches(ctx, queue, n, **options):
    async with aw_aio.connect(ctx.url, **options) as conn:
        async with conn.channel() as ch:
            await ch.confirm_select()
            publish, wait = ch.publish_async, ch.wait_for_confirms
            sent = 0
            t0 = clock()
            while sent < n:
                k = min(CONFIRM_WINDOW, n - sent)
                for _ in itertools.repeat(None, k):
                    await publish("", queue, BODY)
                await wait()
                sent += k
            t1 = clock()
    return span(t0, t1)


def aw_aio_confirm_batches(ctx, queue, n, **options):
    """amqwire asyncio, pattern (a): batches of 1000 ``await ch.publish_async(...)``, then
    ``await ch.wait_for_confirms()`` before the next batch."""
    return asyncio.run(_aw_aio_confirm_batches(ctx, queue, n, **options))


async def _aw_aio_confirm_window(ctx, queue, n, **options):
    async with aw_aio.connect(ctx.url, **options) as conn:
        async with conn.channel() as ch:
            await ch.confirm_select(max_in_flight=CONFIRM_WINDOW)
            publish = ch.publish_async
            t0 = clock()
            for _ in itertools.repeat(None, n):
                await publish("", queue, BODY)
            await ch.wait_for_confirms()
            t1 = clock()
    return span(t0, t1)


def aw_aio_confirm_window(ctx, queue, n, **options):
    """amqwire asyncio, pattern (b): confirm_select(max_in_flight=1000), ``await
    ch.publish_async(...)`` N times (each waits while 1000 are unconfirmed), then ``await
    ch.wait_for_confirms()``."""
    return asyncio.run(_aw_aio_confirm_window(ctx, queue, n, **options))


async def _aw_aio_consume(ctx, queue, n, **options):
    async with aw_aio.connect(ctx.url, **options) as conn:
        async with conn.channel() as ch:
            await ch.basic_qos(PREFETCH)
            got = 0
            t0 = clock()
            async with ch.consume(queue) as consumer:
                async for msg in consumer:
                    got += 1
                    if got % ACK_EVERY == 0 or got == n:
                        await msg.ack(multiple=True)
                        if got >= n:
                            break
                t1 = clock()
    if got != n:
        raise SanityError("received %d messages, expected %d" % (got, n))
    return span(t0, t1)


def aw_aio_consume(ctx, queue, n, **options):
    """amqwire asyncio: ``await ch.basic_qos(1000)``, ``async for msg in consumer``,
    ``await msg.ack(multiple=True)`` every 100th message and on the N-th."""
    return asyncio.run(_aw_aio_consume(ctx, queue, n, **options))


async def _aw_aio_consume_each(ctx, queue, n, **options):
    async with aw_aio.connect(ctx.url, **options) as conn:
        async with conn.channel() as ch:
            await ch.basic_qos(PREFETCH)
            got = 0
            t0 = clock()
            async with ch.consume(queue) as consumer:
                async for msg in consumer:
                    got += 1
                    await msg.ack()
                    if got >= n:
                        break
                t1 = clock()
    if got != n:
        raise SanityError("received %d messages, expected %d" % (got, n))
    return span(t0, t1)


def aw_aio_consume_each(ctx, queue, n, **options):
    """amqwire asyncio, pattern (b): ``async for msg in consumer``, ``await msg.ack()`` for
    each message."""
    return asyncio.run(_aw_aio_consume_each(ctx, queue, n, **options))


# =========================================================================== pika
def _pika_connect(ctx):
    return pika.BlockingConnection(pika.URLParameters(ctx.url))


def pika_publish(ctx, queue, n):
    """pika BlockingConnection: ch.basic_publish("", queue, body) N times (each one written
    to the socket before it returns), then ch.queue_declare(queue, passive=True)."""
    conn = _pika_connect(ctx)
    try:
        ch = conn.channel()
        publish = ch.basic_publish
        t0 = clock()
        for _ in itertools.repeat(None, n):
            publish("", queue, BODY)
        ch.queue_declare(queue, passive=True)
        t1 = clock()
        return span(t0, t1)
    finally:
        conn.close()


def pika_confirm(ctx, queue, n):
    """pika BlockingConnection confirmed: ch.confirm_delivery() (before the clock), then
    ch.basic_publish N times; in confirm mode each call blocks until the broker's ack
    (BlockingConnection has no pipelined confirms: this is its best)."""
    conn = _pika_connect(ctx)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        publish = ch.basic_publish
        t0 = clock()
        for _ in itertools.repeat(None, n):
            publish("", queue, BODY)
        t1 = clock()
        return span(t0, t1)
    finally:
        conn.close()


def pika_consume(ctx, queue, n):
    """pika BlockingConnection: basic_qos(prefetch_count=1000), basic_consume with a callback
    and start_consuming(); the callback counts and calls basic_ack(tag, multiple=True) every
    100th message and on the N-th (where the clock stops), then stop_consuming()."""
    conn = _pika_connect(ctx)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=PREFETCH)
        state = {"got": 0, "t1": None}
        ack = ch.basic_ack

        def on_message(channel, method, properties, body):
            got = state["got"] = state["got"] + 1
            if got % ACK_EVERY == 0 or got == n:
                ack(method.delivery_tag, multiple=True)
                if got >= n:
                    state["t1"] = clock()
                    channel.stop_consuming()

        t0 = clock()
        ch.basic_consume(queue, on_message)
        ch.start_consuming()
        if state["got"] != n:
            raise SanityError("received %d messages, expected %d" % (state["got"], n))
        return span(t0, state["t1"])
    finally:
        conn.close()


# =========================================================================== py-amqp
def _amqp_connect(ctx):
    # py-amqp sets TCP_USER_TIMEOUT to 1 s by default: when the broker stops reading for a
    # second (its flow control on a busy 2-CPU machine) the kernel drops the connection and
    # basic_publish fails with ETIMEDOUT.  0 restores the kernel default (no user timeout).
    settings = {socket.TCP_USER_TIMEOUT: 0} if hasattr(socket, "TCP_USER_TIMEOUT") else None
    conn = amqp.Connection(host="%s:%d" % (ctx.host, ctx.port), userid=ctx.username,
                           password=ctx.password, virtual_host=ctx.vhost,
                           socket_settings=settings)
    conn.connect()
    return conn


def amqp_publish(ctx, queue, n):
    """py-amqp: ch.basic_publish(msg, exchange="", routing_key=queue) N times with one
    amqp.Message reused, then ch.queue_declare(queue, passive=True)."""
    conn = _amqp_connect(ctx)
    try:
        ch = conn.channel()
        msg = amqp.Message(BODY)
        publish = ch.basic_publish
        t0 = clock()
        for _ in itertools.repeat(None, n):
            publish(msg, "", queue)
        ch.queue_declare(queue, passive=True)
        t1 = clock()
        return span(t0, t1)
    finally:
        conn.close()


def amqp_confirm(ctx, queue, n):
    """py-amqp confirmed, its documented way: ch.basic_publish_confirm(msg, "", queue) N
    times (confirm.select on the first call, before the clock here); each call waits for
    the broker's ack."""
    conn = _amqp_connect(ctx)
    try:
        ch = conn.channel()
        msg = amqp.Message(BODY)
        ch.confirm_select()
        ch._confirm_selected = True  # what basic_publish_confirm sets on its first call
        publish = ch.basic_publish_confirm
        t0 = clock()
        for _ in itertools.repeat(None, n):
            publish(msg, "", queue)
        t1 = clock()
        return span(t0, t1)
    finally:
        conn.close()


def amqp_confirm_window(ctx, queue, n):
    """py-amqp confirmed, pipelined (the fastest it offers): ch.confirm_select(), a
    'basic_ack' handler in ch.events counting acked sequence numbers (multiple aware),
    then windows of 1000 plain ch.basic_publish calls each followed by
    conn.drain_events() until the window is acked."""
    conn = _amqp_connect(ctx)
    try:
        ch = conn.channel()
        msg = amqp.Message(BODY)
        ch.confirm_select()
        state = {"acked": 0, "nacked": 0}

        def on_ack(delivery_tag, multiple):
            if delivery_tag > state["acked"]:
                state["acked"] = delivery_tag

        def on_nack(delivery_tag, multiple):
            state["nacked"] += 1

        ch.events["basic_ack"].add(on_ack)
        ch.events["basic_nack"].add(on_nack)
        publish, drain = ch.basic_publish, conn.drain_events
        sent = 0
        t0 = clock()
        while sent < n:
            k = min(CONFIRM_WINDOW, n - sent)
            for _ in itertools.repeat(None, k):
                publish(msg, "", queue)
            sent += k
            while state["acked"] < sent:
                drain(timeout=30)
                if state["nacked"]:
                    raise SanityError("py-amqp: %d nacks" % state["nacked"])
        t1 = clock()
        return span(t0, t1)
    finally:
        conn.close()


def amqp_consume(ctx, queue, n):
    """py-amqp: basic_qos(0, 1000, False), basic_consume(queue, callback=...), then
    conn.drain_events() until N received; the callback calls basic_ack(tag, multiple=True)
    every 100th message and on the N-th (where the clock stops)."""
    conn = _amqp_connect(ctx)
    try:
        ch = conn.channel()
        ch.basic_qos(0, PREFETCH, False)
        state = {"got": 0, "t1": None}
        ack = ch.basic_ack

        def on_message(msg):
            got = state["got"] = state["got"] + 1
            if got % ACK_EVERY == 0 or got == n:
                ack(msg.delivery_tag, multiple=True)
                if got >= n:
                    state["t1"] = clock()

        drain = conn.drain_events
        t0 = clock()
        tag = ch.basic_consume(queue, callback=on_message)
        while state["got"] < n:
            drain(timeout=30)
        ch.basic_cancel(tag)
        if state["got"] != n:
            raise SanityError("received %d messages, expected %d" % (state["got"], n))
        return span(t0, state["t1"])
    finally:
        conn.close()


# =========================================================================== aio-pika
async def _aiopika_publish(ctx, queue, n):
    conn = await aio_pika.connect(ctx.url)
    try:
        ch = await conn.channel(publisher_confirms=False)
        publish = ch.default_exchange.publish
        msg = aio_pika.Message(BODY)
        t0 = clock()
        for _ in itertools.repeat(None, n):
            await publish(msg, queue, mandatory=False)
        await ch.declare_queue(queue, passive=True)
        t1 = clock()
        return span(t0, t1)
    finally:
        await conn.close()


def aiopika_publish(ctx, queue, n):
    """aio-pika: channel(publisher_confirms=False), ``await
    ch.default_exchange.publish(msg, queue, mandatory=False)`` N times with one Message
    reused, then ``await ch.declare_queue(queue, passive=True)``."""
    return asyncio.run(_aiopika_publish(ctx, queue, n))


async def _aiopika_confirm(ctx, queue, n):
    conn = await aio_pika.connect(ctx.url)
    try:
        ch = await conn.channel(publisher_confirms=True)
        publish = ch.default_exchange.publish
        msg = aio_pika.Message(BODY)
        gather = asyncio.gather
        sent = 0
        t0 = clock()
        while sent < n:
            k = min(CONFIRM_WINDOW, n - sent)
            await gather(*[publish(msg, queue, mandatory=False) for _ in range(k)])
            sent += k
        t1 = clock()
        return span(t0, t1)
    finally:
        await conn.close()


def aiopika_confirm(ctx, queue, n):
    """aio-pika confirmed: channel(publisher_confirms=True), then windows of 1000
    publish coroutines in flight: ``await asyncio.gather(*[publish(...) x 1000])``."""
    return asyncio.run(_aiopika_confirm(ctx, queue, n))


async def _aiopika_consume(ctx, queue, n):
    conn = await aio_pika.connect(ctx.url)
    try:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=PREFETCH)
        q = await ch.declare_queue(queue, passive=True)
        done = asyncio.get_running_loop().create_future()
        state = {"got": 0}

        async def on_message(message):
            got = state["got"] = state["got"] + 1
            if got % ACK_EVERY == 0 or got == n:
                await message.ack(multiple=True)
                if got >= n and not done.done():
                    done.set_result(clock())

        t0 = clock()
        tag = await q.consume(on_message)
        t1 = await done
        await q.cancel(tag)
        if state["got"] != n:
            raise SanityError("received %d messages, expected %d" % (state["got"], n))
        return span(t0, t1)
    finally:
        await conn.close()


def aiopika_consume(ctx, queue, n):
    """aio-pika: ch.set_qos(prefetch_count=1000), ``await queue.consume(callback)``; the
    coroutine callback counts and ``await message.ack(multiple=True)`` every 100th message
    and on the N-th (where the clock stops)."""
    return asyncio.run(_aiopika_consume(ctx, queue, n))


async def _aiopika_consume_iter(ctx, queue, n):
    conn = await aio_pika.connect(ctx.url)
    try:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=PREFETCH)
        q = await ch.declare_queue(queue, passive=True)
        got = 0
        t0 = clock()
        async with q.iterator() as it:
            async for message in it:
                got += 1
                if got % ACK_EVERY == 0 or got == n:
                    await message.ack(multiple=True)
                    if got >= n:
                        break
            t1 = clock()
        if got != n:
            raise SanityError("received %d messages, expected %d" % (got, n))
        return span(t0, t1)
    finally:
        await conn.close()


def aiopika_consume_iter(ctx, queue, n):
    """aio-pika: ch.set_qos(prefetch_count=1000), ``async for message in
    queue.iterator()``, ``await message.ack(multiple=True)`` every 100th and the N-th."""
    return asyncio.run(_aiopika_consume_iter(ctx, queue, n))


# =========================================================================== compiled
def compiled_row(lib, case):
    """A compiled anchor (bench/anchors/, built by compiled_anchors) running one case in a
    child process that times the phase itself; the CPU is the child's getrusage."""

    phase, ack_every = ANCHOR_PHASES[case]

    def run(ctx, queue, n):
        binary = compiled_anchors.built(lib).binary
        if binary is None:
            raise RuntimeError("%s is not built: %s" % (lib, compiled_anchors.built(lib).version))
        wall, cpu, done = compiled_anchors.run_phase(
            binary, phase, host=ctx.host, port=ctx.port, username=ctx.username,
            password=ctx.password, vhost=ctx.vhost, queue=queue, n=n, prefetch=PREFETCH,
            ack_every=ack_every, window=CONFIRM_WINDOW, timeout=run_time_limit(n))
        if done != n:
            raise SanityError("%s %s counted %d of %d messages" % (lib, case, done, n))
        return wall, cpu

    run.__name__ = "%s_%s" % (lib.replace("-", "_"), case.replace("-", "_"))
    return run


def mark_unbuildable(rows):
    """Build the compiled anchors the selected rows need; a row whose toolchain or library is
    missing becomes n/a with the one-line reason.  Returns {lib: version or reason}."""
    seen = {}
    for r in rows:
        if r.lib in COMPILED:
            b = compiled_anchors.built(r.lib)
            seen[r.lib] = b.version if b.binary else "skipped: " + b.version
            if b.binary is None:
                r.na = "n/a: %s skipped: %s" % (r.lib, b.version)
    return seen


def with_metrics(fn):
    """The same amqwire row with ``connect(..., metrics=InMemoryMetrics())``: the cost of
    counting, measured beside the row without it (the overhead is row / that row)."""

    def run(ctx, queue, n):
        # imported here: a client without metrics (an older amqwire measured for a
        # before/after comparison) fails this row only
        from amqwire.client.metrics import InMemoryMetrics

        return fn(ctx, queue, n, metrics=InMemoryMetrics())

    run.__name__ = fn.__name__ + "_metrics"
    run.__doc__ = (fn.__doc__ or "") + " With an InMemoryMetrics collector."
    return run


def with_tracing(fn):
    """The same amqwire row with ``connect(..., tracing=provider)``: OpenTelemetry's SDK
    TracerProvider, a SimpleSpanProcessor and an exporter that drops the spans.  So the row
    pays for what amqwire does (a span per publish or delivery, the traceparent written into
    or read from the headers) and for the SDK recording each span, not for exporting it."""

    def run(ctx, queue, n):
        # imported here: an amqwire without tracing fails this row only (no SDK: n/a, see tracing_na)
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

        class Dropped(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Dropped()))
        return fn(ctx, queue, n, tracing=provider)

    run.__name__ = fn.__name__ + "_tracing"
    run.__doc__ = (fn.__doc__ or "") + " With OpenTelemetry tracing (SDK, spans dropped)."
    return run


def with_aa_copies(rows):
    """Each amqwire row followed by an identical copy (an A/A test): whatever separates the
    two is noise, which bounds the differences the run can resolve (e.g. a +metrics row)."""
    out = []
    for r in rows:
        out.append(r)
        if r.lib == "amqwire":
            out.append(Row(r.case, r.label + " (A/A copy)", r.lib, r.fn, info=True,
                           note="info: the row above again", na=r.na))
    return out


# =========================================================================== rows
class Row:
    """One benchmark row: a client doing one case; ``fn(ctx, queue, n) -> seconds``."""

    def __init__(self, case, label, lib, fn, info=False, note="", na=None):
        self.case = case
        self.label = label
        self.lib = lib  # "raw", "amqwire", one of ANCHORS or one of COMPILED
        self.fn = fn
        self.info = info  # informational: no target, not an anchor
        self.note = note
        self.na = na  # reason the row cannot run (amqwire.client missing)
        self.error = None  # why runs of the row failed
        self.failed_runs = 0
        self.dead = False  # no further runs (warm-up failed or a run timed out)
        self.rates = []  # msg/s, one per timed run
        self.secs = []
        self.cpu = []  # client process CPU time / wall time, one per timed run
        self.cpu_us = []  # client process CPU microseconds per message, one per timed run

    @property
    def key(self):
        return "%s: %s" % (self.case, self.label)

    @property
    def is_anchor(self):
        return self.lib in ANCHORS and not self.info


def tracing_na():
    """Why the +tracing rows cannot run, in one line (None: they can)."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return "n/a: opentelemetry-sdk is not installed (pip install opentelemetry-sdk)"
    return None


def build_rows():
    na = None if AW_CLIENT_ERROR is None else "n/a: amqwire.client does not import (see header)"
    traced_na = na or tracing_na()
    R = Row
    return [
        R("publish", "raw socket (limit)", "raw", raw_publish,
          note="pre-encoded FrameWriter frames, sendall 1 MiB slices"),
        R("publish", "amqwire blocking", "amqwire", aw_blocking_publish, na=na,
          note="with ch.batch(): basic_publish"),
        R("publish", "amqwire asyncio", "amqwire", aw_aio_publish, na=na,
          note="await ch.basic_publish"),
        R("publish", "amqwire blocking +metrics", "amqwire", with_metrics(aw_blocking_publish), info=True, na=na,
          note="info: as amqwire blocking, metrics=InMemoryMetrics()"),
        R("publish", "amqwire asyncio +metrics", "amqwire", with_metrics(aw_aio_publish), info=True, na=na,
          note="info: as amqwire asyncio, metrics=InMemoryMetrics()"),
        R("publish", "amqwire blocking +tracing", "amqwire", with_tracing(aw_blocking_publish), info=True, na=traced_na,
          note="info: as amqwire blocking, tracing=an SDK TracerProvider"),
        R("publish", "amqwire asyncio +tracing", "amqwire", with_tracing(aw_aio_publish), info=True, na=traced_na,
          note="info: as amqwire asyncio, tracing=an SDK TracerProvider"),
        R("publish", "amqwire blocking, no batch", "amqwire", aw_blocking_publish_nobatch,
          info=True, na=na, note="info: basic_publish without batch()"),
        R("publish", "pika", "pika", pika_publish, note="BlockingConnection.basic_publish"),
        R("publish", "py-amqp", "py-amqp", amqp_publish, note="basic_publish, Message reused"),
        R("publish", "aio-pika", "aio-pika", aiopika_publish,
          note="await exchange.publish, publisher_confirms=False"),
        R("publish", "rabbitmq-c (C)", "rabbitmq-c", compiled_row("rabbitmq-c", "publish"),
          note="amqp_basic_publish; amqp_queue_declare passive"),
        R("publish", "amqp091-go (Go)", "amqp091-go", compiled_row("amqp091-go", "publish"),
          note="Channel.Publish; QueueDeclarePassive"),

        R("confirm", "raw socket (limit)", "raw", raw_confirm, info=True,
          note="info: pre-encoded frames, acks read in the same select loop"),
        R("confirm", "amqwire blocking", "amqwire", aw_blocking_confirm, na=na,
          note="batch(): publish_async; wait_for_confirms"),
        R("confirm", "amqwire asyncio", "amqwire", aw_aio_confirm, na=na,
          note="await publish_async; wait_for_confirms"),
        R("confirm", "amqwire blocking +metrics", "amqwire", with_metrics(aw_blocking_confirm), info=True, na=na,
          note="info: as amqwire blocking, metrics=InMemoryMetrics()"),
        R("confirm", "amqwire asyncio +metrics", "amqwire", with_metrics(aw_aio_confirm), info=True, na=na,
          note="info: as amqwire asyncio, metrics=InMemoryMetrics()"),
        R("confirm", "amqwire blocking +tracing", "amqwire", with_tracing(aw_blocking_confirm), info=True, na=traced_na,
          note="info: as amqwire blocking, tracing=an SDK TracerProvider"),
        R("confirm", "amqwire asyncio +tracing", "amqwire", with_tracing(aw_aio_confirm), info=True, na=traced_na,
          note="info: as amqwire asyncio, tracing=an SDK TracerProvider"),
        R("confirm", "pika", "pika", pika_confirm,
          note="confirm_delivery + basic_publish (blocks per message)"),
        R("confirm", "py-amqp", "py-amqp", amqp_confirm,
          note="basic_publish_confirm (waits per message)"),
        R("confirm", "py-amqp, windows", "py-amqp", amqp_confirm_window,
          note="confirm_select + events['basic_ack'], windows of %d" % CONFIRM_WINDOW),
        R("confirm", "aio-pika", "aio-pika", aiopika_confirm,
          note="gather() windows of %d publishes" % CONFIRM_WINDOW),
        R("confirm", "rabbitmq-c (C)", "rabbitmq-c", compiled_row("rabbitmq-c", "confirm"),
          note="batches of %d; amqp_simple_wait_frame for basic.ack" % CONFIRM_WINDOW),
        R("confirm", "amqp091-go (Go)", "amqp091-go", compiled_row("amqp091-go", "confirm"),
          note="batches of %d; NotifyPublish" % CONFIRM_WINDOW),

        R("confirm-batch", "amqwire blocking", "amqwire", aw_blocking_confirm_batches, na=na,
          note="per batch: batch(): publish_async x %d; wait_for_confirms" % CONFIRM_WINDOW),
        R("confirm-batch", "amqwire asyncio", "amqwire", aw_aio_confirm_batches, na=na,
          note="per batch: await publish_async x %d; wait_for_confirms" % CONFIRM_WINDOW),
        R("confirm-batch", "rabbitmq-c (C)", "rabbitmq-c", compiled_row("rabbitmq-c", "confirm-batch"),
          note="batches of %d; amqp_simple_wait_frame for basic.ack" % CONFIRM_WINDOW),

        R("confirm-window", "amqwire blocking", "amqwire", aw_blocking_confirm_window, na=na,
          note="confirm_select(max_in_flight=%d); batch(): publish_async" % CONFIRM_WINDOW),
        R("confirm-window", "amqwire blocking, no batch", "amqwire", aw_blocking_confirm_window_nobatch,
          info=True, na=na, note="info: publish_async without batch()"),
        R("confirm-window", "amqwire asyncio", "amqwire", aw_aio_confirm_window, na=na,
          note="confirm_select(max_in_flight=%d); await publish_async" % CONFIRM_WINDOW),
        R("confirm-window", "rabbitmq-c (C)", "rabbitmq-c", compiled_row("rabbitmq-c", "confirm-window"),
          note="publish while < %d unconfirmed, else read acks" % CONFIRM_WINDOW),

        R("consume", "raw socket (limit)", "raw", raw_consume,
          note="recv + CommandParser.feed, ack per chunk"),
        R("consume", "amqwire blocking", "amqwire", aw_blocking_consume, na=na,
          note="for msg in ch.consume(q); msg.ack(multiple=True)"),
        R("consume", "amqwire asyncio", "amqwire", aw_aio_consume, na=na,
          note="async for msg in consumer; await msg.ack(multiple=True)"),
        R("consume", "amqwire blocking +metrics", "amqwire", with_metrics(aw_blocking_consume), info=True, na=na,
          note="info: as amqwire blocking, metrics=InMemoryMetrics()"),
        R("consume", "amqwire asyncio +metrics", "amqwire", with_metrics(aw_aio_consume), info=True, na=na,
          note="info: as amqwire asyncio, metrics=InMemoryMetrics()"),
        R("consume", "amqwire blocking +tracing", "amqwire", with_tracing(aw_blocking_consume), info=True, na=traced_na,
          note="info: as amqwire blocking, tracing=an SDK TracerProvider"),
        R("consume", "amqwire asyncio +tracing", "amqwire", with_tracing(aw_aio_consume), info=True, na=traced_na,
          note="info: as amqwire asyncio, tracing=an SDK TracerProvider"),
        R("consume", "pika", "pika", pika_consume, note="basic_consume callback, start_consuming"),
        R("consume", "py-amqp", "py-amqp", amqp_consume, note="basic_consume callback, drain_events"),
        R("consume", "aio-pika", "aio-pika", aiopika_consume, note="queue.consume(callback)"),
        R("consume", "aio-pika, iterator", "aio-pika", aiopika_consume_iter,
          note="async for in queue.iterator()"),
        R("consume", "rabbitmq-c (C)", "rabbitmq-c", compiled_row("rabbitmq-c", "consume"),
          note="amqp_consume_message; amqp_basic_ack multiple"),
        R("consume", "amqp091-go (Go)", "amqp091-go", compiled_row("amqp091-go", "consume"),
          note="range over Consume's channel; Delivery.Ack(true)"),

        R("consume-each", "amqwire blocking", "amqwire", aw_blocking_consume_each, na=na,
          note="for msg in ch.consume(q); msg.ack()"),
        R("consume-each", "amqwire asyncio", "amqwire", aw_aio_consume_each, na=na,
          note="async for msg in consumer; await msg.ack()"),
        R("consume-each", "rabbitmq-c (C)", "rabbitmq-c", compiled_row("rabbitmq-c", "consume-each"),
          note="amqp_consume_message; amqp_basic_ack per delivery"),
    ]


# =========================================================================== running
_queue_counter = itertools.count(1)


def fresh_queue(case):
    return "amqwire-bench-%s-%d-%d" % (case, os.getpid(), next(_queue_counter))


def run_time_limit(n):
    """Generous: 60 s + N / 500 msg/s (the slowest client measured does ~3,000 msg/s)."""
    return 60.0 + n / 500.0


def _thread_stack(th):
    frame = sys._current_frames().get(th.ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"


def execute(row, ctx, admin, n, no_gc, label):
    """One run of ``row`` with n messages on a fresh queue; returns (wall s, client CPU s)
    of the timed part."""
    queue = fresh_queue(row.case)
    admin.declare(queue)
    try:
        if row.case.startswith("consume"):
            admin.prefill(queue, n)
        box = {}

        def target():
            gc_was = gc.isenabled()
            if no_gc:
                gc.disable()
            try:
                box["t"] = row.fn(ctx, queue, n)
            except BaseException as exc:  # reported by the main thread
                box["exc"] = exc
                box["tb"] = traceback.format_exc()
            finally:
                if gc_was:
                    gc.enable()

        gc.collect()
        th = threading.Thread(target=target, name="bench " + row.key, daemon=True)
        start = time.monotonic()
        limit = run_time_limit(n)
        th.start()
        while True:
            th.join(PROGRESS_EVERY)
            if not th.is_alive():
                break
            el = time.monotonic() - start
            if el > limit:
                sys.stderr.write("  !! %s: no result after %.0f s, abandoning the run; worker "
                                 "stack:\n%s" % (label, el, _thread_stack(th)))
                raise RunTimeout("no result after %.0f s (time limit)" % el)
            try:
                depth = admin.count(queue)
                what = ("%s of %s published" % (format(depth, ","), format(n, ","))
                        if not row.case.startswith("consume") else "%s of %s still ready in the queue"
                        % (format(depth, ","), format(n, ",")))
            except Exception as exc:  # progress only
                what = "queue depth unknown (%s)" % exc
            sys.stderr.write("  .. %s: %.0f s, %s\n" % (label, el, what))
        finish = time.monotonic()
        if ALARMS:
            time.sleep(AlarmWatch.PERIOD + 0.05)  # an alarm raised at the very end is seen too
        alarm = ALARMS.overlaps(start - 0.5, finish + AlarmWatch.PERIOD) if ALARMS else None
        if alarm is not None:
            raise BrokerAlarm("the broker blocked publishers during the run (%s)" % alarm)
        if "exc" in box:
            sys.stderr.write("  !! %s failed:\n%s" % (label, box["tb"]))
            raise box["exc"]
        wall, cpu = box["t"]
        # checks: the broker holds what the client claims to have done
        if row.case.startswith("consume"):
            wait_count(admin, queue, 0, what=row.key + " (all consumed and acked)", timeout=5)
        else:
            wait_count(admin, queue, n, what=row.key, timeout=10)
        return wall, cpu
    finally:
        try:
            admin.delete(queue)
        except Exception:
            pass


def wait_alarm_cleared(limit=600.0):
    end = time.monotonic() + limit
    while ALARMS and ALARMS.overlaps(time.monotonic(), time.monotonic()) and time.monotonic() < end:
        time.sleep(0.5)


def execute_retrying(row, ctx, admin, n, no_gc, label, attempts=3):
    """execute(), done again (up to ``attempts`` times) when a broker alarm spoiled the run."""
    for attempt in range(1, attempts + 1):
        try:
            return execute(row, ctx, admin, n, no_gc, label)
        except BrokerAlarm as exc:
            if attempt == attempts:
                raise
            sys.stderr.write("  !! %s: %s; waiting for the alarm to clear, then again\n"
                             % (label, exc))
            wait_alarm_cleared()
            time.sleep(1.0)


def run_rows(rows, ctx, admin, count, repeats, warm_n, no_gc, settle):
    """Warm-up/sanity run per row, then the repeats round-robin within each case."""
    for r in rows:
        if r.na:
            continue
        label = "%s (warm-up, %s msgs)" % (r.key, format(warm_n, ","))
        sys.stderr.write("  -- %s\n" % label)
        try:
            execute_retrying(r, ctx, admin, warm_n, no_gc, label)
        except Exception as exc:
            r.error = "warm-up failed: %s: %s" % (type(exc).__name__, exc)
            r.dead = True
            sys.stderr.write("  !! %s: %s\n" % (r.key, r.error))
        time.sleep(settle)
    for case in CASE_ORDER:
        live = [r for r in rows if r.case == case]
        if not live:
            continue
        for rep in range(repeats):
            for r in live:
                if r.na or r.dead:
                    continue
                label = "%s run %d/%d" % (r.key, rep + 1, repeats)
                try:
                    secs, cpu = execute_retrying(r, ctx, admin, count, no_gc, label)
                except Exception as exc:
                    # recorded; the row's other repeats still run (a timeout ends the row:
                    # its worker thread may still hold the broker)
                    err = "run %d: %s: %s" % (rep + 1, type(exc).__name__, exc)
                    r.error = err if r.error is None else r.error + "; " + err
                    r.failed_runs += 1
                    if isinstance(exc, RunTimeout):
                        r.dead = True
                    sys.stderr.write("  !! %s: %s\n" % (label, err))
                    try:  # is the set-up connection still usable?
                        admin.rpc(aw.BasicQos(prefetch_count=0), aw.BasicQosOk)
                    except Exception:
                        admin = reconnect_admin(ctx, admin)
                    continue
                r.secs.append(secs)
                r.rates.append(count / secs)
                r.cpu.append(cpu / secs)
                r.cpu_us.append(1e6 * cpu / count)
                sys.stderr.write("  ok %s: %s msg/s (%.2f s, client CPU %.0f%%)\n"
                                 % (label, format(round(count / secs), ","), secs, 100 * cpu / secs))
                time.sleep(settle)
        yield case, live, admin


def reconnect_admin(ctx, admin):
    try:
        admin.close()
    except Exception:
        pass
    return RawConnection(ctx, product="amqwire client_bench (set-up)")


# =========================================================================== output
def _fmt_rate(x):
    return "n/a" if x is None else format(round(x), ",")


def _fmt_pct(a, b):
    return "n/a" if a is None or b is None else "%.0f%%" % (100.0 * a / b)


def _fmt_x(a, b):
    if a is None or b is None:
        return "n/a"
    x = a / b
    return "%.1fx" % x if x >= 10 else "%.2fx" % x


def stats(r):
    if not r.rates:
        return None, None
    return max(r.rates), statistics.median(r.rates)


def case_refs(rows):
    """(raw best, raw median), (fastest anchor best, median, its label) for a case."""
    raw = next((r for r in rows if r.lib == "raw" and r.rates), None)
    rb, rm = stats(raw) if raw else (None, None)
    anchors = [r for r in rows if r.is_anchor and r.rates]
    if anchors:
        ab = max(max(r.rates) for r in anchors)
        am = max(statistics.median(r.rates) for r in anchors)
        al = max(anchors, key=lambda r: max(r.rates)).label
    else:
        ab = am = al = None
    return (rb, rm), (ab, am, al)


def c_ref(rows):
    """(best, median) of the case's rabbitmq-c row, or (None, None) when it did not run."""
    r = next((x for x in rows if x.lib == C_ANCHOR and not x.info and x.rates), None)
    return stats(r) if r else (None, None)


def c_cpu_us(rows):
    """The median CPU microseconds per message of the case's rabbitmq-c row, or None."""
    r = next((x for x in rows if x.lib == C_ANCHOR and not x.info and x.cpu_us), None)
    return statistics.median(r.cpu_us) if r else None


def unconfirmed_ref(all_rows, label):
    r = next((x for x in all_rows if x.case == "publish" and x.label == label and x.rates), None)
    return stats(r) if r else (None, None)


def print_case(case, rows, all_rows, count, repeats):
    """One table per case.  ``cpu`` is the client process's CPU time over the wall time of
    the timed part (median of the runs): near 100% the client is the bottleneck, well below
    it the client waits for the broker (which shares this machine).  ``us/msg`` is that CPU
    time per message (median): what the client costs, whoever is the bottleneck."""
    (rb, rm), (ab, am, al) = case_refs(rows)
    cb_, cm = c_ref(rows)
    confirm = case.startswith("confirm")
    print()
    print(CASE_TITLES[case] + "   %s msgs x %d" % (format(count, ","), repeats))
    w = max(28, max(len(r.label) for r in rows) + 1)
    fmt = "  %-*s %11s %12s %12s %13s %11s" + (" %13s" if confirm else "") + " %5s %7s  %s"
    hdr = fmt % ((w, "row", "best msg/s", "median msg/s", "% raw b/m", "x anchor b/m", "x C b/m")
                 + (("% unconf b/m",) if confirm else ()) + ("cpu", "us/msg", "how"))
    print(hdr)
    print("  " + "-" * (len(hdr) - 2))
    for r in rows:
        if r.na or (r.error and not r.rates):
            why = r.na or ("FAILED: " + r.error)
            print(fmt % ((w, r.label, "n/a", "n/a", "n/a", "n/a", "n/a") + (("n/a",) if confirm else ())
                         + ("n/a", "n/a", why)))
            continue
        b, m = stats(r)
        pct = "-" if r.lib == "raw" else "%s/%s" % (_fmt_pct(b, rb), _fmt_pct(m, rm))
        xa = "%s/%s" % (_fmt_x(b, ab), _fmt_x(m, am))
        xc = "%s/%s" % (_fmt_x(b, cb_), _fmt_x(m, cm))
        extra = ()
        if confirm:
            if r.lib == "amqwire":
                ub, um = unconfirmed_ref(all_rows, r.label)
                extra = ("%s/%s" % (_fmt_pct(b, ub), _fmt_pct(m, um)),)
            else:
                extra = ("-",)
        cpu = "%.0f%%" % (100 * statistics.median(r.cpu)) if r.cpu else "n/a"
        cpu_us = "%.1f" % statistics.median(r.cpu_us) if r.cpu_us else "n/a"
        marks = []
        if r.is_anchor and al == r.label:
            marks.append("<- fastest anchor")
        if r.error:
            marks.append("(%d of the runs FAILED: %s)" % (r.failed_runs, r.error))
        print(fmt % ((w, r.label, _fmt_rate(b), _fmt_rate(m), pct, xa, xc) + extra
                     + (cpu, cpu_us, r.note + ("  " + "  ".join(marks) if marks else ""))))


def _verdict(value_b, value_m, need, desc, fmt):
    if value_b is None:
        return ("n/a", desc, "not measured", None)
    ok = value_b >= need
    detail = "best %s, median %s" % (fmt(value_b), fmt(value_m))
    if value_m is not None and (value_m >= need) != ok:
        detail += "  (borderline: the median %s)" % ("meets it" if value_m >= need else "misses it")
    return ("met" if ok else "MISSED", desc, detail, value_b)


def target_lines(all_rows):
    by = {(r.case, r.label): r for r in all_rows}
    cases = {c: [r for r in all_rows if r.case == c] for c in CASE_ORDER}
    pct = lambda v: "%.0f%%" % (100 * v)  # noqa: E731
    xf = lambda v: "%.2fx" % v  # noqa: E731
    out = []
    for t in ("blocking", "asyncio"):
        label = "amqwire " + t
        # publish
        r = by.get(("publish", label))
        (rb, rm), (ab, am, al) = case_refs(cases["publish"])
        b, m = stats(r) if r else (None, None)
        out.append(_verdict(b / rb if b and rb else None, m / rm if m and rm else None, 0.90,
                            "publish, %s >= 90%% of the raw socket" % label, pct))
        out.append(_verdict(b / ab if b and ab else None, m / am if m and am else None, 2.0,
                            "publish, %s >= 2x the fastest anchor (%s)" % (label, al or "none measured"), xf))
        # confirm
        r = by.get(("confirm", label))
        b, m = stats(r) if r else (None, None)
        ub, um = unconfirmed_ref(all_rows, label)
        out.append(_verdict(b / ub if b and ub else None, m / um if m and um else None, 0.80,
                            "confirmed publish, %s >= 80%% of its unconfirmed rate" % label, pct))
        # consume
        r = by.get(("consume", label))
        (rb, rm), (ab, am, al) = case_refs(cases["consume"])
        b, m = stats(r) if r else (None, None)
        out.append(_verdict(b / ab if b and ab else None, m / am if m and am else None, 2.0,
                            "consume, %s >= 2x the fastest anchor (%s)" % (label, al or "none measured"), xf))
        # level with the C client (issue 29), where it ran, in each pattern (issue 38)
        for case in ("confirm", "confirm-batch", "confirm-window", "consume", "consume-each"):
            r = by.get((case, label))
            if r is None:
                continue
            b, m = stats(r)
            cb_, cm = c_ref(cases[case])
            if cb_ is not None:
                out.append(_verdict(b / cb_ if b else None, m / cm if m and cm else None, 1.0,
                                    "%s, %s >= 1.00x rabbitmq-c" % (CASE_NAMES[case], label), xf))
            c_cpu = c_cpu_us(cases[case])
            if t == "blocking" and c_cpu is not None:
                mine = statistics.median(r.cpu_us) if r.cpu_us else None
                desc = "%s, %s CPU per message <= rabbitmq-c's" % (CASE_NAMES[case], label)
                if mine is None:
                    out.append(("n/a", desc, "not measured", None))
                else:
                    out.append(("met" if mine <= c_cpu else "MISSED", desc,
                                "%.2f us against %.2f us (medians)" % (mine, c_cpu), c_cpu / mine))
    # the asyncio transport within 10% of the blocking one, each case
    for case in CASE_ORDER:
        a, bl = by.get((case, "amqwire asyncio")), by.get((case, "amqwire blocking"))
        (ab_, am_), (bb, bm) = (stats(a) if a else (None, None)), (stats(bl) if bl else (None, None))
        if ab_ is not None and bb is not None:
            out.append(_verdict(ab_ / bb, am_ / bm, 0.90,
                                "%s, amqwire asyncio >= 90%% of amqwire blocking" % CASE_NAMES[case], pct))
    return out


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        return "load average: %.2f, %.2f, %.2f" % os.getloadavg()


def lib_versions():
    out = {"python": platform.python_version() + " (" + platform.python_implementation() + ")"}
    for dist, label in (("pika", "pika"), ("amqp", "py-amqp"), ("aio-pika", "aio-pika"),
                        ("aiormq", "aiormq"), ("amqwire", "amqwire")):
        v = None
        if _dist_version is not None:
            try:
                v = _dist_version(dist)
            except Exception:
                v = None
        out[label] = v or "?"
    out["amqwire"] += " (codec at %s; client: %s)" % (
        os.path.dirname(aw.__file__),
        "OK" if AW_CLIENT_ERROR is None else "n/a, " + AW_CLIENT_ERROR)
    return out


QUICK_NOTE = ("--quick is a smoke run (few, short repeats on a shared machine): the targets below are informational, not a verdict")

def _charts():
    try:
        from bench import charts
    except ImportError:  # run as a script: bench/ is sys.path[0]
        import charts
    return charts


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.client_bench",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=None,
                    help="messages per run (default 200000, --quick 5000)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 3, --quick 1)")
    ap.add_argument("--quick", action="store_true", help="5,000 messages, 1 repeat (CI smoke)")
    ap.add_argument("--only", metavar="SUBSTR", help="run only rows whose 'case: label' contains "
                    "one of these comma-separated substrings (e.g. 'consume', 'pika', 'publish: raw'); "
                    "'=case: label' matches that row only (e.g. '=consume: amqwire blocking', without +metrics)")
    ap.add_argument("--url", default=os.environ.get("AMQP_URL") or DEFAULT_URL,
                    help="broker URL (default: $AMQP_URL or %s)" % DEFAULT_URL)
    ap.add_argument("--no-gc", action="store_true", help="disable gc while timing")
    ap.add_argument("--aa", action="store_true",
                    help="add an identical copy of each amqwire row (info), run beside it: the spread between "
                         "two rows doing the same thing is the benchmark's resolution on this machine")
    _charts().add_output_options(ap)
    args = ap.parse_args(argv)
    count = args.count or (5000 if args.quick else 200000)
    repeats = args.repeats or (1 if args.quick else 3)
    warm_n = min(count, 500 if args.quick else 2000)
    settle = 0.1 if args.quick else 0.5
    ctx = Ctx(args.url)

    load0 = os.getloadavg()
    up0 = uptime()
    versions = lib_versions()
    admin = RawConnection(ctx, product="amqwire client_bench (set-up)")
    global ALARMS
    ALARMS = AlarmWatch(ctx)
    sp = admin.server_properties
    broker = "%s %s" % (sp.get("product", "?"), sp.get("version", "?"))
    if isinstance(broker, bytes):
        broker = broker.decode()

    print("amqwire client benchmark  %s" % time.strftime("%Y-%m-%d %H:%M:%S"))
    print("  machine : %s, %s, %d CPUs" % (platform.node(), platform.machine(), os.cpu_count() or 0))
    print("  uptime  : %s" % up0)
    if load0[0] > 0.5 * (os.cpu_count() or 1):
        print("  WARNING : the machine is busy (1-min load %.2f on %d CPUs): rates are noisy, "
              "ratios may be off" % (load0[0], os.cpu_count() or 0))
    if args.quick:
        print("  NOTE    : " + QUICK_NOTE)
    print("  broker  : %s at %s (client and broker share this machine)" % (broker, ctx.safe_url()))
    for k in ("python", "amqwire", "pika", "py-amqp", "aio-pika", "aiormq"):
        print("  %-8s: %s" % (k, versions[k]))
    print("  workload: %s messages per run, 100 B bodies, no properties, default exchange, fresh "
          "non-durable queue per run; %d timed runs per row (+1 warm-up of %s)"
          % (format(count, ","), repeats, format(warm_n, ","), ))
    print("  timing  : perf_counter around the client calls only; gc %s while timing; "
          "best = highest msg/s, median of the runs" % ("disabled" if args.no_gc else "enabled"))
    print("  columns : % raw = row / raw socket, x anchor = row / fastest of pika, py-amqp, "
          "aio-pika (each best/median); x C = row / rabbitmq-c; cpu = client process CPU time / wall "
          "time, us/msg = client CPU microseconds per message (medians; a compiled row: its child "
          "process's getrusage over the phase)")
    print("  alarms  : a run during which the broker blocked publishers (memory/disk alarm) "
          "is discarded and done again")
    sys.stdout.flush()

    rows = select_rows(build_rows(), args.only)
    if not rows:
        raise SystemExit("--only %r matches no row" % args.only)
    for lib, what in mark_unbuildable(rows).items():
        versions[lib] = what
        print("  %-8s: %s" % (lib, what))
    if args.aa:
        rows = with_aa_copies(rows)
    t_start = time.monotonic()
    for case, case_rows, _admin in run_rows(rows, ctx, admin, count, repeats, warm_n,
                                           args.no_gc, settle):
        print_case(case, case_rows, rows, count, repeats)
        sys.stdout.flush()

    verdicts = target_lines(rows)
    print()
    for status, desc, detail, _v in verdicts:
        print("  target %-7s %s: %s" % (status, desc, detail))
    failed = [r for r in rows if r.error]
    for r in failed:
        print("  FAILED  %s: %s" % (r.key, r.error))
    load1 = os.getloadavg()
    print()
    # the load at the end includes this benchmark and the broker it drives (~1.5 on 2 CPUs):
    # only the load at the start says whether something else was running
    print("uptime at end: %s  (includes this benchmark and the broker)%s" % (uptime(), (
        "\n  the machine was busy when the run started: rerun when idle for trustworthy ratios"
        if load0[0] > 0.5 * (os.cpu_count() or 1) else "")))
    print("targets%s: %d met, %d missed, %d not measured; %d rows failed; %d broker alarms seen; "
          "%.0f s in all"
          % (" (informational: --quick)" if args.quick else "",
             sum(v[0] == "met" for v in verdicts), sum(v[0] == "MISSED" for v in verdicts),
             sum(v[0] == "n/a" for v in verdicts), len(failed), len(ALARMS.intervals),
             time.monotonic() - t_start))
    admin.close()
    ALARMS.close()

    doc = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"), "uptime_start": up0,
           "uptime_end": uptime(), "loadavg_start": load0, "loadavg_end": load1,
           "cpus": os.cpu_count(), "platform": platform.platform(), "broker": broker,
           "versions": versions, "count": count, "repeats": repeats, "gc_enabled": not args.no_gc,
           "results": [{"case": r.case, "row": r.label, "lib": r.lib, "info": r.info,
                        "note": r.note, "na": r.na, "error": r.error,
                        "best_msg_s": stats(r)[0], "median_msg_s": stats(r)[1],
                        "msg_s_all": r.rates, "seconds_all": r.secs,
                        "client_cpu_fraction_all": r.cpu,
                        "client_cpu_us_per_msg_all": r.cpu_us} for r in rows],
           "targets": [{"status": s, "target": d, "detail": t, "value_best": v}
                       for s, d, t, v in verdicts]}
    _charts().write_outputs("client", doc, args)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
