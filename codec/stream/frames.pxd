# The stream protocol's commands, for Cython modules that cimport them: the base class and
# the commands a consumer or a publisher handles per message batch (the rest are declared
# in frames.pyx only).

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

from amqwire.codec.buffer cimport WriteBuffer


cdef enum:
    # the top bit of a key: the frame is a response
    STREAM_RESPONSE_FLAG = 0x8000
    STREAM_KEY_PUBLISH = 0x0002
    STREAM_KEY_PUBLISH_CONFIRM = 0x0003
    STREAM_KEY_DELIVER = 0x0008
    STREAM_KEY_CREDIT = 0x0009


cdef class StreamCommand:
    cdef int write_frame(self, WriteBuffer buf) except -1


cdef class Deliver(StreamCommand):
    cdef readonly uint8_t subscription_id
    cdef readonly object committed_offset      # int (version 2) or None (version 1)
    cdef readonly object chunk                 # bytes (or any buffer given to __init__)


cdef class PublishConfirm(StreamCommand):
    cdef readonly uint8_t publisher_id
    cdef readonly list publishing_ids


# Appends one publish frame to buf: (publisher id, count, then per message its publishing
# id and size-prefixed bytes); first_id is used when ids is None (consecutive ids).
cdef int write_publish(WriteBuffer buf, uint8_t publisher_id, object ids, uint64_t first_id,
                       object messages, object filter_values) except -1
