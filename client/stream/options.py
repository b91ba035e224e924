"""What callers give the stream client, checked before anything is sent.

RabbitMQ 3.10 turns some bad values into a crash of its connection process rather than an
error code (``create_stream`` parses ``max-length-bytes`` with ``binary_to_integer``, and
ignores arguments it does not know): every option is checked here first and refused with
:class:`~amqwire.client.errors.StreamOptionError` naming it.
"""
from __future__ import annotations

import datetime
import re
from typing import Any, Callable, NamedTuple, Optional, Union

from ..errors import StreamOptionError

__all__ = [
    "OffsetSpec", "StreamOffset", "offset_spec", "retention_arguments", "check_name", "check_reference",
    "FIRST", "LAST", "NEXT", "OFFSET", "TIMESTAMP",
]

# the OffsetType of Subscribe
FIRST, LAST, NEXT, OFFSET, TIMESTAMP = 1, 2, 3, 4, 5
_WORDS = {"first": FIRST, "last": LAST, "next": NEXT}
_MAX_U64 = 2**64 - 1
_MAX_I64 = 2**63 - 1
_AGE = re.compile(r"[0-9]+[YMDhms]")
_MAX_NAME = 255  # a RabbitMQ queue name, in UTF-8 bytes
_MAX_REFERENCE = 256  # publisher references and consumer names (PROTOCOL.adoc)

#: Where a consumer starts: ``"first"``, ``"last"`` (the last chunk written: some messages
#: before the tail), ``"next"`` (what is appended from now on), an offset (int), or a point
#: in time (a datetime; naive means UTC: the first chunk written at or after it, to the
#: millisecond).
StreamOffset = Union[str, int, datetime.datetime]


class OffsetSpec(NamedTuple):
    """Subscribe's offset specification: ``kind`` (FIRST .. TIMESTAMP) and ``value`` (the
    offset, or milliseconds since the epoch; 0 for the words)."""

    kind: int
    value: int


def offset_spec(offset: Any, option: str = "offset") -> OffsetSpec:
    """The offset specification of ``offset``; StreamOptionError if it is not one."""
    if isinstance(offset, bool):
        raise StreamOptionError(option, f"expected 'first', 'last', 'next', an offset or a datetime, got {offset!r}")
    if isinstance(offset, int):
        if not 0 <= offset <= _MAX_I64:
            raise StreamOptionError(option, f"an offset is 0 .. 2**63-1, got {offset}")
        return OffsetSpec(OFFSET, offset)
    if isinstance(offset, datetime.datetime):
        if offset.tzinfo is None:
            offset = offset.replace(tzinfo=datetime.timezone.utc)
        elif offset.utcoffset() is None:
            raise StreamOptionError(option, f"{offset!r} has a tzinfo without a UTC offset")
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        millis = (offset - epoch) // datetime.timedelta(milliseconds=1)
        if not 0 <= millis <= _MAX_I64:
            raise StreamOptionError(option, f"{offset.isoformat()} is before 1970 or too far ahead")
        return OffsetSpec(TIMESTAMP, millis)
    if isinstance(offset, str) and offset in _WORDS:
        return OffsetSpec(_WORDS[offset], 0)
    raise StreamOptionError(option, f"expected 'first', 'last', 'next', an offset (int) or a datetime, got {offset!r}")


def end_offset(end: Any) -> Optional[int]:
    """A consumer's ``end`` (the last offset to read, inclusive) or None."""
    if end is None:
        return None
    if isinstance(end, bool) or not isinstance(end, int) or not 0 <= end <= _MAX_I64:
        raise StreamOptionError("end", f"expected an offset (int, 0 .. 2**63-1) or None, got {end!r}")
    return end


def check_name(name: Any, what: str = "stream") -> str:
    """A stream name: a non-empty str of at most 255 UTF-8 bytes."""
    if not isinstance(name, str):
        raise StreamOptionError(what, f"expected a str, got {type(name).__name__}")
    size = len(name.encode("utf-8", "surrogatepass"))
    if not 0 < size <= _MAX_NAME:
        raise StreamOptionError(what, f"a stream name is 1 .. {_MAX_NAME} bytes of UTF-8, got {size}")
    return name


def check_reference(reference: Any, what: str) -> Optional[str]:
    """A publisher reference or a consumer name: None, or 1 .. 256 UTF-8 bytes."""
    if reference is None:
        return None
    if not isinstance(reference, str):
        raise StreamOptionError(what, f"expected a str or None, got {type(reference).__name__}")
    size = len(reference.encode("utf-8", "surrogatepass"))
    if not 0 < size <= _MAX_REFERENCE:
        raise StreamOptionError(what, f"1 .. {_MAX_REFERENCE} bytes of UTF-8, got {size}")
    return reference


def _positive_int(option: str, value: Any, low: int = 1, high: int = _MAX_I64) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StreamOptionError(option, f"expected an integer {low} .. {high}, got {value!r}")
    return str(value)


def _max_age(value: Any) -> str:
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
        if seconds < 1 or seconds != int(seconds):
            raise StreamOptionError("max_age", f"a whole number of seconds, at least 1, got {value!r}")
        return f"{int(seconds)}s"
    if isinstance(value, str) and _AGE.fullmatch(value) and int(value[:-1]) > 0:
        return value
    raise StreamOptionError("max_age", f"expected a timedelta or a string such as '7D', '12h', '30m' (units Y M D h m s), "
                                       f"got {value!r}")


#: keyword of create_stream -> (the Create command's argument, its check)
_RETENTION: dict[str, tuple[str, Callable[[Any], str]]] = {
    "max_length_bytes": ("max-length-bytes", lambda v: _positive_int("max_length_bytes", v)),
    "max_age": ("max-age", _max_age),
    "max_segment_size_bytes": ("stream-max-segment-size-bytes",
                               lambda v: _positive_int("max_segment_size_bytes", v, 1, 3_000_000_000)),
    "initial_cluster_size": ("initial-cluster-size", lambda v: _positive_int("initial_cluster_size", v, 1, 255)),
    "leader_locator": ("queue-leader-locator", lambda v: _locator(v)),
}
_LOCATORS = ("client-local", "balanced", "least-leaders", "random")


def _locator(value: Any) -> str:
    if value not in _LOCATORS:
        raise StreamOptionError("leader_locator", f"expected one of {', '.join(_LOCATORS)}, got {value!r}")
    return str(value)


def retention_arguments(options: dict[str, Any]) -> dict[str, str]:
    """The Create command's arguments for create_stream's keywords (``max_length_bytes``,
    ``max_age``, ``max_segment_size_bytes``, ``initial_cluster_size``, ``leader_locator``;
    None leaves one out).  A keyword it does not know is refused: the broker would ignore it."""
    arguments = {}
    for key, value in options.items():
        known = _RETENTION.get(key)
        if known is None:
            raise StreamOptionError(key, f"not a stream argument (known: {', '.join(_RETENTION)})")
        if value is None:
            continue
        name, check = known
        arguments[name] = check(value)
    return arguments


def positive(option: str, value: Any, high: int) -> int:
    """An option that is an integer 1 .. high."""
    _positive_int(option, value, 1, high)
    return int(value)


#: Sub-entry compressions the codec writes (and reads back): name -> COMPRESSION_* code.
COMPRESSIONS = {"none": 0, "gzip": 1, "zstd": 4}


def compression_option(compression: Any, subentry_size: int) -> int:
    """The COMPRESSION_* code of a producer's ``compression`` (None: none)."""
    if compression is None:
        return 0
    if not isinstance(compression, str) or compression.lower() not in COMPRESSIONS:
        raise StreamOptionError("compression", f"expected one of {', '.join(COMPRESSIONS)} or None, got {compression!r}")
    code = COMPRESSIONS[compression.lower()]
    if code and not subentry_size:
        raise StreamOptionError("compression", "compresses sub-entries: give subentry_size= too (e.g. 100)")
    if code == 4:
        try:
            import zstandard  # noqa: F401
        except ImportError:
            raise StreamOptionError("compression", "zstd needs the zstandard package (pip install zstandard)") from None
    return code
