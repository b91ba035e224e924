"""``amqwire perf`` on RabbitMQ's stream protocol (a ``rabbitmq-stream://`` URL), with the flags of
RabbitMQ's stream-perf-test where they fit and the output of the AMQP 0-9-1 perf.

Producers and consumers each have their own connection (``amqwire.client.stream.aio``), all on
one asyncio loop, spread over the streams in turn (producer i and consumer i on stream
i mod the number of streams).  Every body starts with the time it was sent (8 bytes, the
monotonic clock in nanoseconds), so a consumer in this process measures the latency from
send to delivery; a message without such a stamp (one from before the run, read with
``--offset first``) counts as received without a latency.  Publishing is always confirmed:
``-c`` bounds the unconfirmed messages of each producer (stream-perf-test's
``--confirms``, 10,000 by default).  Without ``--rate`` a producer sends ``--batch-size``
messages at a time (``send_batch``: one Publish frame each); with it, one at a time, paced.
Consumers subscribe before any producer starts, so that ``--offset next`` (the default)
misses nothing.

``--sub-entry-size`` above 1 turns sub-entry batching on (that many messages stored as one
entry under one publishing id), ``--compression`` gzip or zstd compresses each sub-entry
(snappy and lz4 are refused: amqwire's codec does not write them).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import importlib.util
import logging
import re
import signal
import time
import uuid
from typing import TYPE_CHECKING, Any, Optional, Sequence, TextIO

from amqwire.client import AmqwireError, OperationTimeout

from .perf_run import (CONFIRM_DRAIN_SECONDS, STAMP, STOP_CHECK_SECONDS, SUMMARY_SAMPLE, LatencySample, Run,
                       percentiles, report, supervise)
from .settings import Settings, UsageError

if TYPE_CHECKING:
    from amqwire.client.stream import StreamParameters

log = logging.getLogger("amqwire.cli.perf")

DEFAULT_SIZE = 10          # stream-perf-test's
DEFAULT_CONFIRMS = 10_000  # stream-perf-test's --confirms
DEFAULT_BATCH_SIZE = 100   # stream-perf-test's --batch-size
DEFAULT_MAX_LENGTH_BYTES = "20gb"       # stream-perf-test's, for the streams a run creates
DEFAULT_MAX_SEGMENT_SIZE_BYTES = "500mb"
CONSUMERS_READY_SECONDS = 30.0
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
LEADER_LOCATORS = ("client-local", "balanced", "least-leaders", "random")
_BYTES = re.compile(r"(\d+)\s*(b|kb|mb|gb|tb)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", re.IGNORECASE)
_AGE = re.compile(r"\d+[YMDhms]")
#: A stamp further back than this was not sent by this run: no latency for it.
MAX_PLAUSIBLE_LATENCY_NS = 3600 * 10**9


def add_arguments(perf: argparse.ArgumentParser) -> None:
    """The flags only the stream protocol has (stream-perf-test's names and short forms)."""
    group = perf.add_argument_group(
        "stream protocol (a rabbitmq-stream:// URL; RabbitMQ's stream-perf-test flags)")
    group.add_argument("-st", "--streams", metavar="NAMES",
                       help="streams to send to and read from, comma-separated: declared if missing and kept "
                       "(default: a new stream, deleted at the end)")
    group.add_argument("-sc", "--stream-count", type=_positive, metavar="N",
                       help="N streams: each name of --streams (default 'amqwire-perf-<id>') suffixed -1 .. -N")
    group.add_argument("-ds", "--delete-streams", action="store_true", help="delete the streams at the end")
    group.add_argument("-o", "--offset", metavar="OFFSET",
                       help="where consumers start: first, last, next (default), an offset, or an ISO 8601 time "
                       "(2026-11-28T07:45:54Z)")
    group.add_argument("-bs", "--batch-size", type=_positive, metavar="N",
                       help=f"messages per Publish frame (default: {DEFAULT_BATCH_SIZE})")
    group.add_argument("-ses", "--sub-entry-size", type=_positive, metavar="N",
                       help="messages per sub-entry: above 1, sub-entry batching (default: 1)")
    group.add_argument("-co", "--compression", type=str.lower, choices=COMPRESSIONS,
                       help="compression of each sub-entry: none, gzip, zstd (snappy, lz4: not written by "
                       "amqwire's codec) (default: none)")
    group.add_argument("-pn", "--producer-names", metavar="PATTERN",
                       help="producer references (deduplication): 'uuid', or a pattern of the stream and the "
                       "producer's number, e.g. '%%s-%%d' (default: none)")
    group.add_argument("-cn", "--consumer-names", metavar="PATTERN",
                       help="consumer names for --store-every: 'uuid' or a pattern as -pn (default: '%%s-%%d')")
    group.add_argument("-se", "--store-every", type=_positive, metavar="N",
                       help="store the consumer's offset every N messages (default: never)")
    group.add_argument("-mlb", "--max-length-bytes", metavar="SIZE",
                       help=f"max size of created streams, e.g. 20gb, 500mb; 0: no limit "
                       f"(default: {DEFAULT_MAX_LENGTH_BYTES})")
    group.add_argument("-smssb", "--stream-max-segment-size-bytes", metavar="SIZE",
                       help=f"max size of the segments of created streams (default: {DEFAULT_MAX_SEGMENT_SIZE_BYTES})")
    group.add_argument("-ma", "--max-age", metavar="AGE",
                       help="max age of created streams' segments: ISO 8601 (PT10M30S, P5DT8H) or 7D, 12h, 30m")
    group.add_argument("-ll", "--leader-locator", choices=LEADER_LOCATORS,
                       help="leader locator of created streams (default: the broker's)")


STREAM_ONLY = ("streams", "stream_count", "delete_streams", "offset", "batch_size", "sub_entry_size", "compression",
               "producer_names", "consumer_names", "store_every", "max_length_bytes",
               "stream_max_segment_size_bytes", "max_age", "leader_locator")
AMQP_ONLY = {"queue": "-u/--queue (use --streams)", "prefetch": "-q/--qos", "multi_ack_every": "-A/--multi-ack-every",
             "autoack": "-a/--autoack", "flag": "-f/--flag"}
AMQP_DEFAULTS: dict[str, Any] = {"queue": None, "prefetch": 0, "multi_ack_every": 1, "autoack": False, "flag": []}


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def stream_flags_given(args: argparse.Namespace) -> list[str]:
    """The stream-only flags set on the command line (an AMQP 0-9-1 run refuses them)."""
    return ["--" + name.replace("_", "-") for name in STREAM_ONLY if getattr(args, name, None) not in (None, False)]


def byte_capacity(text: str, flag: str) -> int:
    match = _BYTES.fullmatch(text.strip())
    if not match:
        raise UsageError(f"{flag}: expected a size such as 20gb, 500mb, 1000000, not {text!r}")
    return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def max_age(text: str) -> str:
    """The Create argument for --max-age: '7D'-style as is, ISO 8601 durations in seconds."""
    text = text.strip()
    if _AGE.fullmatch(text) and int(text[:-1]) > 0:
        return text
    match = _ISO_DURATION.fullmatch(text)
    if match and any(match.groups()):
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
        if total > 0:
            return f"{total}s"
    raise UsageError(f"--max-age: expected an ISO 8601 duration (PT10M30S, P5DT8H) or 7D, 12h, 30m, not {text!r}")


def offset(text: Optional[str]) -> Any:
    """--offset as the client takes it: a word, an int, or an aware datetime."""
    if text is None:
        return "next"
    text = text.strip()
    if text in ("first", "last", "next"):
        return text
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--offset: expected first, last, next, an offset or an ISO 8601 time, not {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _name(pattern: str, stream: str, index: int) -> str:
    """A producer's or consumer's name from ``pattern``: 'uuid', or printf-style with the stream
    (%s) and then the number (%d), either left out as Java's String.format allows."""
    if pattern == "uuid":
        return str(uuid.uuid4())
    for values in ((stream, index), (stream,), ()):
        try:
            return pattern % values
        except (TypeError, ValueError):
            continue
    raise UsageError(f"a name pattern takes the stream (%s) and the number (%d), not {pattern!r}")


def stream_names(args: argparse.Namespace) -> tuple[list[str], bool]:
    """The run's streams, and whether it made up their names (then they are its own, deleted at the end)."""
    own = not args.streams
    names = [n.strip() for n in (args.streams or f"amqwire-perf-{uuid.uuid4().hex[:12]}").split(",") if n.strip()]
    if not names:
        raise UsageError("--streams: no stream name")
    if args.stream_count:
        names = [f"{name}-{i}" for name in names for i in range(1, args.stream_count + 1)]
    return names, own


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what the stream protocol run cannot do, before connecting; fill in its defaults."""
    given = [flag for name, flag in AMQP_ONLY.items() if getattr(args, name) != AMQP_DEFAULTS[name]]
    if given:
        raise UsageError(f"{', '.join(given)}: AMQP 0-9-1 flags, not for a rabbitmq-stream:// URL")
    compression = args.compression or "none"
    if compression in ("snappy", "lz4"):
        raise UsageError(f"--compression {compression}: amqwire's codec writes gzip and zstd sub-entries only")
    if compression != "none" and (args.sub_entry_size or 1) < 2:
        raise UsageError("--compression compresses sub-entries: give --sub-entry-size above 1 too")
    if compression == "zstd" and importlib.util.find_spec("zstandard") is None:
        raise UsageError("--compression zstd needs the zstandard package (pip install zstandard)")
    if args.size is None:
        args.size = DEFAULT_SIZE
    if args.confirm is None:
        args.confirm = DEFAULT_CONFIRMS
    if args.batch_size is None:
        args.batch_size = DEFAULT_BATCH_SIZE
    if args.batch_size > 65535:
        raise UsageError(f"--batch-size: at most 65535, not {args.batch_size}")
    args.offset_spec = offset(args.offset)
    for pattern in (args.producer_names, args.consumer_names):
        if pattern is not None:
            _name(pattern, "s", 1)


def retention(args: argparse.Namespace) -> dict[str, Any]:
    """create_stream's keywords for the streams a run declares."""
    length = byte_capacity(args.max_length_bytes or DEFAULT_MAX_LENGTH_BYTES, "--max-length-bytes")
    segment = byte_capacity(args.stream_max_segment_size_bytes or DEFAULT_MAX_SEGMENT_SIZE_BYTES,
                            "--stream-max-segment-size-bytes")
    return {"max_length_bytes": length or None, "max_segment_size_bytes": segment,
            "max_age": max_age(args.max_age) if args.max_age else None, "leader_locator": args.leader_locator}


async def produce(run: Any, stream: str, index: int) -> None:
    from amqwire.client.stream import aio


    args = run.args
    counters = run.counters
    padding = bytes(max(args.size - STAMP.size, 0))
    reference = _name(args.producer_names, stream, index) if args.producer_names else None

    def settled(n: int, future: Any) -> None:
        if not future.cancelled() and future.exception() is None:
            counters.confirmed += n
        else:
            counters.nacked += n

    async with aio.connect(stream_parameters(run.settings)) as connection:
        subentries = args.sub_entry_size if (args.sub_entry_size or 1) > 1 else 0
        compression = args.compression if args.compression not in (None, "none") else None
        producer = await connection.producer(stream, reference, batch_size=args.batch_size, max_in_flight=args.confirm,
                                             subentry_size=subentries, compression=compression)
        started = time.monotonic()
        sent = 0
        while not run.stop.is_set() and (args.count is None or sent < args.count):
            try:
                # bounded, so that a broker that never confirms cannot hold the run past its stop
                if args.rate:
                    future = await producer.send(STAMP.pack(time.monotonic_ns()) + padding,
                                                 timeout=STOP_CHECK_SECONDS)
                    size = 1
                else:
                    size = args.batch_size if args.count is None else min(args.batch_size, args.count - sent)
                    stamped = STAMP.pack(time.monotonic_ns()) + padding
                    future = await producer.send_batch([stamped] * size, timeout=STOP_CHECK_SECONDS)
            except OperationTimeout:
                log.info("no room to send for %s s", STOP_CHECK_SECONDS)
                continue
            future.add_done_callback(functools.partial(settled, size))
            sent += size
            counters.sent += size
            if args.rate:
                ahead = started + sent / args.rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            else:
                await asyncio.sleep(0)  # the consumers and the reporter share this loop
        try:
            await producer.flush(timeout=CONFIRM_DRAIN_SECONDS)
        except OperationTimeout:
            log.warning("sends still unconfirmed %s s after the end", CONFIRM_DRAIN_SECONDS)
        with contextlib.suppress(AmqwireError):
            await producer.close(timeout=1.0)
    run.producers_done += 1
    if run.producers_done == args.producers and (args.consumers == 0 or args.count is None):
        run.finish("producers done" if args.count is not None else run.stop_reason)


async def consume(run: Any, stream: str, index: int, ready: "Ready", expected: Optional[int]) -> None:
    from amqwire.client.stream import aio


    args = run.args
    counters = run.counters
    name = None
    if args.store_every:
        name = _name(args.consumer_names or "%s-%d", stream, index)
    async with aio.connect(stream_parameters(run.settings)) as connection:
        try:
            consumer = await connection.consumer(stream, args.offset_spec, name=name)
        finally:
            ready.one_done()
        stopper = asyncio.ensure_future(_close_when_stopped(run, consumer))
        unpack = STAMP.unpack_from
        try:
            async for message in consumer:
                if run.stop.is_set():
                    break
                body = message.body
                if isinstance(body, (bytes, bytearray, memoryview)) and len(body) >= STAMP.size:
                    latency = time.monotonic_ns() - unpack(body)[0]
                    if 0 <= latency < MAX_PLAUSIBLE_LATENCY_NS:
                        counters.latencies_us.append(latency // 1000)
                counters.received += 1
                if name is not None and counters.received % args.store_every == 0:
                    await consumer.store_offset()
                if expected is not None and counters.received >= expected:
                    run.finish("all messages received")
                    break
        finally:
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopper
            with contextlib.suppress(AmqwireError):
                await consumer.close()


async def _close_when_stopped(run: Any, consumer: Any) -> None:
    await run.stop.wait()
    with contextlib.suppress(AmqwireError):
        await consumer.close()


class Ready:
    """Counts consumers that subscribed (or failed to): producers start once all have."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.event = asyncio.Event()
        if count == 0:
            self.event.set()

    def one_done(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.event.set()


async def perf(args: argparse.Namespace, settings: Settings, out: TextIO) -> dict[str, Any]:
    from amqwire.client.stream import aio


    streams, own = stream_names(args)
    run = Run(args, settings, ",".join(streams), out)
    arguments = retention(args)
    parameters = stream_parameters(settings)
    async with aio.connect(parameters) as admin:
        for stream in streams:
            await admin.create_stream(stream, exist_ok=True, **arguments)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, run.finish, "interrupted")
    samples: list[dict[str, Any]] = []
    everything = LatencySample(SUMMARY_SAMPLE)
    on_stream = [streams[i % len(streams)] for i in range(max(args.producers, args.consumers))]
    producers_per_stream = {s: sum(1 for i in range(args.producers) if on_stream[i] == s) for s in streams}
    expected = None
    if args.count is not None and args.producers:
        # every consumer of a stream reads every message sent to it
        expected = sum(args.count * producers_per_stream[on_stream[i]] for i in range(args.consumers))
    try:
        ready = Ready(args.consumers)
        consumers = [asyncio.ensure_future(consume(run, on_stream[i], i + 1, ready, expected))
                     for i in range(args.consumers)]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(_ready_or_failed(ready, consumers), CONSUMERS_READY_SECONDS)
        started = time.monotonic()
        reporter = asyncio.ensure_future(report(run, started, samples, everything))
        producers = [asyncio.ensure_future(produce(run, on_stream[i], i + 1)) for i in range(args.producers)]
        if args.duration:
            loop.call_later(args.duration, run.finish, "time limit reached")
        try:
            await supervise(run, consumers + producers)
        except BaseException:
            reporter.cancel()
            raise
        run.finish(run.stop_reason)
        await reporter
        elapsed = (run.stopped_at or time.monotonic()) - started
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if own or args.delete_streams:
            with contextlib.suppress(AmqwireError, OSError):
                async with aio.connect(parameters) as admin:
                    for stream in streams:
                        await admin.delete_stream(stream, missing_ok=True)
    counters = run.counters
    summary: dict[str, Any] = {
        "stopped": run.stop_reason, "seconds": round(elapsed, 3), "sent": counters.sent,
        "received": counters.received, "sending_rate": counters.sent / elapsed,
        "receiving_rate": counters.received / elapsed, "latency_us": percentiles(everything.values),
        "confirmed": counters.confirmed, "nacked": counters.nacked,
    }
    return {"settings": settings_record(args, streams), "samples": samples, "summary": summary}


async def _ready_or_failed(ready: Ready, consumers: Sequence[asyncio.Future[None]]) -> None:
    """Until every consumer subscribed, or one of them ended (its error comes out of supervise)."""
    waiter: asyncio.Future[Any] = asyncio.ensure_future(ready.event.wait())
    waits: list[asyncio.Future[Any]] = [waiter, *consumers]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def stream_parameters(settings: Settings) -> "StreamParameters":
    """The stream URL's parameters (settings.py parses a rabbitmq-stream:// URL into them)."""
    from amqwire.client.stream import StreamParameters

    parameters = settings.parameters
    if not isinstance(parameters, StreamParameters):
        raise UsageError("perf over the stream protocol needs a rabbitmq-stream:// URL")
    return parameters


def settings_record(args: argparse.Namespace, streams: list[str]) -> dict[str, Any]:
    offset_value = args.offset_spec
    return {"protocol": "stream", "producers": args.producers, "consumers": args.consumers, "size": args.size,
            "streams": streams, "confirm": args.confirm, "batch_size": args.batch_size,
            "offset": offset_value.isoformat() if isinstance(offset_value, datetime.datetime) else offset_value,
            "sub_entry_size": args.sub_entry_size or 1, "compression": args.compression or "none",
            "producer_names": args.producer_names, "store_every": args.store_every, "rate": args.rate,
            "duration": args.duration, "count": args.count, "delete_streams": args.delete_streams}
