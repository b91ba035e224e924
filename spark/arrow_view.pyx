# cython: language_level=3
"""Typed views of Arrow arrays, imported through the Arrow C data interface
(``__arrow_c_array__``): the buffers are read in place, nothing is copied."""

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t

from amqwire.spark.errors import ArrowTypeError

_SIMPLE_FORMATS = {
    b"n": K_NULL, b"b": K_BOOL,
    b"c": K_INT8, b"s": K_INT16, b"i": K_INT32, b"l": K_INT64,
    b"C": K_UINT8, b"S": K_UINT16, b"I": K_UINT32, b"L": K_UINT64,
    b"f": K_FLOAT32, b"g": K_FLOAT64,
    b"u": K_UTF8, b"U": K_LARGE_UTF8, b"z": K_BINARY, b"Z": K_LARGE_BINARY,
    b"tdD": K_DATE32, b"tdm": K_DATE64,
    b"+s": K_STRUCT, b"+l": K_LIST, b"+L": K_LARGE_LIST, b"+m": K_MAP,
}
_TIMESTAMP_UNITS = {b"s": 1, b"m": 1000, b"u": 1000000, b"n": 1000000000}


cdef class ArrowColumn:
    """One Arrow array (and its children) as typed pointers into its buffers."""

    def __len__(self):
        return self.length

    def __repr__(self):
        return f"<ArrowColumn {self.name!r} format={self.format!r} length={self.length}>"

    cdef bint bool_at(self, int64_t slot) noexcept:
        return (self.values[slot >> 3] >> (slot & 7)) & 1

    cdef int64_t int_at(self, int64_t slot) noexcept:
        cdef int kind = self.kind
        if kind == K_INT64 or kind == K_TIMESTAMP or kind == K_DATE64 or kind == K_UINT64:
            return (<const int64_t *>self.values)[slot]
        if kind == K_INT32 or kind == K_DATE32:
            return (<const int32_t *>self.values)[slot]
        if kind == K_INT16:
            return (<const int16_t *>self.values)[slot]
        if kind == K_INT8:
            return (<const int8_t *>self.values)[slot]
        if kind == K_UINT32:
            return (<const uint32_t *>self.values)[slot]
        if kind == K_UINT16:
            return (<const uint16_t *>self.values)[slot]
        if kind == K_UINT8:
            return (<const uint8_t *>self.values)[slot]
        if kind == K_BOOL:
            return self.bool_at(slot)
        return 0

    cdef double float_at(self, int64_t slot) noexcept:
        if self.kind == K_FLOAT64:
            return (<const double *>self.values)[slot]
        if self.kind == K_FLOAT32:
            return (<const float *>self.values)[slot]
        return <double>self.int_at(slot)

    cdef int64_t epoch_seconds_at(self, int64_t slot) noexcept:
        """Timestamps, dates and integers (taken as seconds) as whole seconds, floored."""
        cdef int64_t v = self.int_at(slot)
        cdef int64_t unit
        if self.kind == K_TIMESTAMP:
            unit = self.units_per_second
        elif self.kind == K_DATE32:
            return v * 86400
        elif self.kind == K_DATE64:
            unit = 1000
        else:
            return v
        return floor_div(v, unit)


cdef object _format_kind(bytes fmt, ArrowColumn col):
    kind = _SIMPLE_FORMATS.get(fmt)
    if kind is not None:
        return kind
    if fmt.startswith(b"ts") and len(fmt) >= 4 and fmt[3:4] == b":":
        unit = _TIMESTAMP_UNITS.get(fmt[2:3])
        if unit is not None:
            col.units_per_second = unit
            col.has_tz = len(fmt) > 4
            return K_TIMESTAMP
    if fmt.startswith(b"d:"):
        parts = fmt[2:].split(b",")
        if len(parts) == 2 or (len(parts) == 3 and parts[2] == b"128"):
            col.decimal_scale = int(parts[1])
            return K_DECIMAL128
    return None


cdef ArrowColumn _build(ArrowSchema *schema, ArrowArray *array, object owner, str fallback_name):
    cdef ArrowColumn col = ArrowColumn.__new__(ArrowColumn)
    cdef bytes fmt = schema.format
    cdef int64_t i
    col.owner = owner
    col.format = fmt.decode("utf-8", "replace")
    col.name = schema.name.decode("utf-8", "replace") if schema.name != NULL and schema.name[0] else fallback_name
    col.name_utf8 = col.name.encode("utf-8")
    col.offset = array.offset
    col.length = array.length
    col.children = []
    if schema.dictionary != NULL:
        raise ArrowTypeError(f"{col.name}: dictionary-encoded arrays are not supported; "
                             f"cast to the value type first")
    kind = _format_kind(fmt, col)
    if kind is None:
        raise ArrowTypeError(f"{col.name}: the Arrow type with format {col.format!r} is not supported")
    col.kind = kind
    if col.kind != K_NULL:
        if array.n_buffers < 1:
            raise ArrowTypeError(f"{col.name}: malformed Arrow array (no validity buffer)")
        col.validity = <const uint8_t *>array.buffers[0] if array.null_count != 0 else NULL
    if col.kind == K_NULL or col.kind == K_STRUCT:
        pass
    elif col.is_binary_like():
        if array.n_buffers < 3:
            raise ArrowTypeError(f"{col.name}: malformed Arrow array ({array.n_buffers} buffers, need 3)")
        col.values = <const uint8_t *>array.buffers[1]
        col.data = <const uint8_t *>array.buffers[2]
        if col.length and col.values == NULL:
            raise ArrowTypeError(f"{col.name}: malformed Arrow array (no offsets buffer)")
    else:
        if array.n_buffers < 2:
            raise ArrowTypeError(f"{col.name}: malformed Arrow array ({array.n_buffers} buffers, need 2)")
        col.values = <const uint8_t *>array.buffers[1]
        if col.length and col.values == NULL:
            raise ArrowTypeError(f"{col.name}: malformed Arrow array (no values buffer)")
    if array.n_children != schema.n_children:
        raise ArrowTypeError(f"{col.name}: the array and its schema disagree on children")
    for i in range(schema.n_children):
        col.children.append(_build(schema.children[i], array.children[i], owner, f"{col.name}.{i}"))
    if col.kind == K_LIST or col.kind == K_LARGE_LIST:
        if len(col.children) != 1:
            raise ArrowTypeError(f"{col.name}: a list needs one child")
    elif col.kind == K_MAP:
        if len(col.children) != 1 or len((<ArrowColumn>col.children[0]).children) != 2:
            raise ArrowTypeError(f"{col.name}: a map needs one entries child of key and value")
    return col


cdef ArrowColumn column_of(object array, str name):
    """A view of ``array`` (anything exporting ``__arrow_c_array__``; a pyarrow
    ChunkedArray is combined first).  It keeps the export alive while it lives."""
    cdef ArrowSchema *schema
    cdef ArrowArray *c_array
    if not hasattr(array, "__arrow_c_array__"):
        if hasattr(array, "combine_chunks"):
            array = array.combine_chunks()
        else:
            raise ArrowTypeError(f"{name}: expected an Arrow array, got {type(array).__name__}")
    schema_capsule, array_capsule = array.__arrow_c_array__()
    schema = <ArrowSchema *>PyCapsule_GetPointer(schema_capsule, "arrow_schema")
    c_array = <ArrowArray *>PyCapsule_GetPointer(array_capsule, "arrow_array")
    return _build(schema, c_array, (schema_capsule, array_capsule, array), name)


def view(array, name="column"):
    """A read-only typed view of an Arrow array (for tests and debugging)."""
    return column_of(array, name)
