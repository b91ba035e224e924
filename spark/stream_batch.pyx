# cython: language_level=3
"""Received stream messages to one Arrow record batch, in one pass, without a Python object
per row: bodies, strings, offsets, timestamps and header text are copied from the
messages' fields straight into growable Arrow buffers, which pyarrow then wraps without a
copy (``pa.Array.from_buffers`` over ``pa.py_buffer``).

The output is exactly what :func:`amqwire.spark.stream_rows.build_batch` (plain pyarrow)
builds from the same messages; :func:`stream_schema` is the schema.  ``headers`` holds the
message's headers but the broker's ``x-stream-offset`` (that is the ``offset`` column), and
is null when none are left.

Offsets: string and binary columns have 32-bit offsets (``binary``/``string``); a column
whose data passes 2 GiB - 1 bytes in one batch switches to its ``large_`` variant (64-bit
offsets), so such a batch no longer has :func:`stream_schema`'s types.

Header values become text as :func:`amqwire.spark.decode.header_text` renders them.  The
values the codec decodes most (str, None, bool, int, float, bytes, UTC datetimes) are
rendered here in C; the rest (decimals, tables, arrays, other datetimes) by
``header_text`` itself, so the two can never disagree.  The headers are read from the
decoded dict, not from the property bytes (``BasicProperties.wire``): the dict is what a
user sees and may have changed, and the codec has decoded it already.
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.datetime cimport (
    import_datetime, PyDateTime_Check, PyDateTime_CheckExact, PyDateTime_GET_YEAR, PyDateTime_GET_MONTH,
    PyDateTime_GET_DAY, PyDateTime_DATE_GET_HOUR, PyDateTime_DATE_GET_MINUTE,
    PyDateTime_DATE_GET_SECOND, PyDateTime_DATE_GET_MICROSECOND, datetime_tzinfo,
)
from cpython.dict cimport PyDict_Next, PyDict_CheckExact
from cpython.float cimport PyFloat_CheckExact, PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_Check, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_SIZE, PySequence_Fast_GET_ITEM
from cpython.unicode cimport PyUnicode_Check, PyUnicode_CheckExact
from libc.stdint cimport int32_t, int64_t, uint8_t, INT32_MAX
from libc.string cimport memcmp

from amqwire.codec.parser cimport Delivery, delivery_properties
from amqwire.codec.properties cimport BasicProperties
from amqwire.spark.arrow_columns cimport (
    ByteBuffer, ColumnBuilder, pyarrow, text_base64, text_double, text_int, text_utc_micros,
)

from amqwire.spark.decode import PROPERTY_FIELDS as _PROPERTY_FIELDS, header_text as _header_text
from amqwire.spark.errors import MessageRowError as _MessageRowError

cdef extern from "Python.h":
    bint PyBool_Check(object o)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void *PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    const char *PyUnicode_AsUTF8AndSize(object o, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1


import_datetime()

import datetime as _dt

cdef object _UTC = _dt.timezone.utc
cdef object _SCHEMA = None
# The header in which RabbitMQ gives a stream delivery's offset: the offset column, so
# left out of the headers column (as amqwire.spark.stream_rows does).
cdef const char *_OFFSET_HEADER = b"x-stream-offset"
cdef Py_ssize_t _OFFSET_HEADER_LEN = 15


# ---------------------------------------------------------------------------- field values

cdef inline int _fail(Py_ssize_t index, str field, str problem) except -1:
    raise _MessageRowError(index=index, field=field, problem=problem)


cdef inline const char *_utf8(object text, Py_ssize_t *n, Py_ssize_t index, str field) except NULL:
    """The UTF-8 of a str (ASCII read in place); MessageRowError for anything else."""
    if PyUnicode_CheckExact(text) and PyUnicode_IS_COMPACT_ASCII(text):
        n[0] = PyUnicode_GET_LENGTH(text)
        return <const char *>PyUnicode_DATA(text)
    return _utf8_slow(text, n, index, field)


cdef const char *_utf8_slow(object text, Py_ssize_t *n, Py_ssize_t index, str field) except NULL:
    if not PyUnicode_Check(text):
        _fail(index, field, f"expected str, got {type(text).__name__}")
    if PyUnicode_IS_COMPACT_ASCII(text):
        n[0] = PyUnicode_GET_LENGTH(text)
        return <const char *>PyUnicode_DATA(text)
    try:
        return PyUnicode_AsUTF8AndSize(text, n)
    except UnicodeError as exc:
        _fail(index, field, f"{text!r} cannot be encoded as UTF-8 ({exc.reason})")


cdef inline int _add_text(ColumnBuilder col, object value, Py_ssize_t index, str field) except -1:
    cdef Py_ssize_t n = 0
    cdef const char *p
    if value is None:
        return col.add_null_bytes()
    p = _utf8(value, &n, index, field)
    return col.add_bytes(p, n)


cdef int _add_body(ColumnBuilder col, PyObject *body, Py_ssize_t index) except -1:
    cdef Py_buffer view
    if body is NULL or <object>body is None:
        return _fail(index, "body", "the message has no body")
    if PyBytes_CheckExact(<object>body):
        return col.add_bytes(PyBytes_AS_STRING(<object>body), PyBytes_GET_SIZE(<object>body))
    if PyUnicode_Check(<object>body):
        return _fail(index, "body", "expected bytes, got str")
    try:
        PyObject_GetBuffer(<object>body, &view, PyBUF_SIMPLE)
    except TypeError:
        return _fail(index, "body", f"expected bytes, got {type(<object>body).__name__}")
    try:
        col.add_bytes(<const char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d) noexcept:
    # Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's days_from_civil).
    y -= m <= 2
    cdef int64_t era = (y if y >= 0 else y - 399) // 400
    cdef int64_t yoe = y - era * 400
    cdef int64_t doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef int64_t doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef int64_t _epoch_us(object value, Py_ssize_t index, str field) except? -1:
    """Microseconds since the epoch of a datetime; naive means UTC (as pyarrow reads it)."""
    cdef int64_t us
    if not PyDateTime_Check(value):
        _fail(index, field, f"expected datetime, got {type(value).__name__}")
    us = ((_days_from_civil(PyDateTime_GET_YEAR(value), PyDateTime_GET_MONTH(value),
                            PyDateTime_GET_DAY(value)) * 86400
           + PyDateTime_DATE_GET_HOUR(value) * 3600
           + PyDateTime_DATE_GET_MINUTE(value) * 60
           + PyDateTime_DATE_GET_SECOND(value)) * 1000000
          + PyDateTime_DATE_GET_MICROSECOND(value))
    tz = <object>datetime_tzinfo(value)
    if tz is not None and tz is not _UTC:
        offset = value.utcoffset()
        if offset is not None:
            us -= (offset.days * 86400 + offset.seconds) * 1000000 + offset.microseconds
    return us


cdef int _add_octet(ColumnBuilder col, object value, Py_ssize_t index, str field) except -1:
    cdef int overflow = 0
    cdef long long v
    if value is None:
        return col.add_int32(0, False)
    if not PyLong_Check(value):
        return _fail(index, field, f"expected int, got {type(value).__name__}")
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or v < -2147483648 or v > 2147483647:
        return _fail(index, field, f"{value} is out of the int32 range")
    return col.add_int32(<int32_t>v, True)


# ---------------------------------------------------------------------------- header text

cdef int _add_header_value(ColumnBuilder items, ByteBuffer scratch, object value, Py_ssize_t index) except -1:
    """One header value as header_text renders it: in C for the common types, by
    header_text itself for the rest."""
    cdef Py_ssize_t n = 0
    cdef const char *p
    cdef int overflow = 0
    cdef long long v
    if value is None:
        return items.add_null_bytes()
    if PyUnicode_Check(value):
        p = _utf8(value, &n, index, "headers")
        return items.add_bytes(p, n)
    scratch.len = 0
    if PyBool_Check(value):
        if value:
            return items.add_bytes(b"true", 4)
        return items.add_bytes(b"false", 5)
    elif PyLong_CheckExact(value):
        v = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return _add_rendered(items, value, index)
        text_int(scratch, v)
    elif PyFloat_CheckExact(value):
        text_double(scratch, PyFloat_AS_DOUBLE(value))
    elif PyBytes_CheckExact(value):
        text_base64(scratch, <const uint8_t *>PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value))
    elif PyDateTime_CheckExact(value) and <object>datetime_tzinfo(value) is _UTC:
        text_utc_micros(scratch, _epoch_us(value, index, "headers"))
    else:
        return _add_rendered(items, value, index)
    return items.add_bytes(scratch.data, scratch.len)


cdef int _add_rendered(ColumnBuilder items, object value, Py_ssize_t index) except -1:
    cdef Py_ssize_t n = 0
    cdef const char *p
    try:
        text = _header_text(value)
    except (TypeError, ValueError) as exc:
        return _fail(index, "headers", f"a value of type {type(value).__name__} cannot be shown as text: {exc}")
    if text is None:
        return items.add_null_bytes()
    p = _utf8(text, &n, index, "headers")
    return items.add_bytes(p, n)


# ---------------------------------------------------------------------------- the batch

def stream_schema():
    """The pyarrow schema of the stream source's batches (see the module's docstring)."""
    global _SCHEMA
    if _SCHEMA is None:
        pa = pyarrow()
        kinds = {"string": pa.string(), "int32": pa.int32(), "timestamp": pa.timestamp("us", tz="UTC")}
        _SCHEMA = pa.schema([
            # Nullable as Spark makes them of the source's DDL, though never null here.
            pa.field("body", pa.binary()),
            pa.field("stream", pa.string()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("exchange", pa.string()),
            pa.field("routing_key", pa.string()),
            pa.field("properties", pa.struct([(name, kinds[kind]) for name, kind in _PROPERTY_FIELDS])),
            pa.field("headers", pa.map_(pa.string(), pa.string())),
        ])
    return _SCHEMA


cdef enum:
    # the string properties' columns, in PROPERTY_FIELDS order but the three that are not
    CONTENT_TYPE, CONTENT_ENCODING, CORRELATION_ID, REPLY_TO, EXPIRATION, MESSAGE_ID
    TYPE, USER_ID, APP_ID, CLUSTER_ID
    N_TEXT_PROPERTIES


def build_batch(messages, str stream not None):
    """``messages`` (Deliveries from a stream, e.g. amqwire.client.Message) as one
    pyarrow RecordBatch of :func:`stream_schema`, row i from message i.

    MessageRowError (naming the message's index) for a message without a stream offset or
    with a field of a type no column holds."""
    pa = pyarrow()
    schema = stream_schema()
    seq = PySequence_Fast(messages, "messages must be a sequence of amqwire.client.Message")
    cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i, j, pos
    cdef Py_ssize_t stream_len = 0
    cdef const char *stream_utf8 = _utf8(stream, &stream_len, 0, "stream")
    cdef PyObject *item
    cdef PyObject *slot
    cdef PyObject *key
    cdef PyObject *value
    cdef Delivery d
    cdef BasicProperties p
    cdef int overflow = 0
    cdef long long offset
    cdef Py_ssize_t kn = 0
    cdef const char *kp
    cdef int32_t entries = 0, first_entry
    cdef int64_t us

    cdef ColumnBuilder bodies = ColumnBuilder(n, 4, True, 128)
    cdef ColumnBuilder offsets = ColumnBuilder(n, 8, False)
    cdef ColumnBuilder timestamps = ColumnBuilder(n, 8, False)
    cdef ColumnBuilder exchanges = ColumnBuilder(n, 4, True, 8)
    cdef ColumnBuilder routing_keys = ColumnBuilder(n, 4, True, 16)
    cdef list texts = [ColumnBuilder(n, 4, True) for _ in range(N_TEXT_PROPERTIES)]
    cdef ColumnBuilder delivery_modes = ColumnBuilder(n, 4, False)
    cdef ColumnBuilder priorities = ColumnBuilder(n, 4, False)
    cdef ColumnBuilder prop_timestamps = ColumnBuilder(n, 8, False)
    cdef ColumnBuilder header_maps = ColumnBuilder(n, 4, False)   # map offsets: entries so far
    cdef ColumnBuilder header_keys = ColumnBuilder(n * 3, 4, True, 8)
    cdef ColumnBuilder header_items = ColumnBuilder(n * 3, 4, True, 16)
    cdef ByteBuffer scratch = ByteBuffer(64)

    (<int32_t *>header_maps.values.data)[0] = 0
    header_maps.values.len = 4

    for i in range(n):
        item = PySequence_Fast_GET_ITEM(seq, i)
        if not isinstance(<object>item, Delivery):
            _fail(i, "message", f"expected a Delivery (amqwire.client.Message), got {type(<object>item).__name__}")
        d = <Delivery><object>item

        slot = <PyObject *>d.stream_offset
        if slot is NULL or <object>slot is None:
            _fail(i, "stream_offset", "the message has no stream offset (was it consumed from a stream queue?)")
        if not PyLong_Check(<object>slot):
            _fail(i, "stream_offset", f"expected int, got {type(<object>slot).__name__}")
        offset = PyLong_AsLongLongAndOverflow(<object>slot, &overflow)
        if overflow:
            _fail(i, "stream_offset", f"{<object>slot} is out of the int64 range")
        offsets.add_int64(offset, True)

        _add_body(bodies, <PyObject *>d.body, i)

        slot = <PyObject *>d.exchange
        _add_text(exchanges, None if slot is NULL else <object>slot, i, "exchange")
        slot = <PyObject *>d.routing_key
        _add_text(routing_keys, None if slot is NULL else <object>slot, i, "routing_key")

        props = delivery_properties(d)    # None: no properties (the field is not read directly)
        if props is None:
            p = None
        elif isinstance(props, BasicProperties):
            p = <BasicProperties>props
        else:
            _fail(i, "properties", f"expected BasicProperties, got {type(props).__name__}")

        if p is None:
            timestamps.add_int64(0, False)
            prop_timestamps.add_int64(0, False)
            for j in range(N_TEXT_PROPERTIES):
                (<ColumnBuilder>texts[j]).add_null_bytes()
            delivery_modes.add_int32(0, False)
            priorities.add_int32(0, False)
            header_maps.add_int32(entries, False)
            continue

        stamp = p.timestamp     # held: a tzinfo's utcoffset() is Python code
        if stamp is None:
            timestamps.add_int64(0, False)
            prop_timestamps.add_int64(0, False)
        else:
            us = _epoch_us(stamp, i, "properties.timestamp")
            timestamps.add_int64(us, True)
            prop_timestamps.add_int64(us, True)
        _add_text(<ColumnBuilder>texts[CONTENT_TYPE], p.content_type, i, "properties.content_type")
        _add_text(<ColumnBuilder>texts[CONTENT_ENCODING], p.content_encoding, i, "properties.content_encoding")
        _add_octet(delivery_modes, p.delivery_mode, i, "properties.delivery_mode")
        _add_octet(priorities, p.priority, i, "properties.priority")
        _add_text(<ColumnBuilder>texts[CORRELATION_ID], p.correlation_id, i, "properties.correlation_id")
        _add_text(<ColumnBuilder>texts[REPLY_TO], p.reply_to, i, "properties.reply_to")
        _add_text(<ColumnBuilder>texts[EXPIRATION], p.expiration, i, "properties.expiration")
        _add_text(<ColumnBuilder>texts[MESSAGE_ID], p.message_id, i, "properties.message_id")
        _add_text(<ColumnBuilder>texts[TYPE], p.type, i, "properties.type")
        _add_text(<ColumnBuilder>texts[USER_ID], p.user_id, i, "properties.user_id")
        _add_text(<ColumnBuilder>texts[APP_ID], p.app_id, i, "properties.app_id")
        _add_text(<ColumnBuilder>texts[CLUSTER_ID], p.cluster_id, i, "properties.cluster_id")

        headers = p.headers
        if headers is None:
            header_maps.add_int32(entries, False)
            continue
        if not PyDict_CheckExact(headers):
            if not isinstance(headers, dict):
                _fail(i, "headers", f"expected dict, got {type(headers).__name__}")
        pos = 0
        first_entry = entries
        while PyDict_Next(headers, &pos, &key, &value):
            # held, not borrowed: rendering a value may run Python code (header_text)
            header_key = <object>key
            header_value = <object>value
            kp = _utf8(header_key, &kn, i, "headers")
            if kn == _OFFSET_HEADER_LEN and memcmp(kp, _OFFSET_HEADER, _OFFSET_HEADER_LEN) == 0:
                continue        # the broker's, and the offset column already
            header_keys.add_bytes(kp, kn)
            _add_header_value(header_items, scratch, header_value, i)
            if entries == INT32_MAX:
                _fail(i, "headers", "more than 2**31 - 1 header entries in one batch")
            entries += 1
        header_maps.add_int32(entries, entries > first_entry)

    # stream: the same text in every row
    cdef ColumnBuilder streams = ColumnBuilder(n, 4, True, stream_len)
    i = 0
    while i < n:
        streams.add_bytes(stream_utf8, stream_len)
        i += 1

    string, binary = pa.string(), pa.binary()
    large_string = pa.large_string()
    ts_type = pa.timestamp("us", tz="UTC")
    props_type = schema.field("properties").type
    map_type = schema.field("headers").type
    text_arrays = [(<ColumnBuilder>texts[j]).variable(string, large_string) for j in range(N_TEXT_PROPERTIES)]
    property_arrays = text_arrays[:2] + [delivery_modes.fixed(pa.int32()), priorities.fixed(pa.int32())] \
        + text_arrays[2:6] + [prop_timestamps.fixed(ts_type)] + text_arrays[6:]
    properties = pa.StructArray.from_arrays(property_arrays, fields=list(props_type))
    map_entries = pa.StructArray.from_arrays(
        [header_keys.variable(string, large_string), header_items.variable(string, large_string)],
        fields=[map_type.key_field, map_type.item_field])
    headers_array = pa.Array.from_buffers(
        map_type, n, [header_maps.validity_buffer(), pa.py_buffer(header_maps.values)],
        null_count=header_maps.nulls, children=[map_entries])
    columns = [
        bodies.variable(binary, pa.large_binary()),
        streams.variable(string, large_string),
        offsets.fixed(pa.int64()),
        timestamps.fixed(ts_type),
        exchanges.variable(string, large_string),
        routing_keys.variable(string, large_string),
        properties,
        headers_array,
    ]
    wide = [bodies, streams, exchanges, routing_keys, header_keys, header_items] + texts
    if any((<ColumnBuilder>col).wide for col in wide):
        # past 2 GiB in one column: its large_ type, so not stream_schema()'s types
        return pa.RecordBatch.from_arrays(columns, names=schema.names)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
