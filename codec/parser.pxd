from libc.stdint cimport uint64_t

# The parser's flattened delivery, for Cython modules that read many of them (the Spark
# stream source builds Arrow batches from their fields).  The fields are also member slots
# (see _expose_delivery_fields in parser.pyx): Python code may delete one, leaving NULL, so
# a reader that cimports this must check a field for NULL before it takes a reference.

cdef class Delivery:
    cdef object channel_id
    cdef object channel
    cdef object consumer_tag
    cdef object delivery_tag
    cdef object redelivered
    cdef object exchange
    cdef object routing_key
    cdef object message_count
    cdef object properties
    cdef object body
    cdef object stream_offset

# A Delivery's properties, for Cython readers: None when the content header had none and
# nobody has read them yet (the field then holds a private marker, not BasicProperties:
# read it through this, never directly), or when the field was deleted.
cdef object delivery_properties(Delivery d)

# For a client's hot path of publisher confirms: 1 when ``item`` (from CommandParser.feed)
# is a basic.ack, 2 a basic.nack (channel, delivery_tag and multiple set from it), else 0.
cdef int command_confirm(object item, int *channel, uint64_t *delivery_tag, bint *multiple) noexcept
