"""What every subcommand of the ``amqwire`` command shares: where to connect (URL,
password, timeout, with the secrets the error line must never show), the argument types,
and the masking of a failure's one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
from typing import Callable, Optional, Sequence
from urllib.parse import unquote

from amqwire.client import ConnectionParameters, parse_url

PROG = "amqwire"
ENV_URL = "AMQP_URL"
ENV_PASSWORD = "AMQP_PASSWORD"
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"


class UsageError(Exception):
    """Arguments or configuration that cannot work: exit code 2."""


STREAM_SCHEMES = ("rabbitmq-stream://", "rabbitmq-stream+tls://")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where to connect, with the secrets the error line must never show.  ``parameters``
    are a ``StreamParameters`` (a subclass) for a ``rabbitmq-stream://`` URL."""

    parameters: ConnectionParameters
    secrets: tuple[str, ...]

    @property
    def stream_protocol(self) -> bool:
        """Whether the URL names RabbitMQ's stream protocol (``rabbitmq-stream://``), not AMQP 0-9-1."""
        return is_stream_url(self.parameters.display_url)


def is_stream_url(url: str) -> bool:
    return url.strip().lower().startswith(STREAM_SCHEMES)


def _parse(url: str) -> ConnectionParameters:
    if is_stream_url(url):
        from amqwire.client.stream import parse_stream_url  # only the perf command speaks it

        return parse_stream_url(url)
    return parse_url(url)


def connection_settings(args: argparse.Namespace) -> Settings:
    """The URL from ``--url``, else ``$AMQP_URL``, else the local default; the password
    from ``--password-file``, else ``$AMQP_PASSWORD``, else the URL's."""
    url: str = args.url or os.environ.get(ENV_URL) or DEFAULT_URL
    secrets = url_passwords(url)
    try:
        parameters = _parse(url.strip())
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


def url_passwords(url: str) -> list[str]:
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
                       "perf also takes rabbitmq-stream://user:pass@host:5552/vhost; a password here is visible in ps)")
    group.add_argument("--password-file", metavar="PATH",
                       help=f"read the password from this file's first line (default: ${ENV_PASSWORD}, else the URL's)")
    group.add_argument("--connect-timeout", type=positive_float, metavar="SECONDS",
                       help="give up connecting after this long (default: the URL's, else 10)")
    group.add_argument("-v", "--verbose", action="store_true", help="log the client's diagnostics on stderr")
    return common


Handler = Callable[[argparse.Namespace, Settings], int]
