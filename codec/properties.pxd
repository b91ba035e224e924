from libc.stdint cimport uint16_t, uint64_t
from amqwire.codec.buffer cimport WriteBuffer, ReadView

cdef class BasicProperties:
    cdef public object content_type
    cdef public object content_encoding
    cdef public object headers
    cdef public object delivery_mode
    cdef public object priority
    cdef public object correlation_id
    cdef public object reply_to
    cdef public object expiration
    cdef public object message_id
    cdef public object timestamp
    cdef public object type
    cdef public object user_id
    cdef public object app_id
    cdef public object cluster_id
    cdef readonly bytes wire

    cdef tuple _values(self)

cdef int write_properties(WriteBuffer buf, BasicProperties props) except -1
cdef BasicProperties read_properties(ReadView *v, Py_ssize_t *headers_at=*)
cdef int write_header_frame(WriteBuffer buf, uint16_t channel, uint16_t class_id,
                            uint64_t body_size, BasicProperties props,
                            Py_ssize_t frame_max) except -1
