"""An independent reference encoder for the stream protocol's frames and Osiris chunks,
written from PROTOCOL.adoc, rabbit_stream_core.erl and osiris_log.erl with ``struct``
(never with amqwire's codec): the tests compare the codec's bytes with these, and the fuzz
corpus is made of them.
"""
from __future__ import annotations

import struct
import zlib
from typing import Iterable, Mapping, Sequence, Union


def u8(v: int) -> bytes:
    return struct.pack(">B", v)


def u16(v: int) -> bytes:
    return struct.pack(">H", v)


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def u64(v: int) -> bytes:
    return struct.pack(">Q", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    """int16 length + UTF-8; None is length -1."""
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return u16(len(raw)) + raw


def strings(items: Sequence[str]) -> bytes:
    return u32(len(items)) + b"".join(string(s) for s in items)


def string_map(items: Mapping[str, str]) -> bytes:
    return u32(len(items)) + b"".join(string(k) + string(v) for k, v in items.items())


def frame(key: int, version: int, content: bytes = b"") -> bytes:
    """size (of what follows) | key | version | content"""
    body = u16(key) + u16(version) + content
    return u32(len(body)) + body


def message_entry(message: bytes) -> bytes:
    """A published message or a chunk's simple entry: top bit 0, uint31 size, bytes."""
    assert len(message) < 1 << 31
    return u32(len(message)) + message


def subentry(records: Sequence[bytes], compression: int = 0, data: bytes | None = None) -> bytes:
    """A sub-entry: 1 | compression (3 bits) | 4 reserved bits, uint16 record count, uint32
    uncompressed size, uint32 size, data (the records, each uint32 size + bytes)."""
    raw = b"".join(u32(len(r)) + r for r in records)
    if data is None:
        if compression == 0:
            data = raw
        elif compression == 1:
            packer = zlib.compressobj(9, zlib.DEFLATED, 31)
            data = packer.compress(raw) + packer.flush()
        elif compression == 4:
            import zstandard

            data = zstandard.ZstdCompressor().compress(raw)
        else:
            raise ValueError(f"no reference compressor for {compression}")
    return u8(0x80 | compression << 4) + u16(len(records)) + u32(len(raw)) + u32(len(data)) + data


def data_section(body: bytes) -> bytes:
    """An AMQP 1.0 message of one data section: descriptor 0x75, vbin8 or vbin32."""
    if len(body) < 256:
        return b"\x00\x53\x75\xa0" + u8(len(body)) + body
    return b"\x00\x53\x75\xb0" + u32(len(body)) + body


Entry = Union[bytes, tuple]   # a record (simple entry), or ("sub", records, compression)


def chunk(
    entries: Iterable[Entry],
    first_offset: int = 0,
    *,
    timestamp: int = 1_700_000_000_000,
    epoch: int = 1,
    chunk_type: int = 0,
    trailer: bytes = b"",
    include_trailer: bool = False,
    crc: int | None = None,
    filter_size: int = 0,
    version_byte: int = 0x50,
) -> bytes:
    """An Osiris chunk as a Deliver carries it (header + data; the trailer only if
    ``include_trailer``), for simple entries (bytes) and ("sub", records, compression)."""
    data = b""
    num_entries = num_records = 0
    for entry in entries:
        num_entries += 1
        if isinstance(entry, tuple):
            _, records, compression = entry
            data += subentry(records, compression)
            num_records += len(records)
        else:
            data += message_entry(entry)
            num_records += 1
    header = (
        u8(version_byte) + u8(chunk_type) + u16(num_entries) + u32(num_records) + i64(timestamp) + u64(epoch)
        + u64(first_offset) + u32(zlib.crc32(data) if crc is None else crc) + u32(len(data)) + u32(len(trailer))
        + u8(filter_size) + b"\x00\x00\x00"
    )
    assert len(header) == 48
    return header + data + (trailer if include_trailer else b"")
