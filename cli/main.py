"""The ``amqwire`` command: argument parsing, the connection settings every subcommand
shares, and how a failure ends the program (one line on stderr, never a password).

Exit codes: 0 done; 1 failed while running (broker unreachable, credentials refused, a
queue missing, a publish nacked, ...); 2 bad arguments or configuration (a bad URL, a
body file that cannot be read).  ``amqwire bridge`` keeps the bridge's own codes.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
from typing import Callable, Optional, Sequence
from urllib.parse import unquote

from amqwire.client import AmqwireError, ConnectionParameters, parse_url

PROG = "amqwire"
ENV_URL = "AMQP_URL"
ENV_PASSWORD = "AMQP_PASSWORD"
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
# The client logs what it retries and why; a command reports a failure in its one line.
_QUIET_UNLESS_VERBOSE = ("amqwire.client", "amqwire.bridge")


class UsageError(Exception):
    """Arguments or configuration that cannot work: exit code 2."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where to connect, with the secrets the error line must never show."""

    parameters: ConnectionParameters
    secrets: tuple[str, ...]


def connection_settings(args: argparse.Namespace) -> Settings:
    """The URL from ``--url``, else ``$AMQP_URL``, else the local default; the password
    from ``--password-file``, else ``$AMQP_PASSWORD``, else the URL's."""
    url: str = args.url or os.environ.get(ENV_URL) or DEFAULT_URL
    secrets = _url_passwords(url)
    try:
        parameters = parse_url(url.strip())
    except ValueError as exc:
        raise UsageError(f"bad URL: {exc}") from None
    password: Optional[str] = None
    if args.password_file:
        password = _read_first_line(args.password_file, "password file")
    elif os.environ.get(ENV_PASSWORD):
        password = os.environ[ENV_PASSWORD]
    if password is not None:
        parameters = dataclasses.replace(parameters, password=password)
    secrets.append(parameters.password)
    if args.connect_timeout is not None:
        parameters = dataclasses.replace(parameters, connection_timeout=args.connect_timeout)
    return Settings(parameters, tuple(s for s in secrets if s))


def _url_passwords(url: str) -> list[str]:
    # Taken apart by hand: a URL the parser refuses must not leak its password either.
    match = re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://([^@]*)@", url.strip())
    if not match or ":" not in match.group(1):
        return []
    raw = match.group(1).split(":", 1)[1]
    return [raw, unquote(raw)]


def _read_first_line(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.readline().rstrip("\r\n")
    except OSError as exc:
        raise UsageError(f"cannot read the {what} {path}: {exc.strerror}") from None


def redact(text: str, secrets: Sequence[str]) -> str:
    """One line with every secret masked, and any URL's user-info password too.

    The client's exceptions never contain a password; this is the second line of defence,
    so it skips secrets under 4 characters, which would mask letters all over the line."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "****")
    text = re.sub(r"(://[^:/@\s]*):[^@\s]*@", r"\1:****@", text)
    return " ".join(text.split())


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an int from ``low`` to ``high``."""
    def parse(text: str) -> int:
        value = _integer(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}: {text!r}")
        return value
    return parse


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def connection_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection")
    group.add_argument("--url", "--uri", metavar="URL",
                       help=f"amqp://user:pass@host:port/vhost (default: ${ENV_URL}, else {DEFAULT_URL.replace(':guest@', ':****@')}; "
                       "a password here is visible in ps)")
    group.add_argument("--password-file", metavar="PATH",
                       help=f"read the password from this file's first line (default: ${ENV_PASSWORD}, else the URL's)")
    group.add_argument("--connect-timeout", type=positive_float, metavar="SECONDS",
                       help="give up connecting after this long (default: the URL's, else 10)")
    group.add_argument("-v", "--verbose", action="store_true", help="log the client's diagnostics on stderr")
    return common


Handler = Callable[[argparse.Namespace, Settings], int]


def parser() -> argparse.ArgumentParser:
    from . import messages, perf

    top = argparse.ArgumentParser(
        prog=PROG,
        description="Publish, read and measure with RabbitMQ (AMQP 0-9-1) from a shell.",
        epilog="exit codes: 0 done, 1 failed while running, 2 bad arguments or configuration. "
        f"The URL comes from --url or ${ENV_URL}, a password alone from --password-file or ${ENV_PASSWORD}.",
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = connection_options()
    messages.add_commands(commands, common)
    perf.add_command(commands, common)
    commands.add_parser("bridge", help="forward a queue to an exchange on another broker (amqwire bridge --help)",
                        add_help=False)
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["bridge"]:
        from amqwire.bridge.__main__ import main as bridge_main

        return bridge_main(arguments[1:], prog=f"{PROG} bridge")
    args = parser().parse_args(arguments)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.verbose:
        for name in _QUIET_UNLESS_VERBOSE:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    secrets: Sequence[str] = _url_passwords(args.url or os.environ.get(ENV_URL) or "")
    try:
        settings = connection_settings(args)
        secrets = settings.secrets
        handler: Handler = args.handler
        return handler(args, settings)
    except UsageError as exc:
        return _fail(str(exc), 2, secrets)
    except AmqwireError as exc:
        return _fail(str(exc) or type(exc).__name__, 1, secrets)
    except BrokenPipeError:  # stdout closed early (| head): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # a socket error the client did not wrap
        return _fail(f"{type(exc).__name__}: {exc}", 1, secrets)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, code: int, secrets: Sequence[str]) -> int:
    try:
        sys.stdout.flush()
    except OSError:
        pass
    sys.stderr.write(f"{PROG}: error: {redact(message, secrets)}\n")
    return code
