"""Connection URLs and parameters.

``amqp://user:pass@host:port/vhost?heartbeat=10&frame_max=131072&channel_max=2047
&connection_timeout=5`` and ``amqps://...?cafile=..&certfile=..&keyfile=..&verify=..
&server_hostname=..``.  User, password and vhost are percent-decoded (``%2F`` is the vhost
``/``); an empty path means the vhost ``/``, as in RabbitMQ's URI spec.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Optional, Sequence, Union
from urllib.parse import parse_qsl, unquote, urlsplit

FRAME_MIN_SIZE = 4096
AUTH_MECHANISMS = ("PLAIN", "AMQPLAIN", "EXTERNAL")


@dataclasses.dataclass(frozen=True)
class ConnectionParameters:
    """Where and how to connect.  The password never shows in repr or str."""

    host: str = "127.0.0.1"
    port: int = 5672
    vhost: str = "/"
    username: str = "guest"
    password: str = dataclasses.field(default="guest", repr=False)
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    connection_timeout: float = 10.0
    ssl: bool = False
    cafile: Optional[str] = None
    certfile: Optional[str] = None
    keyfile: Optional[str] = None
    verify: bool = True
    server_hostname: Optional[str] = None
    locale: str = "en_US"
    auth_mechanism: str = "PLAIN"

    def __post_init__(self) -> None:
        _check_int("port", self.port, 1, 65535)
        _check_int("heartbeat", self.heartbeat, 0, 65535)
        _check_int("frame_max", self.frame_max, FRAME_MIN_SIZE, 0xFFFFFFFF, zero_ok=True)
        _check_int("channel_max", self.channel_max, 1, 65535, zero_ok=True)
        if not isinstance(self.connection_timeout, (int, float)) or not self.connection_timeout > 0:
            raise ValueError(f"connection_timeout must be a number > 0, not {self.connection_timeout!r}")
        if self.auth_mechanism not in AUTH_MECHANISMS:
            raise ValueError(f"auth_mechanism must be one of {', '.join(AUTH_MECHANISMS)}, not {self.auth_mechanism!r}")
        for name in ("host", "vhost", "username", "password", "locale"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str, not {type(getattr(self, name)).__name__}")

    def replace(self, **changes: Any) -> "ConnectionParameters":
        """A copy with some fields changed; None values leave a field as it is."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def display_url(self) -> str:
        """The URL without the password, for logs and error messages."""
        scheme = "amqps" if self.ssl else "amqp"
        host = f"[{self.host}]" if ":" in self.host else self.host
        vhost = "" if self.vhost == "/" else "/" + _quote(self.vhost)
        user = "" if self.auth_mechanism == "EXTERNAL" else _quote(self.username) + "@"  # EXTERNAL sends no user
        return f"{scheme}://{user}{host}:{self.port}{vhost}"

    def __str__(self) -> str:
        return self.display_url


# scheme://user:PASSWORD@ : the user name stops at the first ':' (a raw one cannot be in
# it); the password runs to the last '@' of the URL (a raw '@' in it is a mistake, but
# still a password), never across white space.
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):\S*@")


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``****``, and nothing else:
    the user name, host and vhost stay as they are, whatever the password's text (a user
    ``guest`` with the password ``guest`` still reads ``amqp://guest:****@host``)."""
    return _URL_PASSWORD.sub(r"\1:****@", text)


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _check_int(name: str, value: Any, low: int, high: int, zero_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if zero_ok and value == 0:
        return
    if not low <= value <= high:
        extra = " (or 0 for no limit)" if zero_ok else ""
        raise ValueError(f"{name} must be between {low} and {high}{extra}, not {value}")


def _parse_bool(key: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"URL option {key} must be true or false, not {value!r}")


def _parse_int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"URL option {key} must be an integer, not {value!r}") from None


def _parse_float(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"URL option {key} must be a number, not {value!r}") from None
    if not number > 0:
        raise ValueError(f"URL option {key} must be > 0, not {value!r}")
    return number


_QUERY_OPTIONS: dict[str, Callable[[str, str], Any]] = {
    "heartbeat": _parse_int,
    "frame_max": _parse_int,
    "channel_max": _parse_int,
    "connection_timeout": _parse_float,
    "cafile": lambda key, value: value,
    "certfile": lambda key, value: value,
    "keyfile": lambda key, value: value,
    "verify": _parse_bool,
    "server_hostname": lambda key, value: value,
    "locale": lambda key, value: value,
    "auth_mechanism": lambda key, value: value.upper(),
}
_TLS_ONLY = ("cafile", "certfile", "keyfile", "verify", "server_hostname")


def parse_option(key: str, value: str) -> Any:
    """One connection option given as text (a URL query option, or a Spark ``amqp.*``
    option), converted and checked by the URL's rules."""
    parser = _QUERY_OPTIONS.get(key)
    if parser is None:
        raise ValueError(f"unknown connection option {key!r} (known: {', '.join(_QUERY_OPTIONS)})")
    return parser(key, value)


def parse_url(url: str) -> ConnectionParameters:
    """Parse an ``amqp://`` or ``amqps://`` URL; errors name the part that is wrong."""
    return ConnectionParameters(**url_options(url, {"amqp": (False, 5672), "amqps": (True, 5671)}, _QUERY_OPTIONS))


def url_options(
    url: str, schemes: dict[str, tuple[bool, int]], query_options: dict[str, Callable[[str, str], Any]]
) -> dict[str, Any]:
    """The keyword arguments of a parameters class that a URL gives: ``schemes`` maps each
    scheme accepted to (TLS, default port), ``query_options`` each query option to its
    parser.  Errors (ValueError, TypeError) name the part that is wrong."""
    if not isinstance(url, str):
        raise TypeError(f"URL must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise ValueError(f"URL scheme must be {' or '.join(schemes)}, not {parts.scheme!r}")
    if "@" not in parts.netloc and "@" in parts.path + parts.query + parts.fragment:
        # amqp://user:5690/SECRET@host: a raw '/', '?' or '#' in the password ended the
        # host part early; what follows it is part of the password, so never echo it.
        raise ValueError(
            "malformed URL: an '@' after the host part; percent-encode '/', '?', '#' and '@' "
            "in the user name and password (%2F, %3F, %23, %40)"
        )
    tls, default_port = schemes[scheme]
    options: dict[str, Any] = {"ssl": tls}
    try:
        port = parts.port
    except ValueError:
        raise ValueError("URL port must be an integer between 1 and 65535") from None
    if parts.hostname:
        options["host"] = unquote(parts.hostname)
    options["port"] = port if port is not None else default_port
    if parts.username is not None:
        options["username"] = unquote(parts.username)
    if parts.password is not None:
        options["password"] = unquote(parts.password)
    path = parts.path
    if path not in ("", "/"):
        vhost = path[1:]
        if "/" in vhost:
            raise ValueError("URL vhost must be one path segment; write a '/' in it as %2F")
        options["vhost"] = unquote(vhost)
    seen = set()
    tls_scheme = next((name for name, (secure, _) in schemes.items() if secure), "TLS")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        parser = query_options.get(key)
        if parser is None:
            raise ValueError(f"unknown URL option {key!r} (known: {', '.join(query_options)})")
        if key in seen:
            raise ValueError(f"URL option {key} is given more than once")
        seen.add(key)
        if key in _TLS_ONLY and not tls:
            raise ValueError(f"URL option {key} needs a TLS URL ({tls_scheme}://)")
        options[key] = parser(key, value)
    return options


ParametersLike = Union[str, ConnectionParameters]


def parameters_list(
    target: Union[ParametersLike, Sequence[ParametersLike], None], **overrides: Any
) -> list[ConnectionParameters]:
    """Normalize what connect() accepts: a URL, parameters, or a list of them to try in order."""
    if target is None:
        target = "amqp://guest:guest@127.0.0.1:5672/"
    items = [target] if isinstance(target, (str, ConnectionParameters)) else list(target)
    if not items:
        raise ValueError("no URL to connect to")
    result = []
    for item in items:
        params = parse_url(item) if isinstance(item, str) else item
        if not isinstance(params, ConnectionParameters):
            raise TypeError(f"expected a URL or ConnectionParameters, not {type(item).__name__}")
        result.append(params.replace(**overrides))
    return result
