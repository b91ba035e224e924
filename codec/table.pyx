# cython: language_level=3
"""Field tables and arrays in RabbitMQ's dialect.

RabbitMQ departs from the letter of the 0-9-1 spec; these are the letters it uses
(and that pika, py-amqp and the Java client use):

    t bool   b int8   B uint8   s int16   u uint16   I int32   i uint32
    l int64  f float32   d float64   D decimal   S long string   x byte array
    A array  T timestamp  F table  V void          (L is read as int64 too)

Python -> AMQP picks one letter per type so that every value we write comes back as an
equal value: bool t, int I or l (the smallest that fits), float d (never f), Decimal D,
str S, bytes-like x, datetime T, dict F, list/tuple A, None V.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.dict cimport PyDict_Next, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from amqwire.codec.buffer cimport (
    MAX_NESTING, amqw_pack_u32, decode_utf8, raise_short_read, read_raw, read_shortstr,
    read_u8, read_u16, read_u32, read_u64, amqw_unpack_f32, amqw_unpack_f64,
)

import datetime as _dt
from decimal import Decimal

from amqwire.codec.errors import AMQPSyntaxError, CodecError, UnsupportedValueError

cdef extern from "Python.h":
    bint PyUnicode_Check(object o)
    bint PyLong_Check(object o)
    bint PyFloat_Check(object o)
    bint PyDict_Check(object o)
    bint PyList_Check(object o)
    bint PyTuple_Check(object o)
    bint PyBool_Check(object o)
    bint PyObject_CheckBuffer(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    double PyFloat_AS_DOUBLE(object o)
    Py_ssize_t PyList_GET_SIZE(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject *PyList_GET_ITEM(object o, Py_ssize_t i)
    PyObject *PyTuple_GET_ITEM(object o, Py_ssize_t i)

cdef object _UTC = _dt.timezone.utc
cdef object _EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
cdef object _EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
cdef object _datetime = _dt.datetime
cdef object _timedelta = _dt.timedelta
cdef object _Decimal = Decimal


# --- error context ----------------------------------------------------------------
# A leaf error says what is wrong; each enclosing table or array puts its key or index in
# front on the way out, and the outermost caller names the field.  Only the error path
# pays for this.

cdef object _at(object exc, str step):
    msg = str(exc.args[0]) if exc.args else ""
    exc.args = (step + ("" if msg.startswith("[") else ": ") + msg,)
    return exc

cdef object name_error(object exc, str name):
    return _at(exc, name)


# --- encoding -------------------------------------------------------------------------

cdef int _write_decimal(WriteBuffer buf, object value) except -1:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise AMQPSyntaxError(f"decimal {value} is not finite")
    unscaled = 0
    for d in digits:
        unscaled = unscaled * 10 + d
    if exponent > 0:
        unscaled *= 10 ** exponent
        exponent = 0
    if sign:
        unscaled = -unscaled
    if -exponent > 255:
        raise AMQPSyntaxError(f"decimal {value} has {-exponent} decimal places, the limit is 255")
    if not -0x80000000 <= unscaled <= 0x7FFFFFFF:
        raise AMQPSyntaxError(f"decimal {value} does not fit: its unscaled value must be a signed 32-bit int")
    buf.write_u8(ord('D'))
    buf.write_u8(<uint8_t>(-exponent))
    buf.write_u32(<uint32_t><int32_t>unscaled)
    return 0


cdef int _write_timestamp(WriteBuffer buf, object value) except -1:
    if value.microsecond:
        raise AMQPSyntaxError(
            f"timestamp {value.isoformat()} has microseconds; AMQP timestamps are whole "
            "seconds (use .replace(microsecond=0))")
    delta = value - (_EPOCH_NAIVE if value.tzinfo is None else _EPOCH)
    seconds = delta.days * 86400 + delta.seconds
    buf.write_u8(ord('T'))
    buf.write_u64(<uint64_t><int64_t>seconds)
    return 0


cdef int _write_value(WriteBuffer buf, object value, int depth) except -1:
    cdef int overflow = 0
    cdef long long ival
    # Exact types first (the common case), subclasses after; bool before int.
    cdef type t = type(value)
    if t is str:
        buf.write_u8(ord('S'))
        return buf.write_longstr(value, "value")
    if t is bool:
        buf.write_u8(ord('t'))
        return buf.write_u8(1 if value else 0)
    if t is int or (PyLong_Check(value) and not PyBool_Check(value)):
        ival = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            raise AMQPSyntaxError(f"integer {value} is out of range for a field table (int64)")
        if -0x80000000 <= ival <= 0x7FFFFFFF:
            buf.write_u8(ord('I'))
            return buf.write_u32(<uint32_t><int32_t>ival)
        buf.write_u8(ord('l'))
        return buf.write_u64(<uint64_t>ival)
    if PyBool_Check(value):
        buf.write_u8(ord('t'))
        return buf.write_u8(1 if value else 0)
    if t is bytes:
        buf.write_u8(ord('x'))
        return buf.write_longstr(value, "value")
    if t is float or PyFloat_Check(value):
        buf.write_u8(ord('d'))
        return buf.write_f64(PyFloat_AS_DOUBLE(value))
    if PyDict_Check(value):
        buf.write_u8(ord('F'))
        return write_table(buf, value, depth + 1)
    if PyList_Check(value) or PyTuple_Check(value):
        buf.write_u8(ord('A'))
        return write_array(buf, value, depth + 1)
    if value is None:
        return buf.write_u8(ord('V'))
    if PyUnicode_Check(value):
        buf.write_u8(ord('S'))
        return buf.write_longstr(value, "value")
    if isinstance(value, _Decimal):
        return _write_decimal(buf, value)
    if isinstance(value, _datetime):
        return _write_timestamp(buf, value)
    if PyObject_CheckBuffer(value):
        buf.write_u8(ord('x'))
        return buf.write_longstr(value, "value")
    raise UnsupportedValueError(f"no AMQP field type for a value of type {t.__name__}")


cdef inline int _check_depth(int depth) except -1:
    if depth > MAX_NESTING:
        raise AMQPSyntaxError(f"nested deeper than {MAX_NESTING} levels")
    return 0


cdef int write_table(WriteBuffer buf, object table, int depth) except -1:
    cdef Py_ssize_t start = buf._len
    cdef Py_ssize_t pos = 0
    cdef PyObject *k
    cdef PyObject *v
    _check_depth(depth)
    if table is None:
        return buf.write_u32(0)
    if not PyDict_Check(table):
        raise UnsupportedValueError(f"a field table must be a dict, got {type(table).__name__}")
    buf.write_u32(0)
    try:
        while PyDict_Next(table, &pos, &k, &v):
            key = <object>k
            if not PyUnicode_Check(key):
                raise UnsupportedValueError(
                    f"[{key!r}]: field table keys must be str, got {type(key).__name__}")
            try:
                buf.write_shortstr(key, "key")
                _write_value(buf, <object>v, depth)
            except CodecError as exc:
                raise _at(exc, f"[{key!r}]")
    except BaseException:
        buf._len = start
        raise
    amqw_pack_u32(buf._buf + start, <uint32_t>(buf._len - start - 4))
    return 0


cdef int write_array(WriteBuffer buf, object seq, int depth) except -1:
    cdef Py_ssize_t start = buf._len
    cdef Py_ssize_t i, n
    _check_depth(depth)
    buf.write_u32(0)
    try:
        if PyList_Check(seq):
            # Length re-read each turn: a value's encoder never runs Python code that could
            # shrink the list, but stay safe if it does.
            i = 0
            while i < PyList_GET_SIZE(seq):
                try:
                    _write_value(buf, <object>PyList_GET_ITEM(seq, i), depth)
                except CodecError as exc:
                    raise _at(exc, f"[{i}]")
                i += 1
        elif PyTuple_Check(seq):
            n = PyTuple_GET_SIZE(seq)
            for i in range(n):
                try:
                    _write_value(buf, <object>PyTuple_GET_ITEM(seq, i), depth)
                except CodecError as exc:
                    raise _at(exc, f"[{i}]")
        else:
            raise UnsupportedValueError(f"a field array must be a list or tuple, got {type(seq).__name__}")
    except BaseException:
        buf._len = start
        raise
    amqw_pack_u32(buf._buf + start, <uint32_t>(buf._len - start - 4))
    return 0


cdef int write_named_table(WriteBuffer buf, object table, const char *name) except -1:
    try:
        return write_table(buf, table, 1)
    except CodecError as exc:
        raise name_error(exc, name.decode())


# --- decoding -------------------------------------------------------------------------

cdef object _read_value(ReadView *v, int depth):
    cdef uint8_t letter, u8
    cdef uint16_t u16
    cdef uint32_t u32
    cdef uint64_t u64
    cdef const char *p
    cdef Py_ssize_t at = v.base + v.pos
    read_u8(v, &letter, "field type")
    if letter == b'S':
        read_u32(v, &u32, "long string")
        p = read_raw(v, <Py_ssize_t>u32, "long string")
        try:
            return decode_utf8(p, <Py_ssize_t>u32, v, "long string")
        except AMQPSyntaxError:
            return PyBytes_FromStringAndSize(p, <Py_ssize_t>u32)
    if letter == b'I':
        read_u32(v, &u32, "int32")
        return <int32_t>u32
    if letter == b't':
        read_u8(v, &u8, "bool")
        return u8 != 0
    if letter == b'l' or letter == b'L':
        read_u64(v, &u64, "int64")
        return <int64_t>u64
    if letter == b'F':
        return read_table(v, depth + 1)
    if letter == b'A':
        return read_array(v, depth + 1)
    if letter == b'd':
        p = read_raw(v, 8, "float64")
        return amqw_unpack_f64(p)
    if letter == b'x':
        read_u32(v, &u32, "byte array")
        p = read_raw(v, <Py_ssize_t>u32, "byte array")
        return PyBytes_FromStringAndSize(p, <Py_ssize_t>u32)
    if letter == b'V':
        return None
    if letter == b'T':
        read_u64(v, &u64, "timestamp")
        try:
            return _EPOCH + _timedelta(seconds=<int64_t>u64)
        except OverflowError:
            raise AMQPSyntaxError(f"timestamp {<int64_t>u64} at offset {at + 1} is out of datetime's range",
                                  offset=at + 1) from None
    if letter == b'D':
        read_u8(v, &u8, "decimal scale")
        read_u32(v, &u32, "decimal value")
        return _Decimal(<int32_t>u32).scaleb(-u8)
    if letter == b'b':
        read_u8(v, &u8, "int8")
        return <int8_t>u8
    if letter == b'B':
        read_u8(v, &u8, "uint8")
        return u8
    if letter == b's':
        read_u16(v, &u16, "int16")
        return <int16_t>u16
    if letter == b'u':
        read_u16(v, &u16, "uint16")
        return u16
    if letter == b'i':
        read_u32(v, &u32, "uint32")
        return u32
    if letter == b'f':
        p = read_raw(v, 4, "float32")
        return <double>amqw_unpack_f32(p)
    raise AMQPSyntaxError(
        f"unknown field type {bytes([letter])!r} at offset {at}", offset=at)


cdef inline int _sub_view(ReadView *v, ReadView *sub, const char *what) except -1:
    cdef uint32_t size
    cdef const char *p
    read_u32(v, &size, what)
    p = read_raw(v, <Py_ssize_t>size, what)
    sub.buf = p
    sub.len = <Py_ssize_t>size
    sub.pos = 0
    sub.base = v.base + v.pos - <Py_ssize_t>size
    return 0


cdef dict read_table(ReadView *v, int depth):
    cdef ReadView sub
    cdef dict result = {}
    _check_depth(depth)
    _sub_view(v, &sub, "table size")
    while sub.pos < sub.len:
        key = read_shortstr(&sub, "table key")
        try:
            PyDict_SetItem(result, key, _read_value(&sub, depth))
        except CodecError as exc:
            raise _at(exc, f"[{key!r}]")
    return result


cdef list read_array(ReadView *v, int depth):
    cdef ReadView sub
    cdef list result = []
    _check_depth(depth)
    _sub_view(v, &sub, "array size")
    while sub.pos < sub.len:
        try:
            PyList_Append(result, _read_value(&sub, depth))
        except CodecError as exc:
            raise _at(exc, f"[{len(result)}]")
    return result


cdef dict read_named_table(ReadView *v, const char *name):
    try:
        return read_table(v, 1)
    except CodecError as exc:
        raise name_error(exc, name.decode())


# --- Python API -------------------------------------------------------------------------

def encode_table(table) -> bytes:
    """Encode a dict as a field table: 4-byte size, then key / type letter / value."""
    cdef WriteBuffer buf = WriteBuffer()
    try:
        write_table(buf, table, 1)
    except CodecError as exc:
        raise name_error(exc, "table")
    return buf.to_bytes()


def encode_array(seq) -> bytes:
    """Encode a list or tuple as a field array: 4-byte size, then type letter / value."""
    cdef WriteBuffer buf = WriteBuffer()
    try:
        write_array(buf, seq, 1)
    except CodecError as exc:
        raise name_error(exc, "array")
    return buf.to_bytes()


cdef object _decode_exact(object data, bint is_array):
    cdef Py_buffer pybuf
    cdef ReadView v
    PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
    try:
        v.buf = <const char *>pybuf.buf
        v.len = pybuf.len
        v.pos = 0
        v.base = 0
        try:
            result = read_array(&v, 1) if is_array else read_table(&v, 1)
        except CodecError as exc:
            raise name_error(exc, "array" if is_array else "table")
        if v.pos != v.len:
            raise AMQPSyntaxError(
                f"{'array' if is_array else 'table'}: {v.len - v.pos} trailing bytes at offset {v.pos}",
                offset=v.pos)
        return result
    finally:
        PyBuffer_Release(&pybuf)


def decode_table(data) -> dict:
    """Decode exactly one field table (size prefix included) from a bytes-like object."""
    return _decode_exact(data, False)


def decode_array(data) -> list:
    """Decode exactly one field array (size prefix included) from a bytes-like object."""
    return _decode_exact(data, True)
