# The codec's byte-level primitives: one growable write buffer and a bounds-checked
# read view.  Other codec modules (and amqwire.spark) cimport these.

from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t,
                          uint8_t, uint16_t, uint32_t, uint64_t)
from libc.string cimport memcpy
from cpython.object cimport PyObject


cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void *PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    bint PyUnicode_CheckExact(object o)


cdef extern from "_endian.h":
    void amqw_pack_u16(char *p, uint16_t v) nogil
    void amqw_pack_u32(char *p, uint32_t v) nogil
    void amqw_pack_u64(char *p, uint64_t v) nogil
    void amqw_pack_f32(char *p, float v) nogil
    void amqw_pack_f64(char *p, double v) nogil
    uint16_t amqw_unpack_u16(const char *p) nogil
    uint32_t amqw_unpack_u32(const char *p) nogil
    uint64_t amqw_unpack_u64(const char *p) nogil
    float amqw_unpack_f32(const char *p) nogil
    double amqw_unpack_f64(const char *p) nogil


cdef enum:
    FRAME_METHOD = 1
    FRAME_HEADER = 2
    FRAME_BODY = 3
    FRAME_HEARTBEAT = 8
    FRAME_END = 0xCE
    FRAME_HEADER_SIZE = 7      # type, channel, size
    FRAME_OVERHEAD = 8         # header + end octet
    FRAME_MIN_SIZE = 4096      # the smallest frame_max a peer may negotiate
    HAND_OVER_AT = 4096        # WriteBuffer.take_view hands its memory over from this many bytes
    MAX_NESTING = 64           # tables and arrays nested deeper than this are refused


cdef const char *_utf8_slow(object text, Py_ssize_t *size, const char *what) except NULL


cdef inline const char *utf8_of(object text, Py_ssize_t *size, const char *what) except NULL:
    """The UTF-8 bytes of a str: ASCII strings are their own UTF-8, read in place."""
    if PyUnicode_IS_COMPACT_ASCII(text):
        size[0] = PyUnicode_GET_LENGTH(text)
        return <const char *>PyUnicode_DATA(text)
    return _utf8_slow(text, size, what)
cdef const char *_shortstr_slow(object value, Py_ssize_t *size, const char *what) except NULL


cdef inline const char *shortstr_utf8(object value, Py_ssize_t *size, const char *what) except NULL:
    """The UTF-8 of a short string argument, checked: a str of at most 255 bytes."""
    if PyUnicode_CheckExact(value) and PyUnicode_IS_COMPACT_ASCII(value) \
            and PyUnicode_GET_LENGTH(value) <= 255:
        size[0] = PyUnicode_GET_LENGTH(value)
        return <const char *>PyUnicode_DATA(value)
    return _shortstr_slow(value, size, what)


cdef int raise_too_long(Py_ssize_t n) except -1


cdef class WriteBuffer:
    cdef char *_buf
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap

    cdef int _grow(self, Py_ssize_t needed) except -1
    cdef int try_grow(self, Py_ssize_t needed) noexcept
    cdef int write_longstr(self, object value, const char *what) except -1
    cdef Py_ssize_t begin_frame(self, uint8_t frame_type, uint16_t channel) except -1
    cdef int end_frame(self, Py_ssize_t start, Py_ssize_t frame_max) except -1
    cdef bytes to_bytes(self)
    cdef object take_view(self)

    cdef inline int ensure(self, Py_ssize_t extra) except -1:
        if self._len + extra > self._cap:
            return self._grow(self._len + extra)
        return 0

    cdef inline int write_u8(self, uint8_t v) except -1:
        if self._len + 1 > self._cap:
            self._grow(self._len + 1)
        self._buf[self._len] = <char>v
        self._len += 1
        return 0

    cdef inline int write_u16(self, uint16_t v) except -1:
        if self._len + 2 > self._cap:
            self._grow(self._len + 2)
        amqw_pack_u16(self._buf + self._len, v)
        self._len += 2
        return 0

    cdef inline int write_u32(self, uint32_t v) except -1:
        if self._len + 4 > self._cap:
            self._grow(self._len + 4)
        amqw_pack_u32(self._buf + self._len, v)
        self._len += 4
        return 0

    cdef inline int write_u64(self, uint64_t v) except -1:
        if self._len + 8 > self._cap:
            self._grow(self._len + 8)
        amqw_pack_u64(self._buf + self._len, v)
        self._len += 8
        return 0

    cdef inline int write_f32(self, float v) except -1:
        if self._len + 4 > self._cap:
            self._grow(self._len + 4)
        amqw_pack_f32(self._buf + self._len, v)
        self._len += 4
        return 0

    cdef inline int write_f64(self, double v) except -1:
        if self._len + 8 > self._cap:
            self._grow(self._len + 8)
        amqw_pack_f64(self._buf + self._len, v)
        self._len += 8
        return 0

    cdef inline int write_shortstr(self, object value, const char *what) except -1:
        """A short string: a str of at most 255 bytes in UTF-8, after its length octet."""
        cdef Py_ssize_t n = 0
        cdef const char *data = shortstr_utf8(value, &n, what)
        if self._len + 1 + n > self._cap:
            self._grow(self._len + 1 + n)
        self._buf[self._len] = <char><uint8_t>n
        memcpy(self._buf + self._len + 1, data, <size_t>n)
        self._len += 1 + n
        return 0

    cdef inline int write_str_value(self, object value) except -1:
        """A str as a field-table long string: 'S', size, UTF-8."""
        cdef Py_ssize_t n = 0
        cdef const char *data = utf8_of(value, &n, "value")
        if n > 0xFFFFFFFF:
            return raise_too_long(n)
        if self._len + 5 + n > self._cap:
            self._grow(self._len + 5 + n)
        self._buf[self._len] = c'S'
        amqw_pack_u32(self._buf + self._len + 1, <uint32_t>n)
        memcpy(self._buf + self._len + 5, data, <size_t>n)
        self._len += 5 + n
        return 0

    cdef inline int write_raw(self, const char *data, Py_ssize_t n) except -1:
        if self._len + n > self._cap:
            self._grow(self._len + n)
        memcpy(self._buf + self._len, data, <size_t>n)
        self._len += n
        return 0


# A read-only window over bytes owned by someone else (a bytes object or a Py_buffer
# the caller keeps alive).  `base` is the offset of buf[0] in the frame or stream the
# caller reports errors against.
cdef struct ReadView:
    const char *buf
    Py_ssize_t len
    Py_ssize_t pos
    Py_ssize_t base


cdef int raise_short_read(ReadView *v, Py_ssize_t need, const char *what) except -1
cdef int raise_trailing(ReadView *v, str what) except -1


cdef inline void view_of_buffer(ReadView *v, Py_buffer *pybuf) noexcept:
    v.buf = <const char *>pybuf.buf
    v.len = pybuf.len
    v.pos = 0
    v.base = 0


cdef inline int expect_end(ReadView *v, str what) except -1:
    """A structure decoded from a view must use all of it."""
    if v.pos != v.len:
        return raise_trailing(v, what)
    return 0
cdef object read_shortstr(ReadView *v, const char *what)
cdef bytes read_longstr(ReadView *v, const char *what)
cdef PyObject *decode_utf8_or_null(const char *data, Py_ssize_t n) noexcept
cdef object decode_utf8(const char *data, Py_ssize_t n, ReadView *v, const char *what)


cdef inline int read_u8(ReadView *v, uint8_t *out, const char *what) except -1:
    if v.len - v.pos < 1:
        return raise_short_read(v, 1, what)
    out[0] = <uint8_t>v.buf[v.pos]
    v.pos += 1
    return 0

cdef inline int read_u16(ReadView *v, uint16_t *out, const char *what) except -1:
    if v.len - v.pos < 2:
        return raise_short_read(v, 2, what)
    out[0] = amqw_unpack_u16(v.buf + v.pos)
    v.pos += 2
    return 0

cdef inline int read_u32(ReadView *v, uint32_t *out, const char *what) except -1:
    if v.len - v.pos < 4:
        return raise_short_read(v, 4, what)
    out[0] = amqw_unpack_u32(v.buf + v.pos)
    v.pos += 4
    return 0

cdef inline int read_u64(ReadView *v, uint64_t *out, const char *what) except -1:
    if v.len - v.pos < 8:
        return raise_short_read(v, 8, what)
    out[0] = amqw_unpack_u64(v.buf + v.pos)
    v.pos += 8
    return 0

cdef inline const char *read_raw(ReadView *v, Py_ssize_t n, const char *what) except NULL:
    cdef const char *p
    if n < 0 or v.len - v.pos < n:
        raise_short_read(v, n, what)
        return NULL
    p = v.buf + v.pos
    v.pos += n
    return p
