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
from libc.string cimport memcmp
from cpython.datetime cimport (
    import_datetime, datetime_new, datetime_tzinfo, PyDateTime_Check,
    PyDateTime_GET_YEAR, PyDateTime_GET_MONTH, PyDateTime_GET_DAY,
    PyDateTime_DATE_GET_HOUR, PyDateTime_DATE_GET_MINUTE, PyDateTime_DATE_GET_SECOND,
    PyDateTime_DATE_GET_MICROSECOND,
)
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from amqwire.codec.buffer cimport (
    MAX_NESTING, amqw_pack_u32, amqw_unpack_f32, amqw_unpack_f64, amqw_unpack_u32,
    decode_utf8_or_null, expect_end, read_raw, read_shortstr, read_u8, read_u16, read_u32,
    read_u64, view_of_buffer,
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
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    void Py_XDECREF(PyObject *o)
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    double PyFloat_AS_DOUBLE(object o)
    Py_ssize_t PyList_GET_SIZE(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject *PyList_GET_ITEM(object o, Py_ssize_t i)
    PyObject *PyTuple_GET_ITEM(object o, Py_ssize_t i)

import_datetime()
cdef extern from "_compat.h":
    dict amqw_dict_presized(Py_ssize_t n)

cdef object _UTC = _dt.timezone.utc
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

# --- timestamps: whole seconds since the epoch, UTC, via the datetime C API -------------

cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d) noexcept:
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    y -= m <= 2
    cdef int64_t era = (y if y >= 0 else y - 399) // 400
    cdef int64_t yoe = y - era * 400
    cdef int64_t doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef int64_t doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef int64_t datetime_to_epoch(object value, str what) except? -1:
    """Seconds since the epoch of a datetime (naive means UTC); whole seconds only."""
    cdef int64_t seconds
    if not PyDateTime_Check(value):
        raise UnsupportedValueError(f"{what}: expected datetime, got {type(value).__name__}")
    if PyDateTime_DATE_GET_MICROSECOND(value):
        raise AMQPSyntaxError(
            f"{what}: {value.isoformat()} has microseconds; AMQP timestamps are whole "
            "seconds (use .replace(microsecond=0))")
    seconds = (_days_from_civil(PyDateTime_GET_YEAR(value), PyDateTime_GET_MONTH(value),
                                PyDateTime_GET_DAY(value)) * 86400
               + PyDateTime_DATE_GET_HOUR(value) * 3600
               + PyDateTime_DATE_GET_MINUTE(value) * 60
               + PyDateTime_DATE_GET_SECOND(value))
    tz = <object>datetime_tzinfo(value)
    if tz is not None and tz is not _UTC:
        offset = value.utcoffset()       # None: naive after all, so UTC
        if offset is not None:
            if offset.microseconds:
                raise AMQPSyntaxError(f"{what}: UTC offset {offset} is not whole seconds")
            seconds -= offset.days * 86400 + offset.seconds
    if seconds < 0:
        raise AMQPSyntaxError(
            f"{what}: {value.isoformat()} is before 1970-01-01T00:00:00Z; AMQP timestamps are "
            "unsigned seconds since the epoch (RabbitMQ and other clients would read a far future)")
    if seconds > MAX_TIMESTAMP:
        raise AMQPSyntaxError(f"{what}: {value.isoformat()} is after 9999-12-31T23:59:59 in UTC")
    return seconds


cdef void civil_from_days(int64_t days, int64_t *year, int *month, int *day) noexcept:
    """Days since 1970-01-01 to a proleptic Gregorian date (400-year eras; the divisions
    below only see non-negative operands, so C truncation is floor)."""
    cdef int64_t z = days + 719468
    cdef int64_t era = (z if z >= 0 else z - 146096) // 146097
    cdef int64_t doe = z - era * 146097
    cdef int64_t yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef int64_t doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef int64_t mp = (5 * doy + 2) // 153
    day[0] = <int>(doy - (153 * mp + 2) // 5 + 1)
    month[0] = <int>(mp + 3 if mp < 10 else mp - 9)
    year[0] = yoe + era * 400 + (1 if month[0] <= 2 else 0)


cdef object epoch_to_datetime(uint64_t seconds, Py_ssize_t at, str what):
    """An aware UTC datetime of unsigned epoch seconds; AMQPSyntaxError naming ``what`` and
    ``at`` past the last second a datetime holds."""
    cdef int64_t days, secs, y
    cdef int m = 0, d = 0
    if seconds > <uint64_t>MAX_TIMESTAMP:
        raise AMQPSyntaxError(f"{what}: {seconds} at offset {at} is after "
                              f"9999-12-31T23:59:59Z, the last second a datetime holds", offset=at)
    days = <int64_t>(seconds // 86400)
    secs = <int64_t>seconds - days * 86400
    civil_from_days(days, &y, &m, &d)
    return datetime_new(<int>y, <int>m, <int>d, <int>(secs // 3600), <int>((secs // 60) % 60),
                        <int>(secs % 60), 0, _UTC)


# --- decimals: scale octet + signed 32-bit unscaled value --------------------------------

cdef int _write_decimal(WriteBuffer buf, object value) except -1:
    # Parse str(value) ("-12.34", "1.5E+3", "NaN") in C: as_tuple() builds a named tuple
    # and costs more than the rest of a whole table.
    cdef Py_ssize_t n, i = 0
    cdef const char *s
    cdef bint neg = False, in_fraction = False, any_digit = False, exp_neg = False
    cdef int64_t unscaled = 0, exponent = 0, scale
    cdef int frac_digits = 0
    cdef char c
    text = str(value)
    s = PyUnicode_AsUTF8AndSize(text, &n)
    if n and (s[0] == c'-' or s[0] == c'+'):
        neg = s[0] == c'-'
        i = 1
    while i < n:
        c = s[i]
        if c'0' <= c <= c'9':
            unscaled = unscaled * 10 + (c - c'0')
            if unscaled > 0x80000000:
                raise AMQPSyntaxError(
                    f"decimal {value} does not fit: its unscaled value must be a signed 32-bit int")
            frac_digits += in_fraction
            any_digit = True
        elif c == c'.':
            in_fraction = True
        elif (c == c'E' or c == c'e') and any_digit:
            i += 1
            if i < n and (s[i] == c'-' or s[i] == c'+'):
                exp_neg = s[i] == c'-'
                i += 1
            while i < n and c'0' <= s[i] <= c'9':
                exponent = exponent * 10 + (s[i] - c'0')
                if exponent > 100000:
                    break
                i += 1
            if i != n:
                break
            if exp_neg:
                exponent = -exponent
            continue
        else:
            break
        i += 1
    if i != n or not any_digit:
        raise AMQPSyntaxError(f"decimal {value} is not finite")
    scale = frac_digits - exponent
    while scale < 0 and unscaled:
        unscaled *= 10
        scale += 1
        if unscaled > 0x80000000:
            raise AMQPSyntaxError(
                f"decimal {value} does not fit: its unscaled value must be a signed 32-bit int")
    if scale < 0:
        scale = 0
    if neg:
        unscaled = -unscaled
    if unscaled > 0x7FFFFFFF:
        raise AMQPSyntaxError(
            f"decimal {value} does not fit: its unscaled value must be a signed 32-bit int")
    if scale > 255:
        raise AMQPSyntaxError(f"decimal {value} has {scale} decimal places, the limit is 255")
    buf.write_u8(ord('D'))
    buf.write_u8(<uint8_t>scale)
    buf.write_u32(<uint32_t><int32_t>unscaled)
    return 0


cdef inline char *_digits_before(char *end, uint64_t v) noexcept:
    """Write v in decimal so that it ends just before ``end``; return where it starts."""
    while True:
        end -= 1
        end[0] = <char>(c'0' + v % 10)
        v //= 10
        if v == 0:
            return end


cdef object _read_decimal(uint8_t scale, int32_t unscaled):
    # Decimal("<unscaled>E-<scale>") keeps the scale: Decimal("150E-2") == Decimal("1.50").
    cdef char text[24]
    cdef char *end = text + sizeof(text)
    cdef char *p = _digits_before(end, scale)
    p -= 2
    p[0] = c'E'
    p[1] = c'-'
    p = _digits_before(p, <uint64_t>(-<int64_t>unscaled if unscaled < 0 else unscaled))
    if unscaled < 0:
        p -= 1
        p[0] = c'-'
    return _Decimal(PyUnicode_DecodeASCII(p, end - p, NULL))


cdef int _write_value(WriteBuffer buf, object value, int depth) except -1:
    cdef int overflow = 0
    cdef long long ival
    # Exact types first (the common case), subclasses after; bool before int.
    cdef type t = type(value)
    if t is str:
        return buf.write_str_value(value)
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
        return buf.write_str_value(value)
    if isinstance(value, _Decimal):
        return _write_decimal(buf, value)
    if PyDateTime_Check(value):
        buf.write_u8(ord('T'))
        return buf.write_u64(<uint64_t>datetime_to_epoch(value, "timestamp"))
    if PyObject_CheckBuffer(value):
        buf.write_u8(ord('x'))
        return buf.write_longstr(value, "value")
    raise UnsupportedValueError(f"no AMQP field type for a value of type {t.__name__}")


cdef inline int _check_depth(int depth) except -1:
    if depth > MAX_NESTING:
        raise AMQPSyntaxError(f"nested deeper than {MAX_NESTING} levels")
    return 0


cdef int write_table(WriteBuffer buf, object table, int depth, const char *name=NULL) except -1:
    """Append a field table.  Errors name the key path, prefixed by ``name`` if given."""
    cdef Py_ssize_t start = buf._len
    cdef Py_ssize_t pos = 0
    cdef PyObject *k
    cdef PyObject *v
    key = None
    try:                        # one try per table, not per entry: errors name the key
        _check_depth(depth)
        if table is None:
            return buf.write_u32(0)
        if not PyDict_Check(table):
            raise UnsupportedValueError(
                f"a field table must be a dict, got {type(table).__name__}")
        buf.write_u32(0)
        while PyDict_Next(table, &pos, &k, &v):
            key = <object>k
            if not PyUnicode_Check(key):
                raise UnsupportedValueError(
                    f"field table keys must be str, got {type(key).__name__}")
            buf.write_shortstr(key, "key")
            _write_value(buf, <object>v, depth)
    except BaseException as exc:
        buf._len = start
        if isinstance(exc, CodecError):
            if key is not None:
                _at(exc, f"[{key!r}]")
            if name is not NULL:
                name_error(exc, name.decode())
        raise
    amqw_pack_u32(buf._buf + start, <uint32_t>(buf._len - start - 4))
    return 0


cdef int write_array(WriteBuffer buf, object seq, int depth) except -1:
    cdef Py_ssize_t start = buf._len
    cdef Py_ssize_t i = -1
    _check_depth(depth)
    buf.write_u32(0)
    try:                        # one try per array: errors name the index
        if PyList_Check(seq):
            # The length is re-read each turn: stay in bounds even if encoding a value
            # runs Python code (a tzinfo, say) that shrinks the list.
            i = 0
            while i < PyList_GET_SIZE(seq):
                _write_value(buf, <object>PyList_GET_ITEM(seq, i), depth)
                i += 1
        elif PyTuple_Check(seq):
            for i in range(PyTuple_GET_SIZE(seq)):
                _write_value(buf, <object>PyTuple_GET_ITEM(seq, i), depth)
        else:
            raise UnsupportedValueError(
                f"a field array must be a list or tuple, got {type(seq).__name__}")
    except BaseException as exc:
        buf._len = start
        if i >= 0 and isinstance(exc, CodecError):
            _at(exc, f"[{i}]")
        raise
    amqw_pack_u32(buf._buf + start, <uint32_t>(buf._len - start - 4))
    return 0


# --- decoding -------------------------------------------------------------------------

cdef object _read_value(ReadView *v, int depth):
    cdef uint8_t letter = 0, u8 = 0
    cdef uint16_t u16 = 0
    cdef uint32_t u32 = 0
    cdef uint64_t u64 = 0
    cdef const char *p
    cdef PyObject *text
    cdef Py_ssize_t at = v.base + v.pos
    read_u8(v, &letter, "field type")
    # An elif chain on one C int: Cython emits a switch.
    if letter == c'S':
        read_u32(v, &u32, "long string")
        p = read_raw(v, <Py_ssize_t>u32, "long string")
        text = decode_utf8_or_null(p, <Py_ssize_t>u32)
        if text is NULL:        # not UTF-8: hand back the bytes
            return PyBytes_FromStringAndSize(p, <Py_ssize_t>u32)
        value = <object>text
        Py_XDECREF(text)
        return value
    elif letter == c'I':
        read_u32(v, &u32, "int32")
        return <int32_t>u32
    elif letter == c't':
        read_u8(v, &u8, "bool")
        return u8 != 0
    elif letter == c'l' or letter == c'L':
        read_u64(v, &u64, "int64")
        return <int64_t>u64
    elif letter == c'F':
        return read_table(v, depth + 1)
    elif letter == c'A':
        return read_array(v, depth + 1)
    elif letter == c'd':
        p = read_raw(v, 8, "float64")
        return amqw_unpack_f64(p)
    elif letter == c'x':
        read_u32(v, &u32, "byte array")
        p = read_raw(v, <Py_ssize_t>u32, "byte array")
        return PyBytes_FromStringAndSize(p, <Py_ssize_t>u32)
    elif letter == c'V':
        return None
    elif letter == c'T':
        read_u64(v, &u64, "timestamp")
        return epoch_to_datetime(u64, at + 1, "timestamp")
    elif letter == c'D':
        read_u8(v, &u8, "decimal scale")
        read_u32(v, &u32, "decimal value")
        return _read_decimal(u8, <int32_t>u32)
    elif letter == c'b':
        read_u8(v, &u8, "int8")
        return <int8_t>u8
    elif letter == c'B':
        read_u8(v, &u8, "uint8")
        return u8
    elif letter == c's':
        read_u16(v, &u16, "int16")
        return <int16_t>u16
    elif letter == c'u':
        read_u16(v, &u16, "uint16")
        return u16
    elif letter == c'i':
        read_u32(v, &u32, "uint32")
        return u32
    elif letter == c'f':
        p = read_raw(v, 4, "float32")
        return <double>amqw_unpack_f32(p)
    raise AMQPSyntaxError(
        f"unknown field type {bytes([letter])!r} at offset {at}", offset=at)


cdef inline int _sub_view(ReadView *v, ReadView *sub, const char *what) except -1:
    cdef uint32_t size = 0
    cdef const char *p
    read_u32(v, &size, what)
    p = read_raw(v, <Py_ssize_t>size, what)
    sub.buf = p
    sub.len = <Py_ssize_t>size
    sub.pos = 0
    sub.base = v.base + v.pos - <Py_ssize_t>size
    return 0


cdef Py_ssize_t _count_entries(const char *p, Py_ssize_t n) noexcept:
    """Entries in a table payload, counted without decoding; -1 if it is malformed
    (the decoder then says where)."""
    cdef Py_ssize_t pos = 0, count = 0, size
    cdef uint8_t letter
    while pos < n:
        pos += 1 + <uint8_t>p[pos]               # key
        if pos >= n:
            return -1
        letter = <uint8_t>p[pos]
        pos += 1
        if letter == b't' or letter == b'b' or letter == b'B':
            size = 1
        elif letter == b's' or letter == b'u':
            size = 2
        elif letter == b'I' or letter == b'i' or letter == b'f':
            size = 4
        elif letter == b'l' or letter == b'L' or letter == b'd' or letter == b'T':
            size = 8
        elif letter == b'D':
            size = 5
        elif letter == b'V':
            size = 0
        elif letter == b'S' or letter == b'x' or letter == b'A' or letter == b'F':
            if n - pos < 4:
                return -1
            size = 4 + <Py_ssize_t>amqw_unpack_u32(p + pos)
        else:
            return -1
        pos += size
        count += 1
    return count if pos == n else -1


cdef int find_int64_field(ReadView *v, const char *key, Py_ssize_t key_len,
                          int64_t *out) except -1:
    """Find the top-level entry ``key`` of type 'l' (int64) in the field table at the
    view's position (size prefix first) without decoding the table: 1 with its value in
    ``out``, 0 when there is none (other entries, nested ones included, are skipped by
    their sizes).  The first such entry counts.  The view is not moved."""
    cdef ReadView table
    cdef uint32_t size = 0
    cdef uint8_t key_size, letter
    cdef uint64_t value = 0
    cdef Py_ssize_t skip, at
    cdef ReadView outer = v[0]
    _sub_view(&outer, &table, "table size")
    while table.pos < table.len:
        at = table.base + table.pos
        read_u8(&table, &key_size, "table key")
        if table.len - table.pos < <Py_ssize_t>key_size + 1:
            raise AMQPSyntaxError(
                f"table entry at offset {at} is cut short: its key and type need "
                f"{key_size + 1} bytes, {table.len - table.pos} remain", offset=at)
        letter = <uint8_t>table.buf[table.pos + key_size]
        if letter == b'l' and key_size == key_len \
                and memcmp(table.buf + table.pos, key, <size_t>key_len) == 0:
            table.pos += key_size + 1
            read_u64(&table, &value, "int64")
            out[0] = <int64_t>value
            return 1
        table.pos += key_size + 1
        if letter == b't' or letter == b'b' or letter == b'B' or letter == b'V':
            skip = 0 if letter == b'V' else 1
        elif letter == b's' or letter == b'u':
            skip = 2
        elif letter == b'I' or letter == b'i' or letter == b'f':
            skip = 4
        elif letter == b'l' or letter == b'L' or letter == b'd' or letter == b'T':
            skip = 8
        elif letter == b'D':
            skip = 5
        elif letter == b'S' or letter == b'x' or letter == b'A' or letter == b'F':
            read_u32(&table, &size, "field size")
            skip = <Py_ssize_t>size
        else:
            at = table.base + table.pos - 1
            raise AMQPSyntaxError(f"unknown field type {bytes([letter])!r} at offset {at}", offset=at)
        read_raw(&table, skip, "field value")
    return 0


cdef dict read_table(ReadView *v, int depth, const char *name=NULL):
    """Decode a field table.  Errors name the key path, prefixed by ``name`` if given."""
    cdef ReadView sub
    cdef dict result
    cdef Py_ssize_t count
    key = None
    try:                        # one try per table, not per entry: errors name the key
        _check_depth(depth)
        _sub_view(v, &sub, "table size")
        # Past five entries a dict resizes as it grows: size it once instead.
        count = _count_entries(sub.buf, sub.len) if sub.len > 64 else -1
        result = amqw_dict_presized(count) if count > 5 else {}
        while sub.pos < sub.len:
            key = None
            key = read_shortstr(&sub, "table key")
            PyDict_SetItem(result, key, _read_value(&sub, depth))
    except CodecError as exc:
        if key is not None:
            _at(exc, f"[{key!r}]")
        if name is not NULL:
            name_error(exc, name.decode())
        raise
    return result


cdef list read_array(ReadView *v, int depth):
    cdef ReadView sub
    cdef list result = []
    _check_depth(depth)
    _sub_view(v, &sub, "array size")
    try:
        while sub.pos < sub.len:
            PyList_Append(result, _read_value(&sub, depth))
    except CodecError as exc:
        raise _at(exc, f"[{len(result)}]")
    return result


# --- Python API -------------------------------------------------------------------------

def encode_table(table) -> bytes:
    """Encode a dict as a field table: 4-byte size, then key / type letter / value."""
    cdef WriteBuffer buf = WriteBuffer()
    write_table(buf, table, 1, "table")
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
    cdef str name = "array" if is_array else "table"
    PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
    try:
        view_of_buffer(&v, &pybuf)
        try:
            result = read_array(&v, 1) if is_array else read_table(&v, 1)
        except CodecError as exc:
            raise name_error(exc, name)
        expect_end(&v, name)
        return result
    finally:
        PyBuffer_Release(&pybuf)


def decode_table(data) -> dict:
    """Decode exactly one field table (size prefix included) from a bytes-like object."""
    return _decode_exact(data, False)


def decode_array(data) -> list:
    """Decode exactly one field array (size prefix included) from a bytes-like object."""
    return _decode_exact(data, True)
