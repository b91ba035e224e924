"""The ``amqwire`` command: its subcommands, and how a failure ends the program (one line
on stderr, never a password).

Exit codes: 0 done; 1 failed while running (broker unreachable, credentials refused, a
queue missing, a publish nacked, ...); 2 bad arguments or configuration (a bad URL, a
body file that cannot be read).  ``amqwire bridge`` keeps the bridge's own codes.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Optional, Sequence

from amqwire.client import AmqwireError

from . import messages, perf
from .settings import ENV_PASSWORD, ENV_URL, PROG, Handler, UsageError, connection_options, connection_settings, redact

# The client logs what it retries and why; a command reports a failure in its one line.
_QUIET_UNLESS_VERBOSE = ("amqwire.client", "amqwire.bridge")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="Publish, read and measure with RabbitMQ (AMQP 0-9-1; perf also the stream protocol) from a shell.",
        epilog="exit codes: 0 done, 1 failed while running, 2 bad arguments or configuration. "
        f"The URL comes from --url or ${ENV_URL}, a password alone from --password-file or ${ENV_PASSWORD}.",
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = connection_options()
    messages.add_commands(commands, common)
    perf.add_command(commands, common)
    commands.add_parser("bridge", help="forward a queue to an exchange on another broker (amqwire bridge --help)",
                        add_help=False)
    for command in commands.choices.values():  # an unknown option gets its subcommand's usage
        command.set_defaults(command_parser=command)
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["bridge"]:
        from amqwire.bridge.__main__ import main as bridge_main

        return bridge_main(arguments[1:], prog=f"{PROG} bridge")
    args, unknown = parser().parse_known_args(arguments)
    if unknown:
        command_parser: argparse.ArgumentParser = args.command_parser
        command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # exits 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    levels = {name: logging.getLogger(name).level for name in _QUIET_UNLESS_VERBOSE}
    if not args.verbose:
        for name in _QUIET_UNLESS_VERBOSE:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        settings = connection_settings(args)
        if settings.stream_protocol and args.command != "perf":
            raise UsageError(f"{args.command} speaks AMQP 0-9-1 (an amqp:// URL): only perf takes a "
                             "rabbitmq-stream:// URL")
        handler: Handler = args.handler
        return handler(args, settings)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except AmqwireError as exc:
        return _fail(str(exc) or type(exc).__name__, 1)
    except BrokenPipeError:  # stdout closed early (| head): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # a socket error the client did not wrap
        return _fail(f"{type(exc).__name__}: {exc}", 1)
    except KeyboardInterrupt:
        return 130
    finally:  # called in-process (tests, an embedding program): leave its loggers as they were
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _fail(message: str, code: int) -> int:
    try:
        sys.stdout.flush()
    except OSError:
        pass
    sys.stderr.write(f"{PROG}: error: {redact(message)}\n")
    return code
