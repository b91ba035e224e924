from libc.stdint cimport uint32_t
from amqwire.codec.buffer cimport WriteBuffer, ReadView

cdef class Method:
    cdef int write_payload(self, WriteBuffer buf) except -1

cdef Method read_method(ReadView *v)
cdef bint method_has_content(uint32_t index) noexcept
