# cython: language_level=3
"""Frames out: the publish encoder (single, batched, zero-copy) and a frame writer."""

from cpython.bool cimport PyBool_Check
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_Check
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from amqwire.codec.buffer cimport (
    FRAME_BODY, FRAME_END, FRAME_METHOD, FRAME_MIN_SIZE, FRAME_OVERHEAD,
    FRAME_HEADER_SIZE, amqw_pack_u16, amqw_pack_u32, amqw_pack_u64, shortstr_utf8, utf8_of,
)
from amqwire.codec.methods cimport Method
from amqwire.codec.properties cimport write_header_frame

from amqwire.codec.errors import AMQPSyntaxError, FrameError, UnsupportedValueError

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object o)
    bint PyUnicode_Check(object o)

cdef enum:
    _BASIC_PUBLISH = 0x003C0028
    _BASIC_CLASS = 60
    _BASIC_ACK = 0x003C0050
    _BASIC_ACK_PAYLOAD = 13  # method id 4, delivery tag 8, bits 1
    # Body chunks shorter than this are copied next to their frame header in the
    # zero-copy form: an extra iovec costs more than copying a few KiB.
    _IOV_COPY_BELOW = 4096

# The Python names are for users; the writer copies from C constants nobody can rebind.
cdef const char *_PROTOCOL_HEADER_C = b"AMQP\x00\x00\x09\x01"
cdef const char *_HEARTBEAT_FRAME_C = b"\x08\x00\x00\x00\x00\x00\x00\xce"

DEFAULT_FRAME_MAX = 131072
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


cdef Py_ssize_t check_frame_max(object frame_max) except -1:
    if not isinstance(frame_max, int) or isinstance(frame_max, bool):
        raise TypeError(f"frame_max must be an int, got {type(frame_max).__name__}")
    if frame_max != 0 and not FRAME_MIN_SIZE <= frame_max <= 0xFFFFFFFF:
        raise ValueError(
            f"frame_max {frame_max} is out of range: 0 (no limit) or {FRAME_MIN_SIZE}..4294967295")
    return frame_max


cdef inline uint16_t _channel(long channel) except? 0xFFFF:
    if channel < 0 or channel > 0xFFFF:
        raise ValueError(f"channel {channel} is out of range 0..65535")
    return <uint16_t>channel


# A body borrowed from the caller for the duration of one call.
cdef struct _Body:
    const char *data
    Py_ssize_t len
    bint release
    Py_buffer view


cdef int _acquire_body(object body, _Body *b) except -1:
    b.release = False
    if PyBytes_CheckExact(body):
        b.data = PyBytes_AS_STRING(body)
        b.len = PyBytes_GET_SIZE(body)
    elif PyUnicode_Check(body):
        b.data = utf8_of(body, &b.len, b"body")
    elif body is None:
        b.data = NULL
        b.len = 0
    else:
        try:
            PyObject_GetBuffer(body, &b.view, PyBUF_SIMPLE)
        except TypeError:
            raise UnsupportedValueError(
                f"body: expected bytes, a contiguous bytes-like object or str, "
                f"got {type(body).__name__}") from None
        except BufferError as exc:
            raise UnsupportedValueError(
                f"body: {exc}; pass bytes(body) to send a copy") from None
        b.release = True
        b.data = <const char *>b.view.buf
        b.len = b.view.len
    return 0


cdef inline void _release_body(_Body *b) noexcept:
    if b.release:
        PyBuffer_Release(&b.view)
        b.release = False


cdef inline Py_ssize_t _chunk_size(Py_ssize_t body_len, Py_ssize_t frame_max) noexcept:
    if frame_max == 0:
        return body_len if body_len < 0xFFFFFFFF else 0xFFFFFFFF
    return frame_max - FRAME_OVERHEAD


cdef inline Py_ssize_t _body_frames_size(Py_ssize_t body_len, Py_ssize_t chunk) noexcept:
    if body_len == 0:
        return 0
    return body_len + ((body_len + chunk - 1) // chunk) * FRAME_OVERHEAD


cdef char *_fill_body_frames(char *out, uint16_t channel, const char *body,
                             Py_ssize_t body_len, Py_ssize_t chunk) noexcept:
    cdef Py_ssize_t pos = 0, n
    while pos < body_len:
        n = body_len - pos
        if n > chunk:
            n = chunk
        out[0] = <char>FRAME_BODY
        amqw_pack_u16(out + 1, channel)
        amqw_pack_u32(out + 3, <uint32_t>n)
        memcpy(out + FRAME_HEADER_SIZE, body + pos, <size_t>n)
        out[FRAME_HEADER_SIZE + n] = <char>FRAME_END
        out += n + FRAME_OVERHEAD
        pos += n
    return out


cdef int write_body_frames(WriteBuffer buf, uint16_t channel, const char *body,
                           Py_ssize_t body_len, Py_ssize_t frame_max) except -1:
    cdef Py_ssize_t chunk = _chunk_size(body_len, frame_max)
    cdef Py_ssize_t total = _body_frames_size(body_len, chunk)
    if total:
        buf.ensure(total)
        _fill_body_frames(buf._buf + buf._len, channel, body, body_len, chunk)
        buf._len += total
    return 0


cdef int _write_publish_head(WriteBuffer buf, uint16_t channel, object exchange,
                             object routing_key, Py_ssize_t body_len, BasicProperties props,
                             bint mandatory, bint immediate, Py_ssize_t frame_max) except -1:
    """basic.publish method frame + content header frame (rolled back on error)."""
    cdef Py_ssize_t start = buf._len
    cdef Py_ssize_t ex_len, rk_len, payload
    cdef const char *ex = shortstr_utf8(exchange, &ex_len, b"basic.publish.exchange")
    cdef const char *rk = shortstr_utf8(routing_key, &rk_len, b"basic.publish.routing_key")
    cdef char *p
    # The method frame is known in full: reserve it and the header's fixed part at once.
    payload = 4 + 2 + 1 + ex_len + 1 + rk_len + 1
    if frame_max and payload + FRAME_OVERHEAD > frame_max:
        raise FrameError(f"basic.publish frame of {payload + FRAME_OVERHEAD} bytes exceeds "
                         f"frame_max {frame_max}")
    buf.ensure(payload + FRAME_OVERHEAD + 64)
    p = buf._buf + buf._len
    p[0] = <char>FRAME_METHOD
    amqw_pack_u16(p + 1, channel)
    amqw_pack_u32(p + 3, <uint32_t>payload)
    amqw_pack_u32(p + 7, _BASIC_PUBLISH)
    amqw_pack_u16(p + 11, 0)                # ticket, reserved
    p[13] = <char><uint8_t>ex_len
    memcpy(p + 14, ex, <size_t>ex_len)
    p += 14 + ex_len
    p[0] = <char><uint8_t>rk_len
    memcpy(p + 1, rk, <size_t>rk_len)
    p += 1 + rk_len
    p[0] = <char>((1 if mandatory else 0) | (2 if immediate else 0))
    p[1] = <char>FRAME_END
    buf._len += payload + FRAME_OVERHEAD
    try:
        write_header_frame(buf, channel, _BASIC_CLASS, <uint64_t>body_len, props, frame_max)
    except BaseException:
        buf._len = start
        raise
    return 0


cdef int write_publish(WriteBuffer buf, uint16_t channel, object exchange, object routing_key,
                       const char *body, Py_ssize_t body_len, BasicProperties props,
                       bint mandatory, bint immediate, Py_ssize_t frame_max) except -1:
    """Append a whole basic.publish, or nothing (the buffer is left as it was)."""
    cdef Py_ssize_t start = buf._len
    cdef Py_ssize_t chunk = _chunk_size(body_len, frame_max)
    cdef Py_ssize_t total = _body_frames_size(body_len, chunk)
    _write_publish_head(buf, channel, exchange, routing_key, body_len, props,
                        mandatory, immediate, frame_max)
    if buf._len + total > buf._cap and buf.try_grow(buf._len + total) < 0:
        buf._len = start
        raise MemoryError(f"cannot buffer a {body_len}-byte body")
    if total:
        _fill_body_frames(buf._buf + buf._len, channel, body, body_len, chunk)
        buf._len += total
    return 0


# encode_publish writes the two small frames into a reused scratch buffer, then copies
# them and the body frames straight into the result: the body is copied exactly once.
# The busy flag keeps a re-entrant call (another thread switching in while a Decimal
# header is formatted, say) off the shared buffer.
cdef WriteBuffer _scratch = WriteBuffer(1024)
cdef bint _scratch_busy = False


def encode_publish(channel, exchange, routing_key, body, BasicProperties properties=None,
                   bint mandatory=False, bint immediate=False, frame_max=DEFAULT_FRAME_MAX):
    """Encode one basic.publish: method, content header and body frames, as bytes.

    The body is split into frames of at most ``frame_max`` bytes (0: no limit).
    """
    global _scratch_busy
    cdef Py_ssize_t fm = check_frame_max(frame_max)
    cdef uint16_t ch = _channel(channel)
    cdef _Body b
    cdef WriteBuffer head
    cdef bint own_scratch = not _scratch_busy
    cdef Py_ssize_t chunk
    cdef bytes result
    cdef char *out
    if own_scratch:
        head = _scratch
        head._len = 0
        _scratch_busy = True
    else:
        head = WriteBuffer(256)
    _acquire_body(body, &b)
    try:
        _write_publish_head(head, ch, exchange, routing_key, b.len, properties,
                            mandatory, immediate, fm)
        chunk = _chunk_size(b.len, fm)
        result = PyBytes_FromStringAndSize(NULL, head._len + _body_frames_size(b.len, chunk))
        out = PyBytes_AS_STRING(result)
        memcpy(out, head._buf, <size_t>head._len)
        _fill_body_frames(out + head._len, ch, b.data, b.len, chunk)
        return result
    finally:
        _release_body(&b)
        if own_scratch:
            _scratch_busy = False


def encode_publish_iov(channel, exchange, routing_key, body, BasicProperties properties=None,
                       bint mandatory=False, bint immediate=False, frame_max=DEFAULT_FRAME_MAX):
    """Like :func:`encode_publish`, but as a list of buffers for ``socket.sendmsg``.

    Large body chunks are memoryview slices of ``body`` itself: the body is never
    copied (keep it unchanged until the list has been sent).  The pieces joined are
    byte-for-byte what :func:`encode_publish` returns.
    """
    cdef Py_ssize_t fm = check_frame_max(frame_max)
    cdef uint16_t ch = _channel(channel)
    cdef _Body b
    cdef WriteBuffer small = WriteBuffer(512)
    cdef list pieces = []
    cdef Py_ssize_t chunk, pos = 0, n, start
    _acquire_body(body, &b)
    try:
        _write_publish_head(small, ch, exchange, routing_key, b.len, properties,
                            mandatory, immediate, fm)
        chunk = _chunk_size(b.len, fm)
        if b.len < _IOV_COPY_BELOW:
            write_body_frames(small, ch, b.data, b.len, fm)
            return [small.to_bytes()]
        view = memoryview(body.encode() if PyUnicode_Check(body) else body)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        while pos < b.len:
            n = b.len - pos
            if n > chunk:
                n = chunk
            start = small.begin_frame(FRAME_BODY, ch)
            amqw_pack_u32(small._buf + start + 3, <uint32_t>n)
            if n < _IOV_COPY_BELOW:
                small.write_raw(b.data + pos, n)
            else:
                PyList_Append(pieces, small.to_bytes())
                small._len = 0
                PyList_Append(pieces, view[pos:pos + n])
            small.write_u8(FRAME_END)
            pos += n
        PyList_Append(pieces, small.to_bytes())
        return pieces
    finally:
        _release_body(&b)


cdef class FrameWriter:
    """Frames written back to back into one growable buffer, for one socket write.

    Every call either writes all of its frames or, when it raises, nothing: the
    buffer is left exactly as it was.
    """

    def __cinit__(self, frame_max=DEFAULT_FRAME_MAX):
        self._frame_max = check_frame_max(frame_max)
        self.buf = WriteBuffer(4096)

    @property
    def frame_max(self):
        return self._frame_max

    @frame_max.setter
    def frame_max(self, value):
        self._frame_max = check_frame_max(value)

    def publish(self, channel, exchange, routing_key, body, BasicProperties properties=None,
                bint mandatory=False, bint immediate=False):
        """Append a basic.publish (method + header + body frames)."""
        cdef _Body b
        cdef uint16_t ch = _channel(channel)
        if PyBytes_CheckExact(body):        # nothing to release: no try/finally
            self.publish_bytes(ch, exchange, routing_key, body, properties, mandatory, immediate)
            return
        _acquire_body(body, &b)
        try:
            write_publish(self.buf, ch, exchange, routing_key, b.data, b.len,
                          properties, mandatory, immediate, self._frame_max)
        finally:
            _release_body(&b)
        self.publishes += 1

    cdef int publish_bytes(self, uint16_t channel, object exchange, object routing_key, bytes body,
                           BasicProperties properties, bint mandatory, bint immediate) except -1:
        """``publish`` of a ``bytes`` body on a checked channel number, for compiled callers."""
        write_publish(self.buf, channel, exchange, routing_key, PyBytes_AS_STRING(body),
                      PyBytes_GET_SIZE(body), properties, mandatory, immediate, self._frame_max)
        self.publishes += 1
        return 0

    def method(self, channel, Method method not None):
        """Append one method frame."""
        cdef uint16_t ch = _channel(channel)
        cdef Py_ssize_t start = self.buf.begin_frame(FRAME_METHOD, ch)
        try:
            method.write_payload(self.buf)
            self.buf.end_frame(start, self._frame_max)
        except BaseException:
            self.buf._len = start
            raise

    def ack(self, channel, delivery_tag, multiple=False):
        """Append basic.ack: the frame ``method(channel, BasicAck(delivery_tag, multiple))``
        writes, with the same checks, without building the method object (acknowledging
        each delivery is a hot call of consuming)."""
        cdef uint16_t ch = _channel(channel)
        cdef bint bits
        cdef char *p
        if not PyLong_Check(delivery_tag) or PyBool_Check(delivery_tag):
            raise UnsupportedValueError(
                f"basic.ack.delivery_tag: expected int, got {type(delivery_tag).__name__}")
        if delivery_tag < 0 or delivery_tag > 0xFFFFFFFFFFFFFFFF:
            raise AMQPSyntaxError(
                f"basic.ack.delivery_tag: {delivery_tag} is out of range 0..{0xFFFFFFFFFFFFFFFF}")
        if multiple is True or multiple is False:
            bits = multiple
        elif PyLong_Check(multiple) and (multiple == 0 or multiple == 1):
            bits = multiple == 1
        else:
            raise UnsupportedValueError(f"basic.ack.multiple: expected bool, got {multiple!r}")
        self.buf.ensure(FRAME_OVERHEAD + _BASIC_ACK_PAYLOAD)
        p = self.buf._buf + self.buf._len
        p[0] = <char>FRAME_METHOD
        amqw_pack_u16(p + 1, ch)
        amqw_pack_u32(p + 3, _BASIC_ACK_PAYLOAD)
        amqw_pack_u32(p + 7, _BASIC_ACK)
        amqw_pack_u64(p + 11, <uint64_t>delivery_tag)
        p[19] = <char>(1 if bits else 0)
        p[20] = <char>FRAME_END
        self.buf._len += FRAME_OVERHEAD + _BASIC_ACK_PAYLOAD

    def content(self, channel, Method method not None, BasicProperties properties, body):
        """Append a content-carrying method with its header and body frames."""
        cdef _Body b
        cdef uint16_t ch = _channel(channel)
        cdef Py_ssize_t start = self.buf._len
        if not method.HAS_CONTENT:
            raise ValueError(f"{method.NAME} does not carry content")
        _acquire_body(body, &b)
        try:
            self.method(ch, method)
            write_header_frame(self.buf, ch, method.CLASS_ID, <uint64_t>b.len,
                               properties, self._frame_max)
            write_body_frames(self.buf, ch, b.data, b.len, self._frame_max)
        except BaseException:
            self.buf._len = start
            raise
        finally:
            _release_body(&b)

    def heartbeat(self):
        """Append a heartbeat frame."""
        self.buf.write_raw(_HEARTBEAT_FRAME_C, 8)

    def protocol_header(self):
        """Append the AMQP 0-9-1 protocol header (the first bytes a client sends)."""
        self.buf.write_raw(_PROTOCOL_HEADER_C, 8)

    def __len__(self):
        return self.buf._len

    def getvalue(self):
        """Everything written so far, as bytes (the writer keeps it)."""
        return self.buf.to_bytes()

    def take(self):
        """Everything written so far, as bytes; the writer is left empty."""
        data = self.buf.to_bytes()
        self.buf._len = 0
        return data

    def take_view(self):
        """Everything written so far, for a socket write; the writer is left empty.  Bytes
        when small; from ``HAND_OVER_AT`` bytes a read-only memoryview of the writer's own
        memory, handed over rather than copied (the writer goes on in fresh memory)."""
        return self.buf.take_view()

    def clear(self):
        self.buf._len = 0
