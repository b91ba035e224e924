# cython: language_level=3
"""Byte-level primitives shared by the codec modules (see buffer.pxd)."""

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.object cimport PyObject
from libc.string cimport memcmp, memset
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from amqwire.codec.errors import AMQPSyntaxError, FrameError, UnsupportedValueError

cdef extern from "Python.h":
    PyObject *_decode_utf8_raw "PyUnicode_DecodeUTF8"(const char *s, Py_ssize_t size, const char *errors)
    void PyErr_Clear()
    void Py_XDECREF(PyObject *o)
    void Py_XINCREF(PyObject *o)
    const char *_utf8_raw "PyUnicode_AsUTF8AndSize"(object s, Py_ssize_t *size)
    int PyBytes_CheckExact(object o)
    int PyUnicode_Check(object o)
    int PyObject_CheckBuffer(object o)

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo, PyBUF_SIMPLE
from cpython.memoryview cimport PyMemoryView_FromObject


cdef class WriteBuffer:
    """A growable byte buffer that frames are written into.

    Frames are written by reserving the 7-byte header, writing the payload, then
    patching the size and appending the end octet, so no payload is ever copied twice.
    """

    def __cinit__(self, Py_ssize_t capacity=512):
        if capacity < 16:
            capacity = 16
        self._buf = <char *>PyMem_Malloc(<size_t>capacity)
        if self._buf is NULL:
            raise MemoryError()
        self._cap = capacity
        self._len = 0

    def __dealloc__(self):
        PyMem_Free(self._buf)
        self._buf = NULL

    cdef int try_grow(self, Py_ssize_t needed) noexcept:
        """Make room for ``needed`` bytes in all; -1 (and no exception set) if out of memory."""
        cdef Py_ssize_t new_cap = self._cap
        cdef char *new_buf
        while new_cap < needed:
            new_cap = new_cap * 2 if new_cap < (1 << 26) else new_cap + (new_cap >> 1)
        new_buf = <char *>PyMem_Realloc(self._buf, <size_t>new_cap)
        if new_buf is NULL:
            return -1
        self._buf = new_buf
        self._cap = new_cap
        return 0

    cdef int _grow(self, Py_ssize_t needed) except -1:
        if self.try_grow(needed) < 0:
            raise MemoryError(f"WriteBuffer: cannot grow to {needed} bytes")
        return 0

    cdef int write_longstr(self, object value, const char *what) except -1:
        cdef Py_buffer view
        cdef const char *data
        cdef Py_ssize_t n = 0
        if PyBytes_CheckExact(value):
            n = PyBytes_GET_SIZE(value)
            if n > 0xFFFFFFFF:
                raise AMQPSyntaxError(f"{what.decode()}: long string of {n} bytes exceeds 2**32-1")
            self.write_u32(<uint32_t>n)
            self.write_raw(PyBytes_AS_STRING(value), n)
            return 0
        if PyUnicode_Check(value):
            data = utf8_of(value, &n, what)
            if n > 0xFFFFFFFF:
                raise AMQPSyntaxError(f"{what.decode()}: long string of {n} bytes exceeds 2**32-1")
            self.write_u32(<uint32_t>n)
            self.write_raw(data, n)
            return 0
        if value is None:
            return self.write_u32(0)
        if not PyObject_CheckBuffer(value):
            raise UnsupportedValueError(
                f"{what.decode()}: expected bytes or str for a long string, got {type(value).__name__}")
        try:
            PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)
        except BufferError:
            # Not contiguous (a strided memoryview, say): take its bytes.
            return self.write_longstr(bytes(value), what)
        try:
            if view.len > 0xFFFFFFFF:
                raise AMQPSyntaxError(f"{what.decode()}: long string of {view.len} bytes exceeds 2**32-1")
            self.write_u32(<uint32_t>view.len)
            self.write_raw(<const char *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef Py_ssize_t begin_frame(self, uint8_t frame_type, uint16_t channel) except -1:
        cdef Py_ssize_t start = self._len
        self.ensure(FRAME_HEADER_SIZE)
        self._buf[start] = <char>frame_type
        amqw_pack_u16(self._buf + start + 1, channel)
        self._len += FRAME_HEADER_SIZE
        return start

    cdef int end_frame(self, Py_ssize_t start, Py_ssize_t frame_max) except -1:
        cdef Py_ssize_t size = self._len - start - FRAME_HEADER_SIZE
        if frame_max > 0 and size + FRAME_OVERHEAD > frame_max:
            self._len = start
            raise FrameError(
                f"frame of {size + FRAME_OVERHEAD} bytes exceeds frame_max {frame_max}")
        amqw_pack_u32(self._buf + start + 3, <uint32_t>size)
        return self.write_u8(FRAME_END)

    cdef bytes to_bytes(self):
        return PyBytes_FromStringAndSize(self._buf, self._len)

    cdef object take_view(self):
        """What was written, as a read-only buffer for a socket write; the buffer is left
        empty.  From HAND_OVER_AT bytes on, its memory is handed over whole (``Written``)
        and the buffer takes fresh memory of the same capacity: a copy costs ~0.8
        instructions a byte, a hand-over a few hundred whatever the size."""
        cdef char *fresh = NULL
        cdef Written taken = None
        if self._len >= HAND_OVER_AT:
            taken = Written.__new__(Written)  # first: nothing to free if it cannot be made
            fresh = <char *>PyMem_Malloc(<size_t>self._cap)
        if fresh is NULL:  # small, or no memory for a new buffer: a copy
            data = PyBytes_FromStringAndSize(self._buf, self._len)
            self._len = 0
            return data
        taken._buf = self._buf
        taken._len = self._len
        self._buf = fresh
        self._len = 0
        return PyMemoryView_FromObject(taken)

    # Python-visible API, for tests and for callers that build frames by hand.
    def __len__(self):
        return self._len

    def getvalue(self):
        """The bytes written so far."""
        return self.to_bytes()

    def clear(self):
        """Forget what was written; keep the memory for reuse."""
        self._len = 0


@cython.final
cdef class Written:
    """Bytes a ``WriteBuffer`` wrote, handed over for sending (``WriteBuffer.take_view``):
    it owns their memory now and nothing writes to it again.  Read through the buffer
    protocol (a read-only memoryview of it is what ``take_view`` returns)."""
    cdef char *_buf
    cdef Py_ssize_t _len

    def __dealloc__(self):
        PyMem_Free(self._buf)
        self._buf = NULL

    def __len__(self):
        return self._len

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self._buf, self._len, 1, flags)  # read-only

    def __releasebuffer__(self, Py_buffer *view):
        pass


cdef int raise_too_long(Py_ssize_t n) except -1:
    raise AMQPSyntaxError(f"value: long string of {n} bytes exceeds 2**32-1")


cdef const char *_shortstr_slow(object value, Py_ssize_t *size, const char *what) except NULL:
    cdef const char *data
    if not PyUnicode_Check(value):
        raise UnsupportedValueError(
            f"{what.decode()}: expected str for a short string, got {type(value).__name__}")
    data = utf8_of(value, size, what)
    if size[0] > 255:
        raise AMQPSyntaxError(
            f"{what.decode()}: short string is {size[0]} bytes in UTF-8, the limit is 255")
    return data


cdef const char *_utf8_slow(object text, Py_ssize_t *size, const char *what) except NULL:
    """The UTF-8 of a non-ASCII str (cached by CPython); AMQPSyntaxError when it has none
    (lone surrogates)."""
    cdef const char *data = _utf8_raw(text, size)
    if data is NULL:
        PyErr_Clear()
        raise AMQPSyntaxError(f"{what.decode()}: {text!r} cannot be encoded as UTF-8")
    return data


cdef int raise_short_read(ReadView *v, Py_ssize_t need, const char *what) except -1:
    cdef Py_ssize_t left = v.len - v.pos
    if need < 0:
        raise AMQPSyntaxError(
            f"{what.decode()}: negative length {need} at offset {v.base + v.pos}",
            offset=v.base + v.pos)
    raise AMQPSyntaxError(
        f"{what.decode()}: needs {need} bytes at offset {v.base + v.pos}, only {left} left",
        offset=v.base + v.pos)


# Names repeat: consumer tags, exchanges, routing keys, content types, header keys.
# A small direct-mapped cache of short decoded strings turns most decodes into a hash
# and a memcmp.  Entries own a reference to their str; the GIL guards the table.
cdef enum:
    _STR_CACHE_SLOTS = 512          # a power of two
    _STR_CACHE_MAX_LEN = 48

cdef struct _CachedStr:
    PyObject *obj
    Py_ssize_t len
    uint64_t head                   # first 8 bytes (zero-padded) and last 8 bytes:
    uint64_t tail                   # these alone decide equality up to 16 bytes
    char data[_STR_CACHE_MAX_LEN]

cdef _CachedStr _str_cache[_STR_CACHE_SLOTS]
memset(_str_cache, 0, sizeof(_str_cache))


cdef PyObject *decode_utf8_or_null(const char *data, Py_ssize_t n) noexcept:
    """A new reference to the decoded str, or NULL (no error set) if it is not UTF-8."""
    cdef _CachedStr *slot = NULL
    cdef PyObject *raw
    cdef uint64_t head = 0, tail = 0
    if n <= _STR_CACHE_MAX_LEN:
        if n >= 8:
            memcpy(&head, data, 8)
            memcpy(&tail, data + n - 8, 8)
        else:
            memcpy(&head, data, <size_t>n)
        slot = &_str_cache[((head * 0x9E3779B97F4A7C15ull) ^ (tail * 0xC2B2AE3D27D4EB4Full)
                            ^ <uint64_t>n) >> 40 & (_STR_CACHE_SLOTS - 1)]
        if (slot.obj is not NULL and slot.len == n and slot.head == head and slot.tail == tail
                and (n <= 16 or memcmp(slot.data + 8, data + 8, <size_t>(n - 16)) == 0)):
            Py_XINCREF(slot.obj)
            return slot.obj
    raw = _decode_utf8_raw(data, n, NULL)
    if raw is NULL:
        PyErr_Clear()
        return NULL
    if slot is not NULL:
        Py_XDECREF(slot.obj)
        Py_XINCREF(raw)
        slot.obj = raw
        slot.len = n
        slot.head = head
        slot.tail = tail
        memcpy(slot.data, data, <size_t>n)
    return raw


cdef int raise_trailing(ReadView *v, str what) except -1:
    raise AMQPSyntaxError(
        f"{what}: {v.len - v.pos} trailing bytes at offset {v.base + v.pos}",
        offset=v.base + v.pos)


cdef object decode_utf8(const char *data, Py_ssize_t n, ReadView *v, const char *what):
    cdef PyObject *raw = decode_utf8_or_null(data, n)
    if raw is NULL:
        _raise_bad_utf8(data, n, v, what)
    result = <object>raw
    Py_XDECREF(raw)
    return result


cdef int _raise_bad_utf8(const char *data, Py_ssize_t n, ReadView *v, const char *what) except -1:
    try:
        PyBytes_FromStringAndSize(data, n).decode("utf-8")
    except UnicodeDecodeError as exc:
        at = v.base + v.pos - n + exc.start
    else:
        at = v.base + v.pos - n
    raise AMQPSyntaxError(f"{what.decode()}: invalid UTF-8 at offset {at}", offset=at)


cdef object read_shortstr(ReadView *v, const char *what):
    cdef Py_ssize_t n = 0
    cdef PyObject *raw
    if v.len - v.pos < 1:
        raise_short_read(v, 1, what)
    n = <uint8_t>v.buf[v.pos]
    if v.len - v.pos - 1 < n:
        v.pos += 1
        raise_short_read(v, n, what)
    v.pos += 1 + n
    raw = decode_utf8_or_null(v.buf + v.pos - n, n)
    if raw is NULL:
        _raise_bad_utf8(v.buf + v.pos - n, n, v, what)
    result = <object>raw
    Py_XDECREF(raw)
    return result


cdef bytes read_longstr(ReadView *v, const char *what):
    cdef uint32_t n = 0
    cdef const char *p
    read_u32(v, &n, what)
    p = read_raw(v, <Py_ssize_t>n, what)
    return PyBytes_FromStringAndSize(p, <Py_ssize_t>n)
