# Arrow columns built in C, row by row, into growable buffers that pyarrow then wraps
# without a copy; and the text forms of header values.  The stream sources' batch
# builders (stream_batch: 0-9-1 deliveries; stream_chunks: stream-protocol chunks)
# cimport these.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t, INT32_MAX
from libc.string cimport memcpy


cdef class ByteBuffer:
    """Growable bytes that pyarrow wraps without a copy (the buffer protocol).  Nothing
    writes to it once it has been handed to pyarrow."""
    cdef char *data
    cdef Py_ssize_t len
    cdef Py_ssize_t cap

    cdef int grow(self, Py_ssize_t needed) except -1

    cdef inline char *reserve(self, Py_ssize_t n) except NULL:
        """Room for ``n`` more bytes at the end; the caller writes them and moves len."""
        if self.len + n > self.cap:
            self.grow(self.len + n)
        return self.data + self.len


cdef class ColumnBuilder:
    """One Arrow column under construction: fixed-width values (int32/int64), or the
    offsets and bytes of a string/binary column; a validity bitmap beside either."""
    cdef ByteBuffer values      # fixed-width values, or offsets (int32; int64 once wide)
    cdef ByteBuffer data        # string/binary bytes
    cdef ByteBuffer validity
    cdef int64_t length
    cdef int64_t nulls
    cdef bint wide              # offsets are int64 (the data passed 2 GiB - 1)

    cdef int _widen(self) except -1
    cdef object validity_buffer(self)
    cdef object fixed(self, object arrow_type)
    cdef object variable(self, object arrow_type, object large_type)

    cdef inline int _mark(self, bint valid) except -1:
        cdef uint8_t *bits
        if (self.length & 7) == 0:
            self.validity.reserve(1)[0] = 0
            self.validity.len += 1
        if valid:
            bits = <uint8_t *>self.validity.data
            bits[self.length >> 3] |= <uint8_t>(1 << (self.length & 7))
        else:
            self.nulls += 1
        self.length += 1
        return 0

    cdef inline int _add_end(self, Py_ssize_t end) except -1:
        if self.wide:
            (<int64_t *>self.values.reserve(8))[0] = end
            self.values.len += 8
        else:
            (<int32_t *>self.values.reserve(4))[0] = <int32_t>end
            self.values.len += 4
        return 0

    cdef inline int add_bytes(self, const char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t end = self.data.len + n
        if end > INT32_MAX and not self.wide:
            self._widen()
        memcpy(self.data.reserve(n), p, <size_t>n)
        self.data.len = end
        self._add_end(end)
        return self._mark(True)

    cdef inline int add_null_bytes(self) except -1:
        self._add_end(self.data.len)
        return self._mark(False)

    cdef inline int add_int64(self, int64_t v, bint valid) except -1:
        (<int64_t *>self.values.reserve(8))[0] = v
        self.values.len += 8
        return self._mark(valid)

    cdef inline int add_int32(self, int32_t v, bint valid) except -1:
        (<int32_t *>self.values.reserve(4))[0] = v
        self.values.len += 4
        return self._mark(valid)


# pyarrow, imported on first use
cdef object pyarrow()

# Header values as text (amqwire.spark.decode.header_text's JSON forms), appended to ``out``:
cdef int text_base64(ByteBuffer out, const uint8_t *p, Py_ssize_t n) except -1   # a JSON string of base64
cdef int text_utc_micros(ByteBuffer out, int64_t us) except -1   # a JSON string, ISO 8601 with Z
cdef int text_double(ByteBuffer out, double v) except -1         # json.dumps of a float
cdef int text_int(ByteBuffer out, long long v) except -1
cdef int text_uint(ByteBuffer out, uint64_t v) except -1
cdef int text_raw(ByteBuffer out, const char *p, Py_ssize_t n) except -1
