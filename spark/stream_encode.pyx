# cython: language_level=3
"""Arrow batches to the stream protocol's Publish frames: each row one AMQP 1.0 message,
encoded in one pass over the Arrow buffers (no Python object per row), with its
publishing id, many messages to a frame (up to frame_max).

A row's message, as RabbitMQ 3.10 maps AMQP 0-9-1 onto a stream's AMQP 1.0 messages
(docs/streams-mapping.md), so that 0-9-1 readers of the stream see what a 0-9-1 publish
of the same row would have given them:

- message annotations: ``x-exchange`` and ``x-routing-key`` (the ``exchange`` and
  ``routing_key`` columns or literals, when given), ``x-basic-priority`` and
  ``x-basic-delivery-mode`` (ubyte), ``x-basic-expiration`` (string);
- properties: ``message_id``, ``correlation_id``, ``reply_to`` (strings), ``user_id``
  (binary), ``content_type``, ``content_encoding`` (symbols), ``timestamp`` as
  creation-time (milliseconds; an integer column is epoch seconds, as for 0-9-1);
- application properties: the ``headers`` map (or struct), and ``type`` and ``app_id``
  as ``x-basic-type`` and ``x-basic-app-id``; ``cluster_id`` is dropped (a stream does
  not keep it);
- one data section: the body (binary or string as it is; a struct or map as JSON or an
  AMQP field table with ``body_format``); a null body is an empty one.

Header values keep their type: string, binary, boolean, byte, short, int, long, ubyte,
ushort, uint, float, double, timestamp (milliseconds; dates too), null.  AMQP 1.0 allows
no map, list or array in application properties, and RabbitMQ 3.10 cannot show decimals
or ulongs to 0-9-1 readers: such values are refused (RowEncodeError naming the row and
the header), as is a uint64 above 2**63-1.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT64_MAX
from libc.string cimport memcpy, memmove

from amqwire.codec.buffer cimport WriteBuffer, amqw_pack_u32
from amqwire.spark.arrow_view cimport (
    ArrowColumn, column_of, floor_div,
    K_NULL, K_BOOL, K_INT8, K_INT16, K_INT32, K_INT64, K_UINT8, K_UINT16, K_UINT32, K_UINT64,
    K_FLOAT32, K_FLOAT64, K_UTF8, K_LARGE_UTF8, K_BINARY, K_LARGE_BINARY, K_DATE32, K_DATE64,
    K_TIMESTAMP, K_DECIMAL128, K_STRUCT, K_LIST, K_LARGE_LIST, K_MAP,
)
from amqwire.spark.encode cimport check_value_type, write_json, write_map_table, write_struct_table

from amqwire.spark.errors import ArrowTypeError, RowEncodeError

__all__ = ["StreamPublishEncoder", "PROPERTY_NAMES"]

PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
    "user_id", "app_id", "cluster_id",
)
cdef enum:
    P_CONTENT_TYPE = 0
    P_CONTENT_ENCODING = 1
    P_HEADERS = 2
    P_DELIVERY_MODE = 3
    P_PRIORITY = 4
    P_CORRELATION_ID = 5
    P_REPLY_TO = 6
    P_EXPIRATION = 7
    P_MESSAGE_ID = 8
    P_TIMESTAMP = 9
    P_TYPE = 10
    P_USER_ID = 11
    P_APP_ID = 12
    P_CLUSTER_ID = 13
    N_PROPERTIES = 14
    # the Publish frame: size, key, version, publisher id, count
    FRAME_HEAD = 4 + 2 + 2 + 1 + 4
    MESSAGE_HEAD = 8 + 4       # publishing id, message size

cdef enum BodyFormat:
    BODY_RAW
    BODY_JSON
    BODY_TABLE

_BODY_FORMATS = {"raw": BODY_RAW, "json": BODY_JSON, "table": BODY_TABLE}
# the Properties list's fields this encoder writes, by their index in it
cdef int _LIST_INDEX[N_PROPERTIES]
_LIST_INDEX[:] = [6, 7, -1, -1, -1, 5, 4, -1, 0, 9, -1, 1, -1, -1]
# the highest timestamp (ms) a reader's datetime holds: 9999-12-31T23:59:59.999Z
cdef int64_t _MAX_MS = 253402300799999


cdef int _row_error(int64_t row, str field, str problem) except -1:
    raise RowEncodeError(row=row, field=field, problem=problem)


cdef str _text(const char *p, Py_ssize_t n):
    return p[:n].decode("utf-8", "replace")


# ---------------------------------------------------------------------------- AMQP 1.0 values

cdef inline int _write_sized(WriteBuffer buf, uint8_t small, uint8_t large, const char *p, Py_ssize_t n,
                             int64_t row, str field) except -1:
    """A string, symbol or binary: the 1-byte size form up to 255 bytes, else the 4-byte one."""
    cdef char *w
    if n <= 255:
        buf.ensure(2 + n)
        w = buf._buf + buf._len
        w[0] = <char>small
        w[1] = <char><uint8_t>n
        memcpy(w + 2, p, <size_t>n)
        buf._len += 2 + n
        return 0
    if n > 0xFFFFFFFF:
        return _row_error(row, field, f"a value of {n} bytes is over the 4 GiB an AMQP 1.0 value holds")
    buf.ensure(5 + n)
    w = buf._buf + buf._len
    w[0] = <char>large
    amqw_pack_u32(w + 1, <uint32_t>n)
    memcpy(w + 5, p, <size_t>n)
    buf._len += 5 + n
    return 0


cdef inline int _write_string(WriteBuffer buf, const char *p, Py_ssize_t n, int64_t row, str field) except -1:
    return _write_sized(buf, 0xa1, 0xb1, p, n, row, field)


cdef int _write_symbol(WriteBuffer buf, const char *p, Py_ssize_t n, int64_t row, str field) except -1:
    cdef Py_ssize_t i
    for i in range(n):
        if <uint8_t>p[i] > 0x7f:
            return _row_error(row, field, f"{_text(p, n)!r} is not ASCII, which an AMQP 1.0 symbol must be")
    return _write_sized(buf, 0xa3, 0xb3, p, n, row, field)


cdef inline int _write_ubyte(WriteBuffer buf, uint8_t v) except -1:
    buf.ensure(2)
    buf._buf[buf._len] = <char>0x50
    buf._buf[buf._len + 1] = <char>v
    buf._len += 2
    return 0


cdef inline int _write_timestamp(WriteBuffer buf, int64_t ms) except -1:
    buf.write_u8(0x83)
    return buf.write_u64(<uint64_t>ms)


cdef inline int _write_code(WriteBuffer buf, uint8_t code) except -1:
    return buf.write_u8(code)


cdef inline Py_ssize_t _begin_compound(WriteBuffer buf, uint8_t large) except -1:
    """A map32 or list32 whose size and count are patched in by _end_compound."""
    cdef Py_ssize_t at = buf._len
    buf.ensure(9)
    buf._buf[at] = <char>large
    buf._len += 9
    return at


cdef int _end_compound(WriteBuffer buf, Py_ssize_t at, uint32_t count, uint8_t small) except -1:
    """Patch the size and count in; when both fit a byte, the compact form (map8/list8)."""
    cdef Py_ssize_t content = buf._len - at - 9
    if content + 1 <= 255 and count <= 255:
        memmove(buf._buf + at + 3, buf._buf + at + 9, <size_t>content)
        buf._buf[at] = <char>small
        buf._buf[at + 1] = <char><uint8_t>(content + 1)
        buf._buf[at + 2] = <char><uint8_t>count
        buf._len = at + 3 + content
        return 0
    if content + 4 > 0xFFFFFFFF:
        raise ValueError(f"a compound value of {content} bytes is over the 4 GiB AMQP 1.0 allows")
    amqw_pack_u32(buf._buf + at + 1, <uint32_t>(content + 4))
    amqw_pack_u32(buf._buf + at + 5, count)
    return 0


cdef inline int _write_section(WriteBuffer buf, uint8_t code) except -1:
    buf.ensure(3)
    buf._buf[buf._len] = 0x00
    buf._buf[buf._len + 1] = <char>0x53
    buf._buf[buf._len + 2] = <char>code
    buf._len += 3
    return 0


cdef int64_t _epoch_ms(ArrowColumn col, int64_t slot, int64_t row, str field) except? -1:
    """Milliseconds since the epoch of a timestamp or date (floored), or of an integer
    taken as seconds (the 0-9-1 sink's reading of an integer timestamp)."""
    cdef int64_t v = col.int_at(slot)
    cdef int64_t ms
    if col.kind == K_TIMESTAMP:
        if col.units_per_second == 1:
            ms = v * 1000
        elif col.units_per_second == 1000:
            ms = v
        else:
            ms = floor_div(v, col.units_per_second // 1000)
    elif col.kind == K_DATE32:
        ms = v * 86400000
    elif col.kind == K_DATE64:
        ms = v
    elif col.kind == K_UINT64 and (<const uint64_t *>col.values)[slot] > <uint64_t>(_MAX_MS // 1000):
        return _row_error(row, field, f"timestamp {(<const uint64_t *>col.values)[slot]} s is after 9999")
    else:
        if v > _MAX_MS // 1000 or v < -_MAX_MS // 1000:
            return _row_error(row, field, f"timestamp {v} s is out of the years 1 .. 9999")
        ms = v * 1000
    return ms


cdef int _write_header_value(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row, str field) except -1:
    """One application property's value (AMQP 1.0 simple types only)."""
    cdef int kind = col.kind
    cdef Py_ssize_t n
    cdef const char *p
    cdef int64_t v
    cdef uint64_t u
    if kind == K_NULL or col.is_null(slot):
        return buf.write_u8(0x40)
    if kind == K_UTF8 or kind == K_LARGE_UTF8:
        p = col.bytes_at(slot, &n)
        return _write_string(buf, p, n, row, field)
    if kind == K_BINARY or kind == K_LARGE_BINARY:
        p = col.bytes_at(slot, &n)
        return _write_sized(buf, 0xa0, 0xb0, p, n, row, field)
    if kind == K_BOOL:
        return buf.write_u8(0x41 if col.bool_at(slot) else 0x42)
    if kind == K_INT64:
        v = col.int_at(slot)
        if -128 <= v <= 127:
            buf.write_u8(0x55)
            return buf.write_u8(<uint8_t><int8_t>v)
        buf.write_u8(0x81)
        return buf.write_u64(<uint64_t>v)
    if kind == K_INT32:
        v = col.int_at(slot)
        if -128 <= v <= 127:
            buf.write_u8(0x54)
            return buf.write_u8(<uint8_t><int8_t>v)
        buf.write_u8(0x71)
        return buf.write_u32(<uint32_t><int32_t>v)
    if kind == K_INT16:
        buf.write_u8(0x61)
        return buf.write_u16(<uint16_t>col.int_at(slot))
    if kind == K_INT8:
        buf.write_u8(0x51)
        return buf.write_u8(<uint8_t>col.int_at(slot))
    if kind == K_UINT8:
        return _write_ubyte(buf, <uint8_t>col.int_at(slot))
    if kind == K_UINT16:
        buf.write_u8(0x60)
        return buf.write_u16(<uint16_t>col.int_at(slot))
    if kind == K_UINT32:
        v = col.int_at(slot)
        if v == 0:
            return buf.write_u8(0x43)
        if v <= 255:
            buf.write_u8(0x52)
            return buf.write_u8(<uint8_t>v)
        buf.write_u8(0x70)
        return buf.write_u32(<uint32_t>v)
    if kind == K_UINT64:
        u = (<const uint64_t *>col.values)[slot]
        if u > <uint64_t>INT64_MAX:
            return _row_error(row, field, f"uint64 {u} is over 2**63-1: a ulong, which RabbitMQ 3.10 cannot show "
                                          f"0-9-1 readers; cast the column to a signed or smaller type")
        buf.write_u8(0x81)
        return buf.write_u64(u)
    if kind == K_FLOAT64:
        buf.write_u8(0x82)
        return buf.write_f64(col.float_at(slot))
    if kind == K_FLOAT32:
        buf.write_u8(0x72)
        return buf.write_f32(<float>col.float_at(slot))
    if kind == K_TIMESTAMP or kind == K_DATE32 or kind == K_DATE64:
        return _write_timestamp(buf, _epoch_ms(col, slot, row, field))
    if kind == K_DECIMAL128:
        return _row_error(row, field, "a decimal, which RabbitMQ 3.10 cannot show 0-9-1 readers of a stream; cast "
                                      "it to a double or a string")
    return _row_error(row, field, f"Arrow {col.format!r}: AMQP 1.0 application properties hold simple values "
                                  f"only (no map, list or array); serialize it (to_json) first")


cdef int _check_header_types(ArrowColumn col, str path) except -1:
    cdef ArrowColumn child
    if col.kind == K_MAP:
        entries = <ArrowColumn>col.children[0]
        key = <ArrowColumn>entries.children[0]
        if key.kind != K_UTF8 and key.kind != K_LARGE_UTF8:
            raise ArrowTypeError(f"{path}: map keys must be strings (application property names), not {key.format!r}")
        _check_simple(<ArrowColumn>entries.children[1], f"{path}[value]")
    elif col.kind == K_STRUCT:
        for child in col.children:
            _check_simple(child, f"{path}.{child.name}")
    elif col.kind != K_NULL:
        raise ArrowTypeError(f"{path} must be a map<string, ...> (or struct) column, not Arrow {col.format!r}")
    return 0


cdef int _check_simple(ArrowColumn col, str path) except -1:
    if col.kind in (K_STRUCT, K_MAP, K_LIST, K_LARGE_LIST):
        raise ArrowTypeError(f"{path}: Arrow {col.format!r}: AMQP 1.0 application properties hold simple values "
                             f"only (no map, list or array); serialize it (to_json) first")
    if col.kind == K_DECIMAL128:
        raise ArrowTypeError(f"{path}: a decimal column, which RabbitMQ 3.10 cannot show 0-9-1 readers of a stream; "
                             f"cast it to a double or a string")
    return 0


# the property (PROPERTY_NAMES index) of each field of the Properties list: message-id,
# user-id, to, subject, reply-to, correlation-id, content-type, content-encoding,
# absolute-expiry-time, creation-time, group-id, group-sequence, reply-to-group-id
cdef int _PROPERTY_AT[13]
_PROPERTY_AT[:] = [P_MESSAGE_ID, P_USER_ID, -1, -1, P_REPLY_TO, P_CORRELATION_ID, P_CONTENT_TYPE,
                   P_CONTENT_ENCODING, -1, P_TIMESTAMP, -1, -1, -1]


# ---------------------------------------------------------------------------- the encoder

cdef class StreamPublishEncoder:
    """Arrow columns to Publish frames of AMQP 1.0 messages, one batch at a time (see the
    module's text).  ``publisher_id``: the frames' publisher (declared on the link);
    ``frame_max``: the negotiated maximum, which no frame passes (a message that cannot
    fit one alone is a RowEncodeError); ``exchange`` / ``routing_key``: literals written as
    the x-exchange / x-routing-key annotations of every row (or columns given to encode)."""

    cdef uint8_t publisher_id
    cdef Py_ssize_t frame_max
    cdef int body_format
    cdef bytes exchange_literal
    cdef bytes routing_key_literal
    cdef WriteBuffer out
    cdef WriteBuffer scratch
    cdef readonly int64_t frames        # frames written by the last encode()

    def __init__(self, *, int publisher_id=0, Py_ssize_t frame_max=1048576, str body_format="raw",
                 exchange=None, routing_key=None):
        if not 0 <= publisher_id <= 255:
            raise ValueError(f"publisher_id {publisher_id} is out of range 0..255")
        if frame_max != 0 and frame_max < 1024:
            raise ValueError(f"frame_max {frame_max} is below 1024 (0: no limit)")
        if body_format not in _BODY_FORMATS:
            raise ValueError(f"body_format must be one of {sorted(_BODY_FORMATS)}, not {body_format!r}")
        self.publisher_id = <uint8_t>publisher_id
        self.frame_max = frame_max if frame_max else 0x7FFFFFFF
        self.body_format = _BODY_FORMATS[body_format]
        self.exchange_literal = None if exchange is None else (<str>exchange).encode("utf-8")
        self.routing_key_literal = None if routing_key is None else (<str>routing_key).encode("utf-8")
        self.out = WriteBuffer()
        self.scratch = WriteBuffer()

    def encode(self, uint64_t first_id, body, headers=None, properties=None, exchange=None, routing_key=None,
               int64_t skip=0):
        """The Publish frames of rows ``skip`` .. n-1, row i with publishing id
        ``first_id + i``, back to back in one bytes object; with how many rows they hold:
        ``(frames, count)``."""
        cdef ArrowColumn body_col = column_of(body, "body")
        cdef int64_t n = body_col.length
        cdef ArrowColumn headers_col = None, props_col = None, ex_col = None, rk_col = None
        cdef list props = [None] * N_PROPERTIES
        cdef ArrowColumn child
        if skip < 0:
            raise ValueError(f"skip {skip} is negative")
        if first_id == 0 and n > skip:
            raise ValueError("publishing ids start at 1 (the broker keeps 0 for a reference with no message)")
        if n and first_id + <uint64_t>(n - 1) < first_id:
            raise ValueError(f"publishing ids from {first_id} for {n} rows overflow a uint64")
        if self.body_format == BODY_RAW:
            if not body_col.is_binary_like() and body_col.kind != K_NULL:
                raise ArrowTypeError(f"body must be a binary or string column for body_format 'raw', not Arrow "
                                     f"{body_col.format!r}; use body_format 'json' or 'table' for structs")
        else:
            if body_col.kind != K_STRUCT and body_col.kind != K_MAP and body_col.kind != K_NULL:
                raise ArrowTypeError(f"body must be a struct or map column for body_format "
                                     f"{'json' if self.body_format == BODY_JSON else 'table'}, "
                                     f"not Arrow {body_col.format!r}")
            check_value_type(body_col, "body", 1, self.body_format == BODY_JSON)
        if headers is not None:
            headers_col = column_of(headers, "headers")
            _check_header_types(headers_col, "headers")
        if properties is not None:
            props_col = column_of(properties, "properties")
            if props_col.kind != K_STRUCT:
                raise ArrowTypeError(f"properties must be a struct column, not Arrow {props_col.format!r}")
            for child in props_col.children:
                _bind_property(child, props)
            if props[P_HEADERS] is not None:
                if headers_col is not None:
                    raise ValueError("headers are given twice: as the headers column and as properties.headers")
                _check_header_types(<ArrowColumn>props[P_HEADERS], "properties.headers")
        if exchange is not None:
            ex_col = column_of(exchange, "exchange")
            if ex_col.kind != K_UTF8 and ex_col.kind != K_LARGE_UTF8 and ex_col.kind != K_NULL:
                raise ArrowTypeError(f"exchange must be a string column, not Arrow {ex_col.format!r}")
        if routing_key is not None:
            rk_col = column_of(routing_key, "routing_key")
            if rk_col.kind != K_UTF8 and rk_col.kind != K_LARGE_UTF8 and rk_col.kind != K_NULL:
                raise ArrowTypeError(f"routing_key must be a string column, not Arrow {rk_col.format!r}")
        for col in (headers_col, props_col, ex_col, rk_col):
            if col is not None and (<ArrowColumn>col).length != n:
                raise ValueError(f"{(<ArrowColumn>col).name} has {(<ArrowColumn>col).length} rows, body has {n}")
        self.out._len = 0
        self.frames = 0
        self._encode(first_id, n, skip, body_col, headers_col, props_col, props, ex_col, rk_col)
        data = PyBytes_FromStringAndSize(self.out._buf, self.out._len)
        if self.out._cap > (64 << 20):  # after a huge batch: give the memory back
            self.out = WriteBuffer()
        return data, max(n - skip, 0)

    cdef int _encode(self, uint64_t first_id, int64_t n, int64_t skip, ArrowColumn body_col,
                     ArrowColumn headers_col, ArrowColumn props_col, list props, ArrowColumn ex_col,
                     ArrowColumn rk_col) except -1:
        cdef WriteBuffer out = self.out
        cdef Py_ssize_t frame_at = -1, message_at, size_at
        cdef uint32_t in_frame = 0
        cdef int64_t row
        row = skip
        while row < n:
            if frame_at < 0:
                frame_at = out._len
                out.ensure(FRAME_HEAD)
                out._len += 4
                out.write_u16(0x0002)
                out.write_u16(1)
                out.write_u8(self.publisher_id)
                out.write_u32(0)
                in_frame = 0
            message_at = out._len
            out.write_u64(first_id + <uint64_t>row)
            size_at = out._len
            out.write_u32(0)
            self._message(row, body_col, headers_col, props_col, props, ex_col, rk_col)
            if out._len - frame_at > self.frame_max:
                if in_frame == 0:
                    _row_error(row, "body", f"its message ({out._len - size_at - 4} bytes) does not fit a frame "
                                            f"of frame_max {self.frame_max} bytes")
                out._len = message_at  # this row starts the next frame
                self._end_frame(frame_at, in_frame)
                frame_at = -1
                continue
            amqw_pack_u32(out._buf + size_at, <uint32_t>(out._len - size_at - 4))
            in_frame += 1
            row += 1
        if frame_at >= 0:
            self._end_frame(frame_at, in_frame)
        return 0

    cdef int _end_frame(self, Py_ssize_t frame_at, uint32_t count) except -1:
        amqw_pack_u32(self.out._buf + frame_at, <uint32_t>(self.out._len - frame_at - 4))
        amqw_pack_u32(self.out._buf + frame_at + 9, count)
        self.frames += 1
        return 0

    cdef int _message(self, int64_t row, ArrowColumn body_col, ArrowColumn headers_col, ArrowColumn props_col,
                      list props, ArrowColumn ex_col, ArrowColumn rk_col) except -1:
        cdef WriteBuffer out = self.out
        cdef int64_t props_slot = 0
        cdef bint has_props = False, has_exchange, has_routing_key, annotated
        cdef ArrowColumn prop, headers
        cdef Py_ssize_t at, n, section_at
        cdef uint32_t count
        cdef const char *p
        cdef int i, index, last
        cdef int64_t slot
        if props_col is not None:
            props_slot = props_col.offset + row
            has_props = not props_col.is_null(props_slot)

        # message annotations
        count = 0
        has_exchange = self.exchange_literal is not None or (ex_col is not None and not _null(ex_col, row))
        has_routing_key = self.routing_key_literal is not None or (rk_col is not None and not _null(rk_col, row))
        annotated = has_exchange or has_routing_key
        if has_props and not annotated:
            for i in (P_PRIORITY, P_DELIVERY_MODE, P_EXPIRATION):
                prop = <ArrowColumn>props[i]
                if prop is not None and prop.kind != K_NULL and not prop.is_null(prop.offset + props_slot):
                    annotated = True
                    break
        if annotated:
            _write_section(out, 0x72)
            at = _begin_compound(out, 0xd1)
            if has_exchange:
                _write_symbol(out, b"x-exchange", 10, row, "exchange")
                if self.exchange_literal is not None:
                    _write_string(out, self.exchange_literal, len(self.exchange_literal), row, "exchange")
                else:
                    p = ex_col.bytes_at(ex_col.offset + row, &n)
                    _write_string(out, p, n, row, "exchange")
                count += 2
            if has_routing_key:
                _write_symbol(out, b"x-routing-key", 13, row, "routing_key")
                if self.routing_key_literal is not None:
                    _write_string(out, self.routing_key_literal, len(self.routing_key_literal), row, "routing_key")
                else:
                    p = rk_col.bytes_at(rk_col.offset + row, &n)
                    _write_string(out, p, n, row, "routing_key")
                count += 2
            if has_props:
                for i in (P_PRIORITY, P_DELIVERY_MODE, P_EXPIRATION):
                    prop = <ArrowColumn>props[i]
                    if prop is None or prop.kind == K_NULL or prop.is_null(prop.offset + props_slot):
                        continue
                    slot = prop.offset + props_slot
                    if i == P_EXPIRATION:
                        _write_symbol(out, b"x-basic-expiration", 18, row, "properties.expiration")
                        p = prop.bytes_at(slot, &n)
                        _write_string(out, p, n, row, "properties.expiration")
                    else:
                        if i == P_PRIORITY:
                            _write_symbol(out, b"x-basic-priority", 16, row, "properties.priority")
                        else:
                            _write_symbol(out, b"x-basic-delivery-mode", 21, row, "properties.delivery_mode")
                        _write_ubyte(out, _octet(prop, slot, row, PROPERTY_NAMES[i]))
                    count += 2
            _end_compound(out, at, count, 0xc1)

        # properties
        if has_props:
            last = -1
            for i in range(N_PROPERTIES):
                index = _LIST_INDEX[i]
                prop = <ArrowColumn>props[i]
                if index > last and prop is not None and prop.kind != K_NULL \
                        and not prop.is_null(prop.offset + props_slot):
                    last = index
            if last >= 0:
                _write_section(out, 0x73)
                at = _begin_compound(out, 0xd0)
                for index in range(last + 1):
                    self._list_field(index, props, props_slot, row)
                _end_compound(out, at, <uint32_t>(last + 1), 0xc0)

        # application properties
        headers = headers_col if headers_col is not None else (<ArrowColumn>props[P_HEADERS] if has_props else None)
        at = -1
        count = 0
        section_at = out._len
        if headers is not None:
            slot = headers.offset + (props_slot if headers_col is None else row)
            if headers.kind != K_NULL and not headers.is_null(slot):
                _write_section(out, 0x74)
                at = _begin_compound(out, 0xd1)
                count = self._write_headers(headers, slot, row, "headers" if headers_col is not None
                                            else "properties.headers")
        if has_props:
            for i in (P_TYPE, P_APP_ID):
                prop = <ArrowColumn>props[i]
                if prop is None or prop.kind == K_NULL or prop.is_null(prop.offset + props_slot):
                    continue
                if at < 0:
                    _write_section(out, 0x74)
                    at = _begin_compound(out, 0xd1)
                if i == P_TYPE:
                    _write_string(out, b"x-basic-type", 12, row, "properties.type")
                else:
                    _write_string(out, b"x-basic-app-id", 14, row, "properties.app_id")
                p = prop.bytes_at(prop.offset + props_slot, &n)
                _write_string(out, p, n, row, f"properties.{PROPERTY_NAMES[i]}")
                count += 2
        if at >= 0:
            if count == 0:
                out._len = section_at  # no application property: no section
            else:
                _end_compound(out, at, count, 0xc1)

        # the body: one data section
        _write_section(out, 0x75)
        if body_col.kind == K_NULL or body_col.is_null(body_col.offset + row):
            return _write_sized(out, 0xa0, 0xb0, b"", 0, row, "body")
        if self.body_format == BODY_RAW:
            p = body_col.bytes_at(body_col.offset + row, &n)
            return _write_sized(out, 0xa0, 0xb0, p, n, row, "body")
        self.scratch._len = 0
        try:
            if self.body_format == BODY_JSON:
                write_json(self.scratch, body_col, body_col.offset + row, row)
            elif body_col.kind == K_STRUCT:
                write_struct_table(self.scratch, body_col, body_col.offset + row, row)
            else:
                write_map_table(self.scratch, body_col, body_col.offset + row, row)
        except RowEncodeError as exc:
            raise RowEncodeError(row=exc.row, field="body", problem=exc.problem) from None
        return _write_sized(out, 0xa0, 0xb0, self.scratch._buf, self.scratch._len, row, "body")

    cdef int _list_field(self, int index, list props, int64_t props_slot, int64_t row) except -1:
        """Field ``index`` of the properties list: its value, or null."""
        cdef WriteBuffer out = self.out
        cdef int i = _PROPERTY_AT[index] if 0 <= index < 13 else -1
        cdef ArrowColumn prop
        cdef int64_t slot
        cdef Py_ssize_t n
        cdef const char *p
        if i < 0 or props[i] is None:
            return out.write_u8(0x40)
        prop = <ArrowColumn>props[i]
        slot = prop.offset + props_slot
        if prop.kind == K_NULL or prop.is_null(slot):
            return out.write_u8(0x40)
        field = f"properties.{PROPERTY_NAMES[i]}"
        if i == P_TIMESTAMP:
            return _write_timestamp(out, _epoch_ms(prop, slot, row, field))
        p = prop.bytes_at(slot, &n)
        if i == P_USER_ID:
            return _write_sized(out, 0xa0, 0xb0, p, n, row, field)
        if i == P_CONTENT_TYPE or i == P_CONTENT_ENCODING:
            return _write_symbol(out, p, n, row, field)
        return _write_string(out, p, n, row, field)

    cdef uint32_t _write_headers(self, ArrowColumn col, int64_t slot, int64_t row, str field) except? 0xFFFFFFFF:
        """The key/value pairs of a headers map (or struct); how many elements were written."""
        cdef ArrowColumn entries, keys, items, child
        cdef int64_t i, start, end = 0
        cdef Py_ssize_t n
        cdef const char *k
        cdef uint32_t count = 0
        if col.kind == K_MAP:
            entries = <ArrowColumn>col.children[0]
            keys = <ArrowColumn>entries.children[0]
            items = <ArrowColumn>entries.children[1]
            start = col.child_range(slot, &end)
            for i in range(start, end):
                if keys.is_null(keys.offset + i):
                    _row_error(row, field, "a null key cannot name an application property")
                k = keys.bytes_at(keys.offset + i, &n)
                _write_string(self.out, k, n, row, field)
                _write_header_value(self.out, items, items.offset + i, row, f"{field}[{_text(k, n)!r}]")
                count += 2
            return count
        for child in col.children:
            _write_string(self.out, child.name_utf8, len(child.name_utf8), row, field)
            _write_header_value(self.out, child, child.offset + slot, row, f"{field}.{child.name}")
            count += 2
        return count


cdef inline bint _null(ArrowColumn col, int64_t row) noexcept:
    return col.kind == K_NULL or col.is_null(col.offset + row)


cdef uint8_t _octet(ArrowColumn prop, int64_t slot, int64_t row, str name) except? 0xFF:
    cdef int64_t v = prop.int_at(slot)
    if v < 0 or v > 255 or (prop.kind == K_UINT64 and (<const uint64_t *>prop.values)[slot] > 255):
        shown = str((<const uint64_t *>prop.values)[slot]) if prop.kind == K_UINT64 else str(v)
        _row_error(row, f"properties.{name}", f"{shown} is out of range 0..255")
    return <uint8_t>v


cdef int _bind_property(ArrowColumn child, list props) except -1:
    """Check a properties struct field's name and type; remember its column."""
    cdef str name = child.name
    cdef int kind = child.kind
    if name not in PROPERTY_NAMES:
        raise ArrowTypeError(f"properties.{name} is not a basic property; the 14 are: {', '.join(PROPERTY_NAMES)}")
    i = PROPERTY_NAMES.index(name)
    if kind == K_NULL:
        pass
    elif i == P_HEADERS:
        if kind != K_MAP and kind != K_STRUCT:
            raise ArrowTypeError(f"properties.headers must be a map<string, ...> or struct, not Arrow {child.format!r}")
    elif i == P_DELIVERY_MODE or i == P_PRIORITY:
        if not child.is_integer():
            raise ArrowTypeError(f"properties.{name} must be an integer column, not Arrow {child.format!r}")
    elif i == P_TIMESTAMP:
        if not (child.is_integer() or kind == K_TIMESTAMP or kind == K_DATE32 or kind == K_DATE64):
            raise ArrowTypeError(f"properties.timestamp must be a timestamp, date or integer (epoch seconds) "
                                 f"column, not Arrow {child.format!r}")
    elif i == P_USER_ID:
        if not child.is_binary_like():
            raise ArrowTypeError(f"properties.user_id must be a string or binary column, not Arrow {child.format!r}")
    elif kind != K_UTF8 and kind != K_LARGE_UTF8:
        raise ArrowTypeError(f"properties.{name} must be a string column, not Arrow {child.format!r}")
    if props[i] is not None:
        raise ValueError(f"properties.{name} is given twice")
    props[i] = child
    return 0
