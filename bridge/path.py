"""The ``x-amqwire-path`` header: the brokers a message has left through a bridge, in order.

Each bridge appends the name of the broker it takes the message from.  A bridge does not
forward a message whose path already names its destination (it has been there: a loop),
and a bridge with ``max_hops`` drops one that crossed that many bridges already.

The header is written into the content header's property bytes as received
(``BasicProperties.wire``), not by decoding and encoding the properties again: every
other property and header keeps its exact bytes, field types included (a header sent as
a 16-bit int or a 32-bit float stays one).  Only the path entry is added, or replaced.
"""
from __future__ import annotations

import struct
from typing import Any, Optional, Sequence

from amqwire.codec import AmqwireError, BasicProperties, encode_array, encode_table

PATH_HEADER = "x-amqwire-path"
#: Marks the probe a bridge publishes at start to find a loop it cannot see (runner.py).
PROBE_HEADER = "x-amqwire-probe"

_F_CONTENT_TYPE = 0x8000
_F_CONTENT_ENCODING = 0x4000
_F_HEADERS = 0x2000
_F_CONTINUATION = 0x0001
_U32 = struct.Struct(">I")
_KEY = bytes([len(PATH_HEADER)]) + PATH_HEADER.encode()

# Size of a field-table value after its type letter, RabbitMQ's dialect: fixed, or a
# 4-byte length followed by that many bytes (None).
_FIXED = {
    ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4, ord("i"): 4,
    ord("f"): 4, ord("l"): 8, ord("L"): 8, ord("d"): 8, ord("T"): 8, ord("D"): 5, ord("V"): 0,
}
_SIZED = {ord("S"), ord("x"), ord("A"), ord("F")}


class PathError(AmqwireError, ValueError):
    """A content header whose property bytes do not parse where the path must go."""


def read_path(properties: Optional[BasicProperties]) -> list[str]:
    """The brokers a message has left, oldest first (empty for a message never bridged)."""
    headers = properties.headers if properties is not None else None
    if not headers:
        return []
    value = headers.get(PATH_HEADER)
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v) for v in value]
    return [str(value)]  # set by someone else as a single value: still one hop


def _entry_span(table: bytes, key: bytes) -> Optional[tuple[int, int]]:
    """Where the entry named ``key`` (length-prefixed) starts and ends inside ``table``."""
    pos, end = 0, len(table)
    while pos < end:
        start = pos
        klen = table[pos]
        name_end = pos + 1 + klen
        if name_end >= end:
            raise PathError(f"headers table: entry at byte {start} runs past the table's end")
        letter = table[name_end]
        pos = name_end + 1
        fixed = _FIXED.get(letter)
        if fixed is not None:
            pos += fixed
        elif letter in _SIZED:
            if pos + 4 > end:
                raise PathError(f"headers table: value length at byte {pos} runs past the table's end")
            pos += 4 + _U32.unpack_from(table, pos)[0]
        else:
            raise PathError(f"headers table: unknown field type {chr(letter)!r} at byte {name_end}")
        if pos > end:
            raise PathError(f"headers table: entry at byte {start} runs past the table's end")
        if table[start:name_end] == key:
            return start, pos
    return None


class PathWriter:
    """Adds this bridge's hop (``source_name``) to messages' property bytes.

    ``entry(path)`` caches the encoded header entry per distinct incoming path: almost
    every message of a run carries the same one.
    """

    def __init__(self, source_name: str) -> None:
        self.source_name = source_name
        self._entries: dict[tuple[str, ...], bytes] = {}

    def entry(self, path: tuple[str, ...]) -> bytes:
        encoded = self._entries.get(path)
        if encoded is None:
            encoded = _KEY + b"A" + encode_array([*path, self.source_name])
            if len(self._entries) < 1024:
                self._entries[path] = encoded
        return encoded

    def add_hop(self, properties: BasicProperties, path: tuple[str, ...]) -> bytes:
        """The property bytes (flags and list) to forward: the received ones with the path
        entry appended to the headers table (replacing an older path entry)."""
        wire = properties.wire
        if wire is None or (wire[0] << 8 | wire[1]) & _F_CONTINUATION:
            return self._encoded_again(properties, path)
        keys = (_KEY,) if path or (properties.headers and PATH_HEADER in properties.headers) else ()
        return _splice(wire, self.entry(path), keys)

    def _encoded_again(self, properties: BasicProperties, path: tuple[str, ...]) -> bytes:
        """For properties that were not received as bytes (or carry a second flag word,
        which no broker sends for basic): a copy with the path, encoded."""
        values: dict[str, Any] = properties.as_dict()
        headers = dict(values.get("headers") or {})
        headers[PATH_HEADER] = [*path, self.source_name]
        values["headers"] = headers
        return BasicProperties(**values).encode()


def with_headers(properties: BasicProperties, headers: dict[str, Any]) -> bytes:
    """The property bytes of ``properties`` as received, with ``headers`` set in the headers
    table (entries of the same names replaced; every other byte kept)."""
    wire = properties.wire
    if wire is None or (wire[0] << 8 | wire[1]) & _F_CONTINUATION:
        values: dict[str, Any] = properties.as_dict()
        values["headers"] = {**(values.get("headers") or {}), **headers}
        return BasicProperties(**values).encode()
    keys = [bytes([len(encoded)]) + encoded for encoded in (name.encode("utf-8") for name in headers)]
    return _splice(wire, encode_table(headers)[4:], keys)


def _splice(wire: bytes, added: bytes, keys: Sequence[bytes]) -> bytes:
    """The property bytes ``wire`` (flags, then the list) with ``added`` (encoded table
    entries) at the end of the headers table, the entries named ``keys`` (length-prefixed
    names) taken out first; every other byte as it was."""
    flags = wire[0] << 8 | wire[1]
    pos = 2
    if flags & _F_CONTENT_TYPE:
        pos += 1 + wire[pos]
    if flags & _F_CONTENT_ENCODING:
        pos += 1 + wire[pos]
    if not flags & _F_HEADERS:
        flags |= _F_HEADERS
        return b"".join((bytes((flags >> 8, flags & 0xFF)), wire[2:pos], _U32.pack(len(added)), added, wire[pos:]))
    table_end = pos + 4 + _U32.unpack_from(wire, pos)[0]
    table = wire[pos + 4:table_end]
    for key in keys:
        span = _entry_span(table, key)
        if span is not None:
            table = table[:span[0]] + table[span[1]:]
    return b"".join((wire[:pos], _U32.pack(len(table) + len(added)), table, added, wire[table_end:]))
