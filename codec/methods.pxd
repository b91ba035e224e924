from libc.stdint cimport uint32_t, uint64_t
from amqwire.codec.buffer cimport WriteBuffer, ReadView

cdef class Method:
    cdef int write_payload(self, WriteBuffer buf) except -1

cdef Method read_method(ReadView *v)
cdef bint method_has_content(uint32_t index) noexcept
# 1 for basic.ack, 2 for basic.nack (delivery_tag and multiple set from it), 0 for any other
cdef int confirm_of(Method method, uint64_t *delivery_tag, bint *multiple) noexcept
