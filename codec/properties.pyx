# cython: language_level=3
"""The 14 basic properties and the content header frame that carries them."""

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport uint8_t, uint16_t, uint64_t

from amqwire.codec.buffer cimport (
    FRAME_HEADER, amqw_pack_u16, expect_end, read_shortstr, read_u8, read_u16, read_u64,
    view_of_buffer,
)
from amqwire.codec.table cimport (
    datetime_to_epoch, epoch_to_datetime, read_named_table, write_named_table,
)

from amqwire.codec.errors import AMQPSyntaxError, FrameError, UnsupportedValueError

cdef extern from "Python.h":
    bint PyLong_Check(object o)
    bint PyBool_Check(object o)
    long PyLong_AsLongAndOverflow(object o, int *overflow) except? -1
    bytes PyBytes_FromStringAndSize(const char *v, Py_ssize_t len)


# Flag bits, highest first, in wire order.
cdef enum:
    F_CONTENT_TYPE = 0x8000
    F_CONTENT_ENCODING = 0x4000
    F_HEADERS = 0x2000
    F_DELIVERY_MODE = 0x1000
    F_PRIORITY = 0x0800
    F_CORRELATION_ID = 0x0400
    F_REPLY_TO = 0x0200
    F_EXPIRATION = 0x0100
    F_MESSAGE_ID = 0x0080
    F_TIMESTAMP = 0x0040
    F_TYPE = 0x0020
    F_USER_ID = 0x0010
    F_APP_ID = 0x0008
    F_CLUSTER_ID = 0x0004
    F_CONTINUATION = 0x0001

PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
    "user_id", "app_id", "cluster_id",
)


@cython.freelist(256)
cdef class BasicProperties:
    """The basic class's content properties; ``None`` means absent.

    Cheap to build and compare; shortstr properties are ``str``, ``headers`` a dict,
    ``delivery_mode`` and ``priority`` ints 0..255, ``timestamp`` a datetime (whole
    seconds; naive means UTC; decoded as aware UTC).

    ``wire``: for properties decoded from a content header, the exact bytes they were
    decoded from (flags and list), so a message can be passed on unchanged (header field
    types included) without encoding it again; None for properties built in Python.  It
    is not updated when an attribute is changed afterwards.
    """

    def __init__(self, *, content_type=None, content_encoding=None, headers=None,
                 delivery_mode=None, priority=None, correlation_id=None, reply_to=None,
                 expiration=None, message_id=None, timestamp=None, type=None, user_id=None,
                 app_id=None, cluster_id=None):
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.headers = headers
        self.delivery_mode = delivery_mode
        self.priority = priority
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.expiration = expiration
        self.message_id = message_id
        self.timestamp = timestamp
        self.type = type
        self.user_id = user_id
        self.app_id = app_id
        self.cluster_id = cluster_id

    cdef tuple _values(self):
        return (self.content_type, self.content_encoding, self.headers, self.delivery_mode,
                self.priority, self.correlation_id, self.reply_to, self.expiration,
                self.message_id, self.timestamp, self.type, self.user_id, self.app_id,
                self.cluster_id)

    def as_dict(self):
        """The properties that are set, by name."""
        return {k: v for k, v in zip(PROPERTY_NAMES, self._values()) if v is not None}

    def __eq__(self, other):
        if not isinstance(other, BasicProperties):
            return NotImplemented
        return self._values() == (<BasicProperties>other)._values()

    __hash__ = None

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"BasicProperties({fields})"

    def __reduce__(self):
        return (_rebuild, (self._values(),))

    def encode(self):
        """The property flags and list, as they follow body_size in a content header."""
        cdef WriteBuffer buf = WriteBuffer(64)
        write_properties(buf, self)
        return buf.to_bytes()

    @staticmethod
    def decode(data):
        """Decode exactly the bytes :meth:`encode` writes."""
        cdef Py_buffer pybuf
        cdef ReadView v
        PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
        try:
            view_of_buffer(&v, &pybuf)
            props = read_properties(&v)
            expect_end(&v, "basic properties")
            return props
        finally:
            PyBuffer_Release(&pybuf)


def _rebuild(values):
    cdef BasicProperties p = BasicProperties.__new__(BasicProperties)
    (p.content_type, p.content_encoding, p.headers, p.delivery_mode, p.priority,
     p.correlation_id, p.reply_to, p.expiration, p.message_id, p.timestamp, p.type,
     p.user_id, p.app_id, p.cluster_id) = values
    return p


cdef int _write_octet(WriteBuffer buf, object value, str name) except -1:
    cdef int overflow = 0
    cdef long n
    if PyLong_Check(value) and not PyBool_Check(value):
        n = PyLong_AsLongAndOverflow(value, &overflow)
        if not overflow and 0 <= n <= 255:
            return buf.write_u8(<uint8_t>n)
        raise AMQPSyntaxError(f"BasicProperties.{name}: {value} is out of range 0..255")
    raise UnsupportedValueError(
        f"BasicProperties.{name}: expected int, got {type(value).__name__}")


cdef int write_properties(WriteBuffer buf, BasicProperties p) except -1:
    # On error the buffer holds a partial property list: callers roll back to where
    # they began (their frame's start).
    cdef Py_ssize_t start = buf._len
    cdef uint16_t flags = 0
    buf.write_u16(0)
    if p.content_type is not None:
        flags |= F_CONTENT_TYPE
        buf.write_shortstr(p.content_type, "BasicProperties.content_type")
    if p.content_encoding is not None:
        flags |= F_CONTENT_ENCODING
        buf.write_shortstr(p.content_encoding, "BasicProperties.content_encoding")
    if p.headers is not None:
        flags |= F_HEADERS
        write_named_table(buf, p.headers, "BasicProperties.headers")
    if p.delivery_mode is not None:
        flags |= F_DELIVERY_MODE
        _write_octet(buf, p.delivery_mode, "delivery_mode")
    if p.priority is not None:
        flags |= F_PRIORITY
        _write_octet(buf, p.priority, "priority")
    if p.correlation_id is not None:
        flags |= F_CORRELATION_ID
        buf.write_shortstr(p.correlation_id, "BasicProperties.correlation_id")
    if p.reply_to is not None:
        flags |= F_REPLY_TO
        buf.write_shortstr(p.reply_to, "BasicProperties.reply_to")
    if p.expiration is not None:
        flags |= F_EXPIRATION
        buf.write_shortstr(p.expiration, "BasicProperties.expiration")
    if p.message_id is not None:
        flags |= F_MESSAGE_ID
        buf.write_shortstr(p.message_id, "BasicProperties.message_id")
    if p.timestamp is not None:
        flags |= F_TIMESTAMP
        buf.write_u64(<uint64_t>datetime_to_epoch(p.timestamp, "BasicProperties.timestamp"))
    if p.type is not None:
        flags |= F_TYPE
        buf.write_shortstr(p.type, "BasicProperties.type")
    if p.user_id is not None:
        flags |= F_USER_ID
        buf.write_shortstr(p.user_id, "BasicProperties.user_id")
    if p.app_id is not None:
        flags |= F_APP_ID
        buf.write_shortstr(p.app_id, "BasicProperties.app_id")
    if p.cluster_id is not None:
        flags |= F_CLUSTER_ID
        buf.write_shortstr(p.cluster_id, "BasicProperties.cluster_id")
    amqw_pack_u16(buf._buf + start, flags)
    return 0


cdef object _read_octet(ReadView *v, const char *what):
    cdef uint8_t value = 0
    read_u8(v, &value, what)
    return value


cdef BasicProperties read_properties(ReadView *v, Py_ssize_t *headers_at=NULL):
    """The property flags and list at the view's position.  ``headers_at``: where in the
    view the headers table starts (its size field), left as it is when there are none,
    for a caller that reads one entry of it in place (the parser: x-stream-offset)."""
    cdef uint16_t flags = 0, more = 0
    cdef uint64_t ts = 0
    cdef Py_ssize_t at = v.base + v.pos
    cdef Py_ssize_t start = v.pos
    cdef BasicProperties p = BasicProperties.__new__(BasicProperties)
    read_u16(v, &flags, "basic properties flags")
    more = flags
    while more & F_CONTINUATION:
        # Basic has 14 properties: any further flag word must be empty.
        at = v.base + v.pos
        read_u16(v, &more, "basic properties flags")
        if more & ~F_CONTINUATION:
            raise AMQPSyntaxError(
                f"basic properties: unknown property flags 0x{more:04x} at offset {at}",
                offset=at)
    if flags & 0x0002:
        raise AMQPSyntaxError(
            f"basic properties: unknown property flag 0x0002 at offset {at}", offset=at)
    if flags == 0:
        p.wire = PyBytes_FromStringAndSize(v.buf + start, v.pos - start)
        return p
    if flags & F_CONTENT_TYPE:
        p.content_type = read_shortstr(v, "basic properties content_type")
    if flags & F_CONTENT_ENCODING:
        p.content_encoding = read_shortstr(v, "basic properties content_encoding")
    if flags & F_HEADERS:
        if headers_at is not NULL:
            headers_at[0] = v.pos
        p.headers = read_named_table(v, "basic properties headers")
    if flags & F_DELIVERY_MODE:
        p.delivery_mode = _read_octet(v, "basic properties delivery_mode")
    if flags & F_PRIORITY:
        p.priority = _read_octet(v, "basic properties priority")
    if flags & F_CORRELATION_ID:
        p.correlation_id = read_shortstr(v, "basic properties correlation_id")
    if flags & F_REPLY_TO:
        p.reply_to = read_shortstr(v, "basic properties reply_to")
    if flags & F_EXPIRATION:
        p.expiration = read_shortstr(v, "basic properties expiration")
    if flags & F_MESSAGE_ID:
        p.message_id = read_shortstr(v, "basic properties message_id")
    if flags & F_TIMESTAMP:
        at = v.base + v.pos
        read_u64(v, &ts, "basic properties timestamp")
        p.timestamp = epoch_to_datetime(ts, at, "basic properties timestamp")
    if flags & F_TYPE:
        p.type = read_shortstr(v, "basic properties type")
    if flags & F_USER_ID:
        p.user_id = read_shortstr(v, "basic properties user_id")
    if flags & F_APP_ID:
        p.app_id = read_shortstr(v, "basic properties app_id")
    if flags & F_CLUSTER_ID:
        p.cluster_id = read_shortstr(v, "basic properties cluster_id")
    p.wire = PyBytes_FromStringAndSize(v.buf + start, v.pos - start)
    return p


cdef BasicProperties _EMPTY = BasicProperties()


cdef int write_header_frame(WriteBuffer buf, uint16_t channel, uint16_t class_id,
                            uint64_t body_size, BasicProperties props,
                            Py_ssize_t frame_max) except -1:
    # On error the caller rolls the buffer back (write_publish, FrameWriter.content).
    cdef Py_ssize_t start = buf.begin_frame(FRAME_HEADER, channel)
    cdef Py_ssize_t size
    buf.write_u16(class_id)
    buf.write_u16(0)          # weight, unused
    buf.write_u64(body_size)
    write_properties(buf, _EMPTY if props is None else props)
    size = buf._len - start + 1  # with the frame end octet still to come
    if frame_max > 0 and size > frame_max:
        # Unlike the body, a content header cannot be split over frames: say which part is too big.
        raise FrameError(f"content header (basic properties) frame of {size} bytes exceeds frame_max "
                         f"{frame_max}: a header cannot be split over frames; make the headers smaller")
    return buf.end_frame(start, frame_max)
