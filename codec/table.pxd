from libc.stdint cimport int64_t, uint64_t
from amqwire.codec.buffer cimport WriteBuffer, ReadView

cdef int write_table(WriteBuffer buf, object table, int depth, const char *name=*) except -1
cdef int write_array(WriteBuffer buf, object seq, int depth) except -1
cdef dict read_table(ReadView *v, int depth, const char *name=*)
cdef list read_array(ReadView *v, int depth)
cdef int find_int64_field(ReadView *v, const char *key, Py_ssize_t key_len, int64_t *out) except -1
cdef object name_error(object exc, str name)
cdef int64_t datetime_to_epoch(object value, str what) except? -1
# AMQP timestamps are unsigned seconds since the epoch; a datetime ends at 9999-12-31T23:59:59Z.
cdef extern from *:
    """
    #define AMQW_MAX_TIMESTAMP 253402300799LL
    """
    const int64_t MAX_TIMESTAMP "AMQW_MAX_TIMESTAMP"
cdef object epoch_to_datetime(uint64_t seconds, Py_ssize_t at, str what)
cdef void civil_from_days(int64_t days, int64_t *year, int *month, int *day) noexcept


cdef inline int write_named_table(WriteBuffer buf, object table, const char *name) except -1:
    """A table that is a named field; errors start with the name."""
    return write_table(buf, table, 1, name)


cdef inline dict read_named_table(ReadView *v, const char *name):
    """A table that is a named field; errors start with the name."""
    return read_table(v, 1, name)
