"""amqwire.codec.stream.chunk.RecordReader: the records of a chunk one at a time, in C.

It must read exactly what ``decode_chunk(...).offsets_and_messages()`` reads (the chunk
module's own reader), refuse what that refuses, and tell where a record sits (``offset``)."""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from amqwire.codec.errors import ChunkError
from amqwire.codec.stream.chunk import RecordReader, decode_chunk


def entry(record: bytes) -> tuple[bytes, int]:
    return struct.pack(">I", len(record)) + record, 1


def subentry(records: list[bytes], compression: int = 0) -> tuple[bytes, int]:
    raw = b"".join(struct.pack(">I", len(r)) + r for r in records)
    data = raw
    if compression == 1:
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)
        data = packer.compress(raw) + packer.flush()
    return struct.pack(">BHII", 0x80 | (compression << 4), len(records), len(raw), len(data)) + data, len(records)


def chunk(entries, first_offset=0, chunk_type=0, num_records=None, timestamp=1_700_000_000_123) -> bytes:
    data = b"".join(e for e, _ in entries)
    records = sum(n for _, n in entries) if num_records is None else num_records
    head = struct.pack(">BBHIqQQIII", 0x50, chunk_type, len(entries), records, timestamp, 1, first_offset,
                       zlib.crc32(data), len(data), 0) + b"\0" * 4
    return head + data


def test_simple_entries_and_sub_entries_in_order():
    data = chunk([entry(b"a"), subentry([b"bb", b"ccc"]), subentry([b"dd", b"e"], 1), subentry([]), entry(b"")],
                 first_offset=10)
    reader = RecordReader(data)
    assert (reader.first_offset, reader.next_offset, reader.timestamp) == (10, 16, 1_700_000_000_123)
    assert list(reader) == [(10, b"a"), (11, b"bb"), (12, b"ccc"), (13, b"dd"), (14, b"e"), (15, b"")]
    assert reader.offset == 15
    assert list(RecordReader(bytearray(data))) == decode_chunk(data).offsets_and_messages()


def test_a_tracking_chunk_has_no_records():
    data = chunk([entry(b"tracking")], first_offset=7, chunk_type=1)
    reader = RecordReader(data)
    assert list(reader) == [] and reader.next_offset == 8


def test_a_wrong_record_count_or_trailing_bytes_are_refused():
    with pytest.raises(ChunkError, match="its entries hold 2 records, its header says 3"):
        list(RecordReader(chunk([entry(b"a"), entry(b"b")], num_records=3)))
    one, _ = entry(b"a")
    with pytest.raises(ChunkError, match="2 bytes after its 1 entries"):
        list(RecordReader(chunk([(one + b"xx", 1)])))


def test_a_bad_crc_is_refused_unless_asked_not_to_check():
    data = bytearray(chunk([entry(b"abc")]))
    data[-1] ^= 0xFF
    with pytest.raises(ChunkError, match="CRC32"):
        RecordReader(bytes(data))
    assert list(RecordReader(bytes(data), check_crc=False)) == [(0, b"ab\x9c")]


records = st.lists(st.binary(max_size=40), max_size=6)
layouts = st.lists(st.one_of(st.binary(max_size=40).map(lambda r: ("entry", [r])),
                             st.tuples(st.just("sub"), records),
                             st.tuples(st.just("gzip"), records)), max_size=8)


def build(layout, first_offset):
    parts = []
    for kind, items in layout:
        if kind == "entry":
            parts.append(entry(items[0]))
        else:
            parts.append(subentry(items, 1 if kind == "gzip" else 0))
    return chunk(parts, first_offset=first_offset)


@settings(max_examples=150, deadline=None)
@given(layouts, st.integers(0, 2**40))
def test_reads_what_the_chunk_module_reads(layout, first_offset):
    data = build(layout, first_offset)
    assert outcome(lambda: list(RecordReader(data))) == outcome(lambda: decode_chunk(data).offsets_and_messages())


@settings(max_examples=60, deadline=None)
@given(layouts.filter(bool))
def test_a_cut_chunk_fails_as_the_chunk_module_fails(layout):
    data = build(layout, 0)
    for size in range(len(data)):
        cut = data[:size]
        assert outcome(lambda cut=cut: list(RecordReader(cut, check_crc=False))) == \
            outcome(lambda cut=cut: decode_chunk(cut, check_crc=False).offsets_and_messages()), size


def outcome(read):
    """What ``read()`` returns, or that it raised ChunkError (an empty sub-entry, a cut chunk)."""
    try:
        return read()
    except ChunkError:
        return ChunkError
