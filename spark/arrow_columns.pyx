# cython: language_level=3
"""Arrow columns built in C, and the text forms of header values (see arrow_columns.pxd)."""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from libc.math cimport isnan, isinf
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, strlen

from amqwire.codec.table cimport civil_from_days

cdef extern from "Python.h":
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL

cdef extern from *:
    """
    #define AMQW_AC_DTSF_ADD_DOT_0 0x02
    """
    int DTSF_ADD_DOT_0 "AMQW_AC_DTSF_ADD_DOT_0"

cdef object _pa = None


cdef object pyarrow():
    global _pa
    if _pa is None:
        import pyarrow as pa
        _pa = pa
    return _pa


@cython.final
cdef class ByteBuffer:

    def __cinit__(self, Py_ssize_t cap=64):
        if cap < 64:
            cap = 64
        self.data = <char *>PyMem_Malloc(<size_t>cap)
        if self.data is NULL:
            raise MemoryError()
        self.len = 0
        self.cap = cap

    def __dealloc__(self):
        PyMem_Free(self.data)

    cdef int grow(self, Py_ssize_t needed) except -1:
        cdef Py_ssize_t cap = self.cap * 2
        cdef char *data
        if cap < needed:
            cap = needed
        data = <char *>PyMem_Realloc(self.data, <size_t>cap)
        if data is NULL:
            raise MemoryError()
        self.data = data
        self.cap = cap
        return 0

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self.data, self.len, 1, flags)

    def __releasebuffer__(self, Py_buffer *view):
        pass


@cython.final
cdef class ColumnBuilder:

    def __cinit__(self, Py_ssize_t rows, int width, bint variable, Py_ssize_t bytes_per_row=0):
        # Row columns that know their length never grow their values and validity; bytes
        # are allocated for ``bytes_per_row`` and grow from there.
        self.values = ByteBuffer((rows + 1) * width)
        self.validity = ByteBuffer((rows + 7) // 8)
        self.length = 0
        self.nulls = 0
        self.wide = False
        if variable:
            self.data = ByteBuffer(rows * bytes_per_row)
            (<int32_t *>self.values.data)[0] = 0
            self.values.len = 4

    cdef int _widen(self) except -1:
        """int32 offsets to int64, once, when the data is about to pass 2 GiB - 1."""
        cdef Py_ssize_t count = self.values.len // 4, i
        cdef ByteBuffer wide = ByteBuffer(count * 8 + 4096)
        cdef const int32_t *src = <const int32_t *>self.values.data
        cdef int64_t *dst = <int64_t *>wide.data
        for i in range(count):
            dst[i] = src[i]
        wide.len = count * 8
        self.values = wide
        self.wide = True
        return 0

    cdef object validity_buffer(self):
        return None if self.nulls == 0 else _pa.py_buffer(self.validity)

    cdef object fixed(self, object arrow_type):
        pa = pyarrow()
        return pa.Array.from_buffers(arrow_type, self.length, [self.validity_buffer(), pa.py_buffer(self.values)],
                                     null_count=self.nulls)

    cdef object variable(self, object arrow_type, object large_type):
        pa = pyarrow()
        return pa.Array.from_buffers(large_type if self.wide else arrow_type, self.length,
                                     [self.validity_buffer(), pa.py_buffer(self.values), pa.py_buffer(self.data)],
                                     null_count=self.nulls)


cdef const char *_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


cdef int text_base64(ByteBuffer out, const uint8_t *p, Py_ssize_t n) except -1:
    """A JSON string of the base64 of ``n`` bytes (padded, as base64.b64encode)."""
    cdef char *w = out.reserve(2 + (n + 2) // 3 * 4)
    cdef Py_ssize_t i = 0
    cdef uint32_t v
    w[0] = c'"'
    w += 1
    while i + 3 <= n:
        v = (<uint32_t>p[i] << 16) | (<uint32_t>p[i + 1] << 8) | p[i + 2]
        w[0] = _B64[v >> 18]
        w[1] = _B64[(v >> 12) & 63]
        w[2] = _B64[(v >> 6) & 63]
        w[3] = _B64[v & 63]
        w += 4
        i += 3
    if n - i == 1:
        v = <uint32_t>p[i] << 16
        w[0] = _B64[v >> 18]
        w[1] = _B64[(v >> 12) & 63]
        w[2] = c'='
        w[3] = c'='
        w += 4
    elif n - i == 2:
        v = (<uint32_t>p[i] << 16) | (<uint32_t>p[i + 1] << 8)
        w[0] = _B64[v >> 18]
        w[1] = _B64[(v >> 12) & 63]
        w[2] = _B64[(v >> 6) & 63]
        w[3] = c'='
        w += 4
    w[0] = c'"'
    out.len = (w + 1) - out.data
    return 0


cdef inline char *_digits(char *w, int64_t v, int width) noexcept:
    """``v`` (>= 0) zero-padded to ``width`` digits, written backwards from w + width."""
    cdef int i
    for i in range(width - 1, -1, -1):
        w[i] = <char>(c'0' + v % 10)
        v //= 10
    return w + width


cdef inline int64_t _floor_div(int64_t a, int64_t b) noexcept:
    return a // b if a >= 0 else -((-a + b - 1) // b)


cdef int text_utc_micros(ByteBuffer out, int64_t us) except -1:
    """A JSON string of the UTC datetime ``us`` microseconds after the epoch, as an aware
    datetime's isoformat() with Z for +00:00 writes it (years 1 .. 9999)."""
    cdef int64_t seconds = _floor_div(us, 1000000)
    cdef int64_t micros = us - seconds * 1000000
    cdef int64_t days = _floor_div(seconds, 86400)
    cdef int64_t sod = seconds - days * 86400
    cdef int64_t year = 0
    cdef int month = 0, day = 0
    cdef char *w = out.reserve(36)
    cdef char *start = w
    civil_from_days(days, &year, &month, &day)
    w[0] = c'"'
    w = _digits(w + 1, year, 4)
    w[0] = c'-'
    w = _digits(w + 1, month, 2)
    w[0] = c'-'
    w = _digits(w + 1, day, 2)
    w[0] = c'T'
    w = _digits(w + 1, sod // 3600, 2)
    w[0] = c':'
    w = _digits(w + 1, (sod // 60) % 60, 2)
    w[0] = c':'
    w = _digits(w + 1, sod % 60, 2)
    if micros:
        w[0] = c'.'
        w = _digits(w + 1, micros, 6)
    w[0] = c'Z'
    w[1] = c'"'
    out.len += (w + 2) - start
    return 0


cdef int text_raw(ByteBuffer out, const char *p, Py_ssize_t n) except -1:
    memcpy(out.reserve(n), p, <size_t>n)
    out.len += n
    return 0


cdef int text_double(ByteBuffer out, double v) except -1:
    """json.dumps of a float: repr, and NaN / Infinity / -Infinity."""
    cdef char *text
    cdef const char *special = NULL
    if isnan(v):
        special = b"NaN"
    elif isinf(v):
        special = b"Infinity" if v > 0 else b"-Infinity"
    if special is not NULL:
        return text_raw(out, special, <Py_ssize_t>strlen(special))
    text = PyOS_double_to_string(v, c'r', 0, DTSF_ADD_DOT_0, NULL)
    try:
        text_raw(out, text, <Py_ssize_t>strlen(text))
    finally:
        PyMem_Free(text)
    return 0


cdef int text_uint(ByteBuffer out, uint64_t u) except -1:
    cdef char tmp[24]
    cdef int i = 24
    while True:
        i -= 1
        tmp[i] = <char>(c'0' + u % 10)
        u //= 10
        if u == 0:
            break
    return text_raw(out, tmp + i, 24 - i)


cdef int text_int(ByteBuffer out, long long v) except -1:
    if v >= 0:
        return text_uint(out, <uint64_t>v)
    text_raw(out, b"-", 1)
    return text_uint(out, <uint64_t>(-(v + 1)) + 1)
