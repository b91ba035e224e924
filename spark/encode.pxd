# The 0-9-1 encoder's body serializers, for the stream-protocol encoder (stream_encode)
# to cimport: a struct or map value as JSON or as an AMQP field table, and the checks of
# such a column's types.

from libc.stdint cimport int64_t, uint16_t

from amqwire.codec.buffer cimport WriteBuffer
from amqwire.spark.arrow_view cimport ArrowColumn


# Every Arrow type a field-table value (or, for_json, a JSON value) can be made of;
# ArrowTypeError naming ``path`` otherwise.
cdef int check_value_type(ArrowColumn col, str path, int depth, bint for_json) except -1
cdef int write_json(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1
cdef int write_struct_table(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1
cdef int write_map_table(WriteBuffer buf, ArrowColumn col, int64_t slot, int64_t row) except -1


cdef class PublishEncoder:
    cdef uint16_t channel
    cdef Py_ssize_t frame_max
    cdef bint mandatory
    cdef int body_format
    cdef bytes exchange_literal
    cdef bytes routing_key_literal
    cdef WriteBuffer out
    cdef WriteBuffer scratch
    cdef object _offsets            # int64 row ends of the batch being encoded
    cdef bint _headers_nested       # headers came as properties.headers
    cdef readonly object frame_max_setting

    cdef int _reset(self) except -1
    cdef int64_t _run(self, body, routing_key, exchange, headers, properties, bint offsets) except -1
    cdef int _encode_rows(self, int64_t n, ArrowColumn body_col, ArrowColumn rk_col,
                          ArrowColumn ex_col, ArrowColumn headers_col, ArrowColumn props_col,
                          list prop_cols, bytearray ends) except -1
    cdef bint _write_headers(self, ArrowColumn headers_col, int64_t row, int64_t props_slot,
                             bint props_present) except -1
