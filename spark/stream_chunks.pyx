# cython: language_level=3
"""Osiris chunks, as a stream-protocol Deliver carries them, to Arrow record batches of
the stream source's schema (:func:`amqwire.spark.stream_batch.stream_schema`): each
record's AMQP 1.0 sections are read in place and their fields copied straight into the
Arrow buffers, with no Python object per message (the records come from the codec's
``RecordReader``, in C).

What a row holds, the way RabbitMQ 3.10 maps a stored message onto AMQP 0-9-1 when the
same stream is read over 0-9-1 (docs/streams-mapping.md), so that both protocols give the
same rows:

- ``body``: the data section's bytes (several data sections: joined); an amqp-value
  section holding a string or binary: its bytes; any other amqp-value or amqp-sequence
  body: the section's value as encoded; no body section: empty.  A record that is not an
  AMQP 1.0 message at all (it does not start with a section) is its own body.
- ``timestamp``: the chunk's timestamp (when the broker wrote it, to the millisecond).
- ``exchange``, ``routing_key``: the message annotations ``x-exchange`` (absent: ``""``)
  and ``x-routing-key`` (absent: the stream's name).
- ``properties``: message-id, user-id, reply-to, correlation-id, content-type,
  content-encoding, creation-time (``timestamp``, to the millisecond) from the properties
  section; ``type`` and ``app_id`` from the application properties ``x-basic-type`` and
  ``x-basic-app-id``; ``priority``, ``delivery_mode``, ``expiration`` from the message
  annotations ``x-basic-*``; ``cluster_id`` is always null (a stream does not keep it).
  A message-id or correlation-id that is not a string is shown as RabbitMQ shows it over
  0-9-1: a uuid as its canonical text, a ulong in decimal, binary in base64.
- ``headers``: the application properties but those two, each value as text as
  :func:`amqwire.spark.decode.header_text` renders it (strings as they are, numbers and
  booleans as JSON literals, binary as a base64 JSON string, timestamps as an ISO 8601
  JSON string, null as null); null when none are left.

Header, delivery-annotations and footer sections are skipped.  A record that starts like
an AMQP 1.0 message but is not a well-formed one fails the read with
:class:`amqwire.spark.errors.RecordError` naming the stream, the offset and the byte.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MAX
from libc.string cimport memcmp

from amqwire.codec.buffer cimport amqw_unpack_u16, amqw_unpack_u32, amqw_unpack_u64, amqw_unpack_f32, amqw_unpack_f64
from amqwire.codec.stream.chunk cimport RecordReader
from amqwire.spark.arrow_columns cimport (
    ByteBuffer, ColumnBuilder, pyarrow, text_base64, text_double, text_int, text_raw, text_uint, text_utc_micros,
)

import uuid as _uuid

from amqwire.codec.errors import AmqwireError

from amqwire.spark.errors import RecordError as _RecordError
from amqwire.spark.stream_batch import stream_schema as _stream_schema

__all__ = ["ChunkBatchBuilder", "fallback_text"]

cdef enum:
    MAX_DEPTH = 64
    # sections (their descriptor codes)
    S_HEADER = 0x70
    S_DELIVERY_ANNOTATIONS = 0x71
    S_MESSAGE_ANNOTATIONS = 0x72
    S_PROPERTIES = 0x73
    S_APPLICATION_PROPERTIES = 0x74
    S_DATA = 0x75
    S_SEQUENCE = 0x76
    S_VALUE = 0x77
    S_FOOTER = 0x78
    # the text properties' columns, in PROPERTY_FIELDS order but the three that are not
    CONTENT_TYPE = 0
    CONTENT_ENCODING = 1
    CORRELATION_ID = 2
    REPLY_TO = 3
    EXPIRATION = 4
    MESSAGE_ID = 5
    TYPE = 6
    USER_ID = 7
    APP_ID = 8
    CLUSTER_ID = 9
    N_TEXT = 10

# The sections' symbolic descriptors (a described type may name its descriptor so).
_SECTION_NAMES = {
    b"amqp:header:list": S_HEADER, b"amqp:delivery-annotations:map": S_DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": S_MESSAGE_ANNOTATIONS, b"amqp:properties:list": S_PROPERTIES,
    b"amqp:application-properties:map": S_APPLICATION_PROPERTIES, b"amqp:data:binary": S_DATA,
    b"amqp:amqp-sequence:list": S_SEQUENCE, b"amqp:amqp-value:*": S_VALUE, b"amqp:footer:map": S_FOOTER,
}


class _Malformed(AmqwireError, ValueError):
    """Raised inside a record's decoding; the builder re-raises it as RecordError naming
    the stream and the offset (it never leaves the module, but is ours all the same)."""

    def __init__(self, problem, position):
        super().__init__(problem, position)
        self.problem = problem
        self.position = position


# ---------------------------------------------------------------------------- reading values

cdef struct Cursor:
    const char *p
    Py_ssize_t n
    Py_ssize_t pos


cdef struct Value:
    uint8_t code            # the constructor; 0x00 for a described value
    const char *p           # the payload: a fixed-width value's bytes, a string's, a compound's items
    Py_ssize_t n            # the payload's size
    uint32_t count          # a compound's or an array's element count
    Py_ssize_t start        # where the value's encoding starts in its cursor
    Py_ssize_t end          # and where it ends


cdef struct Span:
    const char *p
    Py_ssize_t n
    bint set


cdef int _bad(str problem, Py_ssize_t position) except -1:
    raise _Malformed(problem, position)


cdef inline int _need(Cursor *c, Py_ssize_t k, const char *what) except -1:
    if c.n - c.pos < k:
        _bad(f"{what}: {k} bytes needed, {c.n - c.pos} left", c.pos)
    return 0


cdef inline int _fixed_width(uint8_t code) noexcept:
    """The payload width of a fixed-width constructor; -1 for the others."""
    cdef uint8_t high = code >> 4
    if high == 0x4:
        return 0 if code <= 0x45 else -1
    if high == 0x5:
        return 1 if code <= 0x56 else -1
    if high == 0x6:
        return 2 if code <= 0x61 else -1
    if high == 0x7:
        return 4 if code <= 0x74 else -1
    if high == 0x8:
        return 8 if code <= 0x84 else -1
    if code == 0x94 or code == 0x98:
        return 16
    return -1


cdef int _read(Cursor *c, Value *v, int depth) except -1:
    """The value at the cursor (its constructor and payload, checked against the bytes
    left); the cursor moves past it."""
    cdef uint8_t code
    cdef int width
    cdef Py_ssize_t size
    cdef Value ignored
    if depth > MAX_DEPTH:
        _bad(f"values nested deeper than {MAX_DEPTH}", c.pos)
    _need(c, 1, "a constructor")
    v.start = c.pos
    code = <uint8_t>c.p[c.pos]
    c.pos += 1
    v.code = code
    v.count = 0
    if code == 0x00:
        _read(c, &ignored, depth + 1)   # the descriptor
        _read(c, &ignored, depth + 1)   # the value
        v.p = c.p + v.start
        v.n = c.pos - v.start
        v.end = c.pos
        return 0
    width = _fixed_width(code)
    if width >= 0:
        _need(c, width, "a fixed-width value")
        v.p = c.p + c.pos
        v.n = width
        c.pos += width
        v.end = c.pos
        return 0
    if code == 0xa0 or code == 0xa1 or code == 0xa3:
        _need(c, 1, "a size")
        size = <uint8_t>c.p[c.pos]
        c.pos += 1
    elif code == 0xb0 or code == 0xb1 or code == 0xb3:
        _need(c, 4, "a size")
        size = amqw_unpack_u32(c.p + c.pos)
        c.pos += 4
    elif code == 0xc0 or code == 0xc1 or code == 0xe0:
        _need(c, 2, "a size and a count")
        size = <uint8_t>c.p[c.pos]
        if size < 1:
            _bad(f"constructor 0x{code:02x}: size {size} leaves no room for its count", c.pos)
        v.count = <uint8_t>c.p[c.pos + 1]
        c.pos += 2
        size -= 1
    elif code == 0xd0 or code == 0xd1 or code == 0xf0:
        _need(c, 8, "a size and a count")
        size = amqw_unpack_u32(c.p + c.pos)
        if size < 4:
            _bad(f"constructor 0x{code:02x}: size {size} leaves no room for its count", c.pos)
        v.count = amqw_unpack_u32(c.p + c.pos + 4)
        c.pos += 8
        size -= 4
    else:
        _bad(f"unknown constructor 0x{code:02x}", v.start)
    if c.n - c.pos < size:
        _bad(f"constructor 0x{code:02x} announces {size} bytes, {c.n - c.pos} are left", v.start)
    if 0xc0 <= code < 0xe0 and v.count > size:
        _bad(f"constructor 0x{code:02x}: {v.count} elements cannot fit in {size} bytes", v.start)
    v.p = c.p + c.pos
    v.n = size
    c.pos += size
    v.end = c.pos
    return 0


cdef inline bint _is_text(uint8_t code) noexcept:
    return code == 0xa1 or code == 0xb1 or code == 0xa3 or code == 0xb3


cdef inline bint _is_binary(uint8_t code) noexcept:
    return code == 0xa0 or code == 0xb0


cdef inline bint _is_map(uint8_t code) noexcept:
    return code == 0xc1 or code == 0xd1


cdef inline bint _is_list(uint8_t code) noexcept:
    return code == 0x45 or code == 0xc0 or code == 0xd0


cdef int _integer(Value *v, int64_t *signed_value, uint64_t *unsigned_value) noexcept:
    """An integer's value: 1 signed (in signed_value), 2 unsigned (in unsigned_value), 0
    when the value is no integer."""
    cdef uint8_t code = v.code
    if code == 0x50 or code == 0x52 or code == 0x53:      # ubyte, smalluint, smallulong
        unsigned_value[0] = <uint8_t>v.p[0]
        return 2
    if code == 0x43 or code == 0x44:                      # uint0, ulong0
        unsigned_value[0] = 0
        return 2
    if code == 0x60:
        unsigned_value[0] = amqw_unpack_u16(v.p)
        return 2
    if code == 0x70:
        unsigned_value[0] = amqw_unpack_u32(v.p)
        return 2
    if code == 0x80:
        unsigned_value[0] = amqw_unpack_u64(v.p)
        return 2
    if code == 0x51 or code == 0x54 or code == 0x55:      # byte, smallint, smalllong
        signed_value[0] = <int8_t>v.p[0]
        return 1
    if code == 0x61:
        signed_value[0] = <int16_t>amqw_unpack_u16(v.p)
        return 1
    if code == 0x71:
        signed_value[0] = <int32_t>amqw_unpack_u32(v.p)
        return 1
    if code == 0x81:
        signed_value[0] = <int64_t>amqw_unpack_u64(v.p)
        return 1
    return 0


cdef inline int _check_text(Value *v) except -1:
    """A string or symbol for a string column: it must be UTF-8 (as AMQP 1.0 says it is)."""
    if not _utf8_valid(v.p, v.n):
        _bad(f"a string (constructor 0x{v.code:02x}) that is not UTF-8", v.start)
    return 0


cdef inline int _set(Span *s, Value *v) except -1:
    """A text field of the row: a string or symbol value, checked."""
    _check_text(v)
    s.p = v.p
    s.n = v.n
    s.set = True
    return 0


cdef inline bint _value_is(Value *v, const char *text, Py_ssize_t n) noexcept:
    return v.n == n and memcmp(v.p, text, <size_t>n) == 0


# the largest timestamp a datetime holds: 9999-12-31T23:59:59.999Z, in ms
cdef int64_t _MAX_MS = 253402300799999
cdef int64_t _MIN_MS = -62135596800000      # 0001-01-01T00:00:00Z


cdef const char *_HEX = b"0123456789abcdef"


cdef int _uuid_text(ByteBuffer out, const char *p) except -1:
    """The canonical text of a uuid's 16 bytes (8-4-4-4-12, lower case)."""
    cdef char *w = out.reserve(36)
    cdef int i
    cdef uint8_t b
    for i in range(16):
        if i == 4 or i == 6 or i == 8 or i == 10:
            w[0] = c'-'
            w += 1
        b = <uint8_t>p[i]
        w[0] = _HEX[b >> 4]
        w[1] = _HEX[b & 15]
        w += 2
    out.len += 36
    return 0


def fallback_text(data, bint quoted=True):
    """The text of the one AMQP 1.0 value ``data`` holds, for the types the builder does
    not render itself (uuid, char, decimals, described values, lists, maps, arrays,
    timestamps out of datetime's range): header_text of its plain Python form."""
    from amqwire.codec.stream.amqp10 import decode_value
    from amqwire.spark.decode import header_text

    value = _plain(decode_value(data))
    if not quoted and isinstance(value, str):
        return value
    return header_text(value)


def _plain(value):
    from amqwire.codec.stream import amqp10

    if isinstance(value, _uuid.UUID):
        return str(value)
    if isinstance(value, amqp10.Timestamp):
        return int(value)
    if isinstance(value, (amqp10.Decimal32, amqp10.Decimal64, amqp10.Decimal128)):
        return value.raw
    if isinstance(value, amqp10.Described):
        return {"descriptor": _plain(value.descriptor), "value": _plain(value.value)}
    if isinstance(value, amqp10.Array):
        return [_plain(item) for item in value.items]
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(_plain(key)): _plain(item) for key, item in value.items()}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


cdef int _add_fallback(ColumnBuilder col, Cursor *c, Value *v, bint quoted) except -1:
    """A value rendered by fallback_text (Python), into a string column."""
    text = fallback_text(PyBytes_FromStringAndSize(c.p + v.start, v.end - v.start), quoted)
    if text is None:
        return col.add_null_bytes()
    data = (<str>text).encode("utf-8")
    return col.add_bytes(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


# ---------------------------------------------------------------------------- the builder

cdef class ChunkBatchBuilder:
    """Rows from the chunks of one stream, for offsets in ``[start, end)``: ``add_chunk()``
    each chunk as it comes (records below ``start``, below what was read already, or at
    ``end`` and after are skipped); ``take()`` the rows so far as one RecordBatch.
    ``next_offset`` is the offset after the last record the chunks so far held (``start``
    before any), ``done`` whether it reached ``end``; ``first_chunk_offset`` the first
    offset of the first chunk received (-1 before any: a chunk that starts after
    ``start`` means the offsets before it are gone, or were not messages)."""

    cdef readonly str stream
    cdef bytes _stream_utf8
    cdef readonly int64_t start
    cdef readonly int64_t end
    cdef readonly int64_t next_offset
    cdef readonly int64_t first_chunk_offset
    cdef readonly Py_ssize_t rows
    cdef bint _check_crc
    cdef RecordReader _reader
    cdef int64_t _offset            # the record being decoded (errors)

    cdef ColumnBuilder _bodies
    cdef ColumnBuilder _offsets
    cdef ColumnBuilder _timestamps
    cdef ColumnBuilder _exchanges
    cdef ColumnBuilder _routing_keys
    cdef list _texts
    cdef ColumnBuilder _delivery_modes
    cdef ColumnBuilder _priorities
    cdef ColumnBuilder _creation_times
    cdef ColumnBuilder _header_maps     # map offsets: entries so far
    cdef ColumnBuilder _header_keys
    cdef ColumnBuilder _header_items
    cdef int32_t _entries
    cdef ByteBuffer _scratch            # a header value's text
    cdef ByteBuffer _body               # a body of several data sections
    cdef list _text_out                 # per text property: the text of a value that is not a string

    # the record being decoded
    cdef Span _text[N_TEXT]
    cdef int32_t _delivery_mode
    cdef int32_t _priority
    cdef bint _has_delivery_mode
    cdef bint _has_priority
    cdef int64_t _creation_ms
    cdef bint _has_creation
    cdef Span _exchange
    cdef Span _routing_key
    cdef Span _body_span
    cdef bint _body_joined

    def __init__(self, str stream not None, int64_t start, int64_t end, *, bint check_crc=True):
        if start < 0 or end < start:
            raise ValueError(f"offsets [{start}, {end}): expected 0 <= start <= end")
        self.stream = stream
        self._stream_utf8 = stream.encode("utf-8")
        self.start = start
        self.end = end
        self.next_offset = start
        self.first_chunk_offset = -1
        self._check_crc = check_crc
        self._reader = RecordReader()
        self._scratch = ByteBuffer(64)
        self._body = ByteBuffer(256)
        self._text_out = [ByteBuffer(64) for _ in range(N_TEXT)]
        self._reset(1024)

    @property
    def done(self):
        """Every offset below ``end`` has been read."""
        return self.next_offset >= self.end

    cdef int _reset(self, Py_ssize_t n) except -1:
        self.rows = 0
        self._bodies = ColumnBuilder(n, 4, True, 128)
        self._offsets = ColumnBuilder(n, 8, False)
        self._timestamps = ColumnBuilder(n, 8, False)
        self._exchanges = ColumnBuilder(n, 4, True, 8)
        self._routing_keys = ColumnBuilder(n, 4, True, 16)
        self._texts = [ColumnBuilder(n, 4, True) for _ in range(N_TEXT)]
        self._delivery_modes = ColumnBuilder(n, 4, False)
        self._priorities = ColumnBuilder(n, 4, False)
        self._creation_times = ColumnBuilder(n, 8, False)
        self._header_maps = ColumnBuilder(n, 4, False)
        self._header_keys = ColumnBuilder(n * 3, 4, True, 8)
        self._header_items = ColumnBuilder(n * 3, 4, True, 16)
        (<int32_t *>self._header_maps.values.data)[0] = 0
        self._header_maps.values.len = 4
        self._entries = 0
        return 0

    def add_chunk(self, chunk):
        """The records of ``chunk`` (a Deliver's chunk: bytes-like) in ``[start, end)`` and
        not read yet, as rows; returns how many rows it added.  ChunkError for a chunk that
        is not well-formed (CRC32 checked unless ``check_crc`` is false), RecordError for a
        malformed message."""
        cdef Py_buffer view
        cdef const char *record = NULL
        cdef Py_ssize_t size = 0
        cdef Py_ssize_t before = self.rows
        cdef int64_t low = self.next_offset if self.next_offset > self.start else self.start
        cdef int64_t offset, timestamp_us
        cdef RecordReader reader = self._reader
        owner = chunk if type(chunk) is bytes else None
        if owner is None:
            PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
            try:
                owner = PyBytes_FromStringAndSize(<const char *>view.buf, view.len)
            finally:
                PyBuffer_Release(&view)
        reader.start(owner, PyBytes_AS_STRING(owner), PyBytes_GET_SIZE(owner), self._check_crc)
        if self.first_chunk_offset < 0:
            self.first_chunk_offset = <int64_t>reader.header.first_offset
        timestamp_us = reader.header.timestamp * 1000
        while reader.next(&record, &size):
            offset = <int64_t>reader.offset
            if offset < low:
                continue
            if offset >= self.end:
                break
            self._offset = offset
            try:
                self._add_record(record, size, offset, timestamp_us)
            except _Malformed as exc:
                raise _RecordError(self.stream, offset, exc.problem, exc.position) from None
        offset = <int64_t>(reader.header.first_offset + reader.header.num_records)
        if offset > self.next_offset:
            self.next_offset = offset
        return self.rows - before

    def take(self):
        """The rows added since the last take() as one pyarrow RecordBatch (None when
        there are none)."""
        if self.rows == 0:
            return None
        batch = self._finish()
        self._reset(self.rows if self.rows > 1024 else 1024)
        return batch

    # ------------------------------------------------------------------------ one record

    cdef int _add_record(self, const char *p, Py_ssize_t n, int64_t offset, int64_t timestamp_us) except -1:
        cdef Cursor c
        cdef Value inner
        cdef int section, i
        cdef int32_t first_entry = self._entries
        cdef bint message = _looks_like_message(p, n)
        for i in range(N_TEXT):
            self._text[i].set = False
        self._has_delivery_mode = self._has_priority = self._has_creation = False
        self._exchange.set = self._routing_key.set = False
        self._body_span.set = False
        self._body_joined = False
        self._body.len = 0
        c.p = p
        c.n = n
        c.pos = 0
        if not message:
            self._body_span.p = p
            self._body_span.n = n
            self._body_span.set = True
        else:
            while c.pos < n:
                section = _section(&c, &inner)
                if section == S_DATA:
                    if not _is_binary(inner.code):
                        _bad(f"a data section holds constructor 0x{inner.code:02x}, not binary", inner.start)
                    self._add_body(inner.p, inner.n)
                elif section == S_PROPERTIES:
                    self._read_properties(&c, &inner)
                elif section == S_APPLICATION_PROPERTIES:
                    self._read_application_properties(&c, &inner)
                elif section == S_MESSAGE_ANNOTATIONS:
                    self._read_annotations(&c, &inner)
                elif section == S_VALUE:
                    if _is_text(inner.code) or _is_binary(inner.code):
                        self._add_body(inner.p, inner.n)
                    else:
                        self._add_body(c.p + inner.start, inner.end - inner.start)
                elif section == S_SEQUENCE:
                    self._add_body(c.p + inner.start, inner.end - inner.start)
                # header, delivery annotations, footer: nothing of theirs is a column

        # the row
        self._offsets.add_int64(offset, True)
        self._timestamps.add_int64(timestamp_us, True)
        if self._body_joined:
            self._bodies.add_bytes(self._body.data, self._body.len)
        elif self._body_span.set:
            self._bodies.add_bytes(self._body_span.p, self._body_span.n)
        else:
            self._bodies.add_bytes(b"", 0)
        if self._exchange.set:
            self._exchanges.add_bytes(self._exchange.p, self._exchange.n)
        else:
            self._exchanges.add_bytes(b"", 0)
        if self._routing_key.set:
            self._routing_keys.add_bytes(self._routing_key.p, self._routing_key.n)
        else:
            self._routing_keys.add_bytes(PyBytes_AS_STRING(self._stream_utf8), PyBytes_GET_SIZE(self._stream_utf8))
        for i in range(N_TEXT):
            if self._text[i].set:
                (<ColumnBuilder>self._texts[i]).add_bytes(self._text[i].p, self._text[i].n)
            else:
                (<ColumnBuilder>self._texts[i]).add_null_bytes()
        self._delivery_modes.add_int32(self._delivery_mode if self._has_delivery_mode else 0, self._has_delivery_mode)
        self._priorities.add_int32(self._priority if self._has_priority else 0, self._has_priority)
        self._creation_times.add_int64(self._creation_ms * 1000 if self._has_creation else 0, self._has_creation)
        self._header_maps.add_int32(self._entries, self._entries > first_entry)
        self.rows += 1
        return 0

    cdef int _add_body(self, const char *p, Py_ssize_t n) except -1:
        """A body section's bytes; a second one joins the first."""
        if not self._body_span.set and not self._body_joined:
            self._body_span.p = p
            self._body_span.n = n
            self._body_span.set = True
            return 0
        if not self._body_joined:
            self._body.len = 0
            text_raw(self._body, self._body_span.p, self._body_span.n)
            self._body_joined = True
        return text_raw(self._body, p, n)

    cdef int _read_properties(self, Cursor *c, Value *section) except -1:
        cdef Cursor items
        cdef Value v
        cdef uint32_t i
        if section.code == 0x40:
            return 0
        if not _is_list(section.code):
            _bad(f"the properties section holds constructor 0x{section.code:02x}, not a list", section.start)
        items.p = section.p
        items.n = section.n
        items.pos = 0
        for i in range(section.count):
            _read(&items, &v, 1)
            if v.code == 0x40:
                continue
            if i == 0:
                self._id_text(&items, &v, MESSAGE_ID)
            elif i == 1:
                self._user_id_text(&items, &v)
            elif i == 4:
                self._plain_text(&items, &v, REPLY_TO)
            elif i == 5:
                self._id_text(&items, &v, CORRELATION_ID)
            elif i == 6:
                self._plain_text(&items, &v, CONTENT_TYPE)
            elif i == 7:
                self._plain_text(&items, &v, CONTENT_ENCODING)
            elif i == 9 and v.code == 0x83:
                self._creation_ms = <int64_t>amqw_unpack_u64(v.p)
                self._has_creation = _MIN_MS <= self._creation_ms <= _MAX_MS
        if items.pos != items.n:
            _bad(f"{items.n - items.pos} bytes after the {section.count} fields of the properties section",
                 section.start)
        return 0

    cdef int _plain_text(self, Cursor *c, Value *v, int column) except -1:
        """A text property: a string or a symbol (anything else as fallback_text shows it)."""
        if _is_text(v.code):
            _set(&self._text[column], v)
            return 0
        return self._rendered(c, v, column)

    cdef int _rendered(self, Cursor *c, Value *v, int column) except -1:
        """The text of an unusual value (fallback_text), kept for the row."""
        cdef ByteBuffer out = <ByteBuffer>self._text_out[column]
        text = fallback_text(PyBytes_FromStringAndSize(c.p + v.start, v.end - v.start), False)
        out.len = 0
        if text is None:
            return 0
        data = (<str>text).encode("utf-8")
        text_raw(out, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
        self._text[column].p = out.data
        self._text[column].n = out.len
        self._text[column].set = True
        return 0

    cdef int _id_text(self, Cursor *c, Value *v, int column) except -1:
        """message-id and correlation-id as RabbitMQ shows them over 0-9-1: a string as it
        is, a uuid as its canonical text, a ulong in decimal, binary in base64."""
        cdef ByteBuffer out = <ByteBuffer>self._text_out[column]
        cdef int64_t signed_value = 0
        cdef uint64_t unsigned_value = 0
        cdef Py_ssize_t skip = 0
        if _is_text(v.code):
            _set(&self._text[column], v)
            return 0
        out.len = 0
        if v.code == 0x98:
            _uuid_text(out, v.p)
        elif _is_binary(v.code):
            text_base64(out, <const uint8_t *>v.p, v.n)
            skip = 1                # the JSON string's quotes off
        elif _integer(v, &signed_value, &unsigned_value) == 2:
            text_uint(out, unsigned_value)
        else:
            return self._rendered(c, v, column)
        self._text[column].p = out.data + skip
        self._text[column].n = out.len - 2 * skip
        self._text[column].set = True
        return 0

    cdef int _user_id_text(self, Cursor *c, Value *v) except -1:
        """user-id: binary (the user's name), shown as its text when it is UTF-8, else in
        base64."""
        cdef ByteBuffer out = <ByteBuffer>self._text_out[USER_ID]
        if (_is_binary(v.code) and _utf8_valid(v.p, v.n)) or _is_text(v.code):
            _set(&self._text[USER_ID], v)
            return 0
        if _is_binary(v.code):
            out.len = 0
            text_base64(out, <const uint8_t *>v.p, v.n)
            self._text[USER_ID].p = out.data + 1
            self._text[USER_ID].n = out.len - 2
            self._text[USER_ID].set = True
            return 0
        return self._rendered(c, v, USER_ID)

    cdef int _read_annotations(self, Cursor *c, Value *section) except -1:
        cdef Cursor items
        cdef Value key, v
        cdef uint32_t _pair
        cdef int64_t signed_value = 0
        cdef uint64_t unsigned_value = 0
        cdef int kind
        if section.code == 0x40:
            return 0
        if not _is_map(section.code):
            _bad(f"the message-annotations section holds constructor 0x{section.code:02x}, not a map", section.start)
        if section.count & 1:
            _bad(f"a map of {section.count} elements (not key-value pairs)", section.start)
        items.p = section.p
        items.n = section.n
        items.pos = 0
        for _pair in range(section.count // 2):
            _read(&items, &key, 1)
            _read(&items, &v, 1)
            if not _is_text(key.code) or key.n < 6 or memcmp(key.p, b"x-", 2) != 0:
                continue
            if _value_is(&key, b"x-exchange", 10):
                if _is_text(v.code):
                    _set(&self._exchange, &v)
            elif _value_is(&key, b"x-routing-key", 13):
                if _is_text(v.code):
                    _set(&self._routing_key, &v)
            elif _value_is(&key, b"x-basic-expiration", 18):
                if _is_text(v.code):
                    _set(&self._text[EXPIRATION], &v)
            elif _value_is(&key, b"x-basic-priority", 16) or _value_is(&key, b"x-basic-delivery-mode", 21):
                kind = _integer(&v, &signed_value, &unsigned_value)
                if kind == 2:
                    signed_value = <int64_t>unsigned_value if unsigned_value <= INT32_MAX else -1
                if kind == 0 or not 0 <= signed_value <= 255:
                    continue
                if key.n == 16:
                    self._priority = <int32_t>signed_value
                    self._has_priority = True
                else:
                    self._delivery_mode = <int32_t>signed_value
                    self._has_delivery_mode = True
        if items.pos != items.n:
            _bad(f"{items.n - items.pos} bytes after the {section.count} elements of the message annotations",
                 section.start)
        return 0

    cdef int _read_application_properties(self, Cursor *c, Value *section) except -1:
        cdef Cursor items
        cdef Value key, v
        cdef uint32_t _pair
        if section.code == 0x40:
            return 0
        if not _is_map(section.code):
            _bad(f"the application-properties section holds constructor 0x{section.code:02x}, not a map",
                 section.start)
        if section.count & 1:
            _bad(f"a map of {section.count} elements (not key-value pairs)", section.start)
        items.p = section.p
        items.n = section.n
        items.pos = 0
        for _pair in range(section.count // 2):
            _read(&items, &key, 1)
            _read(&items, &v, 1)
            if not _is_text(key.code):
                _bad(f"an application property's key has constructor 0x{key.code:02x}, not a string", key.start)
            if _value_is(&key, b"x-basic-type", 12) and _is_text(v.code):
                _set(&self._text[TYPE], &v)
                continue
            if _value_is(&key, b"x-basic-app-id", 14) and _is_text(v.code):
                _set(&self._text[APP_ID], &v)
                continue
            if self._entries == INT32_MAX:
                _bad("more than 2**31 - 1 header entries in one batch", key.start)
            _check_text(&key)
            self._header_keys.add_bytes(key.p, key.n)
            self._add_header_value(&items, &v)
            self._entries += 1
        if items.pos != items.n:
            _bad(f"{items.n - items.pos} bytes after the {section.count} elements of the application properties",
                 section.start)
        return 0

    cdef int _add_header_value(self, Cursor *c, Value *v) except -1:
        """One application property's value as header_text renders it: in C for the
        simple types, by fallback_text for the rest."""
        cdef ByteBuffer scratch = self._scratch
        cdef ColumnBuilder items = self._header_items
        cdef uint8_t code = v.code
        cdef int64_t signed_value = 0, ms
        cdef uint64_t unsigned_value = 0
        cdef int kind
        if code == 0x40:
            return items.add_null_bytes()
        if _is_text(code):
            _check_text(v)
            return items.add_bytes(v.p, v.n)
        if code == 0x41 or (code == 0x56 and v.p[0] != 0):
            return items.add_bytes(b"true", 4)
        if code == 0x42 or code == 0x56:
            return items.add_bytes(b"false", 5)
        scratch.len = 0
        kind = _integer(v, &signed_value, &unsigned_value)
        if kind == 1:
            text_int(scratch, signed_value)
        elif kind == 2:
            text_uint(scratch, unsigned_value)
        elif code == 0x82:
            text_double(scratch, amqw_unpack_f64(v.p))
        elif code == 0x72:
            text_double(scratch, <double>amqw_unpack_f32(v.p))
        elif _is_binary(code):
            text_base64(scratch, <const uint8_t *>v.p, v.n)
        elif code == 0x83 and _MIN_MS <= <int64_t>amqw_unpack_u64(v.p) <= _MAX_MS:
            ms = <int64_t>amqw_unpack_u64(v.p)
            text_utc_micros(scratch, ms * 1000)
        else:
            return _add_fallback(items, c, v, True)
        return items.add_bytes(scratch.data, scratch.len)

    # ------------------------------------------------------------------------ the batch

    cdef object _finish(self):
        pa = pyarrow()
        schema = _stream_schema()
        cdef Py_ssize_t n = self.rows, _row
        cdef ColumnBuilder streams = ColumnBuilder(n, 4, True, PyBytes_GET_SIZE(self._stream_utf8))
        cdef const char *name = PyBytes_AS_STRING(self._stream_utf8)
        cdef Py_ssize_t name_len = PyBytes_GET_SIZE(self._stream_utf8)
        for _row in range(n):
            streams.add_bytes(name, name_len)
        string, binary, large_string = pa.string(), pa.binary(), pa.large_string()
        ts_type = pa.timestamp("us", tz="UTC")
        props_type = schema.field("properties").type
        map_type = schema.field("headers").type
        texts = [(<ColumnBuilder>col).variable(string, large_string) for col in self._texts]
        property_arrays = texts[:2] + [self._delivery_modes.fixed(pa.int32()), self._priorities.fixed(pa.int32())] \
            + texts[2:6] + [self._creation_times.fixed(ts_type)] + texts[6:]
        properties = pa.StructArray.from_arrays(property_arrays, fields=list(props_type))
        map_entries = pa.StructArray.from_arrays(
            [self._header_keys.variable(string, large_string), self._header_items.variable(string, large_string)],
            fields=[map_type.key_field, map_type.item_field])
        headers = pa.Array.from_buffers(
            map_type, n, [self._header_maps.validity_buffer(), pa.py_buffer(self._header_maps.values)],
            null_count=self._header_maps.nulls, children=[map_entries])
        columns = [
            self._bodies.variable(binary, pa.large_binary()),
            streams.variable(string, large_string),
            self._offsets.fixed(pa.int64()),
            self._timestamps.fixed(ts_type),
            self._exchanges.variable(string, large_string),
            self._routing_keys.variable(string, large_string),
            properties,
            headers,
        ]
        wide = [self._bodies, streams, self._exchanges, self._routing_keys, self._header_keys,
                self._header_items] + self._texts
        if any((<ColumnBuilder>col).wide for col in wide):
            return pa.RecordBatch.from_arrays(columns, names=schema.names)
        return pa.RecordBatch.from_arrays(columns, schema=schema)


cdef int _section(Cursor *c, Value *inner) except -1:
    """The section at the cursor: its code (0x70 .. 0x78), its value in ``inner``."""
    cdef Value descriptor
    cdef Py_ssize_t at = c.pos
    cdef uint64_t code
    _need(c, 1, "a section")
    if <uint8_t>c.p[c.pos] != 0x00:
        _bad(f"expected a section (a described value, 0x00), found constructor 0x{<uint8_t>c.p[c.pos]:02x}", c.pos)
    c.pos += 1
    _read(c, &descriptor, 1)
    if descriptor.code == 0x53:
        code = <uint8_t>descriptor.p[0]
    elif descriptor.code == 0x80:
        code = amqw_unpack_u64(descriptor.p)
    elif _is_text(descriptor.code):
        code = _SECTION_NAMES.get(PyBytes_FromStringAndSize(descriptor.p, descriptor.n), 0)
    else:
        code = 0
    if not S_HEADER <= code <= S_FOOTER:
        _bad(f"a described value that is no message section (descriptor constructor 0x{descriptor.code:02x})", at)
    _read(c, inner, 1)
    return <int>code


cdef bint _looks_like_message(const char *p, Py_ssize_t n) noexcept:
    """Whether a record starts with a message section's descriptor (0x00 then a small
    ulong 0x70..0x78, a ulong, or a symbol naming one)."""
    if n < 3 or p[0] != 0:
        return False
    if <uint8_t>p[1] == 0x53:
        return 0x70 <= <uint8_t>p[2] <= 0x78
    if <uint8_t>p[1] == 0x80:
        return n >= 10 and amqw_unpack_u64(p + 2) >= 0x70 and amqw_unpack_u64(p + 2) <= 0x78
    if <uint8_t>p[1] == 0xa3:
        return n >= 8 and memcmp(p + 3, b"amqp:", 5) == 0
    return False


cdef bint _utf8_valid(const char *p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i = 0
    cdef uint8_t b
    cdef int extra, k
    cdef uint32_t cp
    while i < n:
        b = <uint8_t>p[i]
        if b < 0x80:
            i += 1
            continue
        if 0xc2 <= b <= 0xdf:
            extra, cp = 1, b & 0x1f
        elif 0xe0 <= b <= 0xef:
            extra, cp = 2, b & 0x0f
        elif 0xf0 <= b <= 0xf4:
            extra, cp = 3, b & 0x07
        else:
            return False
        if n - i <= extra:
            return False
        for k in range(1, extra + 1):
            if (<uint8_t>p[i + k]) & 0xc0 != 0x80:
                return False
            cp = (cp << 6) | ((<uint8_t>p[i + k]) & 0x3f)
        if (extra == 2 and (cp < 0x800 or 0xd800 <= cp <= 0xdfff)) or (extra == 3 and not 0x10000 <= cp <= 0x10ffff):
            return False
        i += extra + 1
    return True
