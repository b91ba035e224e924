from libc.stdint cimport uint16_t
from amqwire.codec.buffer cimport WriteBuffer
from amqwire.codec.properties cimport BasicProperties

cdef Py_ssize_t check_frame_max(object frame_max) except -1
cdef int write_body_frames(WriteBuffer buf, uint16_t channel, const char *body,
                           Py_ssize_t body_len, Py_ssize_t frame_max) except -1
cdef int write_publish(WriteBuffer buf, uint16_t channel, object exchange, object routing_key,
                       const char *body, Py_ssize_t body_len, BasicProperties props,
                       bint mandatory, bint immediate, Py_ssize_t frame_max) except -1

cdef class FrameWriter:
    cdef WriteBuffer buf
    cdef Py_ssize_t _frame_max
    cdef readonly unsigned long long publishes

    cdef int publish_bytes(self, uint16_t channel, object exchange, object routing_key, bytes body,
                           BasicProperties properties, bint mandatory, bint immediate) except -1
