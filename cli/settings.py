"""What every subcommand of the ``amqwire`` command shares: where to connect (URL,
password, timeout), the argument types, and the masking of a failure's one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Callable, Optional
from urllib.parse import urlsplit

from amqwire.client import ConnectionParameters, mask_url_passwords, parse_url

PROG = "amqwire"
ENV_URL = "AMQP_URL"
ENV_PASSWORD = "AMQP_PASSWORD"
DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"


class UsageError(Exception):
    """Arguments or configuration that cannot work: exit code 2."""


STREAM_SCHEMES = ("rabbitmq-stream://", "rabbitmq-stream+tls://")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where to connect.  ``parameters`` are a ``StreamParameters`` (a subclass) for a
    ``rabbitmq-stream://`` URL."""

    parameters: ConnectionParameters

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
    from ``--password-file``, else ``$AMQP_PASSWORD``, else the URL's.  A password from the
    file or the environment and another in a given URL: refused (which one was meant?)."""
    given: Optional[str] = args.url or os.environ.get(ENV_URL)
    url = given or DEFAULT_URL
    try:
        parameters = _parse(url.strip())
    except ValueError as exc:
        raise UsageError(f"bad URL: {exc}") from None
    password: Optional[str] = None
    source = ""
    if args.password_file:
        password, source = _read_first_line(args.password_file, "password file"), "--password-file"
    elif os.environ.get(ENV_PASSWORD):
        password, source = os.environ[ENV_PASSWORD], f"${ENV_PASSWORD}"
    if password is not None:
        if given is not None and _has_password(given) and parameters.password != password:
            where = "--url" if args.url else f"${ENV_URL}"
            raise UsageError(f"two different passwords: the URL's ({where}) and {source}'s; give one "
                             "(a URL without one: amqp://user@host/)")
        parameters = dataclasses.replace(parameters, password=password)
    if args.connect_timeout is not None:
        parameters = dataclasses.replace(parameters, connection_timeout=args.connect_timeout)
    return Settings(parameters)


def _has_password(url: str) -> bool:
    try:
        return urlsplit(url.strip()).password is not None
    except ValueError:
        return False


def _read_first_line(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.readline().rstrip("\r\n")
    except OSError as exc:
        raise UsageError(f"cannot read the {what} {path}: {exc.strerror}") from None


def redact(text: str) -> str:
    """One line, with the password field of any URL in it masked, and nothing else.

    The client's exceptions never contain a password (they show a URL as
    ``amqp://user@host:port``); this is the second line of defence, for a URL written out
    whole.  Not a search for the password's text, which would also mask the same letters
    in a user name (``guest:guest``), a vhost or a queue's name."""
    return " ".join(mask_url_passwords(text).split())


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
