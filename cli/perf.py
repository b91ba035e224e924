"""``amqwire perf``: a load generator with RabbitMQ PerfTest's main flags (AMQP 0-9-1), and
stream-perf-test's for a ``rabbitmq-stream://`` URL (``perf_stream.py``).

Producers and consumers each have their own connection, all on one asyncio loop.  Every
body starts with the time it was published (8 bytes, the loop's monotonic clock in
nanoseconds), so a consumer in this process measures the latency from publish to delivery.
Each second prints the rates of that second (sent, confirmed, nacked, received) and the
latency percentiles of the messages received in it; the end prints a summary, and
``--json PATH`` writes the samples and the summary.  A broker that goes silent cannot hold
the end: publishes wait at most a second at a time, confirms 10 s, closing 5 s more.

A queue of the user's (``-u``) is kept, and so are the messages it held; the run's consumers
take whatever comes first, as PerfTest's do.  What the run published and did not consume
it takes back at the end (every message carries the run's ``app_id``): it consumes from
the queue until it is empty or a message the run did not publish comes first (that one
and the rest stay, in order), and says what the queue still holds.  ``--keep-messages``
leaves them (to fill a queue with ``-y 0``), and says how many the queue holds.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import sys
import time
import uuid
from typing import Any, TextIO

from amqwire.client import AmqwireError, BasicProperties, NotFound, OperationTimeout, PublishError, aio

from . import perf_stream
from .perf_run import (CONFIRM_DRAIN_SECONDS, PERCENTILES, STAMP, STOP_CHECK_SECONDS, SUMMARY_SAMPLE, LatencySample, Run,
                       percentiles, report, supervise)
from .settings import PROG, Settings, UsageError, non_negative_int, positive_float, positive_int

log = logging.getLogger("amqwire.cli.perf")
TAKE_BACK_PREFETCH = 1000
TAKE_BACK_IDLE_SECONDS = 2.0  # a queue that held messages and sends none for this long: the rest are elsewhere


def add_command(commands: Any, common: argparse.ArgumentParser) -> None:
    # -h is the URL, as in PerfTest (-h/--uri); help is --help only
    perf = commands.add_parser(
        "perf", parents=[common], help="measure a broker: PerfTest's main flags (stream-perf-test's for streams)",
        add_help=False,
        description="Publish and consume as fast as allowed and print the rates each second, then a summary. "
        "Runs until -z seconds, -C messages per producer (all received), or Ctrl-C. With a rabbitmq-stream:// URL "
        "it speaks RabbitMQ's stream protocol, with the flags of stream-perf-test below.",
    )
    perf.add_argument("--help", action="help", help="show this help message and exit")
    perf.add_argument("-h", dest="url", metavar="URI", help="the URL, as PerfTest's -h (the same as --url/--uri)")
    perf.add_argument("-x", "--producers", type=non_negative_int, default=1, help="producer connections (default: 1)")
    perf.add_argument("-y", "--consumers", type=non_negative_int, default=1, help="consumer connections (default: 1)")
    perf.add_argument("-s", "--size", type=non_negative_int, default=None,
                      help=f"body size in bytes (default: 12, with a stream URL {perf_stream.DEFAULT_SIZE}; at least "
                      f"{STAMP.size}, the timestamp)")
    perf.add_argument("-u", "--queue", help="queue to use, declared if missing and kept; the run takes back "
                      "the messages it published and did not consume (default: a new queue, deleted at the end)")
    perf.add_argument("--keep-messages", action="store_true",
                      help="with -u: leave what the run published and did not consume in the queue")
    perf.add_argument("-c", "--confirm", "--confirms", type=positive_int, metavar="WINDOW",
                      help="publisher confirms, with at most this many unconfirmed per producer (a stream URL: "
                      f"always confirmed, default {perf_stream.DEFAULT_CONFIRMS:,})")
    perf.add_argument("-q", "--qos", "--prefetch", dest="prefetch", type=non_negative_int, default=0,
                      help="consumer prefetch (default: 0, no limit)")
    perf.add_argument("-A", "--multi-ack-every", type=positive_int, default=1, metavar="N",
                      help="ack every N messages at once (multiple=true; default: each)")
    perf.add_argument("-a", "--autoack", action="store_true", help="consume without acks")
    perf.add_argument("-f", "--flag", action="append", default=[], choices=("persistent", "mandatory"),
                      help="message flags: persistent (delivery mode 2), mandatory; repeatable")
    perf.add_argument("-r", "--rate", type=positive_float, metavar="MSG/S", help="limit each producer to this rate")
    perf.add_argument("-z", "--time", dest="duration", type=positive_float, metavar="SECONDS", help="run this long")
    perf.add_argument("-C", "--pmessages", dest="count", type=positive_int, metavar="N",
                      help="messages each producer sends; the run ends when all are received")
    perf.add_argument("-i", "--interval", type=positive_float, default=1.0, metavar="SECONDS",
                      help="between two rate lines (default: 1)")
    perf.add_argument("--json", dest="json_path", metavar="PATH", help="write the samples and the summary as JSON here")
    perf_stream.add_arguments(perf)
    perf.set_defaults(handler=run_perf)


async def produce(run: Run) -> None:
    args = run.args
    counters = run.counters
    properties = BasicProperties(app_id=run.marker, delivery_mode=2 if "persistent" in args.flag else None)
    mandatory = "mandatory" in args.flag
    padding = bytes(max(args.size - STAMP.size, 0))
    async with aio.connect(run.settings.parameters) as connection:
        channel = await connection.channel()
        if args.confirm:
            await channel.confirm_select(max_in_flight=args.confirm)
        started = time.monotonic()
        sent = 0
        while not run.stop.is_set() and (args.count is None or sent < args.count):
            body = STAMP.pack(time.monotonic_ns()) + padding
            try:
                # Bounded, so that a broker that blocks the connection or never confirms
                # cannot hold the run past its stop: the wait comes before the write, and
                # a publish that timed out was not sent.
                if args.confirm:
                    await channel.publish_async("", run.queue, body, properties, mandatory=mandatory,
                                                callback=counters.on_confirm, timeout=STOP_CHECK_SECONDS)
                else:
                    await channel.basic_publish("", run.queue, body, properties, mandatory=mandatory,
                                                timeout=STOP_CHECK_SECONDS)
            except OperationTimeout:
                log.info("no room to publish for %s s", STOP_CHECK_SECONDS)
                continue
            sent += 1
            counters.sent += 1
            if args.rate:
                ahead = started + sent / args.rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            elif sent % 16 == 0:
                await asyncio.sleep(0)  # the consumers and the reporter share this loop
        if args.confirm:
            try:
                await channel.wait_for_confirms(timeout=CONFIRM_DRAIN_SECONDS)
            except PublishError:
                pass  # counted as nacked by on_confirm
            except OperationTimeout:
                log.warning("publishes still unconfirmed %s s after the end", CONFIRM_DRAIN_SECONDS)
    run.producers_done += 1
    if run.producers_done == args.producers and (args.consumers == 0 or args.count is None):
        run.finish("producers done" if args.count is not None else run.stop_reason)


async def consume(run: Run) -> None:
    args = run.args
    counters = run.counters
    every = args.multi_ack_every
    expected = run.expected
    async with aio.connect(run.settings.parameters) as connection:
        channel = await connection.channel()
        if args.prefetch and not args.autoack:
            await channel.basic_qos(args.prefetch)
        consumer = await channel.consume(run.queue, no_ack=args.autoack)
        stopper = asyncio.ensure_future(_cancel_when_stopped(run, consumer))
        unacked = 0
        last_tag = 0
        try:
            async for message in consumer:
                if run.stop.is_set():
                    break  # what is still buffered goes back to the queue unacked
                now = time.monotonic_ns()
                if len(message.body) >= STAMP.size:
                    counters.latencies_us.append((now - STAMP.unpack_from(message.body)[0]) // 1000)
                counters.received += 1
                if not args.autoack:
                    unacked += 1
                    last_tag = message.delivery_tag
                    if unacked >= every:
                        await channel.basic_ack(last_tag, multiple=every > 1)
                        unacked = 0
                if expected is not None and counters.received >= expected:
                    run.finish("all messages received")
                    break
            if unacked:
                await channel.basic_ack(last_tag, multiple=True)
        finally:
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopper


async def _cancel_when_stopped(run: Run, consumer: Any) -> None:
    await run.stop.wait()
    with contextlib.suppress(AmqwireError):
        await consumer.cancel()


async def prepare_queue(run: Run) -> bool:
    """Declare the queue; True when it is this run's own, to delete at the end."""
    durable = "persistent" in run.args.flag
    async with aio.connect(run.settings.parameters) as connection:
        if run.args.queue:
            try:
                held = (await (await connection.channel()).queue_declare(run.queue, passive=True)).message_count
                if held and run.args.consumers:
                    sys.stderr.write(f"{PROG} perf: warning: queue {run.queue!r} holds {held} messages: "
                                     "the run's consumers take them too\n")
                return False
            except NotFound:
                pass  # that channel is closed now; the next one declares it
        await (await connection.channel()).queue_declare(run.queue, durable=durable)
    return not run.args.queue


@dataclasses.dataclass
class Leftovers:
    """What a kept queue (-u) holds after the run."""

    taken_back: int  # messages the run published and did not consume, taken back
    held: int  # messages the queue holds after that
    foreign_first: bool  # taking back stopped at a message the run did not publish

    def line(self, queue: str, kept: bool) -> str:
        if kept:
            return f"queue {queue!r} kept its messages (--keep-messages): it holds {self.held}"
        line = f"queue {queue!r}: took back {self.taken_back} messages this run published and did not consume"
        if self.foreign_first:
            return (line + f", then stopped at one it did not publish (left in its place); the queue holds {self.held}, "
                    "the run's behind that one among them")
        return line + f"; the queue holds {self.held}"


async def take_back(run: Run) -> Leftovers:
    """Consume the run's own messages (its app_id) from the kept queue and ack them, until
    the queue is empty or a message the run did not publish comes first: that one and those
    delivered after it go back unacked when the channel closes, in their places."""
    async with aio.connect(run.settings.parameters) as connection:
        channel = await connection.channel()
        held = (await channel.queue_declare(run.queue, passive=True)).message_count
        # the run's last publishes may reach the queue after this count (another connection's)
        counters = run.counters
        held = max(held, counters.sent - counters.received)
        if run.args.keep_messages or held == 0:
            if run.args.keep_messages:
                await asyncio.sleep(0.2)  # the count said: let the last publishes land first
                held = (await channel.queue_declare(run.queue, passive=True)).message_count
            return Leftovers(0, held, False)
        await channel.basic_qos(TAKE_BACK_PREFETCH)
        taken = 0
        last_own = acked = 0
        foreign = False
        consumer = await channel.consume(run.queue)
        while taken < held:
            message = await consumer.get(timeout=TAKE_BACK_IDLE_SECONDS)
            if message is None:
                break
            if message.properties.app_id != run.marker:
                foreign = True
                break
            taken += 1
            last_own = message.delivery_tag
            if taken % TAKE_BACK_PREFETCH == 0:
                await channel.basic_ack(last_own, multiple=True)
                acked = last_own
        if last_own > acked:
            await channel.basic_ack(last_own, multiple=True)
        await channel.close()  # what it holds unacked goes back
        left = (await (await connection.channel()).queue_declare(run.queue, passive=True)).message_count
    return Leftovers(taken, left, foreign)


async def delete_queue(run: Run) -> None:
    async with aio.connect(run.settings.parameters) as connection:
        await (await connection.channel()).queue_delete(run.queue)


async def perf(args: argparse.Namespace, settings: Settings, out: TextIO) -> dict[str, Any]:
    queue = args.queue or f"amqwire-perf-{uuid.uuid4().hex[:12]}"
    run = Run(args, settings, queue, out)
    own_queue = await prepare_queue(run)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, run.finish, "interrupted")
    samples: list[dict[str, Any]] = []
    everything = LatencySample(SUMMARY_SAMPLE)
    try:
        # consumers first, so that the first messages find them
        consumers = [asyncio.ensure_future(consume(run)) for _ in range(args.consumers)]
        await asyncio.sleep(0.1 if consumers else 0)
        started = time.monotonic()
        reporter = asyncio.ensure_future(report(run, started, samples, everything))
        producers = [asyncio.ensure_future(produce(run)) for _ in range(args.producers)]
        if args.duration:
            loop.call_later(args.duration, run.finish, "time limit reached")
        workers = consumers + producers
        try:
            await supervise(run, workers)
        except BaseException:
            reporter.cancel()
            raise
        run.finish(run.stop_reason)
        await reporter
        elapsed = (run.stopped_at or time.monotonic()) - started
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if own_queue:
            with contextlib.suppress(AmqwireError, OSError):
                await delete_queue(run)
    leftovers = await take_back(run) if args.queue else None
    counters = run.counters
    summary: dict[str, Any] = {
        "stopped": run.stop_reason,
        "seconds": round(elapsed, 3),
        "sent": counters.sent,
        "received": counters.received,
        "sending_rate": counters.sent / elapsed,
        "receiving_rate": counters.received / elapsed,
        "latency_us": percentiles(everything.values),
    }
    if args.confirm:
        summary.update(confirmed=counters.confirmed, nacked=counters.nacked)
    if leftovers is not None:
        summary["queue_left"] = {"taken_back": leftovers.taken_back, "held": leftovers.held,
                                 "foreign_first": leftovers.foreign_first,
                                 "line": leftovers.line(queue, args.keep_messages)}
    return {"settings": _settings_record(args, queue), "samples": samples, "summary": summary}


def _settings_record(args: argparse.Namespace, queue: str) -> dict[str, Any]:
    return {"producers": args.producers, "consumers": args.consumers, "size": max(args.size, STAMP.size),
            "queue": queue, "confirm": args.confirm, "prefetch": args.prefetch, "multi_ack_every": args.multi_ack_every,
            "autoack": args.autoack, "keep_messages": args.keep_messages, "flags": args.flag, "rate": args.rate,
            "duration": args.duration, "count": args.count}


def summary_lines(result: dict[str, Any]) -> list[str]:
    summary = result["summary"]
    lines = [f"test stopped ({summary['stopped']}) after {summary['seconds']:.3f} s: "
             f"sent {summary['sent']}, received {summary['received']}"
             + (f", confirmed {summary['confirmed']}, nacked {summary['nacked']}" if "confirmed" in summary else ""),
             f"sending rate avg: {summary['sending_rate']:.0f} msg/s",
             f"receiving rate avg: {summary['receiving_rate']:.0f} msg/s"]
    latency = summary["latency_us"]
    if latency:
        names = [name for name, _ in PERCENTILES]
        lines.append(f"consumer latency {'/'.join(names)}: {'/'.join(str(latency[n]) for n in names)} µs")
    if "queue_left" in summary:
        lines.append(summary["queue_left"]["line"])
    return lines


def run_perf(args: argparse.Namespace, settings: Settings) -> int:
    if args.producers == 0 and args.consumers == 0:
        raise UsageError("nothing to run: -x and -y are both 0")
    if args.keep_messages and not args.queue:
        raise UsageError("--keep-messages needs -u QUEUE (without it the run's queue is deleted at the end)")
    if not settings.stream_protocol:
        given = perf_stream.stream_flags_given(args)
        if given:
            raise UsageError(f"{', '.join(given)}: stream protocol flags, for a rabbitmq-stream:// URL")
        if args.size is None:
            args.size = 12
    else:
        perf_stream.check_arguments(args)
    if args.size < STAMP.size:
        log.info("bodies are %d bytes, the timestamp's size, not %d", STAMP.size, args.size)
    if args.json_path:
        try:
            open(args.json_path, "a").close()  # fail now, not after the run
        except OSError as exc:
            raise UsageError(f"cannot write {args.json_path}: {exc.strerror}") from None
    if settings.stream_protocol:
        result = asyncio.run(perf_stream.perf(args, settings, sys.stdout))
    else:
        result = asyncio.run(perf(args, settings, sys.stdout))
    sys.stdout.write("\n".join(summary_lines(result)) + "\n")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as file:
            json.dump(result, file, indent=1)
            file.write("\n")
    return 0
