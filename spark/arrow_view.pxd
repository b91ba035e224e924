# Arrow arrays seen through the Arrow C data interface: typed, read-only views of the
# buffers of any producer (pyarrow, Spark's Arrow batches) without a pyarrow build
# dependency.  The encoder cimports these.

from libc.stdint cimport int32_t, int64_t, uint8_t


cdef extern from *:
    """
    struct ArrowSchema {
        const char *format;
        const char *name;
        const char *metadata;
        int64_t flags;
        int64_t n_children;
        struct ArrowSchema **children;
        struct ArrowSchema *dictionary;
        void (*release)(struct ArrowSchema *);
        void *private_data;
    };
    struct ArrowArray {
        int64_t length;
        int64_t null_count;
        int64_t offset;
        int64_t n_buffers;
        int64_t n_children;
        const void **buffers;
        struct ArrowArray **children;
        struct ArrowArray *dictionary;
        void (*release)(struct ArrowArray *);
        void *private_data;
    };
    """
    struct ArrowSchema:
        const char *format
        const char *name
        int64_t n_children
        ArrowSchema **children
        ArrowSchema *dictionary

    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void **buffers
        ArrowArray **children
        ArrowArray *dictionary


cdef enum Kind:
    K_NULL
    K_BOOL
    K_INT8
    K_INT16
    K_INT32
    K_INT64
    K_UINT8
    K_UINT16
    K_UINT32
    K_UINT64
    K_FLOAT32
    K_FLOAT64
    K_UTF8            # 32-bit offsets
    K_LARGE_UTF8      # 64-bit offsets
    K_BINARY
    K_LARGE_BINARY
    K_DATE32          # days since the epoch
    K_DATE64          # milliseconds since the epoch
    K_TIMESTAMP       # int64 in `units_per_second`, UTC when `has_tz`
    K_DECIMAL128
    K_STRUCT
    K_LIST
    K_LARGE_LIST
    K_MAP


cdef inline int64_t floor_div(int64_t a, int64_t b) noexcept:
    """a // b rounded toward minus infinity (b > 0), whatever C does with negatives."""
    return a // b if a >= 0 else -((-a + b - 1) // b)


cdef class ArrowColumn:
    cdef readonly str name          # the field name (struct children, map keys/items)
    cdef readonly str format        # the C data interface format string
    cdef bytes name_utf8
    cdef int kind
    cdef int64_t offset             # the array's own offset into its buffers
    cdef int64_t length
    cdef const uint8_t *validity    # NULL: no nulls
    cdef const uint8_t *values      # buffers[1]: values, bits or offsets
    cdef const uint8_t *data        # buffers[2]: bytes of variable-size values
    cdef int64_t units_per_second
    cdef bint has_tz
    cdef int decimal_scale
    cdef list children              # of ArrowColumn
    cdef object owner               # keeps the exported arrays alive

    cdef inline bint is_null(self, int64_t slot) noexcept:
        return self.validity != NULL and not ((self.validity[slot >> 3] >> (slot & 7)) & 1)

    cdef inline bint is_binary_like(self) noexcept:
        return self.kind == K_UTF8 or self.kind == K_LARGE_UTF8 \
            or self.kind == K_BINARY or self.kind == K_LARGE_BINARY

    cdef inline bint is_integer(self) noexcept:
        return K_INT8 <= self.kind <= K_UINT64

    cdef inline const char *bytes_at(self, int64_t slot, Py_ssize_t *size) noexcept:
        """A string or binary value: pointer into the data buffer and its size."""
        cdef int64_t start, end
        if self.kind == K_UTF8 or self.kind == K_BINARY:
            start = (<const int32_t *>self.values)[slot]
            end = (<const int32_t *>self.values)[slot + 1]
        else:
            start = (<const int64_t *>self.values)[slot]
            end = (<const int64_t *>self.values)[slot + 1]
        size[0] = <Py_ssize_t>(end - start)
        return <const char *>self.data + start

    cdef inline int64_t child_range(self, int64_t slot, int64_t *end) noexcept:
        """Lists and maps: the child slots [start, end) of the value at ``slot``."""
        cdef int64_t start
        cdef ArrowColumn child = <ArrowColumn>self.children[0]
        if self.kind == K_LARGE_LIST:
            start = (<const int64_t *>self.values)[slot]
            end[0] = (<const int64_t *>self.values)[slot + 1] + child.offset
        else:
            start = (<const int32_t *>self.values)[slot]
            end[0] = (<const int32_t *>self.values)[slot + 1] + child.offset
        return start + child.offset

    cdef bint bool_at(self, int64_t slot) noexcept
    cdef int64_t int_at(self, int64_t slot) noexcept
    cdef double float_at(self, int64_t slot) noexcept
    cdef int64_t epoch_seconds_at(self, int64_t slot) noexcept


cdef ArrowColumn column_of(object array, str name)
