# cython: language_level=3
"""Osiris chunks: the unit a RabbitMQ stream stores, replicates and delivers.

A chunk is a 48-byte header, its data entries, and a trailer (osiris_log.erl)::

    0  uint4 magic (5) | uint4 version (0)   24 uint64 first offset (the chunk id)
    1  uint8 chunk type (0 user,             32 uint32 CRC32 of the data entries
             1 tracking delta, 2 snapshot)   36 uint32 data size
    2  uint16 number of entries              40 uint32 trailer size
    4  uint32 number of records              44 uint8  bloom filter size (osiris 1.7+;
    8  int64  timestamp (ms since the epoch)           RabbitMQ 3.10's osiris 1.3: reserved, 0)
    16 uint64 epoch                          45 3 bytes reserved

A stream-protocol Deliver carries the header and the data entries only: neither the
bloom filter nor the trailer (writer tracking) is sent, though the header still gives
their sizes.  Data entries are simple (top bit 0: a uint31 size, then the record) or
sub-entries (top bit 1, 3 bits of compression, 4 reserved; uint16 record count, uint32
uncompressed size, uint32 size, then that many bytes holding the records, each a uint32
size and its bytes, compressed as the 3 bits say: 0 none, 1 gzip, 2 snappy, 3 lz4,
4 zstd).  Record n of a chunk has offset ``first_offset + n``.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from amqwire.codec.buffer cimport amqw_unpack_u16, amqw_unpack_u32, amqw_unpack_u64
from amqwire.codec.stream.amqp10 cimport message_from

import importlib
import zlib

from amqwire.codec.errors import ChunkError, CodecError

cdef enum:
    _MAGIC = 5
    _SUBENTRY_HEAD = 11
    _MODE_PAIRS = 0
    _MODE_BYTES = 1
    _MODE_DECODED = 2

CHUNK_TYPE_USER = 0
CHUNK_TYPE_TRACKING_DELTA = 1
CHUNK_TYPE_TRACKING_SNAPSHOT = 2
#: RabbitMQ (3.13+) refuses sub-entries that decompress to more; so does this module.
MAX_SUBENTRY_SIZE = 64 * 1024 * 1024

_COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


cdef int read_header(object obj, const char *p, Py_ssize_t n, ChunkHeader *h, bint check_crc) except -1:
    cdef uint8_t first
    cdef Py_ssize_t end
    if n < CHUNK_HEADER_SIZE:
        raise ChunkError(f"a chunk has a {CHUNK_HEADER_SIZE}-byte header, got {n} bytes", offset=n)
    first = <uint8_t>p[0]
    if first >> 4 != _MAGIC:
        raise ChunkError(f"not a chunk: magic {first >> 4} (0x{first:02x} at offset 0), expected 5", offset=0)
    h.version = first & 0x0F
    if h.version != 0:
        raise ChunkError(f"chunk format version {h.version} (0x{first:02x} at offset 0) is not known: 0 is",
                         offset=0)
    h.chunk_type = <uint8_t>p[1]
    h.num_entries = amqw_unpack_u16(p + 2)
    h.num_records = amqw_unpack_u32(p + 4)
    h.timestamp = <int64_t>amqw_unpack_u64(p + 8)
    h.epoch = amqw_unpack_u64(p + 16)
    h.first_offset = amqw_unpack_u64(p + 24)
    h.crc = amqw_unpack_u32(p + 32)
    h.data_size = amqw_unpack_u32(p + 36)
    h.trailer_size = amqw_unpack_u32(p + 40)
    h.filter_size = <uint8_t>p[44]
    end = CHUNK_HEADER_SIZE + <Py_ssize_t>h.data_size
    if n < end:
        raise ChunkError(f"chunk {h.first_offset}: {h.data_size} bytes of data announced, only "
                         f"{n - CHUNK_HEADER_SIZE} follow the header", offset=n, first_offset=h.first_offset)
    # what a Deliver sends (header, data); a whole chunk as stored also has its trailer
    if n != end and n != end + <Py_ssize_t>h.trailer_size:
        raise ChunkError(f"chunk {h.first_offset}: {n - end} bytes after its {h.data_size} bytes of data "
                         f"(its trailer has {h.trailer_size}) at offset {end}", offset=end, first_offset=h.first_offset)
    if h.num_entries > h.num_records and h.chunk_type == 0:
        raise ChunkError(f"chunk {h.first_offset}: {h.num_entries} entries but {h.num_records} records",
                         offset=2, first_offset=h.first_offset)
    if check_crc:
        crc = zlib.crc32(memoryview(obj).cast("B")[CHUNK_HEADER_SIZE:end])
        if crc != h.crc:
            raise ChunkError(f"chunk {h.first_offset}: CRC32 0x{crc:08x} of its data does not match "
                             f"0x{h.crc:08x} in its header", offset=32, first_offset=h.first_offset)
    return 0


cdef object _zstandard():
    """The zstandard module, or None when it is not installed."""
    try:
        return importlib.import_module("zstandard")
    except ImportError:
        return None


cdef bytes _decompress(int compression, const char *p, Py_ssize_t size, uint32_t expected, ChunkHeader *h,
                       Py_ssize_t at):
    cdef bytes packed = PyBytes_FromStringAndSize(p, size)
    if expected > MAX_SUBENTRY_SIZE:
        raise ChunkError(f"chunk {h.first_offset}: a sub-entry at offset {at} announces {expected} bytes "
                         f"uncompressed, over the limit of {MAX_SUBENTRY_SIZE}", offset=at, first_offset=h.first_offset)
    if compression == 1:
        unpacker = zlib.decompressobj(47)      # gzip or zlib header, as the peer wrote it
        try:
            out = unpacker.decompress(packed, expected + 1)
        except zlib.error as exc:
            raise ChunkError(f"chunk {h.first_offset}: the gzip sub-entry at offset {at} does not "
                             f"decompress: {exc}", offset=at, first_offset=h.first_offset) from None
        if not unpacker.eof or unpacker.unused_data:
            raise ChunkError(f"chunk {h.first_offset}: the gzip sub-entry at offset {at} is not one whole "
                             f"gzip stream", offset=at, first_offset=h.first_offset)
        return out
    if compression == 4:
        zstandard = _zstandard()
        if zstandard is None:
            raise ChunkError(f"chunk {h.first_offset}: the sub-entry at offset {at} is compressed with zstd, "
                             f"which needs the zstandard package (pip install amqwire[zstd])",
                             offset=at, first_offset=h.first_offset)
        try:
            # a frame that declares its size is decompressed into a buffer of that size:
            # check it first, so a corrupt header cannot make it allocate gigabytes
            declared = zstandard.frame_content_size(packed)
            if declared != -1 and declared != expected:
                raise ChunkError(f"chunk {h.first_offset}: the zstd sub-entry at offset {at} declares {declared} "
                                 f"bytes, it announces {expected}", offset=at, first_offset=h.first_offset)
            return zstandard.ZstdDecompressor().decompress(packed, max_output_size=expected + 1)
        except zstandard.ZstdError as exc:
            raise ChunkError(f"chunk {h.first_offset}: the zstd sub-entry at offset {at} does not "
                             f"decompress: {exc}", offset=at, first_offset=h.first_offset) from None
    raise ChunkError(f"chunk {h.first_offset}: the sub-entry at offset {at} is compressed with "
                     f"{_COMPRESSION_NAMES.get(compression, f'code {compression}')}, which this reader does not "
                     f"support (none, gzip, zstd)", offset=at, first_offset=h.first_offset)


cdef inline int _append(list out, int mode, uint64_t offset, const char *p, Py_ssize_t size,
                        ChunkHeader *h, Py_ssize_t at) except -1:
    if mode == _MODE_BYTES:
        PyList_Append(out, PyBytes_FromStringAndSize(p, size))
    elif mode == _MODE_PAIRS:
        PyList_Append(out, (offset, PyBytes_FromStringAndSize(p, size)))
    else:
        try:
            PyList_Append(out, message_from(p, size))
        except CodecError as exc:
            raise ChunkError(f"chunk {h.first_offset}: the message at offset {offset} (entry at byte {at}) is not "
                             f"an AMQP 1.0 message: {exc}", offset=at, first_offset=h.first_offset) from exc
    return 0


cdef int _subentry_records(const char *p, Py_ssize_t size, uint16_t count, uint64_t offset,
                           uint64_t from_offset, int mode, list out, ChunkHeader *h, Py_ssize_t at) except -1:
    """The records of an uncompressed sub-entry: ``count`` (uint32 size, bytes)."""
    cdef Py_ssize_t pos = 0
    cdef uint32_t record_size
    cdef uint16_t i
    for i in range(count):
        if size - pos < 4:
            raise ChunkError(f"chunk {h.first_offset}: the sub-entry at offset {at} ends in its record {i} "
                             f"of {count}", offset=at, first_offset=h.first_offset)
        record_size = amqw_unpack_u32(p + pos)
        if record_size & 0x80000000 or size - pos - 4 < <Py_ssize_t>record_size:
            raise ChunkError(f"chunk {h.first_offset}: record {i} of the sub-entry at offset {at} announces "
                             f"{record_size} bytes, {size - pos - 4} are left", offset=at, first_offset=h.first_offset)
        if offset + i >= from_offset:
            _append(out, mode, offset + i, p + pos + 4, record_size, h, at)
        pos += 4 + record_size
    if pos != size:
        raise ChunkError(f"chunk {h.first_offset}: {size - pos} bytes after the {count} records of the "
                         f"sub-entry at offset {at}", offset=at, first_offset=h.first_offset)
    return 0


cdef uint64_t append_records(const char *data, ChunkHeader *h, uint64_t from_offset, int mode,
                             list out) except? 0:
    cdef const char *p = data + CHUNK_HEADER_SIZE
    cdef Py_ssize_t n = h.data_size, pos = 0, at
    cdef uint64_t offset = h.first_offset, first_kept = 0
    cdef uint64_t records = 0
    cdef uint32_t head, size, uncompressed
    cdef uint16_t count
    cdef uint8_t b
    cdef bint kept = False
    cdef uint32_t e
    cdef bytes raw
    if h.chunk_type != 0:
        return h.first_offset + h.num_records      # tracking: no messages
    for e in range(h.num_entries):
        at = CHUNK_HEADER_SIZE + pos
        if pos >= n:
            raise ChunkError(f"chunk {h.first_offset}: its data ends before entry {e} of {h.num_entries}",
                             offset=at, first_offset=h.first_offset)
        b = <uint8_t>p[pos]
        if b & 0x80 == 0:
            if n - pos < 4:
                raise ChunkError(f"chunk {h.first_offset}: entry {e} at offset {at} is cut short",
                                 offset=at, first_offset=h.first_offset)
            head = amqw_unpack_u32(p + pos)
            if n - pos - 4 < <Py_ssize_t>head:
                raise ChunkError(f"chunk {h.first_offset}: entry {e} at offset {at} announces {head} bytes, "
                                 f"{n - pos - 4} are left", offset=at, first_offset=h.first_offset)
            if offset >= from_offset:
                if not kept:
                    kept, first_kept = True, offset
                _append(out, mode, offset, p + pos + 4, head, h, at)
            offset += 1
            records += 1
            pos += 4 + head
            continue
        if n - pos < _SUBENTRY_HEAD:
            raise ChunkError(f"chunk {h.first_offset}: sub-entry {e} at offset {at} is cut short",
                             offset=at, first_offset=h.first_offset)
        count = amqw_unpack_u16(p + pos + 1)
        uncompressed = amqw_unpack_u32(p + pos + 3)
        size = amqw_unpack_u32(p + pos + 7)
        if n - pos - _SUBENTRY_HEAD < <Py_ssize_t>size:
            raise ChunkError(f"chunk {h.first_offset}: sub-entry {e} at offset {at} announces {size} bytes, "
                             f"{n - pos - _SUBENTRY_HEAD} are left", offset=at, first_offset=h.first_offset)
        if offset + count > from_offset and count:
            if not kept:
                kept, first_kept = True, max(offset, from_offset)
            if (b >> 4) & 0x07 == 0:
                if size != uncompressed:
                    raise ChunkError(f"chunk {h.first_offset}: the uncompressed sub-entry at offset {at} has "
                                     f"{size} bytes but announces {uncompressed}", offset=at, first_offset=h.first_offset)
                _subentry_records(p + pos + _SUBENTRY_HEAD, size, count, offset, from_offset, mode, out, h, at)
            else:
                raw = _decompress((b >> 4) & 0x07, p + pos + _SUBENTRY_HEAD, size, uncompressed, h, at)
                if PyBytes_GET_SIZE(raw) != uncompressed:
                    raise ChunkError(f"chunk {h.first_offset}: the sub-entry at offset {at} decompresses to "
                                     f"{'more than ' if PyBytes_GET_SIZE(raw) > uncompressed else ''}"
                                     f"{min(PyBytes_GET_SIZE(raw), uncompressed)} bytes, it announces {uncompressed}",
                                     offset=at, first_offset=h.first_offset)
                _subentry_records(PyBytes_AS_STRING(raw), uncompressed, count, offset, from_offset, mode, out, h, at)
        offset += count
        records += count
        pos += _SUBENTRY_HEAD + size
    if pos != n:
        raise ChunkError(f"chunk {h.first_offset}: {n - pos} bytes after its {h.num_entries} entries at offset "
                         f"{CHUNK_HEADER_SIZE + pos}", offset=CHUNK_HEADER_SIZE + pos, first_offset=h.first_offset)
    if records != h.num_records:
        raise ChunkError(f"chunk {h.first_offset}: its entries hold {records} records, its header says "
                         f"{h.num_records}", offset=4, first_offset=h.first_offset)
    return first_kept if kept else offset


cdef class Chunk:
    """A chunk's header, read from ``data`` (held, not copied)."""

    @property
    def version(self):
        """The chunk format version (the low 4 bits of byte 0): 0."""
        return self.header.version

    @property
    def chunk_type(self):
        """0: user data, 1: tracking delta, 2: tracking snapshot (no messages)."""
        return self.header.chunk_type

    @property
    def num_entries(self):
        return self.header.num_entries

    @property
    def num_records(self):
        return self.header.num_records

    @property
    def timestamp(self):
        """When the chunk was written: ms since the epoch."""
        return self.header.timestamp

    @property
    def epoch(self):
        return self.header.epoch

    @property
    def first_offset(self):
        return self.header.first_offset

    @property
    def next_offset(self):
        """The offset after this chunk's last record."""
        return self.header.first_offset + self.header.num_records

    @property
    def crc(self):
        return self.header.crc

    @property
    def data_size(self):
        return self.header.data_size

    @property
    def trailer_size(self):
        return self.header.trailer_size

    @property
    def filter_size(self):
        """The bloom filter's size (osiris 1.7+, RabbitMQ 3.13+); 0 from RabbitMQ 3.10."""
        return self.header.filter_size

    def offsets_and_messages(self):
        """Every record as (offset, bytes), sub-entries decompressed; [] for a tracking chunk."""
        cdef Py_buffer view
        cdef list out = []
        PyObject_GetBuffer(self.data, &view, PyBUF_SIMPLE)
        try:
            append_records(<const char *>view.buf, &self.header, 0, _MODE_PAIRS, out)
        finally:
            PyBuffer_Release(&view)
        return out

    def __repr__(self):
        h = self.header
        return (f"Chunk(first_offset={h.first_offset}, chunk_type={h.chunk_type}, num_entries={h.num_entries}, "
                f"num_records={h.num_records}, timestamp={h.timestamp}, epoch={h.epoch}, "
                f"data_size={h.data_size}, trailer_size={h.trailer_size})")


def decode_chunk(data, *, check_crc=True):
    """The chunk in ``data`` (a bytes-like: a Deliver's chunk, or a chunk as stored, with its
    trailer), its header checked, and unless ``check_crc`` is false the CRC32 of its data."""
    cdef Py_buffer view
    cdef Chunk c = Chunk.__new__(Chunk)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        read_header(data, <const char *>view.buf, view.len, &c.header, check_crc)
    finally:
        PyBuffer_Release(&view)
    c.data = data
    return c


def chunk_messages(data, from_offset=0, decode=True, *, check_crc=True):
    """``(first_offset, timestamp, messages)`` of the chunk in ``data``: its records from
    ``from_offset`` on (a subscription at an offset inside a chunk gets the whole chunk),
    each decoded into an AMQP 1.0 Message (amqwire.codec.stream.amqp10), or its bytes with
    ``decode=False``.  ``first_offset`` is the offset of ``messages[0]`` (message i has
    offset first_offset + i); with no message left, the offset the next one would have.
    ``timestamp``: the chunk's, ms since the epoch.  A tracking chunk holds no messages."""
    cdef Py_buffer view
    cdef ChunkHeader h
    cdef list out = []
    cdef uint64_t first
    cdef uint64_t start = 0
    if from_offset is not None and from_offset > 0:
        start = from_offset
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        read_header(data, <const char *>view.buf, view.len, &h, check_crc)
        first = append_records(<const char *>view.buf, &h, start, _MODE_DECODED if decode else _MODE_BYTES, out)
    finally:
        PyBuffer_Release(&view)
    return first, h.timestamp, out


cdef class RecordReader:
    """The records of one chunk, one at a time (see chunk.pxd): for Cython modules that
    read records in C.  From Python, ``RecordReader(data)`` iterates ``(offset, bytes)``
    pairs, as ``Chunk.offsets_and_messages()`` lists them."""

    def __init__(self, data=None, *, check_crc=True):
        cdef Py_buffer view
        if data is None:
            return
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            # bytes hold their buffer for as long as they live; anything else is copied
            owner = data if type(data) is bytes else PyBytes_FromStringAndSize(<const char *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        self.start(owner, PyBytes_AS_STRING(owner), PyBytes_GET_SIZE(owner), check_crc)

    cdef int start(self, object owner, const char *data, Py_ssize_t size, bint check_crc) except -1:
        read_header(owner, data, size, &self.header, check_crc)
        self._owner = owner
        self._entries = data + CHUNK_HEADER_SIZE
        self._pos = 0
        self._entry = 0
        self._next = self.header.first_offset
        self.offset = self.header.first_offset
        self._sub_count = self._sub_index = 0
        self._inflated = None
        self._started = True
        return 0

    @property
    def first_offset(self):
        return self.header.first_offset

    @property
    def timestamp(self):
        """When the chunk was written: ms since the epoch."""
        return self.header.timestamp

    @property
    def chunk_type(self):
        return self.header.chunk_type

    @property
    def next_offset(self):
        """The offset after the chunk's last record."""
        return self.header.first_offset + self.header.num_records

    cdef int next(self, const char **record, Py_ssize_t *size) except -1:
        cdef ChunkHeader *h = &self.header
        cdef const char *p = self._entries
        cdef Py_ssize_t n = h.data_size, at
        cdef uint32_t head, packed, uncompressed, record_size
        cdef uint16_t count
        cdef uint8_t b
        if not self._started:
            raise ChunkError("RecordReader: no chunk (start() was not called)", offset=0)
        while True:
            if self._sub_index < self._sub_count:
                if self._sub_size - self._sub_pos < 4:
                    raise ChunkError(f"chunk {h.first_offset}: the sub-entry at offset {self._sub_at} ends in its "
                                     f"record {self._sub_index} of {self._sub_count}", offset=self._sub_at,
                                     first_offset=h.first_offset)
                record_size = amqw_unpack_u32(self._sub + self._sub_pos)
                if record_size & 0x80000000 or self._sub_size - self._sub_pos - 4 < <Py_ssize_t>record_size:
                    raise ChunkError(f"chunk {h.first_offset}: record {self._sub_index} of the sub-entry at offset "
                                     f"{self._sub_at} announces {record_size} bytes, "
                                     f"{self._sub_size - self._sub_pos - 4} are left", offset=self._sub_at,
                                     first_offset=h.first_offset)
                record[0] = self._sub + self._sub_pos + 4
                size[0] = record_size
                self._sub_pos += 4 + record_size
                self._sub_index += 1
                if self._sub_index == self._sub_count and self._sub_pos != self._sub_size:
                    raise ChunkError(f"chunk {h.first_offset}: {self._sub_size - self._sub_pos} bytes after the "
                                     f"{self._sub_count} records of the sub-entry at offset {self._sub_at}",
                                     offset=self._sub_at, first_offset=h.first_offset)
                self.offset = self._next
                self._next += 1
                return 1
            if h.chunk_type != 0:
                return 0  # tracking: no messages
            if self._entry == h.num_entries:
                if self._pos != n:
                    raise ChunkError(f"chunk {h.first_offset}: {n - self._pos} bytes after its {h.num_entries} "
                                     f"entries at offset {CHUNK_HEADER_SIZE + self._pos}",
                                     offset=CHUNK_HEADER_SIZE + self._pos, first_offset=h.first_offset)
                if self._next - h.first_offset != h.num_records:
                    raise ChunkError(f"chunk {h.first_offset}: its entries hold {self._next - h.first_offset} "
                                     f"records, its header says {h.num_records}", offset=4,
                                     first_offset=h.first_offset)
                self._inflated = None
                return 0
            at = CHUNK_HEADER_SIZE + self._pos
            if self._pos >= n:
                raise ChunkError(f"chunk {h.first_offset}: its data ends before entry {self._entry} of "
                                 f"{h.num_entries}", offset=at, first_offset=h.first_offset)
            b = <uint8_t>p[self._pos]
            if b & 0x80 == 0:
                if n - self._pos < 4:
                    raise ChunkError(f"chunk {h.first_offset}: entry {self._entry} at offset {at} is cut short",
                                     offset=at, first_offset=h.first_offset)
                head = amqw_unpack_u32(p + self._pos)
                if n - self._pos - 4 < <Py_ssize_t>head:
                    raise ChunkError(f"chunk {h.first_offset}: entry {self._entry} at offset {at} announces {head} "
                                     f"bytes, {n - self._pos - 4} are left", offset=at, first_offset=h.first_offset)
                record[0] = p + self._pos + 4
                size[0] = head
                self._pos += 4 + head
                self._entry += 1
                self.offset = self._next
                self._next += 1
                return 1
            if n - self._pos < _SUBENTRY_HEAD:
                raise ChunkError(f"chunk {h.first_offset}: sub-entry {self._entry} at offset {at} is cut short",
                                 offset=at, first_offset=h.first_offset)
            count = amqw_unpack_u16(p + self._pos + 1)
            uncompressed = amqw_unpack_u32(p + self._pos + 3)
            packed = amqw_unpack_u32(p + self._pos + 7)
            if n - self._pos - _SUBENTRY_HEAD < <Py_ssize_t>packed:
                raise ChunkError(f"chunk {h.first_offset}: sub-entry {self._entry} at offset {at} announces "
                                 f"{packed} bytes, {n - self._pos - _SUBENTRY_HEAD} are left", offset=at,
                                 first_offset=h.first_offset)
            if (b >> 4) & 0x07 == 0:
                if packed != uncompressed:
                    raise ChunkError(f"chunk {h.first_offset}: the uncompressed sub-entry at offset {at} has "
                                     f"{packed} bytes but announces {uncompressed}", offset=at,
                                     first_offset=h.first_offset)
                self._inflated = None
                self._sub = p + self._pos + _SUBENTRY_HEAD
            else:
                self._inflated = _decompress((b >> 4) & 0x07, p + self._pos + _SUBENTRY_HEAD, packed, uncompressed,
                                             h, at)
                if PyBytes_GET_SIZE(self._inflated) != uncompressed:
                    raise ChunkError(f"chunk {h.first_offset}: the sub-entry at offset {at} decompresses to "
                                     f"{'more than ' if PyBytes_GET_SIZE(self._inflated) > uncompressed else ''}"
                                     f"{min(PyBytes_GET_SIZE(self._inflated), uncompressed)} bytes, it announces "
                                     f"{uncompressed}", offset=at, first_offset=h.first_offset)
                self._sub = PyBytes_AS_STRING(self._inflated)
            self._sub_size = uncompressed
            self._sub_pos = 0
            self._sub_at = at
            self._sub_count = count
            self._sub_index = 0
            self._pos += _SUBENTRY_HEAD + packed
            self._entry += 1
            if count == 0 and uncompressed != 0:
                raise ChunkError(f"chunk {h.first_offset}: {uncompressed} bytes in the empty sub-entry at offset "
                                 f"{at}", offset=at, first_offset=h.first_offset)

    def __iter__(self):
        return self

    def __next__(self):
        cdef const char *record = NULL
        cdef Py_ssize_t size = 0
        if not self.next(&record, &size):
            raise StopIteration
        return self.offset, PyBytes_FromStringAndSize(record, size)
