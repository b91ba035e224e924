"""``python -m amqwire.bridge``: run a bridge until interrupted (Ctrl-C or SIGTERM: it
drains and exits 0).

Exit codes: 0 stopped on request; 1 failed while running (a recovery gave up, a channel
was closed); 2 bad arguments; 3 a broker cannot be reached; 4 credentials, vhost or
access refused; 5 the source queue or the destination exchange does not exist.  The
reason is one line on stderr.  The statistics are redrawn on one line on a terminal,
printed one line per ``--stats-interval`` otherwise (stdout).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Callable, Optional, Sequence, TextIO

from .errors import BridgeError
from .forwarder import AckMode
from .runner import Bridge

PROG = "python -m amqwire.bridge"
_QUIET_WHILE_STARTING = ("amqwire.client", "amqwire.bridge")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}: {text!r}")
        return value
    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Forward messages from a queue on one RabbitMQ broker to an exchange on another.",
        epilog="exit codes: 0 stopped on request, 1 failed while running, 2 bad arguments, "
        "3 broker unreachable, 4 access refused, 5 queue or exchange missing",
    )
    p.add_argument("--src", required=True, metavar="URL", help="source broker, amqp://user:pass@host:port/vhost")
    p.add_argument("--src-queue", required=True, metavar="Q", help="queue to forward from (must exist)")
    p.add_argument("--dest", required=True, metavar="URL", help="destination broker")
    p.add_argument("--dest-exchange", default="", metavar="X",
                   help="exchange to publish to (must exist; default: the default exchange)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--dest-routing-key", metavar="K", default=None,
                     help="routing key to publish with (default: the queue's name with the default "
                     "exchange, else the message's own)")
    key.add_argument("--keep-routing-key", action="store_true", help="always publish with the message's own routing key")
    p.add_argument("--ack-mode", choices=[m.value for m in AckMode], default=AckMode.ON_CONFIRM.value,
                   help="on-confirm (default): ack at the source once the destination confirmed; "
                   "on-publish: once written; no-ack: the source acks on delivery")
    p.add_argument("--prefetch", type=_int_range(1, 65535), default=1000, help="unacked messages per consumer (1000)")
    p.add_argument("--duplex", action="store_true",
                   help="also forward the queue of the same name on the destination to the same exchange on the source")
    p.add_argument("--max-hops", type=_int_range(1, 1000), default=None, metavar="N",
                   help="drop (and count) messages that crossed N bridges already")
    p.add_argument("--include", action="append", default=[], metavar="PATTERN",
                   help="forward only routing keys matching this topic pattern (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="do not forward routing keys matching this topic pattern (repeatable)")
    p.add_argument("--stats-interval", type=_positive_float, default=5.0, metavar="SECONDS",
                   help="statistics every SECONDS (5)")
    p.add_argument("--connection-timeout", type=_positive_float, default=10.0, metavar="SECONDS")
    p.add_argument("--verbose", "-v", action="store_true", help="log at INFO (the statistics too) on stderr")
    return p


class Display:
    """The statistics line: redrawn in place on a terminal, appended otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._drawn = False

    def show(self, bridge: Bridge) -> None:
        line = bridge.stats().line()
        if self.tty:
            self.out.write("\r\x1b[K" + line)
            self._drawn = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def final(self, bridge: Bridge) -> None:
        if self._drawn:
            self.out.write("\n")
        self.out.write("stopped: " + bridge.stats().line() + "\n")
        self.out.flush()


async def run(args: argparse.Namespace, display: Display) -> int:
    bridge = Bridge(
        args.src, args.src_queue, args.dest,
        dest_exchange=args.dest_exchange,
        dest_routing_key=args.dest_routing_key,
        keep_routing_key=args.keep_routing_key,
        ack_mode=args.ack_mode,
        prefetch=args.prefetch,
        duplex=args.duplex,
        max_hops=args.max_hops,
        include=args.include,
        exclude=args.exclude,
        stats_interval=args.stats_interval,
        on_stats=display.show,
        connection_timeout=args.connection_timeout,
    )
    await bridge.start()
    for name in _QUIET_WHILE_STARTING:  # from here on, reconnects are worth a warning
        logging.getLogger(name).setLevel(logging.NOTSET)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waiter = loop.create_task(bridge.wait())
    stopper = loop.create_task(stop.wait())
    try:
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        await bridge.stop()
        display.final(bridge)
    if waiter.done():
        waiter.result()  # raises the failure
    else:
        waiter.cancel()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.verbose:
        for name in _QUIET_WHILE_STARTING:  # a failed start is the one line main() prints
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        return asyncio.run(run(args, Display(sys.stdout)))
    except BridgeError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return exc.exit_code
    except ValueError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
