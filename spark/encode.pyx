# cython: language_level=3
"""Arrow batches to publish frames: one pass over the Arrow buffers per batch, all rows'
frames written into one growable buffer, no Python object per row.

Each row becomes basic.publish (method frame), its content header (the 14 basic
properties, headers as a field table) and its body frames split by frame_max.  Bodies are
a binary/string column as is, or a struct/map column serialized as JSON or as an AMQP
field table.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT64_MAX
from libc.string cimport memcpy, strlen
from libc.math cimport isnan, isinf

from amqwire.codec.buffer cimport (
    WriteBuffer, FRAME_HEADER, FRAME_HEADER_SIZE, FRAME_METHOD, FRAME_OVERHEAD, FRAME_END,
    MAX_NESTING, amqw_pack_u16, amqw_pack_u32, amqw_pack_u64,
)
from amqwire.codec.table cimport MAX_TIMESTAMP, civil_from_days
from amqwire.codec.writer cimport check_frame_max, write_body_frames
from amqwire.spark.arrow_view cimport (
    ArrowColumn, column_of, floor_div,
    K_NULL, K_BOOL, K_INT8, K_INT16, K_INT32, K_INT64, K_UINT8, K_UINT16, K_UINT32, K_UINT64,
    K_FLOAT32, K_FLOAT64, K_UTF8, K_LARGE_UTF8, K_BINARY, K_LARGE_BINARY, K_DATE32, K_DATE64,
    K_TIMESTAMP, K_DECIMAL128, K_STRUCT, K_LIST, K_LARGE_LIST, K_MAP,
)

from amqwire.spark.errors import ArrowTypeError, RowEncodeError

cdef extern from "Python.h":
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags, int *ptype) except NULL
    double PyOS_string_to_double(const char *s, char **endptr, object overflow_exception) except? -1.0

cdef extern from *:
    """
    #define AMQW_DTSF_ADD_DOT_0 0x02
    """
    int AMQW_DTSF_ADD_DOT_0


PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
    "user_id", "app_id", "cluster_id",
)
cdef enum:
    N_PROPERTIES = 14
    P_HEADERS = 2
    P_DELIVERY_MODE = 3
    P_PRIORITY = 4
    P_TIMESTAMP = 9
    _BASIC_PUBLISH = 0x003C0028
    _BASIC_CLASS = 60

cdef enum BodyFormat:
    BODY_RAW
    BODY_JSON
    BODY_TABLE

_BODY_FORMATS = {"raw": BODY_RAW, "json": BODY_JSON, "table": BODY_TABLE}
DEFAULT_FRAME_MAX = 131072


# ---------------------------------------------------------------------------- type checks

cdef int check_value_type(ArrowColumn col, str path, int depth, bint for_json) except -1:
    """Every Arrow type a field-table value (or a JSON value) can be made of."""
    cdef ArrowColumn child
    if depth > MAX_NESTING:
        raise ArrowTypeError(f"{path}: nested deeper than {MAX_NESTING} levels")
    if col.kind == K_STRUCT:
        for child in col.children:
            if not for_json and len(child.name_utf8) > 255:
                raise ArrowTypeError(f"{path}.{child.name}: a field name over 255 bytes cannot be a table key")
            check_value_type(child, f"{path}.{child.name}", depth + 1, for_json)
    elif col.kind == K_MAP:
        entries = <ArrowColumn>col.children[0]
        key = <ArrowColumn>entries.children[0]
        if not for_json and key.kind != K_UTF8 and key.kind != K_LARGE_UTF8:
            raise ArrowTypeError(f"{path}: map keys must be strings to become table keys, not {key.format!r}")
        if for_json and key.kind in (K_STRUCT, K_MAP, K_LIST, K_LARGE_LIST):
            raise ArrowTypeError(f"{path}: map keys must be scalars to become JSON keys")
        check_value_type(<ArrowColumn>entries.children[1], f"{path}[value]", depth + 1, for_json)
    elif col.kind == K_LIST or col.kind == K_LARGE_LIST:
        check_value_type(<ArrowColumn>col.children[0], f"{path}[]", depth + 1, for_json)
    return 0


cdef int _check_string(ArrowColumn col, str what) except -1:
    if col.kind != K_UTF8 and col.kind != K_LARGE_UTF8 and col.kind != K_NULL:
        raise ArrowTypeError(f"{what} must be a string column, not Arrow {col.format!r}")
    return 0


# ---------------------------------------------------------------------------- errors

cdef int _row_error(int64_t row, str field, str problem) except -1:
    raise RowEncodeError(row=row, field=field, problem=problem)


cdef int64_t _timestamp_seconds(ArrowColumn col, int64_t slot, int64_t row, str field) except -1:
    """Whole epoch seconds of a timestamp, date or integer value, checked against what AMQP's
    unsigned timestamp holds and a reader's datetime can show: 1970 .. 9999 in UTC."""
    cdef int64_t v
    if col.kind == K_UINT64 and (<const uint64_t *>col.values)[slot] > <uint64_t>MAX_TIMESTAMP:
        return _row_error(row, field, f"timestamp {(<const uint64_t *>col.values)[slot]} s is after "
                                      f"9999-12-31T23:59:59Z")
    v = col.epoch_seconds_at(slot)
    if v < 0:
        return _row_error(row, field, f"timestamp {v} s is before 1970-01-01T00:00:00Z; AMQP "
                                      f"timestamps are unsigned seconds since the epoch")
    if v > MAX_TIMESTAMP:
        return _row_error(row, field, f"timestamp {v} s is after 9999-12-31T23:59:59Z")
    return v


cdef int _reraise_for(exc, str field) except -1:
    """A nested value's error, re-raised naming the column it is in (``headers``, ``body``)."""
    raise RowEncodeError(row=exc.row, field=field, problem=exc.problem) from None


cdef str _text(const char *p, Py_ssize_t n):
    return p[:n].decode("utf-8", "replace")


# ---------------------------------------------------------------------------- AMQP field values

cdef inline int _write_shortstr_raw(WriteBuffer buf, const char *p, Py_ssize_t n) except -1:
    buf.ensure(1 + n)
    buf._buf[buf._len] = <char><uint8_t>n
    memcpy(buf._buf + buf._len + 1, p, <size_t>n)
    buf._len += 1 + n
    return 0


cdef inline int _write_longstr_raw(WriteBuffer buf, char letter, const char *p, Py_ssize_t n,
                                   int64_t row, ArrowColumn col) except -1:
    if n > 0xFFFFFFFF:
        return _row_error(row, col.name, f"value of {n} bytes is over the 4 GiB of a long string")
    buf.ensure(5 + n)
    buf._buf[buf._len] = letter
    amqw_pack_u32(buf._buf + buf._len + 1, <uint32_t>n)
    memcpy(buf._buf + buf._len + 5, p, <size_t>n)
    buf._len += 5 + n
    return 0


cdef int _decimal_parts(ArrowColumn col, int64_t slot, int64_t *low) noexcept:
    """1 when the decimal128 at ``slot`` fits an int64 (stored in ``low``), else 0."""
    cdef const uint64_t *words = (<const uint64_t *>col.values) + 2 * slot
    cdef int64_t lo = <int64_t>words[0]
    cdef int64_t hi = <int64_t>words[1]
    low[0] = lo
    return (hi == 0 and lo >= 0) or (hi == -1 and lo < 0)


cdef object _decimal_object(ArrowColumn col, int64_t slot):
    from decimal import Decimal
    cdef const char *p = (<const char *>col.values) + 16 * slot
    unscaled = int.from_bytes(p[:16], "little", signed=True)
    return Decimal(unscaled).scaleb(-col.decimal_scale)


cdef int write_field_value(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1:
    """One Arrow value as a typed field value (type letter, then the value)."""
    cdef int kind = col.kind
    cdef Py_ssize_t n
    cdef const char *p
    cdef int64_t v
    cdef char *out
    if kind == K_NULL or col.is_null(slot):
        return buf.write_u8(c'V')
    if kind == K_UTF8 or kind == K_LARGE_UTF8:
        p = col.bytes_at(slot, &n)
        return _write_longstr_raw(buf, c'S', p, n, row, col)
    if kind == K_BINARY or kind == K_LARGE_BINARY:
        p = col.bytes_at(slot, &n)
        return _write_longstr_raw(buf, c'x', p, n, row, col)
    buf.ensure(9)
    out = buf._buf + buf._len
    if kind == K_INT64:
        out[0] = c'l'
        amqw_pack_u64(out + 1, <uint64_t>col.int_at(slot))
        buf._len += 9
    elif kind == K_INT32:
        out[0] = c'I'
        amqw_pack_u32(out + 1, <uint32_t>col.int_at(slot))
        buf._len += 5
    elif kind == K_BOOL:
        out[0] = c't'
        out[1] = <char>col.bool_at(slot)
        buf._len += 2
    elif kind == K_FLOAT64:
        out[0] = c'd'
        buf._len += 1
        buf.write_f64((<const double *>col.values)[slot])
    elif kind == K_FLOAT32:
        out[0] = c'f'
        buf._len += 1
        buf.write_f32((<const float *>col.values)[slot])
    elif kind == K_INT16:
        out[0] = c's'
        amqw_pack_u16(out + 1, <uint16_t>col.int_at(slot))
        buf._len += 3
    elif kind == K_INT8:
        out[0] = c'b'
        out[1] = <char>col.int_at(slot)
        buf._len += 2
    elif kind == K_UINT8:
        out[0] = c'B'
        out[1] = <char>col.int_at(slot)
        buf._len += 2
    elif kind == K_UINT16:
        out[0] = c'u'
        amqw_pack_u16(out + 1, <uint16_t>col.int_at(slot))
        buf._len += 3
    elif kind == K_UINT32:
        out[0] = c'i'
        amqw_pack_u32(out + 1, <uint32_t>col.int_at(slot))
        buf._len += 5
    elif kind == K_UINT64:
        if (<const uint64_t *>col.values)[slot] > <uint64_t>INT64_MAX:
            return _row_error(row, col.name, f"uint64 {(<const uint64_t *>col.values)[slot]} "
                                             f"does not fit a signed 64-bit field value")
        out[0] = c'l'
        amqw_pack_u64(out + 1, (<const uint64_t *>col.values)[slot])
        buf._len += 9
    elif kind == K_TIMESTAMP or kind == K_DATE32 or kind == K_DATE64:
        out[0] = c'T'
        amqw_pack_u64(out + 1, <uint64_t>_timestamp_seconds(col, slot, row, col.name))
        buf._len += 9
    elif kind == K_DECIMAL128:
        if col.decimal_scale < 0 or col.decimal_scale > 255 \
                or not _decimal_parts(col, slot, &v) or v < -2147483648 or v > 2147483647:
            return _row_error(row, col.name, f"decimal {_decimal_object(col, slot)} does not fit "
                                             f"an AMQP decimal (scale 0..255, 32-bit value)")
        out[0] = c'D'
        out[1] = <char><uint8_t>col.decimal_scale
        amqw_pack_u32(out + 2, <uint32_t><int32_t>v)
        buf._len += 6
    elif kind == K_STRUCT:
        buf._buf[buf._len] = c'F'
        buf._len += 1
        write_struct_table(buf, col, slot, row)
    elif kind == K_MAP:
        buf._buf[buf._len] = c'F'
        buf._len += 1
        write_map_table(buf, col, slot, row)
    elif kind == K_LIST or kind == K_LARGE_LIST:
        buf._buf[buf._len] = c'A'
        buf._len += 1
        _write_list_array(buf, col, slot, row)
    else:
        raise ArrowTypeError(f"{col.name}: Arrow {col.format!r} has no AMQP field type")
    return 0


cdef inline Py_ssize_t _begin_sized(WriteBuffer buf) except -1:
    cdef Py_ssize_t at = buf._len
    buf.write_u32(0)
    return at


cdef inline int _end_sized(WriteBuffer buf, Py_ssize_t at, int64_t row, ArrowColumn col) except -1:
    cdef Py_ssize_t size = buf._len - at - 4
    if size > 0xFFFFFFFF:
        return _row_error(row, col.name, f"table of {size} bytes is over the 4 GiB limit")
    amqw_pack_u32(buf._buf + at, <uint32_t>size)
    return 0


cdef int write_struct_table(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1:
    """A struct value as a field table (size, then name/value pairs); null fields are void."""
    cdef Py_ssize_t at = _begin_sized(buf)
    cdef ArrowColumn child
    for child in col.children:
        _write_shortstr_raw(buf, child.name_utf8, len(child.name_utf8))
        write_field_value(buf, child, child.offset + slot, row)
    return _end_sized(buf, at, row, col)


cdef int write_map_table(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1:
    """A map<string, ...> value as a field table."""
    cdef ArrowColumn entries = <ArrowColumn>col.children[0]
    cdef ArrowColumn keys = <ArrowColumn>entries.children[0]
    cdef ArrowColumn items = <ArrowColumn>entries.children[1]
    cdef int64_t i, end = 0
    cdef int64_t start = col.child_range(slot, &end)
    cdef Py_ssize_t n
    cdef const char *k
    cdef Py_ssize_t at = _begin_sized(buf)
    for i in range(start, end):
        if keys.is_null(keys.offset + i):
            return _row_error(row, col.name, "a null map key cannot be a table key")
        k = keys.bytes_at(keys.offset + i, &n)
        if n > 255:
            return _row_error(row, col.name, f"key {_text(k, 40)!r}... is {n} bytes; table keys are "
                                             f"short strings of at most 255")
        _write_shortstr_raw(buf, k, n)
        write_field_value(buf, items, items.offset + i, row)
    return _end_sized(buf, at, row, col)


cdef int _write_list_array(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1:
    cdef ArrowColumn items = <ArrowColumn>col.children[0]
    cdef int64_t i, end = 0
    cdef int64_t start = col.child_range(slot, &end)
    cdef Py_ssize_t at = _begin_sized(buf)
    for i in range(start, end):
        write_field_value(buf, items, i, row)
    return _end_sized(buf, at, row, col)


# ---------------------------------------------------------------------------- JSON

cdef const char *_HEX = b"0123456789abcdef"
cdef const char *_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


cdef int _json_string(WriteBuffer buf, const char *p, Py_ssize_t n) except -1:
    """A JSON string: quotes, backslash and control characters escaped; UTF-8 kept."""
    cdef Py_ssize_t i, run = 0
    cdef uint8_t c
    cdef char *out
    buf.ensure(n + 2)
    buf._buf[buf._len] = c'"'
    buf._len += 1
    for i in range(n):
        c = <uint8_t>p[i]
        if c >= 0x20 and c != c'"' and c != c'\\':
            continue
        if i > run:
            buf.write_raw(p + run, i - run)
        run = i + 1
        buf.ensure(6)
        out = buf._buf + buf._len
        out[0] = c'\\'
        if c == c'"' or c == c'\\':
            out[1] = c
            buf._len += 2
        elif c == c'\n':
            out[1] = c'n'
            buf._len += 2
        elif c == c'\r':
            out[1] = c'r'
            buf._len += 2
        elif c == c'\t':
            out[1] = c't'
            buf._len += 2
        else:
            out[1] = c'u'
            out[2] = c'0'
            out[3] = c'0'
            out[4] = _HEX[c >> 4]
            out[5] = _HEX[c & 15]
            buf._len += 6
    if n > run:
        buf.write_raw(p + run, n - run)
    return buf.write_u8(c'"')


cdef int _json_base64(WriteBuffer buf, const uint8_t *p, Py_ssize_t n) except -1:
    """Binary values as Spark's to_json writes them: base64 in a string."""
    cdef Py_ssize_t i = 0
    cdef uint32_t v
    cdef char *out
    buf.ensure(2 + ((n + 2) // 3) * 4)
    out = buf._buf + buf._len
    out[0] = c'"'
    out += 1
    while i + 3 <= n:
        v = (<uint32_t>p[i] << 16) | (<uint32_t>p[i + 1] << 8) | p[i + 2]
        out[0] = _B64[(v >> 18) & 63]
        out[1] = _B64[(v >> 12) & 63]
        out[2] = _B64[(v >> 6) & 63]
        out[3] = _B64[v & 63]
        out += 4
        i += 3
    if n - i == 1:
        v = <uint32_t>p[i] << 16
        out[0] = _B64[(v >> 18) & 63]
        out[1] = _B64[(v >> 12) & 63]
        out[2] = c'='
        out[3] = c'='
        out += 4
    elif n - i == 2:
        v = (<uint32_t>p[i] << 16) | (<uint32_t>p[i + 1] << 8)
        out[0] = _B64[(v >> 18) & 63]
        out[1] = _B64[(v >> 12) & 63]
        out[2] = _B64[(v >> 6) & 63]
        out[3] = c'='
        out += 4
    out[0] = c'"'
    buf._len = (out + 1) - buf._buf
    return 0


cdef int _json_int(WriteBuffer buf, int64_t v) except -1:
    if v >= 0:
        return _json_uint(buf, <uint64_t>v)
    buf.write_u8(c'-')
    return _json_uint(buf, <uint64_t>0 - <uint64_t>v)


cdef int _json_uint(WriteBuffer buf, uint64_t u) except -1:
    cdef char tmp[24]
    cdef int i = 24
    while True:
        i -= 1
        tmp[i] = <char>(c'0' + u % 10)
        u //= 10
        if u == 0:
            break
    return buf.write_raw(tmp + i, 24 - i)


cdef int _json_double(WriteBuffer buf, double v, bint single) except -1:
    """The shortest text that reads back as the same value (float32: as a float32)."""
    cdef char *text
    cdef int precision
    cdef double shortest
    if isnan(v):
        return buf.write_raw(b'"NaN"', 5)
    if isinf(v):
        return buf.write_raw(b'"Infinity"', 10) if v > 0 else buf.write_raw(b'"-Infinity"', 11)
    if single:
        # the fewest significant digits that read back as the same float32, then written
        # the way repr writes that decimal ("1.0", "1e+20", "1.4e-45")
        for precision in range(1, 10):
            text = PyOS_double_to_string(v, c'g', precision, 0, NULL)
            try:
                shortest = PyOS_string_to_double(text, NULL, None)
            finally:
                PyMem_Free(text)
            if <float>shortest == <float>v:
                v = shortest
                break
    text = PyOS_double_to_string(v, c'r', 0, AMQW_DTSF_ADD_DOT_0, NULL)
    try:
        buf.write_raw(text, strlen(text))
    finally:
        PyMem_Free(text)
    return 0


cdef int _json_date_time(WriteBuffer buf, ArrowColumn col, int64_t slot) except -1:
    cdef int64_t v = col.int_at(slot)
    cdef int64_t unit = 1, secs, frac = 0, days, year
    cdef int month = 0, day = 0, digits = 0
    cdef int64_t sod
    if col.kind == K_DATE32:
        days = v
        secs = -1
    else:
        unit = 1000 if col.kind == K_DATE64 else col.units_per_second
        secs = floor_div(v, unit)
        frac = v - secs * unit
        days = floor_div(secs, 86400)
    civil_from_days(days, &year, &month, &day)
    if col.kind == K_DATE32:
        text = "%04d-%02d-%02d" % (year, month, day)
    else:
        sod = secs - days * 86400
        text = "%04d-%02d-%02dT%02d:%02d:%02d" % (year, month, day, sod // 3600, (sod // 60) % 60, sod % 60)
        if frac:
            digits = {1000: 3, 1000000: 6, 1000000000: 9}.get(unit, 0)
            text += ("." + str(frac).rjust(digits, "0")).rstrip("0")
        if col.has_tz:
            text += "Z"
    data = text.encode("ascii")
    buf.write_u8(c'"')
    buf.write_raw(data, len(data))
    return buf.write_u8(c'"')


cdef int write_json(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1:
    """One Arrow value as JSON.  Struct fields that are null are left out, as Spark's
    to_json does; binary is base64; timestamps are ISO 8601 (UTC 'Z' when zoned)."""
    cdef int kind = col.kind
    cdef Py_ssize_t n
    cdef const char *p
    cdef int64_t i, start, end = 0
    cdef bint first
    cdef ArrowColumn child, entries, keys, items
    if kind == K_NULL or col.is_null(slot):
        return buf.write_raw(b"null", 4)
    if kind == K_UTF8 or kind == K_LARGE_UTF8:
        p = col.bytes_at(slot, &n)
        return _json_string(buf, p, n)
    if kind == K_BINARY or kind == K_LARGE_BINARY:
        p = col.bytes_at(slot, &n)
        return _json_base64(buf, <const uint8_t *>p, n)
    if kind == K_BOOL:
        return buf.write_raw(b"true", 4) if col.bool_at(slot) else buf.write_raw(b"false", 5)
    if K_INT8 <= kind <= K_UINT32:
        return _json_int(buf, col.int_at(slot))
    if kind == K_UINT64:
        return _json_uint(buf, (<const uint64_t *>col.values)[slot])
    if kind == K_FLOAT64 or kind == K_FLOAT32:
        return _json_double(buf, col.float_at(slot), kind == K_FLOAT32)
    if kind == K_DATE32 or kind == K_DATE64 or kind == K_TIMESTAMP:
        return _json_date_time(buf, col, slot)
    if kind == K_DECIMAL128:
        text = str(_decimal_object(col, slot)).encode("ascii")
        return buf.write_raw(text, len(text))
    if kind == K_STRUCT:
        buf.write_u8(c'{')
        first = True
        for child in col.children:
            if child.kind == K_NULL or child.is_null(child.offset + slot):
                continue
            if not first:
                buf.write_u8(c',')
            first = False
            _json_string(buf, child.name_utf8, len(child.name_utf8))
            buf.write_u8(c':')
            write_json(buf, child, child.offset + slot, row)
        return buf.write_u8(c'}')
    if kind == K_MAP:
        entries = <ArrowColumn>col.children[0]
        keys = <ArrowColumn>entries.children[0]
        items = <ArrowColumn>entries.children[1]
        start = col.child_range(slot, &end)
        buf.write_u8(c'{')
        for i in range(start, end):
            if i > start:
                buf.write_u8(c',')
            if keys.is_null(keys.offset + i):
                return _row_error(row, col.name, "a null map key has no JSON form")
            if keys.kind == K_UTF8 or keys.kind == K_LARGE_UTF8:
                write_json(buf, keys, keys.offset + i, row)
            else:
                key = WriteBuffer()
                write_json(key, keys, keys.offset + i, row)
                text = key.to_bytes()
                if text[:1] == b'"':  # already a JSON string (timestamps, dates, binary)
                    buf.write_raw(text, len(text))
                else:
                    _json_string(buf, text, len(text))
            buf.write_u8(c':')
            write_json(buf, items, items.offset + i, row)
        return buf.write_u8(c'}')
    if kind == K_LIST or kind == K_LARGE_LIST:
        items = <ArrowColumn>col.children[0]
        start = col.child_range(slot, &end)
        buf.write_u8(c'[')
        for i in range(start, end):
            if i > start:
                buf.write_u8(c',')
            write_json(buf, items, i, row)
        return buf.write_u8(c']')
    raise ArrowTypeError(f"{col.name}: Arrow {col.format!r} has no JSON form")


# ---------------------------------------------------------------------------- publishes

cdef class PublishEncoder:
    """Turns Arrow columns into ready-to-send publish frames, one batch at a time.

    ``exchange`` / ``routing_key`` given here are literals for every row; otherwise they
    come from columns passed to :meth:`encode`.  ``body_format``: ``"raw"`` (binary or
    string bodies as they are), ``"json"`` or ``"table"`` (a struct or map body column
    serialized as JSON or as an AMQP field table).
    """

    def __init__(self, *, int channel=1, frame_max=DEFAULT_FRAME_MAX, bint mandatory=False,
                 str body_format="raw", exchange=None, routing_key=None):
        if not 1 <= channel <= 0xFFFF:
            raise ValueError(f"channel {channel} is out of range 1..65535")
        self.channel = <uint16_t>channel
        self.frame_max = check_frame_max(frame_max)
        self.frame_max_setting = frame_max
        self.mandatory = mandatory
        if body_format not in _BODY_FORMATS:
            raise ValueError(f"body_format must be one of {sorted(_BODY_FORMATS)}, not {body_format!r}")
        self.body_format = _BODY_FORMATS[body_format]
        self.exchange_literal = _shortstr_literal(exchange, "exchange")
        self.routing_key_literal = _shortstr_literal(routing_key, "routing_key")
        self.out = WriteBuffer()
        self.scratch = WriteBuffer()

    def encode(self, body, routing_key=None, exchange=None, headers=None, properties=None):
        """The frames of every row as a pyarrow binary array (large_binary past 2 GiB)."""
        import pyarrow as pa
        cdef int64_t n
        n = self._run(body, routing_key, exchange, headers, properties, True)
        data = self.out.to_bytes()
        self._reset()
        offsets = self._offsets
        self._offsets = None
        if len(data) < 0x7FFFFFFF:
            return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(_narrow(offsets, n)), pa.py_buffer(data)])
        return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])

    def encode_frames(self, body, routing_key=None, exchange=None, headers=None, properties=None):
        """All rows' frames back to back, as one bytes object ready for one socket write."""
        self._run(body, routing_key, exchange, headers, properties, False)
        data = self.out.to_bytes()
        self._reset()
        return data

    cdef int _reset(self) except -1:
        self.out._len = 0
        if self.out._cap > (64 << 20):  # after a huge batch: give the memory back
            self.out = WriteBuffer()
        return 0

    cdef int64_t _run(self, body, routing_key, exchange, headers, properties, bint offsets) except -1:
        cdef ArrowColumn body_col = column_of(body, "body")
        cdef int64_t n = body_col.length
        cdef ArrowColumn rk_col = None, ex_col = None, headers_col = None, props_col = None
        cdef list prop_cols = [None] * N_PROPERTIES
        if routing_key is not None:
            rk_col = column_of(routing_key, "routing_key")
            _check_string(rk_col, "routing_key")
        elif self.routing_key_literal is None:
            raise ValueError("routing_key: give a column or a literal routing key")
        if exchange is not None:
            ex_col = column_of(exchange, "exchange")
            _check_string(ex_col, "exchange")
        if headers is not None:
            headers_col = column_of(headers, "headers")
        if properties is not None:
            props_col = column_of(properties, "properties")
            if props_col.kind != K_STRUCT:
                raise ArrowTypeError(f"properties must be a struct column, not Arrow {props_col.format!r}")
            for child in props_col.children:
                _bind_property(<ArrowColumn>child, prop_cols)
        self._headers_nested = prop_cols[P_HEADERS] is not None
        if self._headers_nested:
            if headers_col is not None:
                raise ValueError("headers are given twice: as the headers column and as properties.headers")
            headers_col = prop_cols[P_HEADERS]
        if headers_col is not None:
            if headers_col.kind != K_MAP and headers_col.kind != K_STRUCT and headers_col.kind != K_NULL:
                raise ArrowTypeError(f"headers must be a map<string, ...> (or struct) column, "
                                     f"not Arrow {headers_col.format!r}")
            check_value_type(headers_col, "headers", 1, False)
        if self.body_format == BODY_RAW:
            if not body_col.is_binary_like() and body_col.kind != K_NULL:
                raise ArrowTypeError(f"body must be a binary or string column for body_format 'raw', "
                                     f"not Arrow {body_col.format!r}; use body_format 'json' or 'table' "
                                     f"for structs")
        else:
            if body_col.kind != K_STRUCT and body_col.kind != K_MAP and body_col.kind != K_NULL:
                raise ArrowTypeError(f"body must be a struct or map column for body_format "
                                     f"{'json' if self.body_format == BODY_JSON else 'table'}, "
                                     f"not Arrow {body_col.format!r}")
            check_value_type(body_col, "body", 1, self.body_format == BODY_JSON)
        for col in (rk_col, ex_col, None if self._headers_nested else headers_col, props_col):
            if col is not None and (<ArrowColumn>col).length != n:
                raise ValueError(f"{(<ArrowColumn>col).name} has {(<ArrowColumn>col).length} rows, "
                                 f"body has {n}")
        ends = None
        if offsets:
            ends = bytearray(8 * (n + 1))
            self._offsets = ends
        self.out._len = 0
        self._encode_rows(n, body_col, rk_col, ex_col, headers_col, props_col, prop_cols, ends)
        return n

    cdef int _encode_rows(self, int64_t n, ArrowColumn body_col, ArrowColumn rk_col,
                          ArrowColumn ex_col, ArrowColumn headers_col, ArrowColumn props_col,
                          list prop_cols, bytearray ends) except -1:
        cdef WriteBuffer out = self.out
        cdef WriteBuffer scratch = self.scratch
        cdef int64_t row, props_slot = 0
        cdef int64_t *end_at = NULL
        cdef const char *ex = NULL
        cdef const char *rk = NULL
        cdef const char *body = NULL
        cdef Py_ssize_t ex_len = 0, rk_len = 0, body_len = 0, payload, start, flags_at, size
        cdef uint16_t flags
        cdef char *p
        cdef int i
        cdef bint props_present
        cdef ArrowColumn prop
        cdef bint has_props = props_col is not None
        if ends is not None:
            end_at = <int64_t *><char *>ends
            end_at[0] = 0
        if self.exchange_literal is not None:
            ex = self.exchange_literal
            ex_len = len(self.exchange_literal)
        elif ex_col is None:
            ex = b""
        if self.routing_key_literal is not None:
            rk = self.routing_key_literal
            rk_len = len(self.routing_key_literal)
        for row in range(n):
            # exchange and routing key: a column unless a literal was given
            if ex_col is not None and self.exchange_literal is None:
                if ex_col.kind == K_NULL or ex_col.is_null(ex_col.offset + row):
                    _row_error(row, "exchange", "is null (use '' for the default exchange)")
                ex = ex_col.bytes_at(ex_col.offset + row, &ex_len)
                if ex_len > 255:
                    _row_error(row, "exchange", f"{_text(ex, 40)!r}... is {ex_len} bytes; the limit is 255")
            if self.routing_key_literal is None:
                if rk_col.kind == K_NULL or rk_col.is_null(rk_col.offset + row):
                    _row_error(row, "routing_key", "is null")
                rk = rk_col.bytes_at(rk_col.offset + row, &rk_len)
                if rk_len > 255:
                    _row_error(row, "routing_key", f"{_text(rk, 40)!r}... is {rk_len} bytes; the limit is 255")

            # the body: as it is, or serialized into the scratch buffer
            if self.body_format == BODY_RAW:
                if body_col.kind == K_NULL or body_col.is_null(body_col.offset + row):
                    body_len = 0
                    body = b""
                else:
                    body = body_col.bytes_at(body_col.offset + row, &body_len)
            elif body_col.kind == K_NULL or body_col.is_null(body_col.offset + row):
                body_len = 0
                body = b""
            else:
                scratch._len = 0
                try:
                    if self.body_format == BODY_JSON:
                        write_json(scratch, body_col, body_col.offset + row, row)
                    elif body_col.kind == K_STRUCT:
                        write_struct_table(scratch, body_col, body_col.offset + row, row)
                    else:
                        write_map_table(scratch, body_col, body_col.offset + row, row)
                except RowEncodeError as exc:
                    _reraise_for(exc, "body")
                body = scratch._buf
                body_len = scratch._len

            # basic.publish
            payload = 4 + 2 + 1 + ex_len + 1 + rk_len + 1
            out.ensure(payload + FRAME_OVERHEAD + FRAME_HEADER_SIZE + 64)
            p = out._buf + out._len
            p[0] = <char>FRAME_METHOD
            amqw_pack_u16(p + 1, self.channel)
            amqw_pack_u32(p + 3, <uint32_t>payload)
            amqw_pack_u32(p + 7, _BASIC_PUBLISH)
            p[11] = 0
            p[12] = 0
            p[13] = <char><uint8_t>ex_len
            memcpy(p + 14, ex, <size_t>ex_len)
            p += 14 + ex_len
            p[0] = <char><uint8_t>rk_len
            memcpy(p + 1, rk, <size_t>rk_len)
            p += 1 + rk_len
            p[0] = <char>(1 if self.mandatory else 0)
            p[1] = <char>FRAME_END
            out._len += payload + FRAME_OVERHEAD

            # the content header
            start = out._len
            p = out._buf + start
            p[0] = <char>FRAME_HEADER
            amqw_pack_u16(p + 1, self.channel)
            amqw_pack_u16(p + 7, _BASIC_CLASS)
            amqw_pack_u16(p + 9, 0)
            amqw_pack_u64(p + 11, <uint64_t>body_len)
            flags_at = start + 19
            out._len = start + 21
            flags = 0
            if has_props:
                props_slot = props_col.offset + row
                props_present = not props_col.is_null(props_slot)
            else:
                props_present = False
            if props_present or headers_col is not None:
                for i in range(N_PROPERTIES):
                    if i == P_HEADERS:
                        if headers_col is not None and self._write_headers(headers_col, row, props_slot, props_present):
                            flags |= 1 << (15 - i)
                        continue
                    if not props_present:
                        continue
                    prop = <ArrowColumn>prop_cols[i]
                    if prop is not None and _write_property(out, prop, i, prop.offset + props_slot, row):
                        flags |= 1 << (15 - i)
            amqw_pack_u16(out._buf + flags_at, flags)
            size = out._len - start - FRAME_HEADER_SIZE
            if self.frame_max and size + FRAME_OVERHEAD > self.frame_max:
                _row_error(row, "properties", f"the content header frame is {size + FRAME_OVERHEAD} "
                                              f"bytes, over frame_max {self.frame_max}")
            amqw_pack_u32(out._buf + start + 3, <uint32_t>size)
            out.write_u8(FRAME_END)

            write_body_frames(out, self.channel, body, body_len, self.frame_max)
            if end_at != NULL:
                end_at[row + 1] = out._len
        return 0

    cdef bint _write_headers(self, ArrowColumn headers_col, int64_t row, int64_t props_slot,
                             bint props_present) except -1:
        cdef int64_t slot
        if headers_col.kind == K_NULL:
            return False
        if self._headers_nested:
            if not props_present:
                return False
            slot = headers_col.offset + props_slot
        else:
            slot = headers_col.offset + row
        if headers_col.is_null(slot):
            return False
        try:
            if headers_col.kind == K_MAP:
                write_map_table(self.out, headers_col, slot, row)
            else:
                write_struct_table(self.out, headers_col, slot, row)
        except RowEncodeError as exc:
            _reraise_for(exc, "properties.headers" if self._headers_nested else "headers")
        return True


# ---------------------------------------------------------------------------- helpers

cdef bytes _shortstr_literal(object value, str what):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    data = (<str>value).encode("utf-8")
    if len(data) > 255:
        raise ValueError(f"{what} {value[:40]!r}... is {len(data)} bytes in UTF-8; the limit is 255")
    return data


cdef int _bind_property(ArrowColumn child, list prop_cols) except -1:
    """Check a properties struct field's name and type; remember its column."""
    cdef str name = child.name
    cdef int kind = child.kind
    if name not in PROPERTY_NAMES:
        raise ArrowTypeError(f"properties.{name} is not a basic property; the 14 are: "
                             f"{', '.join(PROPERTY_NAMES)}")
    i = PROPERTY_NAMES.index(name)
    if kind == K_NULL:
        pass
    elif i == P_HEADERS:
        if kind != K_MAP and kind != K_STRUCT:
            raise ArrowTypeError(f"properties.headers must be a map<string, ...> or struct, "
                                 f"not Arrow {child.format!r}")
    elif i == P_DELIVERY_MODE or i == P_PRIORITY:
        if not child.is_integer():
            raise ArrowTypeError(f"properties.{name} must be an integer column, not Arrow {child.format!r}")
    elif i == P_TIMESTAMP:
        if not (child.is_integer() or kind == K_TIMESTAMP or kind == K_DATE32 or kind == K_DATE64):
            raise ArrowTypeError(f"properties.timestamp must be a timestamp, date or integer (epoch "
                                 f"seconds) column, not Arrow {child.format!r}")
    elif kind != K_UTF8 and kind != K_LARGE_UTF8:
        raise ArrowTypeError(f"properties.{name} must be a string column, not Arrow {child.format!r}")
    if prop_cols[i] is not None:
        raise ValueError(f"properties.{name} is given twice")
    prop_cols[i] = child
    return 0


cdef bint _write_property(WriteBuffer out, ArrowColumn prop, int i, int64_t slot,
                          int64_t row) except -1:
    """One property value if the row has one; True when written."""
    cdef Py_ssize_t n
    cdef const char *p
    cdef int64_t v
    if prop.kind == K_NULL or prop.is_null(slot):
        return False
    if i == P_DELIVERY_MODE or i == P_PRIORITY:
        v = prop.int_at(slot)
        if v < 0 or v > 255 or (prop.kind == K_UINT64 and (<const uint64_t *>prop.values)[slot] > 255):
            if prop.kind == K_UINT64:
                shown = str((<const uint64_t *>prop.values)[slot])
            else:
                shown = str(v)
            _row_error(row, f"properties.{PROPERTY_NAMES[i]}", f"{shown} is out of range 0..255")
        out.write_u8(<uint8_t>v)
    elif i == P_TIMESTAMP:
        out.write_u64(<uint64_t>_timestamp_seconds(prop, slot, row, "properties.timestamp"))
    else:
        p = prop.bytes_at(slot, &n)
        if n > 255:
            _row_error(row, f"properties.{PROPERTY_NAMES[i]}",
                       f"{_text(p, 40)!r}... is {n} bytes; a short string holds at most 255")
        _write_shortstr_raw(out, p, n)
    return True


cdef bytes _narrow(bytearray offsets, int64_t n):
    """int64 row ends to the int32 offsets of a binary array (the data is under 2 GiB)."""
    cdef bytes result = PyBytes_FromStringAndSize(NULL, 4 * (n + 1))
    cdef int32_t *dst = <int32_t *><char *>result
    cdef const int64_t *src = <const int64_t *><char *>offsets
    cdef int64_t i
    for i in range(n + 1):
        dst[i] = <int32_t>src[i]
    return result


def encode_batch(body, routing_key=None, exchange=None, headers=None, properties=None, *,
                 int channel=1, frame_max=DEFAULT_FRAME_MAX, bint mandatory=False,
                 str body_format="raw", default_exchange=None, default_routing_key=None):
    """One-shot :meth:`PublishEncoder.encode`: Arrow columns in, a binary array of frames out."""
    encoder = PublishEncoder(channel=channel, frame_max=frame_max, mandatory=mandatory,
                             body_format=body_format, exchange=default_exchange,
                             routing_key=default_routing_key)
    return encoder.encode(body, routing_key, exchange, headers, properties)
