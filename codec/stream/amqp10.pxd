# AMQP 1.0 values and messages (amqp10.pyx); the frames and chunk modules cimport these.

from amqwire.codec.buffer cimport WriteBuffer


cdef class Header:
    cdef public object durable
    cdef public object priority
    cdef public object ttl
    cdef public object first_acquirer
    cdef public object delivery_count
    cdef tuple _values(self)


cdef class Properties:
    cdef public object message_id
    cdef public object user_id
    cdef public object to
    cdef public object subject
    cdef public object reply_to
    cdef public object correlation_id
    cdef public object content_type
    cdef public object content_encoding
    cdef public object absolute_expiry_time
    cdef public object creation_time
    cdef public object group_id
    cdef public object group_sequence
    cdef public object reply_to_group_id
    cdef tuple _values(self)


cdef class Message:
    cdef public object header
    cdef public object delivery_annotations
    cdef public object message_annotations
    cdef public object properties
    cdef public object application_properties
    cdef public object body
    cdef public object footer
    cdef tuple _values(self)


# One encoded message, no size prefix: the body (bytes-like, Data, AmqpValue, AmqpSequence
# or None), then properties (Properties, a dict of its fields, or None) and
# application_properties (a dict or None), in the sections' order.
cdef int write_message(WriteBuffer buf, object body, object properties,
                       object application_properties) except -1

# The whole of data[0:size] as one message (a Message); AMQP10DecodeError otherwise.
cdef Message message_from(const char *data, Py_ssize_t size)

# One value by the Python <-> AMQP 1.0 mapping of the module docstring.
cdef int write_value(WriteBuffer buf, object value, int depth) except -1
