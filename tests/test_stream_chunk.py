"""Osiris chunks (amqwire.codec.stream.chunk): the header as RabbitMQ 3.10.8 writes it,
simple entries and sub-entries (none, gzip, zstd; snappy and lz4 refused), the CRC32, every
truncation, from_offset, hypothesis."""
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amqwire.codec.stream as S
from amqwire.codec import CodecError
from amqwire.codec.stream import ChunkError

import stream_reference as R

HELLO = b"\x00\x53\x75\xa0\x05hello"      # an AMQP 1.0 message: one data section, "hello"

# A Deliver's chunk as RabbitMQ 3.10.8 (osiris 1.3.1) sent it (test_stream_codec_broker.py
# records one): 10 messages published with a publisher reference, so a 17-byte trailer
# (the writer's deduplication sequence) that the deliver leaves out.
CHUNK_3_10_8 = bytes.fromhex(
    "50"                  # magic 5, chunk format version 0
    "00"                  # chunk type: user
    "000a"                # 10 entries
    "0000000a"            # 10 records
    "000001a21f8f76d4"    # timestamp, ms
    "0000000000000001"    # epoch
    "0000000000000000"    # first offset
    "ae299069"            # CRC32 of the data
    "0000008c"            # 140 bytes of data
    "00000011"            # 17 bytes of trailer
    "00000000"            # reserved
) + (b"\x00\x00\x00\x0a" + HELLO) * 10


def test_the_header_rabbitmq_3_10_8_writes():
    c = S.decode_chunk(CHUNK_3_10_8)
    assert (c.version, c.chunk_type, c.num_entries, c.num_records) == (0, 0, 10, 10)
    assert (c.timestamp, c.epoch, c.first_offset, c.next_offset) == (0x1A21F8F76D4, 1, 0, 10)
    assert (c.crc, c.data_size, c.trailer_size, c.filter_size) == (0xAE299069, 140, 17, 0)
    assert c.crc == zlib.crc32(CHUNK_3_10_8[48:])
    assert c.offsets_and_messages() == [(i, HELLO) for i in range(10)]
    assert c.data is CHUNK_3_10_8
    assert repr(c).startswith("Chunk(first_offset=0, chunk_type=0, num_entries=10")
    assert S.chunk_messages(CHUNK_3_10_8, 0, decode=False) == (0, 0x1A21F8F76D4, [HELLO] * 10)


def test_the_reference_chunk_is_the_same():
    assert R.chunk([HELLO] * 10, 0, timestamp=0x1A21F8F76D4, epoch=1, trailer=bytes(17)) == CHUNK_3_10_8


def test_a_chunk_with_its_trailer_and_a_newer_header_byte():
    """A chunk as stored (a data reader's) carries its trailer; osiris 1.7+ (RabbitMQ 3.13)
    writes its bloom filter's size at byte 44 (the deliver leaves the filter out)."""
    whole = R.chunk([b"a", b"bb"], 5, trailer=b"T" * 9, include_trailer=True, filter_size=16)
    c = S.decode_chunk(whole)
    assert (c.trailer_size, c.filter_size) == (9, 16)
    assert c.offsets_and_messages() == [(5, b"a"), (6, b"bb")]


def test_buffers_of_any_kind():
    data = R.chunk([b"x", b"yz"], 3)
    for buf in (bytearray(data), memoryview(data), memoryview(b"..." + data)[3:]):
        assert S.decode_chunk(buf).offsets_and_messages() == [(3, b"x"), (4, b"yz")]
        assert S.chunk_messages(buf, decode=False) == (3, 1_700_000_000_000, [b"x", b"yz"])


def test_a_deliver_from_the_parser_is_read_in_place():
    data = R.chunk([bytes([i]) * 100 for i in range(100)], 1000)
    (deliver,) = S.StreamParser().feed(S.Deliver(1, data).encode())
    first, ts, records = S.chunk_messages(deliver.chunk, 1050, decode=False)
    assert (first, len(records), records[0]) == (1050, 50, bytes([50]) * 100)


# --------------------------------------------------------------------------- sub-entries


def test_sub_entries_none_gzip_zstd_mixed_with_simple_entries():
    entries = [
        b"first",
        ("sub", [b"a", b"bb", b""], 0),
        ("sub", [b"g%d" % i * 20 for i in range(30)], 1),
        b"middle",
        ("sub", [HELLO] * 5, 4),
        b"last",
    ]
    data = R.chunk(entries, 100)
    c = S.decode_chunk(data)
    assert (c.num_entries, c.num_records) == (6, 1 + 3 + 30 + 1 + 5 + 1)
    expected = [b"first", b"a", b"bb", b""] + [b"g%d" % i * 20 for i in range(30)] + [b"middle"] + [HELLO] * 5 + [b"last"]
    assert c.offsets_and_messages() == list(enumerate(expected, 100))
    for start in (0, 100, 101, 103, 104, 120, 134, 135, 139, 140, 141, 1000):
        first, _, got = S.chunk_messages(data, start, decode=False)
        kept = expected[max(0, start - 100):]
        assert got == kept
        assert first == (max(start, 100) if kept else 141)


def test_a_gzip_sub_entry_with_a_zlib_header_is_read_too():
    raw = b"".join(R.u32(len(r)) + r for r in (b"x", b"y"))
    data = R.chunk([("sub", [b"x", b"y"], 0)])
    packed = zlib.compress(raw)
    sub = b"\x90" + R.u16(2) + R.u32(len(raw)) + R.u32(len(packed)) + packed
    assert S.decode_chunk(_with_data(data, sub)).offsets_and_messages() == [(0, b"x"), (1, b"y")]


def _with_data(chunk, data, records=None):
    """``chunk`` with its data replaced (sizes and CRC fixed)."""
    header = bytearray(chunk[:48])
    header[36:40] = R.u32(len(data))
    header[32:36] = R.u32(zlib.crc32(data))
    if records is not None:
        header[4:8] = R.u32(records)
    return bytes(header) + data


@pytest.mark.parametrize("code,name", [(2, "snappy"), (3, "lz4"), (5, "code 5"), (7, "code 7")])
def test_compressions_without_a_reader_are_named(code, name):
    data = R.chunk([b"a", ("sub", [b"x"], 0)], 7)
    data = _with_data(data, data[48:53] + bytes([0x80 | code << 4]) + data[54:])
    with pytest.raises(ChunkError, match=f"chunk 7: the sub-entry at offset 53 is compressed with {name}") as info:
        S.decode_chunk(data).offsets_and_messages()
    assert (info.value.first_offset, info.value.offset) == (7, 53)
    # a subscription past that sub-entry never decompresses it
    assert S.chunk_messages(data, 9, decode=False) == (9, 1_700_000_000_000, [])
    with pytest.raises(ChunkError, match="compressed with"):
        S.chunk_messages(data, 0, decode=False)


def test_zstd_without_the_zstandard_package(monkeypatch):
    import sys

    data = R.chunk([("sub", [b"x"], 4)], 3)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(ChunkError, match=r"chunk 3: the sub-entry at offset 48 is compressed with zstd, which needs "
                                         r"the zstandard package"):
        S.decode_chunk(data).offsets_and_messages()


@pytest.mark.parametrize("mutate,message", [
    (lambda sub: sub[:11] + b"garbage" + sub[18:], "the gzip sub-entry at offset 48 does not decompress"),
    (lambda sub: sub[:3] + R.u32(int.from_bytes(sub[3:7], "big") + 1) + sub[7:], "decompresses to 22 bytes, it announces 23"),
    (lambda sub: sub[:3] + R.u32(int.from_bytes(sub[3:7], "big") - 1) + sub[7:], "decompresses to more than 21 bytes, it announces 21"),
    (lambda sub: sub[:3] + R.u32(S.chunk.MAX_SUBENTRY_SIZE + 1) + sub[7:], "over the limit of 67108864"),
])
def test_bad_gzip_sub_entries(mutate, message):
    data = R.chunk([("sub", [b"abc", b"defgh", b"ij"], 1)], 0)
    bad = _with_data(data, mutate(data[48:]))
    with pytest.raises(ChunkError, match=message):
        S.decode_chunk(bad).offsets_and_messages()


@pytest.mark.parametrize("records,message", [
    ([R.u32(2) + b"ab", R.u32(9) + b"c"], "record 1 of the sub-entry at offset 48 announces 9 bytes, 1 are left"),
    ([R.u32(2) + b"ab", R.u32(1) + b"cd"], "1 bytes after the 2 records of the sub-entry"),
    ([R.u32(2) + b"ab", b"\x00\x00"], "the sub-entry at offset 48 ends in its record 1 of 2"),
    ([R.u32(2) + b"ab", b"\x80\x00\x00\x01c"], "record 1 of the sub-entry at offset 48 announces 2147483649 bytes"),
])
def test_bad_records_inside_a_sub_entry(records, message):
    inner = b"".join(records)
    sub = b"\x80" + R.u16(2) + R.u32(len(inner)) + R.u32(len(inner)) + inner
    with pytest.raises(ChunkError, match=message):
        S.decode_chunk(_with_data(R.chunk([("sub", [b"", b""], 0)]), sub)).offsets_and_messages()


def test_an_uncompressed_sub_entry_whose_sizes_differ():
    sub = b"\x80" + R.u16(1) + R.u32(6) + R.u32(5) + R.u32(1) + b"x"
    with pytest.raises(ChunkError, match="the uncompressed sub-entry at offset 48 has 5 bytes but announces 6"):
        S.decode_chunk(_with_data(R.chunk([("sub", [b"x"], 0)]), sub)).offsets_and_messages()


# --------------------------------------------------------------------------- headers and sizes


@pytest.mark.parametrize("first,message", [
    (0x40, r"not a chunk: magic 4 \(0x40 at offset 0\), expected 5"),
    (0x00, r"not a chunk: magic 0"),
    (0x51, r"chunk format version 1 \(0x51 at offset 0\) is not known"),
])
def test_magic_and_version(first, message):
    data = bytearray(R.chunk([b"a"]))
    data[0] = first
    with pytest.raises(ChunkError, match=message) as info:
        S.decode_chunk(bytes(data))
    assert info.value.offset == 0 and info.value.first_offset is None


def test_a_bad_crc_names_the_chunk():
    data = R.chunk([b"abc"], 123456, crc=0xDEADBEEF)
    with pytest.raises(ChunkError, match=r"chunk 123456: CRC32 0x[0-9a-f]{8} of its data does not match 0xdeadbeef") as info:
        S.decode_chunk(data)
    assert (info.value.first_offset, info.value.offset) == (123456, 32)
    with pytest.raises(ChunkError, match="chunk 123456: CRC32"):
        S.chunk_messages(data, decode=False)
    assert S.decode_chunk(data, check_crc=False).offsets_and_messages() == [(123456, b"abc")]
    assert S.chunk_messages(data, decode=False, check_crc=False)[2] == [b"abc"]
    flipped = bytearray(R.chunk([b"abc"], 9))
    flipped[-1] ^= 1
    with pytest.raises(ChunkError, match="chunk 9: CRC32"):
        S.decode_chunk(bytes(flipped))


def test_cut_at_every_byte():
    data = R.chunk([b"first", ("sub", [b"a", b"bb"], 1), b"last"], 77)
    for cut in range(len(data)):
        with pytest.raises(ChunkError) as info:
            S.chunk_messages(data[:cut], decode=False)
        assert 0 <= info.value.offset <= cut
        if cut >= 48:
            assert "chunk 77:" in str(info.value) and info.value.first_offset == 77
        else:
            assert "48-byte header" in str(info.value)


def test_trailing_bytes_are_refused_unless_they_are_the_trailer():
    data = R.chunk([b"a"], 4, trailer=b"tt")
    assert S.decode_chunk(data + b"tt").trailer_size == 2
    with pytest.raises(ChunkError, match=r"chunk 4: 1 bytes after its 5 bytes of data \(its trailer has 2\) at offset 53"):
        S.decode_chunk(data + b"t")


@pytest.mark.parametrize("entries,records,message", [
    ([b"a", b"b"], 3, "its entries hold 2 records, its header says 3"),
    ([b"a", b"b"], 1, "2 entries but 1 records"),
])
def test_counts_that_do_not_add_up(entries, records, message):
    data = bytearray(R.chunk(entries, 0))
    data[4:8] = R.u32(records)
    with pytest.raises(ChunkError, match=message):
        S.decode_chunk(bytes(data)).offsets_and_messages()


def test_entries_that_do_not_fill_the_data():
    data = R.chunk([b"a", b"b"])
    fewer = bytearray(data)
    fewer[2:4] = R.u16(1)
    fewer[4:8] = R.u32(1)
    with pytest.raises(ChunkError, match=r"chunk 0: 5 bytes after its 1 entries at offset 53"):
        S.decode_chunk(bytes(fewer)).offsets_and_messages()
    more = bytearray(data)
    more[2:4] = R.u16(3)
    more[4:8] = R.u32(3)
    with pytest.raises(ChunkError, match=r"chunk 0: its data ends before entry 2 of 3"):
        S.decode_chunk(bytes(more)).offsets_and_messages()
    over = _with_data(data, R.u32(100) + b"a")
    with pytest.raises(ChunkError, match=r"entry 0 at offset 48 announces 100 bytes, 1 are left"):
        S.decode_chunk(over).offsets_and_messages()


def test_tracking_chunks_hold_no_messages():
    data = R.chunk([b"\x00\x01tracking"], 50, chunk_type=S.CHUNK_TYPE_TRACKING_SNAPSHOT)
    c = S.decode_chunk(data)
    assert c.chunk_type == 2 and c.offsets_and_messages() == []
    assert S.chunk_messages(data, 0, decode=False) == (51, 1_700_000_000_000, [])


def test_errors_are_codec_errors():
    assert issubclass(ChunkError, CodecError) and issubclass(ChunkError, ValueError)


# --------------------------------------------------------------------------- chunk_messages


def test_chunk_messages_decodes_amqp_1_0_messages():
    rich = S.encode_message(b"four", properties={"subject": "s"}, application_properties={"k": "v"})
    data = R.chunk([R.data_section(b"one"), ("sub", [R.data_section(b"two"), R.data_section(b"three")], 1), rich], 10)
    first, ts, messages = S.chunk_messages(data, 11)
    assert (first, ts) == (11, 1_700_000_000_000)
    assert [m.body for m in messages] == [b"two", b"three", b"four"]
    assert all(isinstance(m, S.Message) for m in messages)
    assert messages[2].properties.subject == "s" and messages[2].application_properties == {"k": "v"}
    assert S.chunk_messages(data)[2] == [S.decode_message(record) for _, record in S.decode_chunk(data).offsets_and_messages()]


def test_a_record_that_is_not_an_amqp_1_0_message_names_its_offset():
    data = R.chunk([R.data_section(b"fine"), b"not amqp"], 40)
    with pytest.raises(ChunkError, match=r"chunk 40: the message at offset 41 \(entry at byte 61\) is not an AMQP 1.0 message") as info:
        S.chunk_messages(data)
    assert isinstance(info.value.__cause__, S.AMQP10DecodeError)
    assert S.chunk_messages(data, decode=False)[2] == [R.data_section(b"fine"), b"not amqp"]


def test_chunk_messages_from_offsets():
    data = R.chunk([b"a", b"b", b"c"], 10)
    assert S.chunk_messages(data, 0, decode=False) == (10, 1_700_000_000_000, [b"a", b"b", b"c"])
    assert S.chunk_messages(data, None, decode=False)[:2] == (10, 1_700_000_000_000)
    assert S.chunk_messages(data, 11, decode=False)[::2] == (11, [b"b", b"c"])
    assert S.chunk_messages(data, 12, False)[::2] == (12, [b"c"])
    assert S.chunk_messages(data, 13, decode=False)[::2] == (13, [])
    assert S.chunk_messages(data, 99, decode=False)[::2] == (13, [])
    empty = R.chunk([], 10)
    assert S.chunk_messages(empty, 0, decode=False)[::2] == (10, [])


# --------------------------------------------------------------------------- hypothesis

records = st.binary(max_size=60)
entries = st.lists(
    st.one_of(records, st.tuples(st.just("sub"), st.lists(records, min_size=1, max_size=5), st.sampled_from([0, 1, 4]))),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(entries, st.integers(0, 2**63), st.integers(-(2**63), 2**63 - 1), st.integers(0, 50))
def test_any_chunk_round_trips(chunk_entries, first_offset, timestamp, skip):
    data = R.chunk(chunk_entries, first_offset, timestamp=timestamp)
    expected = []
    for entry in chunk_entries:
        expected += entry[1] if isinstance(entry, tuple) else [entry]
    c = S.decode_chunk(data)
    assert (c.first_offset, c.timestamp, c.num_records) == (first_offset, timestamp, len(expected))
    assert c.offsets_and_messages() == list(enumerate(expected, first_offset))
    first, ts, got = S.chunk_messages(data, first_offset + skip, decode=False)
    assert got == expected[skip:] and ts == timestamp
    assert first == (first_offset + skip if skip < len(expected) else first_offset + len(expected))


def test_mutated_chunks_give_records_or_a_chunk_error():
    rnd = random.Random(35)
    base = [R.chunk([b"x" * rnd.randint(0, 40) for _ in range(rnd.randint(0, 5))] + [("sub", [b"yy", b"z"], c)], 5)
            for c in (0, 1, 4)]
    for _ in range(3000):
        data = bytearray(rnd.choice(base))
        for _ in range(rnd.randint(1, 3)):
            pos = rnd.randrange(len(data))
            data[pos] = rnd.getrandbits(8)
        try:
            S.decode_chunk(bytes(data), check_crc=rnd.random() < 0.5).offsets_and_messages()
        except ChunkError as exc:
            assert exc.offset is None or 0 <= exc.offset <= len(data)


def test_a_zstd_frame_declaring_a_huge_size_is_a_chunk_error_not_an_allocation():
    """Found by fuzzing: zstandard allocates what a frame's header declares (a flipped byte:
    34 PB), and raised MemoryError.  The declared size is checked against the sub-entry's."""
    data = bytes.fromhex(
        "50000002000000030000018bcfe568000000000000000001000000000000000722a6f30c0000002d0000000010000000c000020000"
        "00270000001928b52ffdd627850000500000001e7a0000000179010037d002000000056166746572")
    with pytest.raises(ChunkError, match="the zstd sub-entry at offset 48 declares 34372932507553792 bytes, it announces 39"):
        S.decode_chunk(data, check_crc=False).offsets_and_messages()
