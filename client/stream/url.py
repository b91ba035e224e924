"""Stream-protocol URLs and parameters, as RabbitMQ's own stream clients spell them.

``rabbitmq-stream://user:pass@host:5552/vhost?heartbeat=60&frame_max=1048576
&connection_timeout=10`` and ``rabbitmq-stream+tls://...?cafile=..&certfile=..&keyfile=..
&verify=..&server_hostname=..`` (port 5551 by default).  User, password and vhost are
percent-decoded (``%2F`` is the vhost ``/``), an empty path is the vhost ``/``, and the
password never shows in a repr, a log line or an error: the same rules as ``amqp://`` URLs
(``amqwire.client.url``), which this module shares.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence, Union

from ..url import ConnectionParameters, _parse_bool, _parse_float, _parse_int, _quote, url_options
from .errors import InvalidStreamUrl

__all__ = ["StreamParameters", "parse_stream_url", "stream_parameters_list", "SCHEMES", "DEFAULT_PORT"]

DEFAULT_PORT = 5552
DEFAULT_TLS_PORT = 5551
#: scheme -> (TLS, default port)
SCHEMES = {"rabbitmq-stream": (False, DEFAULT_PORT), "rabbitmq-stream+tls": (True, DEFAULT_TLS_PORT)}
#: What the stream plugin accepts of the SASL mechanisms the client speaks.
STREAM_AUTH_MECHANISMS = ("PLAIN", "EXTERNAL")


def _mechanism(key: str, value: str) -> str:
    mechanism = value.upper()
    if mechanism not in STREAM_AUTH_MECHANISMS:
        raise ValueError(f"URL option {key} must be one of {', '.join(STREAM_AUTH_MECHANISMS)}, not {value!r}")
    return mechanism


_QUERY_OPTIONS: dict[str, Callable[[str, str], Any]] = {
    "heartbeat": _parse_int,
    "frame_max": _parse_int,
    "connection_timeout": _parse_float,
    "cafile": lambda key, value: value,
    "certfile": lambda key, value: value,
    "keyfile": lambda key, value: value,
    "verify": _parse_bool,
    "server_hostname": lambda key, value: value,
    "auth_mechanism": _mechanism,
}


@dataclasses.dataclass(frozen=True)
class StreamParameters(ConnectionParameters):
    """Where and how to reach a stream-protocol listener.  The password never shows.

    The fields are those of :class:`amqwire.client.ConnectionParameters` (so the socket
    and TLS code of the 0-9-1 client serves both), with the stream protocol's defaults:
    port 5552, frame_max 1 MiB (RabbitMQ's default), heartbeat 60 s.  ``channel_max`` and
    ``locale`` mean nothing here."""

    port: int = DEFAULT_PORT
    frame_max: int = 1048576

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.auth_mechanism not in STREAM_AUTH_MECHANISMS:
            raise ValueError(
                f"auth_mechanism must be one of {', '.join(STREAM_AUTH_MECHANISMS)}, not {self.auth_mechanism!r}"
            )

    def replace(self, **changes: Any) -> "StreamParameters":
        """A copy with some fields changed; None values leave a field as it is."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def display_url(self) -> str:
        """The URL without the password, for logs and error messages."""
        scheme = "rabbitmq-stream+tls" if self.ssl else "rabbitmq-stream"
        host = f"[{self.host}]" if ":" in self.host else self.host
        vhost = "" if self.vhost == "/" else "/" + _quote(self.vhost)
        user = "" if self.auth_mechanism == "EXTERNAL" else _quote(self.username) + "@"
        return f"{scheme}://{user}{host}:{self.port}{vhost}"

    def __str__(self) -> str:
        return self.display_url


def parse_stream_url(url: str) -> StreamParameters:
    """Parse a ``rabbitmq-stream://`` or ``rabbitmq-stream+tls://`` URL.  Raises
    :class:`InvalidStreamUrl` (a ValueError) naming the part that is wrong, never
    echoing the password."""
    if not isinstance(url, str):
        raise InvalidStreamUrl(f"a stream URL must be a str, not {type(url).__name__}")
    try:
        return StreamParameters(**url_options(url, SCHEMES, _QUERY_OPTIONS))
    except (ValueError, TypeError) as exc:
        raise InvalidStreamUrl(str(exc)) from None


StreamParametersLike = Union[str, StreamParameters]


def stream_parameters_list(
    target: Union[StreamParametersLike, Sequence[StreamParametersLike], None], **overrides: Any
) -> list[StreamParameters]:
    """What connect() accepts: a URL, parameters, or a list of them to try in order."""
    if target is None:
        target = "rabbitmq-stream://guest:guest@127.0.0.1:5552/"
    items: list[Any] = [target] if isinstance(target, (str, StreamParameters)) else list(target)
    if not items:
        raise InvalidStreamUrl("no URL to connect to")
    result = []
    for item in items:
        if isinstance(item, str):
            params = parse_stream_url(item)
        elif isinstance(item, StreamParameters):
            params = item
        else:
            raise InvalidStreamUrl(f"expected a rabbitmq-stream:// URL or StreamParameters, not {type(item).__name__}")
        try:
            result.append(params.replace(**overrides))
        except (ValueError, TypeError) as exc:
            raise InvalidStreamUrl(str(exc)) from None
    return result
