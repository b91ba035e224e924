"""``amqwire-bridge`` (or ``python -m amqwire.bridge``): run a bridge until interrupted
(Ctrl-C or SIGTERM: it drains and exits 0).

Exit codes: 0 stopped on request; 1 failed while running (a recovery gave up, a channel
was closed); 2 bad arguments, a bad URL or secret, or a configuration that loops back
into its source queue; 3 a broker cannot be reached; 4 credentials, vhost or access
refused; 5 the source queue or the destination exchange does not exist.  The reason is
one line on stderr.  The statistics are shown at once, then redrawn on one line on a
terminal, or printed one line per ``--stats-interval`` otherwise (stdout).

Secrets stay off the command line (where ``ps`` shows them to every user): each URL
comes from ``--src``/``--dest``, else from a file (``--src-url-file``), else from the
environment (``AMQWIRE_SRC_URL``/``AMQWIRE_DEST_URL``); a password alone can come from a
file (``--src-password-file``) or the environment (``AMQWIRE_SRC_PASSWORD``) and
replaces the URL's.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import urllib.parse
from typing import Callable, Mapping, Optional, Sequence, TextIO, Union

from .connector import Connector, load_config
from .errors import BadConfiguration, BridgeError
from .forwarder import AckMode, BackOff, Refused
from .runner import Bridge

PROG = "amqwire-bridge" if os.path.basename(sys.argv[0]).startswith("amqwire-bridge") else "python -m amqwire.bridge"
ENV_URL = {"src": "AMQWIRE_SRC_URL", "dest": "AMQWIRE_DEST_URL"}
ENV_PASSWORD = {"src": "AMQWIRE_SRC_PASSWORD", "dest": "AMQWIRE_DEST_PASSWORD"}
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


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Forward messages from a queue on one RabbitMQ broker to an exchange on another.",
        epilog="exit codes: 0 stopped on request, 1 failed while running, 2 bad arguments, "
        "3 broker unreachable, 4 access refused, 5 queue or exchange missing",
    )
    p.add_argument("--src", metavar="URL", help="source broker, amqp://user:pass@host:port/vhost (default: "
                   "--src-url-file, else $AMQWIRE_SRC_URL; a password here is visible in ps)")
    p.add_argument("--src-url-file", metavar="PATH", help="read the source URL from this file (its first line)")
    p.add_argument("--src-password-file", metavar="PATH",
                   help="read the source password from this file (default: $AMQWIRE_SRC_PASSWORD, else the URL's)")
    p.add_argument("--src-queue", action="append", default=[], metavar="Q",
                   help="queue to forward from (must exist; repeatable: one channel each, on one pair of connections)")
    p.add_argument("--src-exchange", metavar="X",
                   help="forward an exchange instead of a queue, through a durable queue the bridge owns "
                   "(amqwire.bridge.NAME), bound with --src-binding-key and kept when the bridge stops")
    p.add_argument("--src-binding-key", metavar="K", default="#",
                   help="with --src-exchange: the binding key of the bridge's queue (# by default: all, on a topic exchange)")
    p.add_argument("--name", metavar="NAME",
                   help="with --src-exchange: names the bridge's queue amqwire.bridge.NAME (default: EXCHANGE.KEY)")
    p.add_argument("--delete-source-queue", action="store_true",
                   help="with --src-exchange: delete the bridge's queue when the bridge stops (what it holds goes)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="do not publish a probe message at start to find a loop through bindings the bridge cannot read "
                   "(the probe is marked x-amqwire-probe, expires after 10 s, and is removed by the bridge that finds it)")
    p.add_argument("--config", metavar="PATH",
                   help="a TOML file of [[bridge]] tables choosing source queues by name or glob (instead of "
                   "--src-queue; the other options are each table's defaults)")
    p.add_argument("--dest", metavar="URL", help="destination broker (default: --dest-url-file, else $AMQWIRE_DEST_URL)")
    p.add_argument("--dest-url-file", metavar="PATH", help="read the destination URL from this file (its first line)")
    p.add_argument("--dest-password-file", metavar="PATH",
                   help="read the destination password from this file (default: $AMQWIRE_DEST_PASSWORD, else the URL's)")
    p.add_argument("--dest-exchange", default="", metavar="X",
                   help="exchange to publish to (must exist; default: the default exchange)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--dest-routing-key", metavar="K", default=None,
                     help="routing key to publish with (default: the queue's name with the default "
                     "exchange, else the message's own)")
    key.add_argument("--keep-routing-key", action="store_true", help="always publish with the message's own routing key")
    p.add_argument("--ack-mode", choices=[m.value for m in AckMode], default=AckMode.ON_CONFIRM.value,
                   help="on-confirm (default): ack at the source once the destination confirmed; "
                   "on-publish: once written; no-ack: the source acks on delivery; auto: persistent messages "
                   "(delivery mode 2) on-confirm, the others on-publish")
    p.add_argument("--prefetch", type=_int_range(1, 65535), default=1000, help="unacked messages per consumer (1000)")
    p.add_argument("--duplex", action="store_true",
                   help="also forward the queue of the same name on the destination to the same exchange on the source")
    p.add_argument("--max-hops", type=_int_range(1, 1000), default=None, metavar="N",
                   help="drop (and count) messages that crossed N bridges already")
    p.add_argument("--include", action="append", default=[], metavar="PATTERN",
                   help="forward only routing keys matching this topic pattern (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="do not forward routing keys matching this topic pattern (repeatable)")
    p.add_argument("--on-refused", choices=[r.value for r in Refused], default=Refused.REQUEUE.value,
                   help="a message the destination returns (no route) or nacks: requeue (default: back to the "
                   "source after a growing back-off, for ever), dead-letter or drop after --max-attempts (on-confirm or auto only)")
    p.add_argument("--max-attempts", type=_int_range(1, 1_000_000), default=5, metavar="N",
                   help="refusals of one message before --on-refused dead-letter / drop applies (5)")
    p.add_argument("--dead-letter-exchange", metavar="X", default=None,
                   help="with --on-refused dead-letter: publish to this exchange at the source (default: "
                   "basic.nack without requeue, to the source queue's own dead-letter exchange)")
    p.add_argument("--backoff", type=_positive_float, default=0.5, metavar="SECONDS",
                   help="back-off after a refusal, doubling per refusal of the message and of the destination (0.5)")
    p.add_argument("--max-backoff", type=_positive_float, default=30.0, metavar="SECONDS",
                   help="longest back-off (30)")
    p.add_argument("--management-port", type=_int_range(0, 65535), default=15672, metavar="PORT",
                   help="the source's management API, to check exchange bindings for loops at start (15672; 0: do not)")
    p.add_argument("--rescan-interval", type=float, default=30.0, metavar="SECONDS",
                   help="with queue globs in --config: list the source's queues again every SECONDS and forward "
                   "new ones (30; 0: never)")
    p.add_argument("--demand", action="store_true",
                   help="forward only while the destination has consumers on the queue of the same name (learned from "
                   "the rabbitmq_event_exchange plugin's events where enabled, else polled)")
    p.add_argument("--demand-interval", type=_positive_float, default=2.0, metavar="SECONDS",
                   help="with --demand: read the destination's consumer count every SECONDS (2)")
    p.add_argument("--stats-interval", type=_positive_float, default=5.0, metavar="SECONDS",
                   help="statistics every SECONDS (5)")
    p.add_argument("--connection-timeout", type=_positive_float, default=10.0, metavar="SECONDS")
    p.add_argument("--tracing", action="store_true",
                   help="an OpenTelemetry span per forwarded message, with the global TracerProvider (run under "
                        "opentelemetry-instrument, or set one up); needs opentelemetry-api (docs/tracing.md)")
    p.add_argument("--verbose", "-v", action="store_true", help="log at INFO (the statistics too) on stderr")
    return p


class Display:
    """The statistics line: redrawn in place on a terminal, appended otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._drawn = False

    def show(self, bridge: Union[Bridge, Connector]) -> None:
        line = bridge.stats().line()
        if self.tty:
            self.out.write("\r\x1b[K" + line)
            self._drawn = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def final(self, bridge: Union[Bridge, Connector]) -> None:
        if self._drawn:
            self.out.write("\n")
        self.out.write("stopped: " + bridge.stats().line() + "\n")
        if isinstance(bridge, Connector):
            for queue, stats in bridge.queue_stats().items():
                self.out.write(f"  queue {queue}: {stats.line()}\n")
        self.out.flush()


def _read_secret(path: str, option: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().strip()
    except OSError as exc:
        raise BadConfiguration(f"{option}: cannot read {path!r}: {exc.strerror or exc}") from None
    if not line:
        raise BadConfiguration(f"{option}: {path!r} is empty")
    return line


def with_password(url: str, password: str) -> str:
    """``url`` with its password replaced (percent-encoded as a URL needs)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0] if "@" in parts.netloc else urllib.parse.quote("guest")
    netloc = f"{user}:{urllib.parse.quote(password, safe='')}@{host}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def broker_url(args: argparse.Namespace, side: str, environ: Mapping[str, str]) -> str:
    """The URL of ``side`` ("src" or "dest") from the options, a file or the environment,
    with the password from its file or the environment when given."""
    option = f"--{side}"
    url = getattr(args, side)
    url_file = getattr(args, f"{side}_url_file")
    if url is not None and url_file is not None:
        raise BadConfiguration(f"{option} and {option}-url-file: give one")
    if url is None and url_file is not None:
        url = _read_secret(url_file, f"{option}-url-file")
    if url is None:
        url = environ.get(ENV_URL[side]) or None
    if url is None:
        raise BadConfiguration(f"no {'source' if side == 'src' else 'destination'} URL: give {option}, "
                               f"{option}-url-file or ${ENV_URL[side]}")
    password_file = getattr(args, f"{side}_password_file")
    if password_file is not None:
        return with_password(url, _read_secret(password_file, f"{option}-password-file"))
    password = environ.get(ENV_PASSWORD[side])
    return with_password(url, password) if password else url


async def run(args: argparse.Namespace, display: Display, environ: Mapping[str, str] = os.environ,
              on_started: Optional[Callable[[], None]] = None) -> int:
    try:
        backoff = BackOff(args.backoff, max(args.max_backoff, args.backoff))
    except ValueError as exc:
        raise BadConfiguration(f"--backoff / --max-backoff: {exc}") from None
    if args.dead_letter_exchange is not None and args.on_refused != Refused.DEAD_LETTER.value:
        raise BadConfiguration("--dead-letter-exchange needs --on-refused dead-letter")
    if args.demand and args.duplex:
        raise BadConfiguration("--demand and --duplex: the reverse direction's consumer would count as demand")
    if args.on_refused != Refused.REQUEUE.value and not AckMode(args.ack_mode).confirms:
        raise BadConfiguration(f"--on-refused {args.on_refused} needs --ack-mode on-confirm or auto")
    if sum((args.config is not None, bool(args.src_queue), args.src_exchange is not None)) != 1:
        raise BadConfiguration("give --src-queue (repeatable), --src-exchange or --config")
    if args.src_exchange is None and (args.name is not None or args.delete_source_queue):
        raise BadConfiguration("--name and --delete-source-queue go with --src-exchange")
    tracing = None
    if args.tracing:
        from amqwire.client.tracing import Tracing, TracingUnavailable

        try:
            tracing = Tracing()
        except TracingUnavailable as exc:
            raise BadConfiguration(f"--tracing: {exc}") from None
    options = dict(
        tracing=tracing,
        dest_exchange=args.dest_exchange,
        dest_routing_key=args.dest_routing_key,
        keep_routing_key=args.keep_routing_key,
        ack_mode=args.ack_mode,
        prefetch=args.prefetch,
        duplex=args.duplex,
        max_hops=args.max_hops,
        include=args.include,
        exclude=args.exclude,
        refused=args.on_refused,
        max_attempts=args.max_attempts,
        dead_letter_exchange=args.dead_letter_exchange,
        backoff=backoff,
        demand=args.demand,
        demand_interval=args.demand_interval,
        probe=args.probe,
    )
    management_port = args.management_port or None
    src, dest = broker_url(args, "src", environ), broker_url(args, "dest", environ)
    bridge: Union[Bridge, Connector]
    if args.config is not None:
        specs, settings = load_config(args.config, options)
        if "management_port" in settings:
            management_port = settings["management_port"] or None
        if not args.rescan_interval >= 0:
            raise BadConfiguration(f"--rescan-interval must be 0 or more seconds, not {args.rescan_interval!r}")
        bridge = Connector(src, dest, specs, management_port=management_port, stats_interval=args.stats_interval,
                           on_stats=display.show, connection_timeout=args.connection_timeout,
                           rescan_interval=args.rescan_interval or None)
    elif args.src_exchange is not None:
        bridge = Bridge(src, None, dest, src_exchange=args.src_exchange, src_binding_key=args.src_binding_key,
                        name=args.name, delete_subscription=args.delete_source_queue, stats_interval=args.stats_interval,
                        on_stats=display.show, connection_timeout=args.connection_timeout,
                        management_port=management_port, **options)
    elif len(args.src_queue) > 1:
        bridge = Connector(src, dest, args.src_queue, management_port=management_port,
                           stats_interval=args.stats_interval, on_stats=display.show,
                           connection_timeout=args.connection_timeout, **options)
    else:
        bridge = Bridge(src, args.src_queue[0], dest, stats_interval=args.stats_interval, on_stats=display.show,
                        connection_timeout=args.connection_timeout, management_port=management_port, **options)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before start: a signal during start ends it cleanly
        loop.add_signal_handler(sig, stop.set)
    stopper = loop.create_task(stop.wait())
    starting = loop.create_task(bridge.start())
    await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # start() closes what it opened; nothing was acked
        starting.cancel()
        await asyncio.wait({starting})
        return 0
    if starting.exception() is not None:
        stopper.cancel()
        starting.result()  # raises why it could not start
    for name in _QUIET_WHILE_STARTING:  # from here on, reconnects are worth a warning
        logging.getLogger(name).setLevel(logging.NOTSET)
    if on_started is not None:
        on_started()
    display.show(bridge)  # at once: the first interval can be long
    waiter = loop.create_task(bridge.wait())
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


class _Summary(logging.Filter):
    """Without --verbose: warnings, and the INFO lines that say what is bridged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or bool(getattr(record, "amqwire_summary", False))


class _HeldWhileStarting(logging.Handler):
    """What the bridge logs while it starts, shown once it started: a start that fails is
    the one line main() prints, not the warnings of the way there."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """``prog``: the name usage and errors give the command (``amqwire bridge`` runs this too)."""
    args = parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    levels = {name: logging.getLogger(name).level for name in _QUIET_WHILE_STARTING}
    bridge_log = logging.getLogger("amqwire.bridge")
    shown = logging.StreamHandler(sys.stderr)
    shown.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    shown.addFilter(_Summary())
    held = _HeldWhileStarting()
    if not args.verbose:
        for name in _QUIET_WHILE_STARTING:  # a failed start is the one line main() prints
            logging.getLogger(name).setLevel(logging.CRITICAL)
        bridge_log.setLevel(logging.INFO)  # held, then shown through _Summary (not the root's WARNING)
        bridge_log.propagate = False
        bridge_log.addHandler(held)
    try:
        started = None if args.verbose else (lambda: _show_held(held, shown, bridge_log))
        return asyncio.run(run(args, Display(sys.stdout), on_started=started))
    except BridgeError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return exc.exit_code
    except ValueError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    finally:  # called in-process (tests, an embedding program): leave its loggers as they were
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        bridge_log.removeHandler(held)
        bridge_log.removeHandler(shown)
        bridge_log.propagate = True


def _show_held(held: _HeldWhileStarting, shown: logging.Handler, bridge_log: logging.Logger) -> None:
    bridge_log.removeHandler(held)
    for record in held.records:
        shown.handle(record)
    held.records.clear()
    bridge_log.setLevel(logging.INFO)
    bridge_log.addHandler(shown)


if __name__ == "__main__":
    sys.exit(main())
