# cython: language_level=3
"""Bytes in: an incremental frame parser and, one layer up, a command assembler.

Feed any chunk (one byte or many MiB); get back the frames or commands completed by it.
Complete frames are parsed straight from the caller's buffer; only the bytes of a frame
cut off at the end of a chunk are kept, and content bodies are copied once, into the
bytes object the command carries.
"""

cimport cython
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_XDECREF, Py_XINCREF
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport Py_EQ, Py_TYPE, PyObject_RichCompareBool, PyObject_TypeCheck
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from amqwire.codec.buffer cimport (
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEADER_SIZE, FRAME_HEARTBEAT, FRAME_METHOD,
    FRAME_OVERHEAD, ReadView, amqw_unpack_u16, amqw_unpack_u32, expect_end, read_shortstr,
    read_u8, read_u16, read_u32, read_u64,
)
from amqwire.codec.methods cimport Method, confirm_of, method_has_content, read_method
from amqwire.codec.properties cimport BasicProperties, read_properties
from amqwire.codec.table cimport find_int64_field

from amqwire.codec.errors import (
    AMQPSyntaxError, CodecError, FrameError, ProtocolHeaderError, UnexpectedFrame,
)

cdef enum:
    _BASIC_CLASS = 60
    _BASIC_DELIVER = 0x003C003C
    _DEFAULT_FRAME_MAX = 131072
    _DEFAULT_MAX_BODY = 128 * 1024 * 1024

cdef bytes _PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


# --- events -----------------------------------------------------------------------------

cdef class MethodFrame:
    cdef readonly int channel
    cdef readonly Method method

    def __init__(self, int channel, Method method not None):
        self.channel = channel
        self.method = method

    def __eq__(self, other):
        if type(other) is not MethodFrame:
            return NotImplemented
        return self.channel == (<MethodFrame>other).channel and self.method == (<MethodFrame>other).method

    __hash__ = None

    def __repr__(self):
        return f"MethodFrame(channel={self.channel}, method={self.method!r})"


cdef class HeaderFrame:
    cdef readonly int channel
    cdef readonly int class_id
    cdef readonly object body_size
    cdef readonly BasicProperties properties

    def __init__(self, int channel, int class_id, body_size, BasicProperties properties not None):
        self.channel = channel
        self.class_id = class_id
        self.body_size = body_size
        self.properties = properties

    def __eq__(self, other):
        if type(other) is not HeaderFrame:
            return NotImplemented
        o = <HeaderFrame>other
        return (self.channel, self.class_id, self.body_size, self.properties) == \
               (o.channel, o.class_id, o.body_size, o.properties)

    __hash__ = None

    def __repr__(self):
        return (f"HeaderFrame(channel={self.channel}, class_id={self.class_id}, "
                f"body_size={self.body_size}, properties={self.properties!r})")


cdef class BodyFrame:
    cdef readonly int channel
    cdef readonly bytes data

    def __init__(self, int channel, bytes data not None):
        self.channel = channel
        self.data = data

    def __eq__(self, other):
        if type(other) is not BodyFrame:
            return NotImplemented
        return self.channel == (<BodyFrame>other).channel and self.data == (<BodyFrame>other).data

    __hash__ = None

    def __repr__(self):
        return f"BodyFrame(channel={self.channel}, data=<{len(self.data)} bytes>)"


cdef class Heartbeat:
    """A heartbeat frame (always channel 0)."""

    @property
    def channel(self):
        return 0

    def __eq__(self, other):
        return type(other) is Heartbeat

    def __hash__(self):
        return 8

    def __repr__(self):
        return "Heartbeat()"


cdef class ProtocolHeader:
    """The 8-byte header a client opens with: AMQP 0-major-minor-revision."""
    cdef readonly int major
    cdef readonly int minor
    cdef readonly int revision

    def __init__(self, int major, int minor, int revision):
        self.major = major
        self.minor = minor
        self.revision = revision

    def __eq__(self, other):
        if type(other) is not ProtocolHeader:
            return NotImplemented
        o = <ProtocolHeader>other
        return (self.major, self.minor, self.revision) == (o.major, o.minor, o.revision)

    __hash__ = None

    def __repr__(self):
        return f"ProtocolHeader({self.major}, {self.minor}, {self.revision})"


# A Command holds only a method, properties and bytes: it cannot be part of a reference
# cycle, so it stays out of the cycle collector (the parser makes one per message).
@cython.no_gc
@cython.freelist(256)
cdef class Command:
    """A whole command: a method, and for content methods its properties and body."""
    cdef readonly int channel
    cdef readonly Method method
    cdef readonly BasicProperties properties
    cdef readonly bytes body
    cdef Py_ssize_t _size           # while being assembled: announced body size
    cdef Py_ssize_t _filled         # and bytes received so far
    cdef Delivery _delivery         # a basic.deliver read as a Delivery (delivery_type)

    def __init__(self, int channel, Method method not None, BasicProperties properties=None,
                 bytes body=None):
        self.channel = channel
        self.method = method
        self.properties = properties
        self.body = body

    def __eq__(self, other):
        if type(other) is not Command:
            return NotImplemented
        o = <Command>other
        return (self.channel == o.channel and self.method == o.method
                and self.properties == o.properties and self.body == o.body)

    __hash__ = None

    def __repr__(self):
        body = "None" if self.body is None else f"<{len(self.body)} bytes>"
        return (f"Command(channel={self.channel}, method={self.method!r}, "
                f"properties={self.properties!r}, body={body})")


cdef int command_confirm(object item, int *channel, uint64_t *delivery_tag, bint *multiple) noexcept:
    """1 when ``item`` (from ``CommandParser.feed``) is a basic.ack, 2 a basic.nack (their
    channel, delivery tag and multiple flag set), 0 for anything else."""
    if type(item) is not Command:
        return 0
    cdef int kind = confirm_of((<Command>item).method, delivery_tag, multiple)
    if kind:
        channel[0] = (<Command>item).channel
    return kind


@cython.auto_pickle(False)
cdef class Delivery:
    """A basic.deliver with its content, flattened into one object.

    ``CommandParser(delivery_type=...)`` returns deliveries as instances of ``Delivery``
    (or of a subclass given as ``delivery_type``) instead of a Command holding a
    BasicDeliver: one object per message instead of three.  ``channel`` and
    ``message_count`` are never set by the parser; they are for whoever hands the
    delivery on (a client keeps its channel object there; basic.get-ok has a count).

    ``stream_offset``: the message's offset in a RabbitMQ stream, the int64 header
    ``x-stream-offset`` the broker adds to each delivery from a stream queue, read by the
    parser from the header bytes (the client never looks it up in ``properties.headers``);
    None when the headers have no such entry of type 'l' (a classic or quorum queue).
    """
    # Exposed to Python as member slots (see _expose_delivery_fields), not as Cython
    # properties: CPython 3.11 specializes attribute access to slots, not to properties,
    # and a consumer reads several of these per message.  A slot can be deleted (NULL), so
    # no code of this module reads them after the parser filled them in: __init__,
    # __repr__ and __reduce__ go through getattr/setattr.  The fields are declared in
    # parser.pxd.

    def __init__(self, int channel_id, delivery_tag, redelivered, exchange, routing_key,
                 properties, body, consumer_tag=None, message_count=None, channel=None,
                 stream_offset=None):
        setattr(self, "channel_id", channel_id)
        setattr(self, "channel", channel)
        setattr(self, "consumer_tag", consumer_tag)
        setattr(self, "delivery_tag", delivery_tag)
        setattr(self, "redelivered", redelivered)
        setattr(self, "exchange", exchange)
        setattr(self, "routing_key", routing_key)
        setattr(self, "message_count", message_count)
        setattr(self, "properties", properties)
        setattr(self, "body", body)
        setattr(self, "stream_offset", stream_offset)

    def __reduce__(self):
        return (type(self), tuple([getattr(self, name, None) for name in (
            "channel_id", "delivery_tag", "redelivered", "exchange", "routing_key", "properties",
            "body", "consumer_tag", "message_count")]) + (None, getattr(self, "stream_offset", None)))

    def __repr__(self):
        body = getattr(self, "body", None)
        return (f"{type(self).__name__}(channel_id={getattr(self, 'channel_id', None)}, "
                f"consumer_tag={getattr(self, 'consumer_tag', None)!r}, "
                f"delivery_tag={getattr(self, 'delivery_tag', None)}, "
                f"exchange={getattr(self, 'exchange', None)!r}, "
                f"routing_key={getattr(self, 'routing_key', None)!r}, "
                f"body=<{len(body) if body is not None else 0} bytes>)")


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct _TypeDict "PyTypeObject":
        PyObject *tp_dict
    ctypedef object (*_getter)(object, void *)
    ctypedef int (*_setter)(object, PyObject *, void *) except -1
    ctypedef struct PyGetSetDef:
        const char *name
        _getter get
        _setter set
        const char *doc
        void *closure
    object PyDescr_NewMember(_TypeDict *type, PyMemberDef *member)
    object PyDescr_NewGetSet(_TypeDict *type, PyGetSetDef *getset)
    void PyType_Modified(_TypeDict *type)


# A delivery whose content header has no properties (an empty flag word: the common case
# of a plain publish) keeps this marker in its properties field instead of a
# BasicProperties object; the ``properties`` descriptor builds that delivery's own empty
# object the first time it is read.  So a consumer that never looks at the properties
# allocates, frees and garbage-collects one object less per message, and every delivery
# still has properties of its own to change (none is shared).
cdef object _NOT_BUILT = object()
cdef bytes _EMPTY_WIRE = b"\x00\x00"   # the property bytes of a header without properties


cdef object delivery_properties(Delivery d):
    """The delivery's properties for Cython readers: None when it has none on the wire and
    they were never read (or the field was deleted), else what the field holds."""
    cdef PyObject *slot = <PyObject *>d.properties
    if slot is NULL or <object>slot is _NOT_BUILT:
        return None
    return <object>slot


cdef object _properties_get(object self, void *closure):
    cdef Delivery d = <Delivery>self
    cdef PyObject *slot = <PyObject *>d.properties
    cdef BasicProperties p
    if slot is NULL:
        raise AttributeError("properties")
    if <object>slot is _NOT_BUILT:
        p = BasicProperties.__new__(BasicProperties)
        p.wire = _EMPTY_WIRE
        d.properties = p
        return p
    return <object>slot


cdef int _properties_set(object self, PyObject *value, void *closure) except -1:
    cdef Delivery d = <Delivery>self
    if value is NULL:       # del: as for the member slots, reading it raises AttributeError
        if <PyObject *>d.properties is NULL:
            raise AttributeError("properties")
        _clear_properties(d)
    else:
        _store_properties(d, <object>value)
    return 0


cdef Py_ssize_t _properties_offset    # of Delivery.properties in the object (set below)
cdef Py_ssize_t _channel_offset       # and of channel, channel_id, consumer_tag
cdef Py_ssize_t _channel_id_offset
cdef Py_ssize_t _consumer_tag_offset


cdef inline PyObject *_field(PyObject *d, Py_ssize_t offset) noexcept:
    """A Delivery's field, borrowed; NULL when it was deleted."""
    return (<PyObject **>(<char *>d + offset))[0]


cdef inline void _clear_properties(Delivery d) noexcept:
    cdef PyObject **field = <PyObject **>(<char *><PyObject *>d + _properties_offset)
    cdef PyObject *old = field[0]
    field[0] = NULL
    Py_XDECREF(old)


cdef inline void _store_properties(Delivery d, object value) noexcept:
    # not ``d.properties = value``: Cython's assignment drops the old reference without
    # checking it, and a deleted field holds NULL
    cdef PyObject **field = <PyObject **>(<char *><PyObject *>d + _properties_offset)
    cdef PyObject *old = field[0]
    Py_XINCREF(<PyObject *>value)
    field[0] = <PyObject *>value
    Py_XDECREF(old)


cdef PyGetSetDef _properties_getset

cdef PyMemberDef _delivery_members[11]
_DELIVERY_FIELDS = (b"channel_id", b"channel", b"consumer_tag", b"delivery_tag", b"redelivered",
                    b"exchange", b"routing_key", b"message_count", b"properties", b"body",
                    b"stream_offset")


cdef int _expose_delivery_fields() except -1:
    """Replace Delivery's field descriptors by member descriptors (T_OBJECT_EX, writable)."""
    cdef Delivery probe = Delivery.__new__(Delivery)
    cdef char *base = <char *><PyObject *>probe
    cdef Py_ssize_t[11] offsets = [
        <char *>&probe.channel_id - base, <char *>&probe.channel - base,
        <char *>&probe.consumer_tag - base, <char *>&probe.delivery_tag - base,
        <char *>&probe.redelivered - base, <char *>&probe.exchange - base,
        <char *>&probe.routing_key - base, <char *>&probe.message_count - base,
        <char *>&probe.properties - base, <char *>&probe.body - base,
        <char *>&probe.stream_offset - base,
    ]
    cdef _TypeDict *tp = <_TypeDict *>Delivery
    cdef int i
    cdef bytes name
    for i in range(11):
        name = _DELIVERY_FIELDS[i]
        _delivery_members[i].name = <const char *>name  # the module's tuple keeps it alive
        _delivery_members[i].type = T_OBJECT_EX
        _delivery_members[i].offset = offsets[i]
        _delivery_members[i].flags = 0
        _delivery_members[i].doc = NULL
        (<dict><object>tp.tp_dict)[name.decode()] = PyDescr_NewMember(tp, &_delivery_members[i])
    # properties: built on first read when the wire had none (see _NOT_BUILT)
    global _properties_offset, _channel_offset, _channel_id_offset, _consumer_tag_offset
    _properties_offset = offsets[8]
    _channel_offset = offsets[1]
    _channel_id_offset = offsets[0]
    _consumer_tag_offset = offsets[2]
    _properties_getset.name = b"properties"
    _properties_getset.get = _properties_get
    _properties_getset.set = _properties_set
    _properties_getset.doc = NULL
    _properties_getset.closure = NULL
    (<dict><object>tp.tp_dict)["properties"] = PyDescr_NewGetSet(tp, &_properties_getset)
    PyType_Modified(tp)
    return 0


_expose_delivery_fields()


# --- runs of deliveries: the hot path of a client that consumes ------------------------

def one_run(list items not None):
    """Whether ``items`` (what ``CommandParser.feed`` returned) is one run of deliveries:
    at least one, nothing else, all of one type, on one channel, to one consumer tag.  A
    client hands such a read to its consumer in one step instead of looking at each item."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(items)
    cdef PyObject *item
    cdef PyObject *channel_id
    cdef PyObject *tag
    cdef PyObject *value
    cdef PyTypeObject *kind
    if n == 0:
        return False
    item = PyList_GET_ITEM(items, 0)
    kind = Py_TYPE(<object>item)
    if not PyObject_TypeCheck(<object>item, <PyTypeObject *>Delivery):
        return False
    channel_id = _field(item, _channel_id_offset)
    tag = _field(item, _consumer_tag_offset)
    if channel_id is NULL or tag is NULL:
        return False
    for i in range(1, n):
        item = PyList_GET_ITEM(items, i)
        if Py_TYPE(<object>item) is not kind:
            return False
        value = _field(item, _channel_id_offset)
        if value is NULL or (value is not channel_id and not PyObject_RichCompareBool(
                <object>value, <object>channel_id, Py_EQ)):
            return False
        value = _field(item, _consumer_tag_offset)
        if value is NULL or (value is not tag and not PyObject_RichCompareBool(<object>value, <object>tag, Py_EQ)):
            return False
    return True


def set_channel(list deliveries not None, channel):
    """``delivery.channel = channel`` for every Delivery of the list, in one call."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(deliveries)
    cdef PyObject *item
    cdef PyObject **field
    cdef PyObject *old
    for i in range(n):
        item = PyList_GET_ITEM(deliveries, i)
        if not PyObject_TypeCheck(<object>item, <PyTypeObject *>Delivery):
            raise TypeError(f"set_channel takes a list of Delivery objects, got {type(<object>item).__name__} "
                            f"at index {i}")
    for i in range(n):
        field = <PyObject **>(<char *>PyList_GET_ITEM(deliveries, i) + _channel_offset)
        old = field[0]
        Py_XINCREF(<PyObject *>channel)
        field[0] = <PyObject *>channel
        Py_XDECREF(old)


# --- iterating a consumer's buffer --------------------------------------------------


@cython.final
cdef class DeliveryIterator:
    """Iterates a consumer's buffer of deliveries (a ``collections.deque``), for ``for``
    and ``async for``: while the buffer holds some, each step pops the first one in C, with
    no Python call; when it is empty, the step is ``slow()``: for ``for``, the next item or
    StopIteration; for ``async for``, an awaitable (a coroutine) of it.  Other readers of
    the same deque (a consumer's ``get()``) keep the order: nothing is taken ahead."""
    cdef object _buffer
    cdef object _popleft
    cdef object _slow

    def __init__(self, buffer not None, slow not None):
        self._buffer = buffer
        self._popleft = buffer.popleft
        self._slow = slow

    def __iter__(self):
        return self

    def __next__(self):
        if self._buffer:
            return self._popleft()
        return self._slow()

    def __aiter__(self):
        return self

    def __anext__(self):
        cdef _Ready ready
        if self._buffer:
            ready = _Ready.__new__(_Ready)
            ready.value = self._popleft()
            return ready
        return self._slow()


@cython.final
@cython.freelist(8)
cdef class _Ready:
    """An awaitable whose value is there already: awaiting it returns ``value`` at once
    (a coroutine would cost a frame and a coroutine object per message).  Its iterator
    step is set in C below: through am_send (CPython 3.10 on), no exception at all; else
    _ready_next, StopIteration(value) without a traceback."""
    cdef object value
    cdef bint _spent

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        # What ``ready.__next__()`` runs; ``next()`` and the interpreter take the type's
        # slot, _ready_next, which does the same without a traceback (see _install_ready).
        if self._spent:
            raise RuntimeError("cannot reuse an already awaited delivery")
        self._spent = True
        value = self.value
        self.value = None
        raise StopIteration(value)


cdef extern from "Python.h":
    ctypedef PyObject *(*_iternextfunc)(PyObject *)
    ctypedef struct _TypeIter "PyTypeObject":
        _iternextfunc tp_iternext
    void PyErr_SetObject(object type, object value)
    void PyErr_SetString(object type, const char *message)
    bint PyTuple_Check(object o)
    bint PyExceptionInstance_Check(object o)


cdef PyObject *_ready_next(PyObject *op) noexcept:
    cdef _Ready ready = <_Ready>op
    if ready._spent:
        PyErr_SetString(RuntimeError, b"cannot reuse an already awaited delivery")
        return NULL
    ready._spent = True
    value = ready.value
    ready.value = None
    # A value that is a tuple or an exception would be taken apart by StopIteration's
    # creation: wrap it as CPython's generators do (a delivery is neither).
    if PyTuple_Check(value) or PyExceptionInstance_Check(value):
        PyErr_SetObject(StopIteration, StopIteration(value))
    else:
        PyErr_SetObject(StopIteration, value)
    return NULL


# From CPython 3.10 an awaitable's iterator can return its value through am_send, which the
# interpreter's SEND tries first: no StopIteration at all.
cdef extern from *:
    """
    #if PY_VERSION_HEX >= 0x030A0000 && !defined(PYPY_VERSION) && !CYTHON_COMPILING_IN_LIMITED_API
    static int amqw_set_am_send(PyTypeObject *type, int (*send)(PyObject *, PyObject *, PyObject **)) {
        if (type->tp_as_async == NULL) return 0;
        type->tp_as_async->am_send = (sendfunc)send;
        return 1;
    }
    #else
    static int amqw_set_am_send(PyTypeObject *type, int (*send)(PyObject *, PyObject *, PyObject **)) {
        (void)type; (void)send;
        return 0;
    }
    #endif
    """
    int amqw_set_am_send(PyTypeObject *type, int (*send)(PyObject *, PyObject *, PyObject **))


cdef int _ready_send(PyObject *op, PyObject *arg, PyObject **result) noexcept:
    # PYGEN_RETURN (0) with the value, or PYGEN_ERROR (-1) once it was awaited
    cdef _Ready ready = <_Ready>op
    if ready._spent:
        PyErr_SetString(RuntimeError, b"cannot reuse an already awaited delivery")
        result[0] = NULL
        return -1
    ready._spent = True
    value = ready.value
    ready.value = None
    Py_XINCREF(<PyObject *>value)
    result[0] = <PyObject *>value
    return 0


cdef int _install_ready() except -1:
    (<_TypeIter *>_Ready).tp_iternext = _ready_next
    amqw_set_am_send(<PyTypeObject *>_Ready, _ready_send)
    PyType_Modified(<_TypeDict *>_Ready)
    return 0


_install_ready()


cdef tuple _NO_ARGS = ()


cdef Delivery _read_delivery(ReadView *v, object delivery_type, uint16_t channel):
    """basic.deliver's arguments, straight into a new ``delivery_type`` instance."""
    cdef uint32_t index = 0
    cdef uint64_t tag = 0
    cdef uint8_t bits = 0
    # The type's tp_new straight away: ``delivery_type.__new__(delivery_type)`` goes through
    # a Python-level lookup, tp_new_wrapper and an argument tuple (~300 instructions a message).
    cdef Delivery d = <Delivery>(<PyTypeObject *>delivery_type).tp_new(
        delivery_type, <PyObject *>_NO_ARGS, NULL)
    read_u32(v, &index, b"method id")
    d.channel_id = channel
    d.consumer_tag = read_shortstr(v, b"basic.deliver.consumer_tag")
    read_u64(v, &tag, b"basic.deliver.delivery_tag")
    d.delivery_tag = tag
    read_u8(v, &bits, b"basic.deliver.redelivered")
    d.redelivered = (bits & 1) != 0
    d.exchange = read_shortstr(v, b"basic.deliver.exchange")
    d.routing_key = read_shortstr(v, b"basic.deliver.routing_key")
    d.stream_offset = None
    expect_end(v, "basic.deliver")
    return d


cdef int _read_stream_offset(Delivery d, ReadView *v, Py_ssize_t headers_at) except -1:
    """The x-stream-offset header of a delivery, read in place from the headers table at
    ``headers_at`` in the content header's view (read_properties has checked it)."""
    cdef ReadView table = v[0]
    cdef int64_t offset = 0
    table.pos = headers_at
    if find_int64_field(&table, b"x-stream-offset", 15, &offset):
        d.stream_offset = offset
    return 0


cdef str _content_name(Command c):
    return "basic.deliver" if c.method is None else c.method.NAME


cdef Heartbeat _HEARTBEAT = Heartbeat()


# --- the frame scanner ---------------------------------------------------------------

cdef class _Scanner:
    cdef char *_pending           # the start of a frame cut off by the end of a chunk
    cdef Py_ssize_t _pending_len
    cdef Py_ssize_t _pending_cap
    cdef Py_ssize_t _frame_max
    cdef Py_ssize_t _consumed     # stream offset of the next frame, for error messages
    cdef bint _expect_header
    cdef bint _at_start
    cdef object _error
    # A body frame cut by the end of a chunk, streamed into its message as it arrives
    # (CommandParser): its channel, payload size and the payload bytes still to come.
    cdef bint _streaming
    cdef uint16_t _stream_channel
    cdef Py_ssize_t _stream_size
    cdef Py_ssize_t _stream_left

    def __cinit__(self, *args, **kwargs):
        self._pending = NULL
        self._pending_len = 0
        self._pending_cap = 0
        self._consumed = 0
        self._at_start = True
        self._error = None
        self._streaming = False

    def __dealloc__(self):
        PyMem_Free(self._pending)

    cdef int _set_frame_max(self, object value) except -1:
        if not isinstance(value, int) or value < 0 or value > 0xFFFFFFFF:
            raise ValueError(f"frame_max must be 0 (no limit) or a frame size in bytes, got {value!r}")
        if value != 0 and value < FRAME_OVERHEAD:
            raise ValueError(f"frame_max {value} is smaller than a frame's overhead")
        self._frame_max = value
        return 0

    @property
    def frame_max(self):
        return self._frame_max

    @frame_max.setter
    def frame_max(self, value):
        self._set_frame_max(value)

    @property
    def buffered(self):
        """Bytes received of a frame that is not complete yet."""
        if self._streaming:
            return FRAME_HEADER_SIZE + self._stream_size - self._stream_left
        return self._pending_len

    def feed(self, data):
        """Parse ``data`` (any bytes-like) and return what it completed, in order."""
        cdef Py_buffer pybuf
        cdef list out = []
        if self._error is not None:
            raise self._error
        PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
        try:
            self._feed(<const char *>pybuf.buf, pybuf.len, out)
        except CodecError as exc:
            exc.parsed = out
            self._error = exc
            raise
        finally:
            PyBuffer_Release(&pybuf)
        return out

    @cython.final
    cdef Py_ssize_t _extent(self, const char *p, Py_ssize_t avail) except -2:
        """Length of the frame at p, -1 if more bytes are needed to tell; raises on a bad header."""
        cdef uint8_t ftype
        cdef uint32_t size
        if avail < 1:
            return -1
        ftype = <uint8_t>p[0]
        if self._at_start and (self._expect_header or ftype == b'A'):
            return 8 if avail >= 8 else -1
        if ftype != FRAME_METHOD and ftype != FRAME_HEADER and ftype != FRAME_BODY \
                and ftype != FRAME_HEARTBEAT:
            raise FrameError(f"unknown frame type {ftype} at offset {self._consumed}",
                             offset=self._consumed)
        if avail < FRAME_HEADER_SIZE:
            return -1
        size = amqw_unpack_u32(p + 3)
        if self._frame_max and <uint64_t>size + FRAME_OVERHEAD > <uint64_t>self._frame_max:
            raise FrameError(
                f"frame of {<uint64_t>size + FRAME_OVERHEAD} bytes at offset {self._consumed} "
                f"exceeds frame_max {self._frame_max}", offset=self._consumed)
        return <Py_ssize_t>size + FRAME_OVERHEAD

    @cython.final
    cdef int _frame(self, const char *p, Py_ssize_t extent, list out) except -1:
        """Handle one complete frame of ``extent`` bytes at p."""
        cdef Py_ssize_t size = extent - FRAME_OVERHEAD
        cdef uint8_t ftype = <uint8_t>p[0]
        cdef uint16_t channel
        if self._at_start:
            self._at_start = False
            if self._expect_header or ftype == b'A':
                self._protocol_header(p, out)
                self._consumed += 8
                return 0
        channel = amqw_unpack_u16(p + 1)
        if ftype == FRAME_BODY:
            # A streamed body frame is judged when it starts (before its frame end is in):
            # judge a whole one in the same order, so the error does not depend on the cut.
            self._stream_begin(channel, size)
        if <uint8_t>p[extent - 1] != FRAME_END:
            raise FrameError(
                f"frame end octet is 0x{<uint8_t>p[extent - 1]:02x}, not 0xce, at offset "
                f"{self._consumed + extent - 1}", offset=self._consumed + extent - 1)
        if ftype == FRAME_HEARTBEAT and (channel != 0 or size != 0):
            raise FrameError(
                f"heartbeat frame at offset {self._consumed} has channel {channel} and size "
                f"{size}; both must be 0", offset=self._consumed)
        self._on_frame(ftype, channel, p + FRAME_HEADER_SIZE, size, out)
        self._consumed += extent
        return 0

    @cython.final
    cdef int _protocol_header(self, const char *p, list out) except -1:
        cdef bytes header = PyBytes_FromStringAndSize(p, 8)
        if header[:4] != b"AMQP":
            raise ProtocolHeaderError(
                f"expected the protocol header {_PROTOCOL_HEADER!r}, got {header!r}", header)
        if not self._expect_header:
            raise ProtocolHeaderError(
                f"the peer answered with protocol header {header!r}: it refused AMQP 0-9-1 "
                f"or does not support it (it offers {header[4]}-{header[5]}-{header[6]}-{header[7]})",
                header)
        if header != _PROTOCOL_HEADER:
            raise ProtocolHeaderError(
                f"unsupported protocol version {header[4]}-{header[5]}-{header[6]}-{header[7]} "
                f"in {header!r}; this peer speaks AMQP 0-9-1", header)
        PyList_Append(out, ProtocolHeader(0, 9, 1))
        return 0

    cdef int _on_frame(self, uint8_t ftype, uint16_t channel, const char *payload,
                       Py_ssize_t size, list out) except -1:
        raise NotImplementedError

    @cython.final
    cdef int _hold(self, const char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t need = self._pending_len + n
        cdef Py_ssize_t cap
        cdef char *grown
        if need > self._pending_cap:
            cap = self._pending_cap * 2 if self._pending_cap else 256
            while cap < need:
                cap *= 2
            grown = <char *>PyMem_Realloc(self._pending, <size_t>cap)
            if grown is NULL:
                raise MemoryError()
            self._pending = grown
            self._pending_cap = cap
        memcpy(self._pending + self._pending_len, p, <size_t>n)
        self._pending_len = need
        return 0

    # Streaming a body frame's payload into its message: subclasses that assemble
    # content accept it (return 1) after the same checks as for a whole body frame.
    cdef int _stream_begin(self, uint16_t channel, Py_ssize_t size) except -1:
        return 0

    cdef int _stream_data(self, uint16_t channel, const char *p, Py_ssize_t n) except -1:
        raise NotImplementedError

    cdef int _stream_end(self, uint16_t channel, list out) except -1:
        raise NotImplementedError

    @cython.final
    cdef bint _start_stream(self, const char *frame, Py_ssize_t have) except -1:
        """Stream the incomplete frame at ``frame`` (``have`` bytes of it) if it is a body
        frame the subclass takes; its length is known and checked already."""
        cdef uint16_t channel
        cdef Py_ssize_t size, avail
        if have < FRAME_HEADER_SIZE or <uint8_t>frame[0] != FRAME_BODY or self._at_start:
            return False
        channel = amqw_unpack_u16(frame + 1)
        size = <Py_ssize_t>amqw_unpack_u32(frame + 3)
        if not self._stream_begin(channel, size):
            return False
        avail = have - FRAME_HEADER_SIZE         # < size + 1: the frame is incomplete
        if avail > size:
            avail = size
        self._stream_data(channel, frame + FRAME_HEADER_SIZE, avail)
        self._streaming = True
        self._stream_channel = channel
        self._stream_size = size
        self._stream_left = size - avail
        return True

    @cython.final
    cdef Py_ssize_t _continue_stream(self, const char *p, Py_ssize_t pos, Py_ssize_t n,
                                     list out) except -1:
        cdef Py_ssize_t take
        if self._stream_left:
            take = self._stream_left if self._stream_left < n - pos else n - pos
            self._stream_data(self._stream_channel, p + pos, take)
            self._stream_left -= take
            pos += take
        if self._stream_left or pos == n:
            return pos
        if <uint8_t>p[pos] != FRAME_END:
            raise FrameError(
                f"frame end octet is 0x{<uint8_t>p[pos]:02x}, not 0xce, at offset "
                f"{self._consumed + self._stream_size + FRAME_HEADER_SIZE}",
                offset=self._consumed + self._stream_size + FRAME_HEADER_SIZE)
        self._streaming = False
        self._consumed += self._stream_size + FRAME_OVERHEAD
        self._stream_end(self._stream_channel, out)
        return pos + 1

    @cython.final
    cdef int _feed(self, const char *p, Py_ssize_t n, list out) except -1:
        cdef Py_ssize_t pos = 0, extent, want, take
        if self._streaming:
            pos = self._continue_stream(p, 0, n, out)
            if self._streaming:
                return 0
        # Finish a frame left over from the previous chunk, taking only its bytes.
        while self._pending_len:
            extent = self._extent(self._pending, self._pending_len)
            if extent >= 0 and self._pending_len == extent:
                self._pending_len = 0
                self._frame(self._pending, extent, out)
                if self._pending_cap > 1 << 20:      # don't keep a huge frame's buffer
                    PyMem_Free(self._pending)
                    self._pending = NULL
                    self._pending_cap = 0
                break
            if extent >= 0 and self._start_stream(self._pending, self._pending_len):
                self._pending_len = 0
                pos = self._continue_stream(p, pos, n, out)
                if self._streaming:
                    return 0
                break
            if extent < 0:      # not enough bytes yet to know the frame's length
                want = (8 if (self._at_start and (self._expect_header or self._pending[0] == b'A'))
                        else FRAME_HEADER_SIZE) - self._pending_len
            else:
                want = extent - self._pending_len
            take = want if want < n - pos else n - pos
            if take <= 0:
                return 0
            self._hold(p + pos, take)
            pos += take
        # Then whole frames straight from the caller's buffer.
        while pos < n:
            extent = self._extent(p + pos, n - pos)
            if extent < 0 or extent > n - pos:
                break
            self._frame(p + pos, extent, out)
            pos += extent
        if pos < n and not self._start_stream(p + pos, n - pos):
            self._hold(p + pos, n - pos)
        return 0


cdef class FrameParser(_Scanner):
    """Bytes in, frames out: MethodFrame, HeaderFrame, BodyFrame, Heartbeat.

    ``feed()`` raises a CodecError subclass on malformed input; ``exc.parsed`` holds the
    frames completed before the bad one, and the parser refuses further input.
    """

    def __init__(self, frame_max=_DEFAULT_FRAME_MAX, *, bint expect_protocol_header=False):
        self._set_frame_max(frame_max)
        self._expect_header = expect_protocol_header

    cdef int _on_frame(self, uint8_t ftype, uint16_t channel, const char *payload,
                       Py_ssize_t size, list out) except -1:
        cdef ReadView v
        cdef uint64_t body_size = 0
        v.buf = payload
        v.len = size
        v.pos = 0
        v.base = self._consumed + FRAME_HEADER_SIZE
        if ftype == FRAME_METHOD:
            PyList_Append(out, MethodFrame(channel, read_method(&v)))
        elif ftype == FRAME_HEADER:
            props = _read_header(&v, &body_size, NULL)
            PyList_Append(out, HeaderFrame(channel, _BASIC_CLASS, body_size, props))
        elif ftype == FRAME_BODY:
            PyList_Append(out, BodyFrame(channel, PyBytes_FromStringAndSize(payload, size)))
        else:
            PyList_Append(out, _HEARTBEAT)
        return 0


cdef BasicProperties _read_header(ReadView *v, uint64_t *body_size, Py_ssize_t *headers_at,
                                  bint none_if_empty=False):
    """A content header frame's payload: its properties; the body size in ``body_size``;
    where the headers table starts in ``headers_at`` (if not NULL, and there is one).
    ``none_if_empty``: None instead of an empty BasicProperties for a flag word of 0."""
    cdef uint16_t class_id = 0, weight = 0
    cdef Py_ssize_t at = v.base
    read_u16(v, &class_id, b"content header class id")
    if class_id != _BASIC_CLASS:
        raise AMQPSyntaxError(
            f"content header at offset {at} is for class {class_id}; only basic (60) carries content",
            offset=at)
    read_u16(v, &weight, b"content header weight")
    read_u64(v, body_size, b"content header body size")
    if none_if_empty and v.len - v.pos == 2 and v.buf[v.pos] == 0 and v.buf[v.pos + 1] == 0:
        v.pos += 2
        return None
    props = read_properties(v, headers_at)
    expect_end(v, "content header")
    return props


# --- commands ------------------------------------------------------------------------

cdef class CommandParser(_Scanner):
    """Bytes in, commands out: Command objects (content joined) and Heartbeat.

    Frames of different channels may interleave; a channel's content frames must follow
    their method in order (else UnexpectedFrame, 505).  A body is copied once, into the
    bytes object of its Command, which is allocated when the header announces its size
    (refused above ``max_body_size``).
    """
    # Content being assembled: one channel in a slot (the common case), more in a dict.
    cdef Command _cur
    cdef int _cur_channel
    cdef dict _others
    # A delivery's Command only carries its content while it is assembled (the delivery is
    # what comes out): once done it is kept here and used for the next delivery.
    cdef Command _spare
    cdef readonly Py_ssize_t max_body_size
    cdef readonly object delivery_type
    cdef readonly unsigned long long deliveries  # Delivery objects returned so far

    def __init__(self, frame_max=_DEFAULT_FRAME_MAX, *, max_body_size=_DEFAULT_MAX_BODY,
                 bint expect_protocol_header=False, delivery_type=None):
        if delivery_type is not None and not (
                isinstance(delivery_type, type) and issubclass(delivery_type, Delivery)):
            raise TypeError(f"delivery_type must be Delivery or a subclass of it, got {delivery_type!r}")
        self.delivery_type = delivery_type
        self._set_frame_max(frame_max)
        if not isinstance(max_body_size, int) or max_body_size < 0:
            raise ValueError(f"max_body_size must be a non-negative int, got {max_body_size!r}")
        self.max_body_size = max_body_size
        self._expect_header = expect_protocol_header
        self._cur = None
        self._cur_channel = -1
        self._others = None
        self.deliveries = 0

    cdef inline Command _content_for(self, uint16_t channel):
        if channel == self._cur_channel:
            return self._cur
        if self._others:
            return self._others.get(channel)
        return None

    cdef int _begin(self, uint16_t channel, Command cmd) except -1:
        if self._cur is None:
            self._cur = cmd
            self._cur_channel = channel
        else:
            if self._others is None:
                self._others = {}
            self._others[channel] = cmd
        return 0

    cdef int _finish(self, uint16_t channel, list out) except -1:
        cdef Command cmd
        if channel == self._cur_channel:
            cmd = self._cur
            self._cur = None
            self._cur_channel = -1
        else:
            cmd = self._others.pop(channel)
        if cmd._delivery is None:
            PyList_Append(out, cmd)
        else:
            cmd._delivery.properties = _NOT_BUILT if cmd.properties is None else cmd.properties
            cmd._delivery.body = cmd.body
            PyList_Append(out, cmd._delivery)
            self.deliveries += 1
            cmd._delivery = None
            cmd.properties = None
            cmd.body = None
            self._spare = cmd
        return 0

    cdef Command _body_target(self, uint16_t channel, Py_ssize_t size):
        """The message a body frame of ``size`` bytes on ``channel`` belongs to."""
        cdef Command c = self._content_for(channel)
        cdef Py_ssize_t at = self._consumed
        if c is None or c.body is None:
            raise UnexpectedFrame(
                f"body frame on channel {channel} at offset {at} without a content header",
                offset=at)
        if size > c._size - c._filled:
            raise UnexpectedFrame(
                f"body frame on channel {channel} at offset {at} carries {size} bytes; "
                f"only {c._size - c._filled} of the announced {c._size} remain", offset=at)
        return c

    cdef int _stream_begin(self, uint16_t channel, Py_ssize_t size) except -1:
        self._body_target(channel, size)
        return 1

    cdef int _stream_data(self, uint16_t channel, const char *p, Py_ssize_t n) except -1:
        cdef Command c = self._content_for(channel)
        memcpy(PyBytes_AS_STRING(c.body) + c._filled, p, <size_t>n)
        c._filled += n
        return 0

    cdef int _stream_end(self, uint16_t channel, list out) except -1:
        cdef Command c = self._content_for(channel)
        if c._filled == c._size:
            self._finish(channel, out)
        return 0

    cdef int _on_frame(self, uint8_t ftype, uint16_t channel, const char *payload,
                       Py_ssize_t size, list out) except -1:
        cdef ReadView v
        cdef Command c
        cdef uint64_t body_size = 0
        cdef Command cmd
        cdef Delivery delivery
        cdef Py_ssize_t at = self._consumed
        cdef Py_ssize_t headers_at = -1
        if ftype == FRAME_HEARTBEAT:
            PyList_Append(out, _HEARTBEAT)
            return 0
        v.buf = payload
        v.len = size
        v.pos = 0
        v.base = at + FRAME_HEADER_SIZE
        c = self._content_for(channel)
        if ftype == FRAME_BODY:
            c = self._body_target(channel, size)
            memcpy(PyBytes_AS_STRING(c.body) + c._filled, payload, <size_t>size)
            c._filled += size
            if c._filled == c._size:
                self._finish(channel, out)
            return 0
        if ftype == FRAME_METHOD:
            if c is not None:
                raise UnexpectedFrame(
                    f"method frame on channel {channel} at offset {at} while content for "
                    f"{_content_name(c)} is incomplete", offset=at)
            if (self.delivery_type is not None and size >= 4
                    and amqw_unpack_u32(payload) == _BASIC_DELIVER):
                delivery = _read_delivery(&v, self.delivery_type, channel)
                cmd = self._spare
                if cmd is None:
                    cmd = Command.__new__(Command)
                else:
                    self._spare = None
                cmd.channel = channel
                cmd._delivery = delivery
                self._begin(channel, cmd)
                return 0
            cmd = Command.__new__(Command)
            cmd.channel = channel
            cmd.method = read_method(&v)
            if method_has_content(amqw_unpack_u32(payload)):
                self._begin(channel, cmd)
            else:
                PyList_Append(out, cmd)
            return 0
        # FRAME_HEADER
        if c is None or c.body is not None:
            raise UnexpectedFrame(
                f"content header on channel {channel} at offset {at} "
                + ("without a content method" if c is None else "after the header was received"),
                offset=at)
        if c._delivery is None:
            props = _read_header(&v, &body_size, NULL)
        else:
            props = _read_header(&v, &body_size, &headers_at, True)
        if headers_at >= 0:
            _read_stream_offset(c._delivery, &v, headers_at)
        if body_size > <uint64_t>self.max_body_size:
            raise FrameError(
                f"content header on channel {channel} at offset {at} announces a body of "
                f"{body_size} bytes, over max_body_size {self.max_body_size}", offset=at)
        c.properties = props
        c._size = <Py_ssize_t>body_size
        c._filled = 0
        try:
            c.body = PyBytes_FromStringAndSize(NULL, c._size)
        except MemoryError:
            raise FrameError(
                f"content header on channel {channel} at offset {at} announces a body of "
                f"{body_size} bytes, more than this process can allocate", offset=at) from None
        if c._size == 0:
            self._finish(channel, out)
        return 0
