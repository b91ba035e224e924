# Hand-written part of methods.pyx (included by the generated file): argument checks,
# the Method base class and the decode entry points.

cdef extern from "Python.h":
    bint PyUnicode_Check(object o)
    bint PyLong_Check(object o)
    bint PyBool_Check(object o)
    bint PyDict_Check(object o)
    bint PyBytes_CheckExact(object o)
    bint PyObject_CheckBuffer(object o)


cdef object _REQUIRED = object()


cdef inline object _missing(object value, str what):
    if value is _REQUIRED:
        raise TypeError(f"{what}: missing required argument")


cdef object _uint(object value, object maximum, str what):
    _missing(value, what)
    if not PyLong_Check(value) or PyBool_Check(value):
        raise UnsupportedValueError(f"{what}: expected int, got {type(value).__name__}")
    if value < 0 or value > maximum:
        raise AMQPSyntaxError(f"{what}: {value} is out of range 0..{maximum}")
    return value


cdef bint _bit(object value, str what) except -1:
    _missing(value, what)
    if value is True or value is False:
        return value
    if PyLong_Check(value) and (value == 0 or value == 1):
        return value == 1
    raise UnsupportedValueError(f"{what}: expected bool, got {value!r}")


cdef str _shortstr(object value, str what):
    cdef Py_ssize_t n
    _missing(value, what)
    if not PyUnicode_Check(value):
        raise UnsupportedValueError(f"{what}: expected str, got {type(value).__name__}")
    utf8_of(value, &n, what.encode())
    if n > 255:
        raise AMQPSyntaxError(f"{what}: short string is {n} bytes in UTF-8, the limit is 255")
    return <str>value


cdef bytes _longstr(object value, str what):
    cdef const char *data
    cdef Py_ssize_t n
    _missing(value, what)
    if PyBytes_CheckExact(value):
        result = value
    elif PyUnicode_Check(value):
        data = utf8_of(value, &n, what.encode())
        result = PyBytes_FromStringAndSize(data, n)
    elif PyObject_CheckBuffer(value):
        result = bytes(value)
    else:
        raise UnsupportedValueError(f"{what}: expected bytes or str, got {type(value).__name__}")
    if len(result) > 0xFFFFFFFF:
        raise AMQPSyntaxError(f"{what}: long string of {len(result)} bytes exceeds 2**32-1")
    return result


cdef dict _table(object value, str what):
    _missing(value, what)
    if value is None:
        return {}
    if not PyDict_Check(value):
        raise UnsupportedValueError(f"{what}: expected dict, got {type(value).__name__}")
    return value


cdef class Method:
    """Base class of the 66 method classes (see METHODS)."""

    NAME = "method"
    CLASS_ID = 0
    METHOD_ID = 0
    INDEX = 0
    SYNCHRONOUS = False
    HAS_CONTENT = False
    FIELDS = ()
    RESPONSES = ()

    cdef int write_payload(self, WriteBuffer buf) except -1:
        raise NotImplementedError("Method is abstract")

    def _values(self):
        return ()

    def encode_payload(self):
        """class id, method id and arguments: the payload of a method frame."""
        cdef WriteBuffer buf = WriteBuffer(128)
        self.write_payload(buf)
        return buf.to_bytes()

    def encode(self, int channel=0, Py_ssize_t frame_max=0):
        """One whole method frame on ``channel``."""
        cdef WriteBuffer buf = WriteBuffer(128)
        cdef Py_ssize_t start
        if not 0 <= channel <= 0xFFFF:
            raise AMQPSyntaxError(f"{self.NAME}: channel {channel} is out of range 0..65535")
        start = buf.begin_frame(FRAME_METHOD, <uint16_t>channel)
        self.write_payload(buf)
        buf.end_frame(start, frame_max)
        return buf.to_bytes()

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in zip(self.FIELDS, self._values()))
        return f"{type(self).__name__}({args})"


def _repr_masking(Method m, tuple secret):
    """The repr with the credentials in ``secret`` shown as <masked>."""
    args = ", ".join(f"{k}=<masked>" if k in secret else f"{k}={v!r}" for k, v in zip(m.FIELDS, m._values()))
    return f"{type(m).__name__}({args})"


cdef Method read_method(ReadView *v):
    """Decode a whole method frame payload: ids, arguments, and nothing after them."""
    cdef uint16_t class_id = 0, method_id = 0
    cdef Py_ssize_t at = v.base + v.pos
    cdef signed char slot
    cdef _method_reader reader = NULL
    cdef Method m
    read_u16(v, &class_id, b"method class id")
    read_u16(v, &method_id, b"method id")
    if class_id < 256 and method_id <= _MAX_METHOD_ID:
        slot = _CLASS_SLOT[class_id]
        if slot >= 0:
            reader = _READERS[slot][method_id]
    if reader is NULL:
        raise AMQPSyntaxError(
            f"unknown method {class_id}.{method_id} (index 0x{(class_id << 16) | method_id:08X}) "
            f"at offset {at}", offset=at)
    m = reader(v)
    if v.pos != v.len:  # (the name, a class attribute lookup, only for the error)
        expect_end(v, m.NAME)
    return m


def decode_method(payload):
    """Decode a method frame payload (class id, method id, arguments) to a Method."""
    cdef Py_buffer pybuf
    cdef ReadView v
    PyObject_GetBuffer(payload, &pybuf, PyBUF_SIMPLE)
    try:
        view_of_buffer(&v, &pybuf)
        return read_method(&v)
    finally:
        PyBuffer_Release(&pybuf)
