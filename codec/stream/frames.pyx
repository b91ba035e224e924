# cython: language_level=3
"""RabbitMQ's stream protocol (port 5552): frames, commands, and an incremental parser.

A frame is ``uint32 size | uint16 key | uint16 version | content``; ``size`` counts what
follows it.  A response has the top bit of its key set (``key | 0x8000``).  Requests carry a
``uint32`` correlation id after the version, and their responses echo it, followed by a
``uint16`` response code (``RESPONSE_CODES``).  Strings are ``int16`` length + UTF-8
(``-1``: null), byte strings ``int32`` length + bytes, arrays ``uint32`` count + items.

Every command of ``deps/rabbitmq_stream/docs/PROTOCOL.adoc`` (rabbitmq-server, up to 4.x)
is a class here, laid out as ``rabbit_stream_core.erl`` writes and reads it where the two
disagree: :class:`SaslAuthenticateResponse`'s challenge has a ``uint16`` length, Open's and
Subscribe's property maps are left out when empty, Credit is answered only on error (with
no correlation id).  ``COMMANDS_3_10`` says which keys and versions RabbitMQ 3.10 knows: a
3.10 node closes the connection (code 0x0d, unknown frame) on any other.  3.10 answers
Route and Partitions with the response bit of the key unset; a parser reading a server
(``sender="server"``, the default) decodes those as :class:`RouteResponse` and
:class:`PartitionsResponse`.

Hot paths: :class:`StreamParser` hands a :class:`Deliver`'s chunk over as one bytes
object (records are not copied out: see ``amqwire.codec.stream.chunk``);
:func:`encode_publish`, :func:`encode_publish_values` and :func:`encode_publish_subentry`
write whole publish frames into one buffer.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from amqwire.codec.stream.amqp10 cimport write_message
from amqwire.codec.buffer cimport (
    ReadView, WriteBuffer, amqw_pack_u32, amqw_unpack_u16, amqw_unpack_u32, amqw_unpack_u64,
    decode_utf8, read_raw, read_u8, read_u16, read_u32, read_u64, utf8_of,
)

import importlib
import zlib
from collections import namedtuple

from amqwire.codec.errors import CodecError, StreamFrameError
from amqwire.codec.errors import STREAM_FRAME_TOO_LARGE as _FRAME_TOO_LARGE

cdef extern from "Python.h":
    bint PyUnicode_Check(object o)
    bint PyLong_Check(object o)
    bint PyBool_Check(object o)
    bint PyBytes_CheckExact(object o)
    bint PyObject_CheckBuffer(object o)
    object PySequence_Fast(object o, const char *message)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject **PySequence_Fast_ITEMS(object o)

# --- keys, codes, offset types -------------------------------------------------------------

KEY_DECLARE_PUBLISHER = 0x0001
KEY_PUBLISH = 0x0002
KEY_PUBLISH_CONFIRM = 0x0003
KEY_PUBLISH_ERROR = 0x0004
KEY_QUERY_PUBLISHER_SEQUENCE = 0x0005
KEY_DELETE_PUBLISHER = 0x0006
KEY_SUBSCRIBE = 0x0007
KEY_DELIVER = 0x0008
KEY_CREDIT = 0x0009
KEY_STORE_OFFSET = 0x000A
KEY_QUERY_OFFSET = 0x000B
KEY_UNSUBSCRIBE = 0x000C
KEY_CREATE = 0x000D
KEY_DELETE = 0x000E
KEY_METADATA = 0x000F
KEY_METADATA_UPDATE = 0x0010
KEY_PEER_PROPERTIES = 0x0011
KEY_SASL_HANDSHAKE = 0x0012
KEY_SASL_AUTHENTICATE = 0x0013
KEY_TUNE = 0x0014
KEY_OPEN = 0x0015
KEY_CLOSE = 0x0016
KEY_HEARTBEAT = 0x0017
KEY_ROUTE = 0x0018
KEY_PARTITIONS = 0x0019
KEY_CONSUMER_UPDATE = 0x001A
KEY_EXCHANGE_COMMAND_VERSIONS = 0x001B
KEY_STREAM_STATS = 0x001C
KEY_CREATE_SUPER_STREAM = 0x001D
KEY_DELETE_SUPER_STREAM = 0x001E
KEY_RESOLVE_OFFSET_SPEC = 0x001F
RESPONSE_FLAG = 0x8000

#: key -> the command's name in PROTOCOL.adoc
COMMAND_NAMES = {
    0x0001: "DeclarePublisher", 0x0002: "Publish", 0x0003: "PublishConfirm", 0x0004: "PublishError",
    0x0005: "QueryPublisherSequence", 0x0006: "DeletePublisher", 0x0007: "Subscribe", 0x0008: "Deliver",
    0x0009: "Credit", 0x000A: "StoreOffset", 0x000B: "QueryOffset", 0x000C: "Unsubscribe",
    0x000D: "Create", 0x000E: "Delete", 0x000F: "Metadata", 0x0010: "MetadataUpdate",
    0x0011: "PeerProperties", 0x0012: "SaslHandshake", 0x0013: "SaslAuthenticate", 0x0014: "Tune",
    0x0015: "Open", 0x0016: "Close", 0x0017: "Heartbeat", 0x0018: "Route", 0x0019: "Partitions",
    0x001A: "ConsumerUpdate", 0x001B: "ExchangeCommandVersions", 0x001C: "StreamStats",
    0x001D: "CreateSuperStream", 0x001E: "DeleteSuperStream", 0x001F: "ResolveOffsetSpec",
}

#: What RabbitMQ 3.10 (3.10.8: rabbit_stream_reader.erl, rabbit_stream_core.erl) knows, as
#: key -> the versions it accepts from a client.  It closes the connection with 0x0d
#: (unknown frame) on anything else: ConsumerUpdate, ExchangeCommandVersions, StreamStats,
#: the super stream commands, ResolveOffsetSpec, Publish version 2 (filter values); it
#: never sends Deliver version 2.  Route and Partitions are known, but answered with the
#: response bit of the key unset (see StreamParser).
COMMANDS_3_10 = {
    KEY_DECLARE_PUBLISHER: frozenset({1}),
    KEY_PUBLISH: frozenset({1}),
    KEY_QUERY_PUBLISHER_SEQUENCE: frozenset({1}),
    KEY_DELETE_PUBLISHER: frozenset({1}),
    KEY_SUBSCRIBE: frozenset({1}),
    KEY_CREDIT: frozenset({1}),
    KEY_STORE_OFFSET: frozenset({1}),
    KEY_QUERY_OFFSET: frozenset({1}),
    KEY_UNSUBSCRIBE: frozenset({1}),
    KEY_CREATE: frozenset({1}),
    KEY_DELETE: frozenset({1}),
    KEY_METADATA: frozenset({1}),
    KEY_PEER_PROPERTIES: frozenset({1}),
    KEY_SASL_HANDSHAKE: frozenset({1}),
    KEY_SASL_AUTHENTICATE: frozenset({1}),
    KEY_TUNE: frozenset({1}),
    KEY_OPEN: frozenset({1}),
    KEY_CLOSE: frozenset({1}),
    KEY_HEARTBEAT: frozenset({1}),
    KEY_ROUTE: frozenset({1}),
    KEY_PARTITIONS: frozenset({1}),
}

RESPONSE_OK = 0x01
RESPONSE_STREAM_DOES_NOT_EXIST = 0x02
RESPONSE_SUBSCRIPTION_ID_ALREADY_EXISTS = 0x03
RESPONSE_SUBSCRIPTION_ID_DOES_NOT_EXIST = 0x04
RESPONSE_STREAM_ALREADY_EXISTS = 0x05
RESPONSE_STREAM_NOT_AVAILABLE = 0x06
RESPONSE_SASL_MECHANISM_NOT_SUPPORTED = 0x07
RESPONSE_AUTHENTICATION_FAILURE = 0x08
RESPONSE_SASL_ERROR = 0x09
RESPONSE_SASL_CHALLENGE = 0x0A
RESPONSE_SASL_AUTHENTICATION_FAILURE_LOOPBACK = 0x0B
RESPONSE_VIRTUAL_HOST_ACCESS_FAILURE = 0x0C
RESPONSE_UNKNOWN_FRAME = 0x0D
RESPONSE_FRAME_TOO_LARGE = 0x0E
RESPONSE_INTERNAL_ERROR = 0x0F
RESPONSE_ACCESS_REFUSED = 0x10
RESPONSE_PRECONDITION_FAILED = 0x11
RESPONSE_PUBLISHER_DOES_NOT_EXIST = 0x12
RESPONSE_NO_OFFSET = 0x13
RESPONSE_SASL_CANNOT_CHANGE_MECHANISM = 0x14
RESPONSE_SASL_CANNOT_CHANGE_USERNAME = 0x15

#: response code -> its name (rabbit_stream.hrl; 0x13 and up are not in PROTOCOL.adoc's table)
RESPONSE_CODES = {
    0x01: "ok",
    0x02: "stream does not exist",
    0x03: "subscription id already exists",
    0x04: "subscription id does not exist",
    0x05: "stream already exists",
    0x06: "stream not available",
    0x07: "SASL mechanism not supported",
    0x08: "authentication failure",
    0x09: "SASL error",
    0x0A: "SASL challenge",
    0x0B: "SASL authentication failure loopback",
    0x0C: "virtual host access failure",
    0x0D: "unknown frame",
    0x0E: "frame too large",
    0x0F: "internal error",
    0x10: "access refused",
    0x11: "precondition failed",
    0x12: "publisher does not exist",
    0x13: "no offset",
    0x14: "SASL cannot change mechanism",
    0x15: "SASL cannot change username",
}

OFFSET_TYPE_NONE = 0          # ConsumerUpdateResponse only: keep the current offset
OFFSET_TYPE_FIRST = 1
OFFSET_TYPE_LAST = 2
OFFSET_TYPE_NEXT = 3
OFFSET_TYPE_OFFSET = 4
OFFSET_TYPE_TIMESTAMP = 5

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
#: sub-entry compression code -> name
COMPRESSIONS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

Broker = namedtuple("Broker", "reference host port")
Broker.__doc__ = "A node in a MetadataResponse: reference (uint16), host, port (uint32)."
StreamMetadata = namedtuple("StreamMetadata", "stream response_code leader replicas")
StreamMetadata.__doc__ = ("A stream in a MetadataResponse: its leader and replicas are Broker "
                          "references; the leader is 0xFFFF when the response code is not ok.")
CommandVersion = namedtuple("CommandVersion", "key min_version max_version")
CommandVersion.__doc__ = "One command's versions in ExchangeCommandVersions (all uint16)."

cdef enum:
    _SIZE_PREFIX = 4
    _HEAD = 8                       # size, key, version
    _MAX_STRING = 0x7FFF            # int16 length; -1 is null
    _MAX_MESSAGE = 0x7FFFFFFF       # a message's size has 31 bits (the top one marks a sub-entry)
    _SENT_BY_CLIENT = 1
    _SENT_BY_SERVER = 2
    _SENT_BY_ANY = 3
    _MAX_KEY = 0x1F

# --- value checks (constructors) ---------------------------------------------------------

cdef object _uint(object value, uint64_t maximum, str what):
    if not PyLong_Check(value) or PyBool_Check(value):
        raise StreamFrameError(f"{what}: expected int, got {type(value).__name__}")
    if value < 0 or value > maximum:
        raise StreamFrameError(f"{what}: {value} is out of range 0..{maximum}")
    return int(value)


cdef object _int64(object value, str what):
    if not PyLong_Check(value) or PyBool_Check(value):
        raise StreamFrameError(f"{what}: expected int, got {type(value).__name__}")
    if value < -(1 << 63) or value >= (1 << 63):
        raise StreamFrameError(f"{what}: {value} is out of the int64 range")
    return int(value)


cdef object _string(object value, str what, bint nullable=False):
    cdef Py_ssize_t n = 0
    if value is None and nullable:
        return None
    if not PyUnicode_Check(value):
        raise StreamFrameError(f"{what}: expected str, got {type(value).__name__}")
    utf8_of(value, &n, what.encode())
    if n > _MAX_STRING:
        raise StreamFrameError(f"{what}: {n} bytes in UTF-8, a string holds at most {_MAX_STRING}")
    return str(value)


cdef list _strings(object values, str what):
    if isinstance(values, (str, bytes)) or values is None:
        raise StreamFrameError(f"{what}: expected a list of str, got {type(values).__name__}")
    return [_string(value, f"{what}[{i}]") for i, value in enumerate(values)]


cdef dict _string_map(object values, str what):
    cdef dict out = {}
    if values is None:
        return out
    if not isinstance(values, dict):
        raise StreamFrameError(f"{what}: expected a dict of str to str, got {type(values).__name__}")
    for k, v in (<dict>values).items():
        out[_string(k, f"{what} key")] = _string(v, f"{what}[{k!r}]")
    return out


cdef bytes _bytes(object value, str what):
    if PyBytes_CheckExact(value):
        return <bytes>value
    if PyObject_CheckBuffer(value) and not PyUnicode_Check(value):
        return bytes(value)
    raise StreamFrameError(f"{what}: expected bytes, got {type(value).__name__}")


cdef object _offset_value(object offset_type, object offset, str what, bint allow_none):
    """The offset a specification carries: an offset (uint64) for OFFSET, a timestamp
    (int64, ms) for TIMESTAMP, 0 for the others (nothing on the wire)."""
    if offset_type == OFFSET_TYPE_OFFSET:
        return _uint(offset, 0xFFFFFFFFFFFFFFFF, f"{what}.offset")
    if offset_type == OFFSET_TYPE_TIMESTAMP:
        return _int64(offset, f"{what}.offset")
    if (offset_type == OFFSET_TYPE_NONE and not allow_none) or not OFFSET_TYPE_NONE <= offset_type <= OFFSET_TYPE_NEXT:
        raise StreamFrameError(f"{what}.offset_type: {offset_type} is not an offset type")
    if offset != 0:
        raise StreamFrameError(f"{what}.offset: {offset!r} given with offset type {offset_type}, which carries none")
    return 0


# --- writing ------------------------------------------------------------------------------

cdef inline Py_ssize_t _begin(WriteBuffer buf, uint16_t key, uint16_t version) except -1:
    cdef Py_ssize_t start = buf._len
    buf.write_u32(0)
    buf.write_u16(key)
    buf.write_u16(version)
    return start


cdef inline int _end(WriteBuffer buf, Py_ssize_t start) except -1:
    cdef Py_ssize_t size = buf._len - start - _SIZE_PREFIX
    if size > 0xFFFFFFFF:
        buf._len = start
        raise StreamFrameError(f"a frame of {size} bytes does not fit a uint32 size")
    amqw_pack_u32(buf._buf + start, <uint32_t>size)
    return 0


cdef int _write_string(WriteBuffer buf, object value) except -1:
    cdef Py_ssize_t n = 0
    cdef const char *data
    if value is None:
        return buf.write_u16(0xFFFF)
    data = utf8_of(value, &n, b"string")
    buf.write_u16(<uint16_t>n)
    return buf.write_raw(data, n)


cdef int _write_strings(WriteBuffer buf, list values) except -1:
    buf.write_u32(<uint32_t>len(values))
    for value in values:
        _write_string(buf, value)
    return 0


cdef int _write_map(WriteBuffer buf, dict values) except -1:
    buf.write_u32(<uint32_t>len(values))
    for k, v in values.items():
        _write_string(buf, k)
        _write_string(buf, v)
    return 0


cdef int _write_offset_spec(WriteBuffer buf, int offset_type, object offset) except -1:
    buf.write_u16(<uint16_t>offset_type)
    if offset_type == OFFSET_TYPE_OFFSET:
        buf.write_u64(<uint64_t>offset)
    elif offset_type == OFFSET_TYPE_TIMESTAMP:
        buf.write_u64(<uint64_t><int64_t>offset)
    return 0


cdef int _write_message(WriteBuffer buf, object message, const char *what) except -1:
    """A message's size (31 bits, the top one 0) and bytes."""
    cdef Py_buffer view
    cdef Py_ssize_t n
    if PyBytes_CheckExact(message):
        n = PyBytes_GET_SIZE(message)
        if n > _MAX_MESSAGE:
            raise StreamFrameError(f"{what.decode()}: a message of {n} bytes is over the limit of {_MAX_MESSAGE}")
        buf.write_u32(<uint32_t>n)
        return buf.write_raw(PyBytes_AS_STRING(message), n)
    if PyUnicode_Check(message) or not PyObject_CheckBuffer(message):
        raise StreamFrameError(f"{what.decode()}: expected bytes, got {type(message).__name__}")
    PyObject_GetBuffer(message, &view, PyBUF_SIMPLE)
    try:
        if view.len > _MAX_MESSAGE:
            raise StreamFrameError(f"{what.decode()}: a message of {view.len} bytes is over the limit of {_MAX_MESSAGE}")
        buf.write_u32(<uint32_t>view.len)
        buf.write_raw(<const char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


# --- reading ------------------------------------------------------------------------------

cdef object _read_string(ReadView *v, const char *what, bint nullable=False):
    cdef uint16_t raw = 0
    cdef int16_t n
    cdef const char *p
    read_u16(v, &raw, what)
    n = <int16_t>raw
    if n == -1 and nullable:
        return None
    if n < 0:
        raise StreamFrameError(f"{what.decode()}: string length {n} at offset {v.base + v.pos - 2}",
                               offset=v.base + v.pos - 2)
    p = read_raw(v, n, what)
    return decode_utf8(p, n, v, what)


cdef list _read_strings(ReadView *v, const char *what):
    cdef uint32_t count = 0, _i
    cdef list out = []
    read_u32(v, &count, what)
    _check_count(v, count, 2, what)
    for _i in range(count):
        out.append(_read_string(v, what))
    return out


cdef dict _read_map(ReadView *v, const char *what):
    cdef uint32_t count = 0, _i
    cdef dict out = {}
    read_u32(v, &count, what)
    _check_count(v, count, 4, what)
    for _i in range(count):
        k = _read_string(v, what)
        out[k] = _read_string(v, what)
    return out


cdef int _check_count(ReadView *v, uint32_t count, Py_ssize_t least, const char *what) except -1:
    """An array's count against what is left: each item takes at least ``least`` bytes."""
    if <Py_ssize_t>count * least > v.len - v.pos:
        raise StreamFrameError(
            f"{what.decode()}: {count} items at offset {v.base + v.pos - 4} need at least "
            f"{<Py_ssize_t>count * least} bytes, only {v.len - v.pos} left", offset=v.base + v.pos - 4)
    return 0


cdef object _read_offset_spec(ReadView *v, int *offset_type, const char *what, bint allow_none):
    cdef uint16_t t = 0
    cdef uint64_t value = 0
    read_u16(v, &t, what)
    offset_type[0] = t
    if t == OFFSET_TYPE_OFFSET:
        read_u64(v, &value, what)
        return value
    if t == OFFSET_TYPE_TIMESTAMP:
        read_u64(v, &value, what)
        return <int64_t>value
    if (t == OFFSET_TYPE_NONE and allow_none) or OFFSET_TYPE_FIRST <= t <= OFFSET_TYPE_NEXT:
        return 0
    raise StreamFrameError(f"{what.decode()}: unknown offset type {t} at offset {v.base + v.pos - 2}",
                           offset=v.base + v.pos - 2)


# --- commands -----------------------------------------------------------------------------

cdef class StreamCommand:
    """Base of every command: ``KEY`` (the response bit included for responses),
    ``FIELDS``; ``encode()`` gives the whole frame, size prefix included."""
    KEY = 0
    FIELDS = ()

    cdef int write_frame(self, WriteBuffer buf) except -1:
        raise NotImplementedError

    def encode(self):
        """The whole frame: size, key, version, content."""
        cdef WriteBuffer buf = WriteBuffer(64)
        self.write_frame(buf)
        return buf.to_bytes()

    @property
    def version(self):
        return 1

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all([getattr(self, name) == getattr(other, name) for name in self.FIELDS])

    __hash__ = None

    def __repr__(self):
        fields = ", ".join([f"{name}={getattr(self, name)!r}" for name in self.FIELDS])
        return f"{type(self).__name__}({fields})"


cdef class SimpleResponse(StreamCommand):
    """A response that carries its request's correlation id and a response code only."""
    FIELDS = ("correlation_id", "response_code")
    cdef readonly uint32_t correlation_id
    cdef readonly uint16_t response_code

    def __init__(self, correlation_id, response_code=RESPONSE_OK):
        name = type(self).__name__
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, f"{name}.correlation_id")
        self.response_code = _uint(response_code, 0xFFFF, f"{name}.response_code")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, self.KEY, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        return _end(buf, start)

    @property
    def ok(self):
        """Whether the response code is 0x01 (ok)."""
        return self.response_code == RESPONSE_OK


cdef SimpleResponse _read_simple(type cls, ReadView *v):
    cdef SimpleResponse r = cls.__new__(cls)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    return r


# DeclarePublisher ----------------------------------------------------------------------

cdef class DeclarePublisher(StreamCommand):
    """Declares publisher ``publisher_id`` on ``stream``; ``reference`` (may be empty)
    names it for deduplication (QueryPublisherSequence)."""
    KEY = 0x0001
    FIELDS = ("correlation_id", "publisher_id", "reference", "stream")
    cdef readonly uint32_t correlation_id
    cdef readonly uint8_t publisher_id
    cdef readonly str reference
    cdef readonly str stream

    def __init__(self, correlation_id, publisher_id, reference, stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "DeclarePublisher.correlation_id")
        self.publisher_id = _uint(publisher_id, 0xFF, "DeclarePublisher.publisher_id")
        self.reference = _string(reference, "DeclarePublisher.reference")
        self.stream = _string(stream, "DeclarePublisher.stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0001, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u8(self.publisher_id)
        _write_string(buf, self.reference)
        _write_string(buf, self.stream)
        return _end(buf, start)


cdef DeclarePublisher _read_declare_publisher(ReadView *v):
    cdef DeclarePublisher c = DeclarePublisher.__new__(DeclarePublisher)
    read_u32(v, &c.correlation_id, b"correlation_id")
    read_u8(v, &c.publisher_id, b"publisher_id")
    c.reference = _read_string(v, b"reference")
    c.stream = _read_string(v, b"stream")
    return c


cdef class DeclarePublisherResponse(SimpleResponse):
    KEY = 0x8001


# Publish -------------------------------------------------------------------------------

cdef class SubEntry:
    """A batch of records published (and stored) as one entry with one publishing id:
    ``compression`` (COMPRESSION_*), ``record_count``, ``uncompressed_size`` and the
    (compressed) ``data``: the records, each ``uint32`` size + bytes."""
    cdef readonly int compression
    cdef readonly int record_count
    cdef readonly uint32_t uncompressed_size
    cdef readonly bytes data

    def __init__(self, compression, record_count, uncompressed_size, data):
        self.compression = _uint(compression, 7, "SubEntry.compression")
        self.record_count = _uint(record_count, 0xFFFF, "SubEntry.record_count")
        self.uncompressed_size = _uint(uncompressed_size, 0xFFFFFFFF, "SubEntry.uncompressed_size")
        self.data = _bytes(data, "SubEntry.data")
        if len(self.data) > 0xFFFFFFFF:
            raise StreamFrameError(f"SubEntry.data: {len(self.data)} bytes do not fit a uint32 size")

    def __eq__(self, other):
        if type(other) is not SubEntry:
            return NotImplemented
        o = <SubEntry>other
        return (self.compression, self.record_count, self.uncompressed_size, self.data) == \
               (o.compression, o.record_count, o.uncompressed_size, o.data)

    __hash__ = None

    def __repr__(self):
        return (f"SubEntry(compression={self.compression}, record_count={self.record_count}, "
                f"uncompressed_size={self.uncompressed_size}, data=<{len(self.data)} bytes>)")


cdef int _write_subentry(WriteBuffer buf, SubEntry e) except -1:
    buf.write_u8(0x80 | (e.compression << 4))
    buf.write_u16(<uint16_t>e.record_count)
    buf.write_u32(e.uncompressed_size)
    buf.write_u32(<uint32_t>len(e.data))
    return buf.write_raw(PyBytes_AS_STRING(e.data), PyBytes_GET_SIZE(e.data))


cdef class Publish(StreamCommand):
    """Messages of publisher ``publisher_id``: ``messages`` is a list of
    ``(publishing_id, message)``, a message being AMQP 1.0 encoded bytes or a
    :class:`SubEntry`.  With ``filter_values`` (one str or None per message) the frame is
    version 2 (RabbitMQ 3.13+: stream filtering), which takes no sub-entries.  No response:
    the broker answers with PublishConfirm / PublishError.  encode_publish() writes the
    same frame without building this object."""
    KEY = 0x0002
    FIELDS = ("publisher_id", "messages", "filter_values")
    cdef readonly uint8_t publisher_id
    cdef readonly list messages
    cdef readonly object filter_values

    def __init__(self, publisher_id, messages, filter_values=None):
        cdef list checked = []
        self.publisher_id = _uint(publisher_id, 0xFF, "Publish.publisher_id")
        for i, entry in enumerate(messages):
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise StreamFrameError(f"Publish.messages[{i}]: expected (publishing_id, message), got {entry!r:.60}")
            pid = _uint(entry[0], 0xFFFFFFFFFFFFFFFF, f"Publish.messages[{i}] publishing id")
            message = entry[1] if isinstance(entry[1], SubEntry) else _bytes(entry[1], f"Publish.messages[{i}]")
            if not isinstance(message, SubEntry) and len(message) > _MAX_MESSAGE:
                raise StreamFrameError(f"Publish.messages[{i}]: {len(message)} bytes, the limit is {_MAX_MESSAGE}")
            checked.append((pid, message))
        if len(checked) > 0xFFFFFFFF:
            raise StreamFrameError(f"Publish.messages: {len(checked)} messages do not fit a uint32 count")
        self.messages = checked
        if filter_values is not None:
            filter_values = [_string(f, f"Publish.filter_values[{i}]", True) for i, f in enumerate(filter_values)]
            if len(filter_values) != len(checked):
                raise StreamFrameError(
                    f"Publish.filter_values: {len(filter_values)} values for {len(checked)} messages")
            if any([isinstance(m, SubEntry) for _, m in checked]):
                raise StreamFrameError("Publish.messages: a sub-entry cannot carry a filter value (version 2)")
        self.filter_values = filter_values

    @property
    def version(self):
        return 1 if self.filter_values is None else 2

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0002, 1 if self.filter_values is None else 2)
        cdef Py_ssize_t i
        buf.write_u8(self.publisher_id)
        buf.write_u32(<uint32_t>len(self.messages))
        for i, (pid, message) in enumerate(self.messages):
            buf.write_u64(pid)
            if self.filter_values is not None:
                _write_string(buf, self.filter_values[i])
            if isinstance(message, SubEntry):
                _write_subentry(buf, <SubEntry>message)
            else:
                _write_message(buf, message, b"Publish.messages")
        return _end(buf, start)


cdef object _read_entry(ReadView *v):
    """A published message (top bit 0: uint31 size, bytes) or sub-entry (top bit 1)."""
    cdef uint32_t head = 0, uncompressed = 0, size = 0
    cdef uint16_t count = 0
    cdef uint8_t first = 0
    cdef const char *p
    cdef SubEntry e
    if v.len - v.pos < 1:
        read_u8(v, &first, b"message")
    if (<uint8_t>v.buf[v.pos]) & 0x80 == 0:
        read_u32(v, &head, b"message size")
        p = read_raw(v, head, b"message")
        return PyBytes_FromStringAndSize(p, head)
    read_u8(v, &first, b"sub-entry")
    read_u16(v, &count, b"sub-entry record count")
    read_u32(v, &uncompressed, b"sub-entry uncompressed size")
    read_u32(v, &size, b"sub-entry size")
    p = read_raw(v, size, b"sub-entry data")
    if first & 0x0F:
        raise StreamFrameError(f"sub-entry: reserved bits set in 0x{first:02x} at offset {v.base + v.pos - size - 11}",
                               offset=v.base + v.pos - size - 11)
    e = SubEntry.__new__(SubEntry)
    e.compression = (first >> 4) & 0x07
    e.record_count = count
    e.uncompressed_size = uncompressed
    e.data = PyBytes_FromStringAndSize(p, size)
    return e


cdef Publish _read_publish(ReadView *v, uint16_t version):
    cdef Publish c = Publish.__new__(Publish)
    cdef uint32_t count = 0, _i
    cdef uint64_t pid = 0
    cdef list messages = []
    cdef list filters = [] if version == 2 else None
    read_u8(v, &c.publisher_id, b"publisher_id")
    read_u32(v, &count, b"message count")
    _check_count(v, count, 12, b"messages")
    for _i in range(count):
        read_u64(v, &pid, b"publishing_id")
        if version == 2:
            filters.append(_read_string(v, b"filter value", True))
        message = _read_entry(v)
        if version == 2 and isinstance(message, SubEntry):
            raise StreamFrameError(f"sub-entry in a version 2 publish at offset {v.base + v.pos}", offset=v.base + v.pos)
        messages.append((pid, message))
    c.messages = messages
    c.filter_values = filters
    return c


# PublishConfirm, PublishError -----------------------------------------------------------

@cython.freelist(64)
cdef class PublishConfirm(StreamCommand):
    """The broker stored the messages with these publishing ids (server to client)."""
    KEY = 0x0003
    FIELDS = ("publisher_id", "publishing_ids")

    def __init__(self, publisher_id, publishing_ids):
        self.publisher_id = _uint(publisher_id, 0xFF, "PublishConfirm.publisher_id")
        self.publishing_ids = [_uint(p, 0xFFFFFFFFFFFFFFFF, "PublishConfirm.publishing_ids") for p in publishing_ids]

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0003, 1)
        buf.write_u8(self.publisher_id)
        buf.write_u32(<uint32_t>len(self.publishing_ids))
        for pid in self.publishing_ids:
            buf.write_u64(pid)
        return _end(buf, start)


cdef PublishConfirm _read_publish_confirm(ReadView *v):
    cdef PublishConfirm c = PublishConfirm.__new__(PublishConfirm)
    cdef uint32_t count = 0, i
    cdef list ids
    cdef const char *p
    read_u8(v, &c.publisher_id, b"publisher_id")
    read_u32(v, &count, b"publishing id count")
    _check_count(v, count, 8, b"publishing_ids")
    p = read_raw(v, <Py_ssize_t>count * 8, b"publishing_ids")
    ids = [None] * count
    for i in range(count):
        ids[i] = amqw_unpack_u64(p + 8 * i)
    c.publishing_ids = ids
    return c


cdef class PublishError(StreamCommand):
    """Messages the broker refused: ``errors`` is a list of (publishing_id, response_code)
    (server to client; RabbitMQ gives all of one frame the same code)."""
    KEY = 0x0004
    FIELDS = ("publisher_id", "errors")
    cdef readonly uint8_t publisher_id
    cdef readonly list errors

    def __init__(self, publisher_id, errors):
        self.publisher_id = _uint(publisher_id, 0xFF, "PublishError.publisher_id")
        self.errors = [(_uint(p, 0xFFFFFFFFFFFFFFFF, "PublishError.errors publishing id"),
                        _uint(code, 0xFFFF, "PublishError.errors code")) for p, code in errors]

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0004, 1)
        buf.write_u8(self.publisher_id)
        buf.write_u32(<uint32_t>len(self.errors))
        for pid, code in self.errors:
            buf.write_u64(pid)
            buf.write_u16(code)
        return _end(buf, start)


cdef PublishError _read_publish_error(ReadView *v):
    cdef PublishError c = PublishError.__new__(PublishError)
    cdef uint32_t count = 0, _i
    cdef uint64_t pid = 0
    cdef uint16_t code = 0
    cdef list errors = []
    read_u8(v, &c.publisher_id, b"publisher_id")
    read_u32(v, &count, b"error count")
    _check_count(v, count, 10, b"errors")
    for _i in range(count):
        read_u64(v, &pid, b"publishing_id")
        read_u16(v, &code, b"code")
        errors.append((pid, code))
    c.errors = errors
    return c


# QueryPublisherSequence, DeletePublisher ---------------------------------------------------

cdef class QueryPublisherSequence(StreamCommand):
    """The last publishing id the broker stored for publisher ``reference`` on ``stream``."""
    KEY = 0x0005
    FIELDS = ("correlation_id", "reference", "stream")
    cdef readonly uint32_t correlation_id
    cdef readonly str reference
    cdef readonly str stream

    def __init__(self, correlation_id, reference, stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "QueryPublisherSequence.correlation_id")
        self.reference = _string(reference, "QueryPublisherSequence.reference")
        self.stream = _string(stream, "QueryPublisherSequence.stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0005, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.reference)
        _write_string(buf, self.stream)
        return _end(buf, start)


cdef QueryPublisherSequence _read_query_publisher_sequence(ReadView *v):
    cdef QueryPublisherSequence c = QueryPublisherSequence.__new__(QueryPublisherSequence)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.reference = _read_string(v, b"reference")
    c.stream = _read_string(v, b"stream")
    return c


cdef class QueryPublisherSequenceResponse(SimpleResponse):
    KEY = 0x8005
    FIELDS = ("correlation_id", "response_code", "sequence")
    cdef readonly uint64_t sequence

    def __init__(self, correlation_id, response_code, sequence):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.sequence = _uint(sequence, 0xFFFFFFFFFFFFFFFF, "QueryPublisherSequenceResponse.sequence")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x8005, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        buf.write_u64(self.sequence)
        return _end(buf, start)


cdef QueryPublisherSequenceResponse _read_query_publisher_sequence_response(ReadView *v):
    cdef QueryPublisherSequenceResponse r = QueryPublisherSequenceResponse.__new__(QueryPublisherSequenceResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    read_u64(v, &r.sequence, b"sequence")
    return r


cdef class DeletePublisher(StreamCommand):
    KEY = 0x0006
    FIELDS = ("correlation_id", "publisher_id")
    cdef readonly uint32_t correlation_id
    cdef readonly uint8_t publisher_id

    def __init__(self, correlation_id, publisher_id):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "DeletePublisher.correlation_id")
        self.publisher_id = _uint(publisher_id, 0xFF, "DeletePublisher.publisher_id")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0006, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u8(self.publisher_id)
        return _end(buf, start)


cdef DeletePublisher _read_delete_publisher(ReadView *v):
    cdef DeletePublisher c = DeletePublisher.__new__(DeletePublisher)
    read_u32(v, &c.correlation_id, b"correlation_id")
    read_u8(v, &c.publisher_id, b"publisher_id")
    return c


cdef class DeletePublisherResponse(SimpleResponse):
    KEY = 0x8006


# Subscribe, Deliver, Credit ----------------------------------------------------------------

cdef class Subscribe(StreamCommand):
    """Subscription ``subscription_id`` on ``stream`` from an offset specification
    (``offset_type``: OFFSET_TYPE_FIRST/LAST/NEXT, or OFFSET/TIMESTAMP with ``offset``: an
    offset, or a timestamp in ms), with ``credit`` chunks to start with.  ``properties``
    (e.g. ``single-active-consumer``, ``name``, ``filter.0``) are left out of the frame when
    empty, as RabbitMQ's own clients do."""
    KEY = 0x0007
    FIELDS = ("correlation_id", "subscription_id", "stream", "offset_type", "offset", "credit", "properties")
    cdef readonly uint32_t correlation_id
    cdef readonly uint8_t subscription_id
    cdef readonly str stream
    cdef readonly int offset_type
    cdef readonly object offset
    cdef readonly uint16_t credit
    cdef readonly dict properties

    def __init__(self, correlation_id, subscription_id, stream, offset_type, offset=0, credit=1, properties=None):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Subscribe.correlation_id")
        self.subscription_id = _uint(subscription_id, 0xFF, "Subscribe.subscription_id")
        self.stream = _string(stream, "Subscribe.stream")
        self.offset_type = _uint(offset_type, 0xFFFF, "Subscribe.offset_type")
        self.offset = _offset_value(offset_type, offset, "Subscribe", False)
        self.credit = _uint(credit, 0xFFFF, "Subscribe.credit")
        self.properties = _string_map(properties, "Subscribe.properties")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0007, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u8(self.subscription_id)
        _write_string(buf, self.stream)
        _write_offset_spec(buf, self.offset_type, self.offset)
        buf.write_u16(self.credit)
        if self.properties:
            _write_map(buf, self.properties)
        return _end(buf, start)


cdef Subscribe _read_subscribe(ReadView *v):
    cdef Subscribe c = Subscribe.__new__(Subscribe)
    read_u32(v, &c.correlation_id, b"correlation_id")
    read_u8(v, &c.subscription_id, b"subscription_id")
    c.stream = _read_string(v, b"stream")
    c.offset = _read_offset_spec(v, &c.offset_type, b"offset specification", False)
    read_u16(v, &c.credit, b"credit")
    c.properties = _read_map(v, b"properties") if v.pos < v.len else {}
    return c


cdef class SubscribeResponse(SimpleResponse):
    KEY = 0x8007


@cython.freelist(64)
cdef class Deliver(StreamCommand):
    """A chunk for subscription ``subscription_id`` (server to client): ``chunk`` is the
    Osiris chunk, header and entries (amqwire.codec.stream.chunk reads it; the trailer the
    header announces is not sent).  Version 2 (RabbitMQ 3.13+, asked for with
    ExchangeCommandVersions) adds ``committed_offset``, the stream's committed chunk id;
    it is None in version 1."""
    KEY = 0x0008
    FIELDS = ("subscription_id", "committed_offset", "chunk")

    def __init__(self, subscription_id, chunk, committed_offset=None):
        self.subscription_id = _uint(subscription_id, 0xFF, "Deliver.subscription_id")
        if committed_offset is not None:
            committed_offset = _uint(committed_offset, 0xFFFFFFFFFFFFFFFF, "Deliver.committed_offset")
        self.committed_offset = committed_offset
        self.chunk = _bytes(chunk, "Deliver.chunk")

    @property
    def version(self):
        return 1 if self.committed_offset is None else 2

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0008, 1 if self.committed_offset is None else 2)
        buf.write_u8(self.subscription_id)
        if self.committed_offset is not None:
            buf.write_u64(self.committed_offset)
        buf.write_raw(PyBytes_AS_STRING(self.chunk), PyBytes_GET_SIZE(self.chunk))
        return _end(buf, start)

    def __repr__(self):
        return (f"Deliver(subscription_id={self.subscription_id}, committed_offset={self.committed_offset}, "
                f"chunk=<{len(self.chunk)} bytes>)")


cdef Deliver _read_deliver(ReadView *v, uint16_t version):
    cdef Deliver c = Deliver.__new__(Deliver)
    cdef uint64_t committed = 0
    cdef Py_ssize_t n
    read_u8(v, &c.subscription_id, b"subscription_id")
    if version == 2:
        read_u64(v, &committed, b"committed_offset")
        c.committed_offset = committed
    n = v.len - v.pos
    c.chunk = PyBytes_FromStringAndSize(read_raw(v, n, b"chunk"), n)
    return c


cdef class Credit(StreamCommand):
    """``credit`` more chunks for subscription ``subscription_id``.  RabbitMQ reads the
    credit as a signed int16: at most 32767 at a time.  Answered (CreditResponse) only
    when it fails."""
    KEY = 0x0009
    FIELDS = ("subscription_id", "credit")
    cdef readonly uint8_t subscription_id
    cdef readonly uint16_t credit

    def __init__(self, subscription_id, credit):
        self.subscription_id = _uint(subscription_id, 0xFF, "Credit.subscription_id")
        self.credit = _uint(credit, 0x7FFF, "Credit.credit")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0009, 1)
        buf.write_u8(self.subscription_id)
        buf.write_u16(self.credit)
        return _end(buf, start)


cdef Credit _read_credit(ReadView *v):
    cdef Credit c = Credit.__new__(Credit)
    read_u8(v, &c.subscription_id, b"subscription_id")
    read_u16(v, &c.credit, b"credit")
    if c.credit > 0x7FFF:
        raise StreamFrameError(f"credit: {c.credit} at offset {v.base + v.pos - 2} is negative as the int16 RabbitMQ reads",
                               offset=v.base + v.pos - 2)
    return c


cdef class CreditResponse(StreamCommand):
    """Credit failed (e.g. an unknown subscription): no correlation id."""
    KEY = 0x8009
    FIELDS = ("response_code", "subscription_id")
    cdef readonly uint16_t response_code
    cdef readonly uint8_t subscription_id

    def __init__(self, response_code, subscription_id):
        self.response_code = _uint(response_code, 0xFFFF, "CreditResponse.response_code")
        self.subscription_id = _uint(subscription_id, 0xFF, "CreditResponse.subscription_id")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x8009, 1)
        buf.write_u16(self.response_code)
        buf.write_u8(self.subscription_id)
        return _end(buf, start)


cdef CreditResponse _read_credit_response(ReadView *v):
    cdef CreditResponse r = CreditResponse.__new__(CreditResponse)
    read_u16(v, &r.response_code, b"response_code")
    read_u8(v, &r.subscription_id, b"subscription_id")
    return r


# StoreOffset, QueryOffset, Unsubscribe -----------------------------------------------------

cdef class StoreOffset(StreamCommand):
    """Stores ``offset`` for consumer ``reference`` on ``stream`` (no response)."""
    KEY = 0x000A
    FIELDS = ("reference", "stream", "offset")
    cdef readonly str reference
    cdef readonly str stream
    cdef readonly uint64_t offset

    def __init__(self, reference, stream, offset):
        self.reference = _string(reference, "StoreOffset.reference")
        self.stream = _string(stream, "StoreOffset.stream")
        self.offset = _uint(offset, 0xFFFFFFFFFFFFFFFF, "StoreOffset.offset")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x000A, 1)
        _write_string(buf, self.reference)
        _write_string(buf, self.stream)
        buf.write_u64(self.offset)
        return _end(buf, start)


cdef StoreOffset _read_store_offset(ReadView *v):
    cdef StoreOffset c = StoreOffset.__new__(StoreOffset)
    c.reference = _read_string(v, b"reference")
    c.stream = _read_string(v, b"stream")
    read_u64(v, &c.offset, b"offset")
    return c


cdef class QueryOffset(StreamCommand):
    KEY = 0x000B
    FIELDS = ("correlation_id", "reference", "stream")
    cdef readonly uint32_t correlation_id
    cdef readonly str reference
    cdef readonly str stream

    def __init__(self, correlation_id, reference, stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "QueryOffset.correlation_id")
        self.reference = _string(reference, "QueryOffset.reference")
        self.stream = _string(stream, "QueryOffset.stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x000B, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.reference)
        _write_string(buf, self.stream)
        return _end(buf, start)


cdef QueryOffset _read_query_offset(ReadView *v):
    cdef QueryOffset c = QueryOffset.__new__(QueryOffset)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.reference = _read_string(v, b"reference")
    c.stream = _read_string(v, b"stream")
    return c


cdef class QueryOffsetResponse(SimpleResponse):
    """The stored offset; response code 0x13 (no offset) when none was stored."""
    KEY = 0x800B
    FIELDS = ("correlation_id", "response_code", "offset")
    cdef readonly uint64_t offset

    def __init__(self, correlation_id, response_code, offset):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.offset = _uint(offset, 0xFFFFFFFFFFFFFFFF, "QueryOffsetResponse.offset")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x800B, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        buf.write_u64(self.offset)
        return _end(buf, start)


cdef QueryOffsetResponse _read_query_offset_response(ReadView *v):
    cdef QueryOffsetResponse r = QueryOffsetResponse.__new__(QueryOffsetResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    read_u64(v, &r.offset, b"offset")
    return r


cdef class Unsubscribe(StreamCommand):
    KEY = 0x000C
    FIELDS = ("correlation_id", "subscription_id")
    cdef readonly uint32_t correlation_id
    cdef readonly uint8_t subscription_id

    def __init__(self, correlation_id, subscription_id):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Unsubscribe.correlation_id")
        self.subscription_id = _uint(subscription_id, 0xFF, "Unsubscribe.subscription_id")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x000C, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u8(self.subscription_id)
        return _end(buf, start)


cdef Unsubscribe _read_unsubscribe(ReadView *v):
    cdef Unsubscribe c = Unsubscribe.__new__(Unsubscribe)
    read_u32(v, &c.correlation_id, b"correlation_id")
    read_u8(v, &c.subscription_id, b"subscription_id")
    return c


cdef class UnsubscribeResponse(SimpleResponse):
    KEY = 0x800C


# Create, Delete ------------------------------------------------------------------------------

cdef class Create(StreamCommand):
    """Creates ``stream`` with ``arguments`` (e.g. ``max-length-bytes``,
    ``max-age``, ``stream-max-segment-size-bytes``, ``initial-cluster-size``)."""
    KEY = 0x000D
    FIELDS = ("correlation_id", "stream", "arguments")
    cdef readonly uint32_t correlation_id
    cdef readonly str stream
    cdef readonly dict arguments

    def __init__(self, correlation_id, stream, arguments=None):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Create.correlation_id")
        self.stream = _string(stream, "Create.stream")
        self.arguments = _string_map(arguments, "Create.arguments")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x000D, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.stream)
        _write_map(buf, self.arguments)
        return _end(buf, start)


cdef Create _read_create(ReadView *v):
    cdef Create c = Create.__new__(Create)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.stream = _read_string(v, b"stream")
    c.arguments = _read_map(v, b"arguments")
    return c


cdef class CreateResponse(SimpleResponse):
    KEY = 0x800D


cdef class Delete(StreamCommand):
    KEY = 0x000E
    FIELDS = ("correlation_id", "stream")
    cdef readonly uint32_t correlation_id
    cdef readonly str stream

    def __init__(self, correlation_id, stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Delete.correlation_id")
        self.stream = _string(stream, "Delete.stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x000E, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.stream)
        return _end(buf, start)


cdef Delete _read_delete(ReadView *v):
    cdef Delete c = Delete.__new__(Delete)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.stream = _read_string(v, b"stream")
    return c


cdef class DeleteResponse(SimpleResponse):
    KEY = 0x800E


# Metadata, MetadataUpdate ----------------------------------------------------------------------

cdef class Metadata(StreamCommand):
    """Where ``streams`` live: their leader and replicas (MetadataResponse)."""
    KEY = 0x000F
    FIELDS = ("correlation_id", "streams")
    cdef readonly uint32_t correlation_id
    cdef readonly list streams

    def __init__(self, correlation_id, streams):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Metadata.correlation_id")
        self.streams = _strings(streams, "Metadata.streams")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x000F, 1)
        buf.write_u32(self.correlation_id)
        _write_strings(buf, self.streams)
        return _end(buf, start)


cdef Metadata _read_metadata(ReadView *v):
    cdef Metadata c = Metadata.__new__(Metadata)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.streams = _read_strings(v, b"streams")
    return c


cdef class MetadataResponse(StreamCommand):
    """``brokers``: list of Broker(reference, host, port); ``streams``: list of
    StreamMetadata(stream, response_code, leader, replicas) naming brokers by reference.
    No response code of its own: each stream has one."""
    KEY = 0x800F
    FIELDS = ("correlation_id", "brokers", "streams")
    cdef readonly uint32_t correlation_id
    cdef readonly list brokers
    cdef readonly list streams

    def __init__(self, correlation_id, brokers, streams):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "MetadataResponse.correlation_id")
        self.brokers = [Broker(_uint(r, 0xFFFF, "MetadataResponse.brokers reference"),
                               _string(h, "MetadataResponse.brokers host"),
                               _uint(p, 0xFFFFFFFF, "MetadataResponse.brokers port")) for r, h, p in brokers]
        self.streams = [StreamMetadata(_string(s, "MetadataResponse.streams stream"),
                                       _uint(code, 0xFFFF, "MetadataResponse.streams response_code"),
                                       _uint(leader, 0xFFFF, "MetadataResponse.streams leader"),
                                       [_uint(r, 0xFFFF, "MetadataResponse.streams replicas") for r in replicas])
                        for s, code, leader, replicas in streams]

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x800F, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u32(<uint32_t>len(self.brokers))
        for reference, host, port in self.brokers:
            buf.write_u16(reference)
            _write_string(buf, host)
            buf.write_u32(port)
        buf.write_u32(<uint32_t>len(self.streams))
        for stream, code, leader, replicas in self.streams:
            _write_string(buf, stream)
            buf.write_u16(code)
            buf.write_u16(leader)
            buf.write_u32(<uint32_t>len(replicas))
            for r in replicas:
                buf.write_u16(r)
        return _end(buf, start)


cdef MetadataResponse _read_metadata_response(ReadView *v):
    cdef MetadataResponse r = MetadataResponse.__new__(MetadataResponse)
    cdef uint32_t count = 0, replica_count = 0, _i, _j, port = 0
    cdef uint16_t reference = 0, code = 0, leader = 0, replica = 0
    cdef list brokers = [], streams = [], replicas
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u32(v, &count, b"broker count")
    _check_count(v, count, 8, b"brokers")
    for _i in range(count):
        read_u16(v, &reference, b"broker reference")
        host = _read_string(v, b"broker host")
        read_u32(v, &port, b"broker port")
        brokers.append(Broker(reference, host, port))
    read_u32(v, &count, b"stream count")
    _check_count(v, count, 10, b"streams")
    for _i in range(count):
        stream = _read_string(v, b"stream")
        read_u16(v, &code, b"stream response_code")
        read_u16(v, &leader, b"stream leader")
        read_u32(v, &replica_count, b"replica count")
        _check_count(v, replica_count, 2, b"replicas")
        replicas = []
        for _j in range(replica_count):
            read_u16(v, &replica, b"replica")
            replicas.append(replica)
        streams.append(StreamMetadata(stream, code, leader, replicas))
    r.brokers = brokers
    r.streams = streams
    return r


cdef class MetadataUpdate(StreamCommand):
    """Something changed about ``stream`` (server to client): code 0x06 (stream not
    available) when its leader moved or it was deleted."""
    KEY = 0x0010
    FIELDS = ("response_code", "stream")
    cdef readonly uint16_t response_code
    cdef readonly str stream

    def __init__(self, response_code, stream):
        self.response_code = _uint(response_code, 0xFFFF, "MetadataUpdate.response_code")
        self.stream = _string(stream, "MetadataUpdate.stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0010, 1)
        buf.write_u16(self.response_code)
        _write_string(buf, self.stream)
        return _end(buf, start)


cdef MetadataUpdate _read_metadata_update(ReadView *v):
    cdef MetadataUpdate c = MetadataUpdate.__new__(MetadataUpdate)
    read_u16(v, &c.response_code, b"response_code")
    c.stream = _read_string(v, b"stream")
    return c


# Connection: PeerProperties, SASL, Tune, Open, Close, Heartbeat ----------------------------------

cdef class PeerProperties(StreamCommand):
    KEY = 0x0011
    FIELDS = ("correlation_id", "properties")
    cdef readonly uint32_t correlation_id
    cdef readonly dict properties

    def __init__(self, correlation_id, properties=None):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "PeerProperties.correlation_id")
        self.properties = _string_map(properties, "PeerProperties.properties")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0011, 1)
        buf.write_u32(self.correlation_id)
        _write_map(buf, self.properties)
        return _end(buf, start)


cdef PeerProperties _read_peer_properties(ReadView *v):
    cdef PeerProperties c = PeerProperties.__new__(PeerProperties)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.properties = _read_map(v, b"properties")
    return c


cdef class PeerPropertiesResponse(SimpleResponse):
    KEY = 0x8011
    FIELDS = ("correlation_id", "response_code", "properties")
    cdef readonly dict properties

    def __init__(self, correlation_id, response_code, properties=None):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.properties = _string_map(properties, "PeerPropertiesResponse.properties")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x8011, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        _write_map(buf, self.properties)
        return _end(buf, start)


cdef PeerPropertiesResponse _read_peer_properties_response(ReadView *v):
    cdef PeerPropertiesResponse r = PeerPropertiesResponse.__new__(PeerPropertiesResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    r.properties = _read_map(v, b"properties")
    return r


cdef class SaslHandshake(StreamCommand):
    """Asks for the SASL mechanisms the server offers (no mechanism in the request)."""
    KEY = 0x0012
    FIELDS = ("correlation_id",)
    cdef readonly uint32_t correlation_id

    def __init__(self, correlation_id):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "SaslHandshake.correlation_id")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0012, 1)
        buf.write_u32(self.correlation_id)
        return _end(buf, start)


cdef SaslHandshake _read_sasl_handshake(ReadView *v):
    cdef SaslHandshake c = SaslHandshake.__new__(SaslHandshake)
    read_u32(v, &c.correlation_id, b"correlation_id")
    return c


cdef class SaslHandshakeResponse(SimpleResponse):
    KEY = 0x8012
    FIELDS = ("correlation_id", "response_code", "mechanisms")
    cdef readonly list mechanisms

    def __init__(self, correlation_id, response_code, mechanisms):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.mechanisms = _strings(mechanisms, "SaslHandshakeResponse.mechanisms")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x8012, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        _write_strings(buf, self.mechanisms)
        return _end(buf, start)


cdef SaslHandshakeResponse _read_sasl_handshake_response(ReadView *v):
    cdef SaslHandshakeResponse r = SaslHandshakeResponse.__new__(SaslHandshakeResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    r.mechanisms = _read_strings(v, b"mechanisms")
    return r


cdef class SaslAuthenticate(StreamCommand):
    """``mechanism`` and its data (PLAIN: ``b"\\0user\\0password"``); None is written as
    length -1, as RabbitMQ writes an empty response."""
    KEY = 0x0013
    FIELDS = ("correlation_id", "mechanism", "data")
    cdef readonly uint32_t correlation_id
    cdef readonly str mechanism
    cdef readonly bytes data

    def __init__(self, correlation_id, mechanism, data):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "SaslAuthenticate.correlation_id")
        self.mechanism = _string(mechanism, "SaslAuthenticate.mechanism")
        self.data = None if data is None else _bytes(data, "SaslAuthenticate.data")
        if self.data is not None and len(self.data) > 0x7FFFFFFF:
            raise StreamFrameError(f"SaslAuthenticate.data: {len(self.data)} bytes, the limit is {0x7FFFFFFF}")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0013, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.mechanism)
        if self.data is None:
            buf.write_u32(0xFFFFFFFF)
        else:
            buf.write_u32(<uint32_t>len(self.data))
            buf.write_raw(PyBytes_AS_STRING(self.data), PyBytes_GET_SIZE(self.data))
        return _end(buf, start)


cdef SaslAuthenticate _read_sasl_authenticate(ReadView *v):
    cdef SaslAuthenticate c = SaslAuthenticate.__new__(SaslAuthenticate)
    cdef uint32_t n = 0
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.mechanism = _read_string(v, b"mechanism")
    read_u32(v, &n, b"data")
    if <int32_t>n == -1:
        c.data = None
    elif <int32_t>n < 0:
        raise StreamFrameError(f"data: length {<int32_t>n} at offset {v.base + v.pos - 4}", offset=v.base + v.pos - 4)
    else:
        c.data = PyBytes_FromStringAndSize(read_raw(v, n, b"data"), n)
    return c


cdef class SaslAuthenticateResponse(SimpleResponse):
    """``challenge`` (code 0x0a) follows the code with a uint16 length, as RabbitMQ writes
    it (PROTOCOL.adoc says int32); empty, it is left out."""
    KEY = 0x8013
    FIELDS = ("correlation_id", "response_code", "challenge")
    cdef readonly bytes challenge

    def __init__(self, correlation_id, response_code, challenge=b""):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.challenge = _bytes(challenge, "SaslAuthenticateResponse.challenge")
        if len(self.challenge) > 0xFFFF:
            raise StreamFrameError(f"SaslAuthenticateResponse.challenge: {len(self.challenge)} bytes, the limit is 65535")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x8013, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        if self.challenge:
            buf.write_u16(<uint16_t>len(self.challenge))
            buf.write_raw(PyBytes_AS_STRING(self.challenge), PyBytes_GET_SIZE(self.challenge))
        return _end(buf, start)


cdef SaslAuthenticateResponse _read_sasl_authenticate_response(ReadView *v):
    cdef SaslAuthenticateResponse r = SaslAuthenticateResponse.__new__(SaslAuthenticateResponse)
    cdef uint16_t n = 0
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    if v.pos < v.len:
        read_u16(v, &n, b"challenge")
        if n == 0:
            raise StreamFrameError(f"challenge: an empty challenge is left out, not sent at offset {v.base + v.pos - 2}",
                                   offset=v.base + v.pos - 2)
        r.challenge = PyBytes_FromStringAndSize(read_raw(v, n, b"challenge"), n)
    else:
        r.challenge = b""
    return r


cdef class Tune(StreamCommand):
    """The server's proposal (request, key 0x0014): ``frame_max`` in bytes and
    ``heartbeat`` in seconds, 0 for no limit / none.  The client answers with TuneResponse."""
    KEY = 0x0014
    FIELDS = ("frame_max", "heartbeat")
    cdef readonly uint32_t frame_max
    cdef readonly uint32_t heartbeat

    def __init__(self, frame_max, heartbeat):
        name = type(self).__name__
        self.frame_max = _uint(frame_max, 0xFFFFFFFF, f"{name}.frame_max")
        self.heartbeat = _uint(heartbeat, 0xFFFFFFFF, f"{name}.heartbeat")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, self.KEY, 1)
        buf.write_u32(self.frame_max)
        buf.write_u32(self.heartbeat)
        return _end(buf, start)


cdef class TuneResponse(Tune):
    """The client's answer to Tune (key 0x8014): the values it agrees on."""
    KEY = 0x8014


cdef Tune _read_tune(type cls, ReadView *v):
    cdef Tune c = cls.__new__(cls)
    read_u32(v, &c.frame_max, b"frame_max")
    read_u32(v, &c.heartbeat, b"heartbeat")
    return c


cdef class Open(StreamCommand):
    KEY = 0x0015
    FIELDS = ("correlation_id", "virtual_host")
    cdef readonly uint32_t correlation_id
    cdef readonly str virtual_host

    def __init__(self, correlation_id, virtual_host="/"):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Open.correlation_id")
        self.virtual_host = _string(virtual_host, "Open.virtual_host")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0015, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.virtual_host)
        return _end(buf, start)


cdef Open _read_open(ReadView *v):
    cdef Open c = Open.__new__(Open)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.virtual_host = _read_string(v, b"virtual_host")
    return c


cdef class OpenResponse(SimpleResponse):
    """``properties``: the connection's (RabbitMQ: advertised_host, advertised_port); left
    out of the frame when empty (as on a failed open)."""
    KEY = 0x8015
    FIELDS = ("correlation_id", "response_code", "properties")
    cdef readonly dict properties

    def __init__(self, correlation_id, response_code, properties=None):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.properties = _string_map(properties, "OpenResponse.properties")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x8015, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        if self.properties:
            _write_map(buf, self.properties)
        return _end(buf, start)


cdef OpenResponse _read_open_response(ReadView *v):
    cdef OpenResponse r = OpenResponse.__new__(OpenResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    r.properties = _read_map(v, b"properties") if v.pos < v.len else {}
    return r


cdef class Close(StreamCommand):
    """Either side closes the connection with ``code`` (a response code) and ``reason``."""
    KEY = 0x0016
    FIELDS = ("correlation_id", "code", "reason")
    cdef readonly uint32_t correlation_id
    cdef readonly uint16_t code
    cdef readonly str reason

    def __init__(self, correlation_id, code=RESPONSE_OK, reason=""):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Close.correlation_id")
        self.code = _uint(code, 0xFFFF, "Close.code")
        self.reason = _string(reason, "Close.reason")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0016, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.code)
        _write_string(buf, self.reason)
        return _end(buf, start)


cdef Close _read_close(ReadView *v):
    cdef Close c = Close.__new__(Close)
    read_u32(v, &c.correlation_id, b"correlation_id")
    read_u16(v, &c.code, b"code")
    c.reason = _read_string(v, b"reason")
    return c


cdef class CloseResponse(SimpleResponse):
    KEY = 0x8016


cdef class Heartbeat(StreamCommand):
    """Either side, when it has sent nothing else for a while (no content)."""
    KEY = 0x0017

    cdef int write_frame(self, WriteBuffer buf) except -1:
        return _end(buf, _begin(buf, 0x0017, 1))


cdef Heartbeat _HEARTBEAT = Heartbeat()


# Super streams: Route, Partitions (3.10 knows them), Create/DeleteSuperStream ---------------------

cdef class Route(StreamCommand):
    """The partitions of super stream ``super_stream`` that ``routing_key`` goes to."""
    KEY = 0x0018
    FIELDS = ("correlation_id", "routing_key", "super_stream")
    cdef readonly uint32_t correlation_id
    cdef readonly str routing_key
    cdef readonly str super_stream

    def __init__(self, correlation_id, routing_key, super_stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Route.correlation_id")
        self.routing_key = _string(routing_key, "Route.routing_key")
        self.super_stream = _string(super_stream, "Route.super_stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0018, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.routing_key)
        _write_string(buf, self.super_stream)
        return _end(buf, start)


cdef Route _read_route(ReadView *v):
    cdef Route c = Route.__new__(Route)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.routing_key = _read_string(v, b"routing_key")
    c.super_stream = _read_string(v, b"super_stream")
    return c


cdef class StreamsResponse(SimpleResponse):
    """A response code and a list of stream names (RouteResponse, PartitionsResponse)."""
    FIELDS = ("correlation_id", "response_code", "streams")
    cdef readonly list streams

    def __init__(self, correlation_id, response_code, streams):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.streams = _strings(streams, f"{type(self).__name__}.streams")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, self.KEY, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        _write_strings(buf, self.streams)
        return _end(buf, start)


cdef class RouteResponse(StreamsResponse):
    KEY = 0x8018


cdef StreamsResponse _read_streams_response(type cls, ReadView *v):
    cdef StreamsResponse r = cls.__new__(cls)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    r.streams = _read_strings(v, b"streams")
    return r


cdef class Partitions(StreamCommand):
    KEY = 0x0019
    FIELDS = ("correlation_id", "super_stream")
    cdef readonly uint32_t correlation_id
    cdef readonly str super_stream

    def __init__(self, correlation_id, super_stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "Partitions.correlation_id")
        self.super_stream = _string(super_stream, "Partitions.super_stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x0019, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.super_stream)
        return _end(buf, start)


cdef Partitions _read_partitions(ReadView *v):
    cdef Partitions c = Partitions.__new__(Partitions)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.super_stream = _read_string(v, b"super_stream")
    return c


cdef class PartitionsResponse(StreamsResponse):
    KEY = 0x8019


cdef class CreateSuperStream(StreamCommand):
    """RabbitMQ 3.13+: super stream ``name`` with ``partitions`` bound by ``binding_keys``."""
    KEY = 0x001D
    FIELDS = ("correlation_id", "name", "partitions", "binding_keys", "arguments")
    cdef readonly uint32_t correlation_id
    cdef readonly str name
    cdef readonly list partitions
    cdef readonly list binding_keys
    cdef readonly dict arguments

    def __init__(self, correlation_id, name, partitions, binding_keys, arguments=None):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "CreateSuperStream.correlation_id")
        self.name = _string(name, "CreateSuperStream.name")
        self.partitions = _strings(partitions, "CreateSuperStream.partitions")
        self.binding_keys = _strings(binding_keys, "CreateSuperStream.binding_keys")
        self.arguments = _string_map(arguments, "CreateSuperStream.arguments")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x001D, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.name)
        _write_strings(buf, self.partitions)
        _write_strings(buf, self.binding_keys)
        _write_map(buf, self.arguments)
        return _end(buf, start)


cdef CreateSuperStream _read_create_super_stream(ReadView *v):
    cdef CreateSuperStream c = CreateSuperStream.__new__(CreateSuperStream)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.name = _read_string(v, b"name")
    c.partitions = _read_strings(v, b"partitions")
    c.binding_keys = _read_strings(v, b"binding_keys")
    c.arguments = _read_map(v, b"arguments")
    return c


cdef class CreateSuperStreamResponse(SimpleResponse):
    KEY = 0x801D


cdef class DeleteSuperStream(StreamCommand):
    KEY = 0x001E
    FIELDS = ("correlation_id", "name")
    cdef readonly uint32_t correlation_id
    cdef readonly str name

    def __init__(self, correlation_id, name):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "DeleteSuperStream.correlation_id")
        self.name = _string(name, "DeleteSuperStream.name")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x001E, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.name)
        return _end(buf, start)


cdef DeleteSuperStream _read_delete_super_stream(ReadView *v):
    cdef DeleteSuperStream c = DeleteSuperStream.__new__(DeleteSuperStream)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.name = _read_string(v, b"name")
    return c


cdef class DeleteSuperStreamResponse(SimpleResponse):
    KEY = 0x801E


# Newer than 3.10: ConsumerUpdate, ExchangeCommandVersions, StreamStats, ResolveOffsetSpec -----------

cdef class ConsumerUpdate(StreamCommand):
    """RabbitMQ 3.11+, single active consumer (server to client): subscription
    ``subscription_id`` becomes ``active`` or not.  The client answers with
    ConsumerUpdateResponse and the offset to start from."""
    KEY = 0x001A
    FIELDS = ("correlation_id", "subscription_id", "active")
    cdef readonly uint32_t correlation_id
    cdef readonly uint8_t subscription_id
    cdef readonly bint active

    def __init__(self, correlation_id, subscription_id, active):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "ConsumerUpdate.correlation_id")
        self.subscription_id = _uint(subscription_id, 0xFF, "ConsumerUpdate.subscription_id")
        if active is not True and active is not False:
            raise StreamFrameError(f"ConsumerUpdate.active: expected bool, got {active!r}")
        self.active = active

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x001A, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u8(self.subscription_id)
        buf.write_u8(1 if self.active else 0)
        return _end(buf, start)


cdef ConsumerUpdate _read_consumer_update(ReadView *v):
    cdef ConsumerUpdate c = ConsumerUpdate.__new__(ConsumerUpdate)
    cdef uint8_t active = 0
    read_u32(v, &c.correlation_id, b"correlation_id")
    read_u8(v, &c.subscription_id, b"subscription_id")
    read_u8(v, &active, b"active")
    if active > 1:
        raise StreamFrameError(f"active: {active} at offset {v.base + v.pos - 1} is not 0 or 1", offset=v.base + v.pos - 1)
    c.active = active == 1
    return c


cdef class ConsumerUpdateResponse(SimpleResponse):
    """Where the consumer that became active starts: an offset specification, or
    OFFSET_TYPE_NONE (0) for where it was."""
    KEY = 0x801A
    FIELDS = ("correlation_id", "response_code", "offset_type", "offset")
    cdef readonly int offset_type
    cdef readonly object offset

    def __init__(self, correlation_id, response_code, offset_type, offset=0):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.offset_type = _uint(offset_type, 0xFFFF, "ConsumerUpdateResponse.offset_type")
        self.offset = _offset_value(offset_type, offset, "ConsumerUpdateResponse", True)

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x801A, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        _write_offset_spec(buf, self.offset_type, self.offset)
        return _end(buf, start)


cdef ConsumerUpdateResponse _read_consumer_update_response(ReadView *v):
    cdef ConsumerUpdateResponse r = ConsumerUpdateResponse.__new__(ConsumerUpdateResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    r.offset = _read_offset_spec(v, &r.offset_type, b"offset specification", True)
    return r


cdef list _command_versions(object versions, str what):
    return [CommandVersion(_uint(k, 0xFFFF, f"{what} key"), _uint(lo, 0xFFFF, f"{what} min_version"),
                           _uint(hi, 0xFFFF, f"{what} max_version")) for k, lo, hi in versions]


cdef int _write_command_versions(WriteBuffer buf, list versions) except -1:
    buf.write_u32(<uint32_t>len(versions))
    for key, low, high in versions:
        buf.write_u16(key)
        buf.write_u16(low)
        buf.write_u16(high)
    return 0


cdef list _read_command_versions(ReadView *v):
    cdef uint32_t count = 0, _i
    cdef uint16_t key = 0, low = 0, high = 0
    cdef list out = []
    read_u32(v, &count, b"command count")
    _check_count(v, count, 6, b"commands")
    for _i in range(count):
        read_u16(v, &key, b"command key")
        read_u16(v, &low, b"command min_version")
        read_u16(v, &high, b"command max_version")
        out.append(CommandVersion(key, low, high))
    return out


cdef class ExchangeCommandVersions(StreamCommand):
    """RabbitMQ 3.13+: the versions of the commands each side handles
    (``commands``: list of CommandVersion(key, min_version, max_version)); a client that
    lists Deliver up to version 2 gets Deliver version 2."""
    KEY = 0x001B
    FIELDS = ("correlation_id", "commands")
    cdef readonly uint32_t correlation_id
    cdef readonly list commands

    def __init__(self, correlation_id, commands):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "ExchangeCommandVersions.correlation_id")
        self.commands = _command_versions(commands, "ExchangeCommandVersions.commands")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x001B, 1)
        buf.write_u32(self.correlation_id)
        _write_command_versions(buf, self.commands)
        return _end(buf, start)


cdef ExchangeCommandVersions _read_exchange_command_versions(ReadView *v):
    cdef ExchangeCommandVersions c = ExchangeCommandVersions.__new__(ExchangeCommandVersions)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.commands = _read_command_versions(v)
    return c


cdef class ExchangeCommandVersionsResponse(SimpleResponse):
    KEY = 0x801B
    FIELDS = ("correlation_id", "response_code", "commands")
    cdef readonly list commands

    def __init__(self, correlation_id, response_code, commands):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.commands = _command_versions(commands, "ExchangeCommandVersionsResponse.commands")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x801B, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        _write_command_versions(buf, self.commands)
        return _end(buf, start)


cdef ExchangeCommandVersionsResponse _read_exchange_command_versions_response(ReadView *v):
    cdef ExchangeCommandVersionsResponse r = ExchangeCommandVersionsResponse.__new__(ExchangeCommandVersionsResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    r.commands = _read_command_versions(v)
    return r


cdef class StreamStats(StreamCommand):
    """RabbitMQ 3.11+: ``stream``'s statistics (first_chunk_id, committed_chunk_id, ...)."""
    KEY = 0x001C
    FIELDS = ("correlation_id", "stream")
    cdef readonly uint32_t correlation_id
    cdef readonly str stream

    def __init__(self, correlation_id, stream):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "StreamStats.correlation_id")
        self.stream = _string(stream, "StreamStats.stream")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x001C, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.stream)
        return _end(buf, start)


cdef StreamStats _read_stream_stats(ReadView *v):
    cdef StreamStats c = StreamStats.__new__(StreamStats)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.stream = _read_string(v, b"stream")
    return c


cdef class StreamStatsResponse(SimpleResponse):
    """``stats``: name -> int64."""
    KEY = 0x801C
    FIELDS = ("correlation_id", "response_code", "stats")
    cdef readonly dict stats

    def __init__(self, correlation_id, response_code, stats=None):
        SimpleResponse.__init__(self, correlation_id, response_code)
        if stats is not None and not isinstance(stats, dict):
            raise StreamFrameError(f"StreamStatsResponse.stats: expected a dict, got {type(stats).__name__}")
        self.stats = {_string(k, "StreamStatsResponse.stats key"): _int64(value, f"StreamStatsResponse.stats[{k!r}]")
                      for k, value in (stats or {}).items()}

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x801C, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        buf.write_u32(<uint32_t>len(self.stats))
        for k, value in self.stats.items():
            _write_string(buf, k)
            buf.write_u64(<uint64_t><int64_t>value)
        return _end(buf, start)


cdef StreamStatsResponse _read_stream_stats_response(ReadView *v):
    cdef StreamStatsResponse r = StreamStatsResponse.__new__(StreamStatsResponse)
    cdef uint32_t count = 0, _i
    cdef uint64_t value = 0
    cdef dict stats = {}
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    read_u32(v, &count, b"stat count")
    _check_count(v, count, 10, b"stats")
    for _i in range(count):
        k = _read_string(v, b"stat name")
        read_u64(v, &value, b"stat value")
        stats[k] = <int64_t>value
    r.stats = stats
    return r


cdef class ResolveOffsetSpec(StreamCommand):
    """RabbitMQ 4.2+: the offset an offset specification stands for in ``stream``."""
    KEY = 0x001F
    FIELDS = ("correlation_id", "stream", "offset_type", "offset", "properties")
    cdef readonly uint32_t correlation_id
    cdef readonly str stream
    cdef readonly int offset_type
    cdef readonly object offset
    cdef readonly dict properties

    def __init__(self, correlation_id, stream, offset_type, offset=0, properties=None):
        self.correlation_id = _uint(correlation_id, 0xFFFFFFFF, "ResolveOffsetSpec.correlation_id")
        self.stream = _string(stream, "ResolveOffsetSpec.stream")
        self.offset_type = _uint(offset_type, 0xFFFF, "ResolveOffsetSpec.offset_type")
        self.offset = _offset_value(offset_type, offset, "ResolveOffsetSpec", False)
        self.properties = _string_map(properties, "ResolveOffsetSpec.properties")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x001F, 1)
        buf.write_u32(self.correlation_id)
        _write_string(buf, self.stream)
        _write_offset_spec(buf, self.offset_type, self.offset)
        if self.properties:
            _write_map(buf, self.properties)
        return _end(buf, start)


cdef ResolveOffsetSpec _read_resolve_offset_spec(ReadView *v):
    cdef ResolveOffsetSpec c = ResolveOffsetSpec.__new__(ResolveOffsetSpec)
    read_u32(v, &c.correlation_id, b"correlation_id")
    c.stream = _read_string(v, b"stream")
    c.offset = _read_offset_spec(v, &c.offset_type, b"offset specification", False)
    c.properties = _read_map(v, b"properties") if v.pos < v.len else {}
    return c


cdef class ResolveOffsetSpecResponse(SimpleResponse):
    """The resolved ``offset`` (``offset_type`` is OFFSET_TYPE_OFFSET)."""
    KEY = 0x801F
    FIELDS = ("correlation_id", "response_code", "offset_type", "offset")
    cdef readonly uint16_t offset_type
    cdef readonly uint64_t offset

    def __init__(self, correlation_id, response_code, offset_type, offset):
        SimpleResponse.__init__(self, correlation_id, response_code)
        self.offset_type = _uint(offset_type, 0xFFFF, "ResolveOffsetSpecResponse.offset_type")
        self.offset = _uint(offset, 0xFFFFFFFFFFFFFFFF, "ResolveOffsetSpecResponse.offset")

    cdef int write_frame(self, WriteBuffer buf) except -1:
        cdef Py_ssize_t start = _begin(buf, 0x801F, 1)
        buf.write_u32(self.correlation_id)
        buf.write_u16(self.response_code)
        buf.write_u16(self.offset_type)
        buf.write_u64(self.offset)
        return _end(buf, start)


cdef ResolveOffsetSpecResponse _read_resolve_offset_spec_response(ReadView *v):
    cdef ResolveOffsetSpecResponse r = ResolveOffsetSpecResponse.__new__(ResolveOffsetSpecResponse)
    read_u32(v, &r.correlation_id, b"correlation_id")
    read_u16(v, &r.response_code, b"response_code")
    read_u16(v, &r.offset_type, b"offset_type")
    read_u64(v, &r.offset, b"offset")
    return r


#: key (the response bit included) -> the command's class
COMMANDS = {cls.KEY: cls for cls in (
    DeclarePublisher, DeclarePublisherResponse, Publish, PublishConfirm, PublishError,
    QueryPublisherSequence, QueryPublisherSequenceResponse, DeletePublisher, DeletePublisherResponse,
    Subscribe, SubscribeResponse, Deliver, Credit, CreditResponse, StoreOffset, QueryOffset,
    QueryOffsetResponse, Unsubscribe, UnsubscribeResponse, Create, CreateResponse, Delete,
    DeleteResponse, Metadata, MetadataResponse, MetadataUpdate, PeerProperties, PeerPropertiesResponse,
    SaslHandshake, SaslHandshakeResponse, SaslAuthenticate, SaslAuthenticateResponse, Tune, TuneResponse,
    Open, OpenResponse, Close, CloseResponse, Heartbeat, Route, RouteResponse, Partitions,
    PartitionsResponse, ConsumerUpdate, ConsumerUpdateResponse, ExchangeCommandVersions,
    ExchangeCommandVersionsResponse, StreamStats, StreamStatsResponse, CreateSuperStream,
    CreateSuperStreamResponse, DeleteSuperStream, DeleteSuperStreamResponse, ResolveOffsetSpec,
    ResolveOffsetSpecResponse,
)}


# --- decoding -----------------------------------------------------------------------------

# Who sends each key: [key][0] the request, [key][1] the response (0: nobody).
cdef uint8_t _SENDERS[_MAX_KEY + 1][2]


cdef int _init_senders() except -1:
    cdef int key
    for key in range(_MAX_KEY + 1):
        _SENDERS[key][0] = 0
        _SENDERS[key][1] = 0
    for key in (0x01, 0x02, 0x05, 0x06, 0x07, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x11, 0x12,
                0x13, 0x15, 0x18, 0x19, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F):
        _SENDERS[key][0] = _SENT_BY_CLIENT
    for key in (0x03, 0x04, 0x08, 0x10, 0x1A):
        _SENDERS[key][0] = _SENT_BY_SERVER
    for key in (0x14, 0x16, 0x17):     # Tune (either side may send its own), Close, Heartbeat
        _SENDERS[key][0] = _SENT_BY_ANY
    for key in (0x01, 0x05, 0x06, 0x07, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x11, 0x12, 0x13,
                0x15, 0x18, 0x19, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F):
        _SENDERS[key][1] = _SENT_BY_SERVER
    _SENDERS[0x14][1] = _SENT_BY_CLIENT
    _SENDERS[0x1A][1] = _SENT_BY_CLIENT
    _SENDERS[0x16][1] = _SENT_BY_ANY
    return 0


_init_senders()

cdef dict _SENDER_NAMES = {"server": _SENT_BY_SERVER, "client": _SENT_BY_CLIENT, "any": _SENT_BY_ANY}


cdef int _sender_of(object sender) except -1:
    try:
        return _SENDER_NAMES[sender]
    except (KeyError, TypeError):
        raise ValueError(f"sender: expected 'server', 'client' or 'any', got {sender!r}") from None


cdef str _command_name(uint16_t key):
    name = COMMAND_NAMES.get(key & 0x7FFF)
    if name is None:
        return f"key 0x{key:04x}"
    return f"{name}{'Response' if key & RESPONSE_FLAG else ''} (key 0x{key:04x})"


cdef int _check_key(uint16_t key, uint16_t version, int sender, Py_ssize_t at) except -1:
    """Whether a frame of this key and version may come from ``sender``."""
    cdef uint16_t base = key & 0x7FFF
    cdef int response = 1 if key & RESPONSE_FLAG else 0
    cdef int sent_by
    if base == 0 or base > _MAX_KEY or _SENDERS[base][response] == 0:
        raise StreamFrameError(f"unknown key 0x{key:04x} (version {version}) at offset {at}",
                               offset=at, key=key, version=version)
    sent_by = _SENDERS[base][response]
    if (base == 0x18 or base == 0x19) and not response and sender == _SENT_BY_SERVER:
        sent_by = _SENT_BY_SERVER       # RabbitMQ 3.10's Route/Partitions responses
    if sent_by & sender == 0:
        raise StreamFrameError(
            f"{_command_name(key)} at offset {at} is never sent by a {'client' if sender == _SENT_BY_CLIENT else 'server'}",
            offset=at, key=key, version=version)
    if version == 1 or (version == 2 and not response and (base == 0x02 or base == 0x08)):
        return 0
    raise StreamFrameError(f"{_command_name(key)}: version {version} is not known, at offset {at}",
                           offset=at, key=key, version=version)


cdef object _read_command(uint16_t key, uint16_t version, ReadView *v, int sender):
    """The command in a frame's content (after the key and version)."""
    if key == 0x0008:
        return _read_deliver(v, version)
    if key == 0x0003:
        return _read_publish_confirm(v)
    if key == 0x0017:
        return _HEARTBEAT
    if key == 0x0001:
        return _read_declare_publisher(v)
    if key == 0x8001:
        return _read_simple(DeclarePublisherResponse, v)
    if key == 0x0002:
        return _read_publish(v, version)
    if key == 0x0004:
        return _read_publish_error(v)
    if key == 0x0005:
        return _read_query_publisher_sequence(v)
    if key == 0x8005:
        return _read_query_publisher_sequence_response(v)
    if key == 0x0006:
        return _read_delete_publisher(v)
    if key == 0x8006:
        return _read_simple(DeletePublisherResponse, v)
    if key == 0x0007:
        return _read_subscribe(v)
    if key == 0x8007:
        return _read_simple(SubscribeResponse, v)
    if key == 0x0009:
        return _read_credit(v)
    if key == 0x8009:
        return _read_credit_response(v)
    if key == 0x000A:
        return _read_store_offset(v)
    if key == 0x000B:
        return _read_query_offset(v)
    if key == 0x800B:
        return _read_query_offset_response(v)
    if key == 0x000C:
        return _read_unsubscribe(v)
    if key == 0x800C:
        return _read_simple(UnsubscribeResponse, v)
    if key == 0x000D:
        return _read_create(v)
    if key == 0x800D:
        return _read_simple(CreateResponse, v)
    if key == 0x000E:
        return _read_delete(v)
    if key == 0x800E:
        return _read_simple(DeleteResponse, v)
    if key == 0x000F:
        return _read_metadata(v)
    if key == 0x800F:
        return _read_metadata_response(v)
    if key == 0x0010:
        return _read_metadata_update(v)
    if key == 0x0011:
        return _read_peer_properties(v)
    if key == 0x8011:
        return _read_peer_properties_response(v)
    if key == 0x0012:
        return _read_sasl_handshake(v)
    if key == 0x8012:
        return _read_sasl_handshake_response(v)
    if key == 0x0013:
        return _read_sasl_authenticate(v)
    if key == 0x8013:
        return _read_sasl_authenticate_response(v)
    if key == 0x0014:
        return _read_tune(Tune, v)
    if key == 0x8014:
        return _read_tune(TuneResponse, v)
    if key == 0x0015:
        return _read_open(v)
    if key == 0x8015:
        return _read_open_response(v)
    if key == 0x0016:
        return _read_close(v)
    if key == 0x8016:
        return _read_simple(CloseResponse, v)
    if key == 0x0018:
        if sender == _SENT_BY_SERVER:
            return _read_streams_response(RouteResponse, v)
        return _read_route(v)
    if key == 0x8018:
        return _read_streams_response(RouteResponse, v)
    if key == 0x0019:
        if sender == _SENT_BY_SERVER:
            return _read_streams_response(PartitionsResponse, v)
        return _read_partitions(v)
    if key == 0x8019:
        return _read_streams_response(PartitionsResponse, v)
    if key == 0x001A:
        return _read_consumer_update(v)
    if key == 0x801A:
        return _read_consumer_update_response(v)
    if key == 0x001B:
        return _read_exchange_command_versions(v)
    if key == 0x801B:
        return _read_exchange_command_versions_response(v)
    if key == 0x001C:
        return _read_stream_stats(v)
    if key == 0x801C:
        return _read_stream_stats_response(v)
    if key == 0x001D:
        return _read_create_super_stream(v)
    if key == 0x801D:
        return _read_simple(CreateSuperStreamResponse, v)
    if key == 0x001E:
        return _read_delete_super_stream(v)
    if key == 0x801E:
        return _read_simple(DeleteSuperStreamResponse, v)
    if key == 0x001F:
        return _read_resolve_offset_spec(v)
    if key == 0x801F:
        return _read_resolve_offset_spec_response(v)
    raise StreamFrameError(f"unknown key 0x{key:04x}")      # _check_key lets none through


cdef object _decode_frame(const char *p, Py_ssize_t size, Py_ssize_t at, int sender):
    """The command of one frame: ``p`` points at its key, ``size`` is its size field,
    ``at`` the stream offset of its size field."""
    cdef uint16_t key = amqw_unpack_u16(p)
    cdef uint16_t version = amqw_unpack_u16(p + 2)
    cdef ReadView v
    _check_key(key, version, sender, at)
    v.buf = p + 4
    v.len = size - 4
    v.pos = 0
    v.base = at + _HEAD
    try:
        command = _read_command(key, version, &v, sender)
    except StreamFrameError as exc:
        raise StreamFrameError(f"{_command_name(key)}, version {version}: {exc}", offset=exc.offset,
                               key=key, version=version) from None
    except CodecError as exc:       # a short read or bad UTF-8 (the buffer's readers)
        raise StreamFrameError(f"{_command_name(key)}, version {version}: {exc}", offset=exc.offset,
                               key=key, version=version) from None
    if v.pos != v.len:
        raise StreamFrameError(
            f"{_command_name(key)}, version {version}: {v.len - v.pos} bytes after the command "
            f"at offset {v.base + v.pos}", offset=v.base + v.pos, key=key, version=version)
    return command


def decode_frame(data, *, sender="server"):
    """The command in ``data``: exactly one whole frame, size prefix included.
    ``sender``: who sent it, as for StreamParser."""
    cdef Py_buffer pybuf
    cdef uint32_t size
    cdef int who = _sender_of(sender)
    PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
    try:
        if pybuf.len < _SIZE_PREFIX:
            raise StreamFrameError(f"a frame needs a 4-byte size, got {pybuf.len} bytes", offset=0)
        size = amqw_unpack_u32(<const char *>pybuf.buf)
        if size < 4:
            raise StreamFrameError(f"frame size {size} at offset 0 is shorter than a key and a version",
                                   offset=0)
        if <Py_ssize_t>size + _SIZE_PREFIX > pybuf.len:
            raise StreamFrameError(f"frame size {size} at offset 0, but only {pybuf.len - _SIZE_PREFIX} bytes "
                                   f"follow it", offset=pybuf.len)
        if <Py_ssize_t>size + _SIZE_PREFIX < pybuf.len:
            raise StreamFrameError(f"{pybuf.len - size - _SIZE_PREFIX} bytes after the frame at offset "
                                   f"{size + _SIZE_PREFIX}", offset=size + _SIZE_PREFIX)
        return _decode_frame(<const char *>pybuf.buf + _SIZE_PREFIX, size, 0, who)
    finally:
        PyBuffer_Release(&pybuf)


# --- the parser ---------------------------------------------------------------------------

cdef class StreamParser:
    """Bytes in, commands out: feed any chunk (one byte or many MiB), get the commands it
    completes.

    ``max_frame_size``: frames whose size field (which leaves out its own 4 bytes) is
    larger raise StreamFrameError (response code 0x0e) before anything is allocated for
    them; 0 for no limit.  It is a memory bound, not the frame_max of Tune: RabbitMQ holds
    what it receives to frame_max, not the Deliver frames it sends (a chunk gathers what
    the publishers wrote meanwhile: 3.10.8 sent 10 MB frames with frame_max 1 MiB).
    ``sender``: who sends what this parser reads: ``"server"`` (a client's parser: the
    default), ``"client"``, or ``"any"``.  A frame the sender never
    sends is an error; from a server, Route and Partitions without the response bit are
    RabbitMQ 3.10's responses.

    A Deliver's chunk is copied once, into the bytes object it carries, straight from the
    data fed (a deliver cut by the end of a feed is assembled in that object).  After an
    error the parser is unusable: the error's ``.parsed`` holds the commands completed
    before it."""
    cdef char *_pending              # the start of a frame cut by the end of a feed
    cdef Py_ssize_t _pending_len
    cdef Py_ssize_t _pending_cap
    cdef Py_ssize_t _frame_total     # the pending frame's size, prefix included (0: not known yet)
    cdef Py_ssize_t _frame_at        # its stream offset
    cdef Py_ssize_t _fed             # bytes fed before the current feed
    cdef uint32_t _max_frame_size
    cdef int _sender
    cdef bytes _chunk                # a deliver's chunk being filled
    cdef Py_ssize_t _chunk_filled
    cdef Py_ssize_t _chunk_head      # bytes of the deliver before its chunk, prefix included
    cdef Deliver _deliver
    cdef object _error

    def __cinit__(self, *args, **kwargs):
        self._pending = NULL

    def __init__(self, max_frame_size=0, *, sender="server"):
        self.max_frame_size = max_frame_size
        self._sender = _sender_of(sender)

    def __dealloc__(self):
        PyMem_Free(self._pending)

    @property
    def max_frame_size(self):
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value):
        self._max_frame_size = _uint(value, 0xFFFFFFFF, "StreamParser.max_frame_size")

    @property
    def sender(self):
        return {_SENT_BY_SERVER: "server", _SENT_BY_CLIENT: "client", _SENT_BY_ANY: "any"}[self._sender]

    @property
    def buffered(self):
        """Bytes of an incomplete frame held until the rest arrives."""
        if self._chunk is not None:
            return self._chunk_head + self._chunk_filled
        return self._pending_len

    def feed(self, data):
        """The commands completed by ``data`` (any bytes-like object), in order."""
        cdef Py_buffer pybuf
        cdef list out = []
        if self._error is not None:
            raise StreamFrameError(f"the parser failed earlier: {self._error}", offset=self._error.offset,
                                   key=self._error.key, version=self._error.version)
        PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
        try:
            self._feed(<const char *>pybuf.buf, pybuf.len, out)
        except StreamFrameError as exc:
            exc.parsed = out
            self._error = exc
            raise
        finally:
            PyBuffer_Release(&pybuf)
        return out

    cdef int _feed(self, const char *p, Py_ssize_t n, list out) except -1:
        cdef Py_ssize_t pos = 0
        cdef uint32_t size
        if self._chunk is not None or self._pending_len > 0:
            pos = self._continue(p, n, out)
            if self._chunk is not None or self._pending_len > 0:
                self._fed += n
                return 0
        while n - pos >= _SIZE_PREFIX:
            size = amqw_unpack_u32(p + pos)
            self._check_size(size, self._fed + pos)
            if n - pos - _SIZE_PREFIX < size:
                break
            PyList_Append(out, _decode_frame(p + pos + _SIZE_PREFIX, size, self._fed + pos, self._sender))
            pos += _SIZE_PREFIX + size
        if pos < n:
            self._frame_at = self._fed + pos
            self._frame_total = 0
            self._continue(p + pos, n - pos, out)
        self._fed += n
        return 0

    cdef int _check_size(self, uint32_t size, Py_ssize_t at) except -1:
        if size < 4:
            raise StreamFrameError(f"frame size {size} at offset {at} is shorter than a key and a version",
                                   offset=at)
        if self._max_frame_size and size > self._max_frame_size:
            raise StreamFrameError(f"frame of {size} bytes at offset {at} exceeds max_frame_size {self._max_frame_size}",
                                   offset=at, response_code=_FRAME_TOO_LARGE)
        return 0

    cdef Py_ssize_t _continue(self, const char *p, Py_ssize_t n, list out) except -1:
        """Bytes of the frame in progress (a new one when nothing is pending); how many it
        took (fewer than n only when the frame completed)."""
        cdef Py_ssize_t used = 0, take, want
        cdef uint16_t key, version
        if self._chunk is not None:
            return self._fill_chunk(p, n, out)
        if self._pending_len < _SIZE_PREFIX:
            used = self._hold(p, min(n, _SIZE_PREFIX - self._pending_len))
            if self._pending_len < _SIZE_PREFIX:
                return used
            self._check_size(amqw_unpack_u32(self._pending), self._frame_at)
            self._frame_total = _SIZE_PREFIX + <Py_ssize_t>amqw_unpack_u32(self._pending)
        if self._pending_len < _HEAD:       # the key and version decide how it is assembled
            used += self._hold(p + used, min(n - used, _HEAD - self._pending_len))
            if self._pending_len < _HEAD:
                return used
        key = amqw_unpack_u16(self._pending + 4)
        version = amqw_unpack_u16(self._pending + 6)
        if key == 0x0008 and (version == 1 or version == 2):
            want = 9 if version == 1 else 17
            if self._frame_total >= want:
                _check_key(key, version, self._sender, self._frame_at)
                if self._pending_len < want:
                    used += self._hold(p + used, min(n - used, want - self._pending_len))
                    if self._pending_len < want:
                        return used
                self._start_chunk(want, version)
                return used + self._fill_chunk(p + used, n - used, out)
        take = min(n - used, self._frame_total - self._pending_len)
        used += self._hold(p + used, take)
        if self._pending_len == self._frame_total:
            self._pending_len = 0
            PyList_Append(out, _decode_frame(self._pending + _SIZE_PREFIX, self._frame_total - _SIZE_PREFIX,
                                             self._frame_at, self._sender))
        return used

    cdef int _start_chunk(self, Py_ssize_t head, uint16_t version) except -1:
        cdef Deliver d = Deliver.__new__(Deliver)
        d.subscription_id = <uint8_t>self._pending[8]
        if version == 2:
            d.committed_offset = amqw_unpack_u64(self._pending + 9)
        try:
            self._chunk = PyBytes_FromStringAndSize(NULL, self._frame_total - head)
        except MemoryError:
            raise StreamFrameError(
                f"Deliver (key 0x0008) at offset {self._frame_at}: a chunk of {self._frame_total - head} bytes "
                f"is more than this process can allocate", offset=self._frame_at, key=0x0008, version=version) from None
        self._deliver = d
        self._chunk_head = head
        self._chunk_filled = 0
        self._pending_len = 0
        return 0

    cdef Py_ssize_t _fill_chunk(self, const char *p, Py_ssize_t n, list out) except -1:
        cdef Py_ssize_t size = PyBytes_GET_SIZE(self._chunk)
        cdef Py_ssize_t take = min(n, size - self._chunk_filled)
        memcpy(PyBytes_AS_STRING(self._chunk) + self._chunk_filled, p, <size_t>take)
        self._chunk_filled += take
        if self._chunk_filled == size:
            self._deliver.chunk = self._chunk
            PyList_Append(out, self._deliver)
            self._chunk = None
            self._deliver = None
        return take

    cdef Py_ssize_t _hold(self, const char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t need = self._pending_len + n
        cdef Py_ssize_t cap
        cdef char *grown
        if need > self._pending_cap:
            cap = max(need, self._pending_cap * 2, 256)
            if self._frame_total and cap > self._frame_total:
                cap = max(need, self._frame_total)
            grown = <char *>PyMem_Realloc(self._pending, <size_t>cap)
            if grown is NULL:
                raise StreamFrameError(f"frame at offset {self._frame_at}: cannot hold {need} bytes", offset=self._frame_at)
            self._pending = grown
            self._pending_cap = cap
        memcpy(self._pending + self._pending_len, p, <size_t>n)
        self._pending_len = need
        return n


# --- publish: the hot path ------------------------------------------------------------------

cdef int write_publish(WriteBuffer buf, uint8_t publisher_id, object ids, uint64_t first_id,
                       object messages, object filter_values) except -1:
    cdef object seq = PySequence_Fast(messages, b"messages: expected a sequence of bytes")
    cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i
    cdef PyObject **items = PySequence_Fast_ITEMS(seq)
    cdef object id_seq = None, filter_seq = None
    cdef PyObject **id_items = NULL
    cdef PyObject **filter_items = NULL
    cdef Py_ssize_t start
    cdef uint64_t pid
    if n > 0xFFFFFFFF:
        raise StreamFrameError(f"messages: {n} do not fit a uint32 count")
    if ids is not None:
        id_seq = PySequence_Fast(ids, b"publishing_ids: expected an int or a sequence of ints")
        if PySequence_Fast_GET_SIZE(id_seq) != n:
            raise StreamFrameError(f"publishing_ids: {PySequence_Fast_GET_SIZE(id_seq)} ids for {n} messages")
        id_items = PySequence_Fast_ITEMS(id_seq)
    elif n and first_id + <uint64_t>(n - 1) < first_id:
        raise StreamFrameError(f"publishing ids from {first_id} for {n} messages overflow a uint64")
    if filter_values is not None:
        filter_seq = PySequence_Fast(filter_values, b"filter_values: expected a sequence of str or None")
        if PySequence_Fast_GET_SIZE(filter_seq) != n:
            raise StreamFrameError(f"filter_values: {PySequence_Fast_GET_SIZE(filter_seq)} values for {n} messages")
        filter_items = PySequence_Fast_ITEMS(filter_seq)
    start = _begin(buf, 0x0002, 1 if filter_values is None else 2)
    try:
        buf.write_u8(publisher_id)
        buf.write_u32(<uint32_t>n)
        for i in range(n):
            if id_items is NULL:
                pid = first_id + <uint64_t>i
            else:
                pid = _uint(<object>id_items[i], 0xFFFFFFFFFFFFFFFF, f"publishing_ids[{i}]")
            buf.write_u64(pid)
            if filter_items is not NULL:
                _write_string(buf, _string(<object>filter_items[i], f"filter_values[{i}]", True))
            _write_message(buf, <object>items[i], b"messages")
        _end(buf, start)
    except BaseException:
        buf._len = start
        raise
    return 0


def encode_publish(publisher_id, publishing_ids, messages, version=1, filter_values=None):
    """One Publish frame: ``messages`` (a sequence of AMQP 1.0 encoded bytes-likes) with
    ``publishing_ids`` (a sequence of ints, one per message, or an int: the first of
    consecutive ids).  ``version=2`` writes ``filter_values`` (one str or None per message;
    None: all None), which RabbitMQ 3.13+ indexes for filtered subscriptions."""
    cdef WriteBuffer buf = WriteBuffer(512)
    cdef uint64_t first = 0
    ids = None
    if PyLong_Check(publishing_ids) and not PyBool_Check(publishing_ids):
        first = _uint(publishing_ids, 0xFFFFFFFFFFFFFFFF, "publishing_ids")
    else:
        ids = publishing_ids
    if version == 1:
        if filter_values is not None:
            raise StreamFrameError("filter_values: only a version 2 publish carries them")
    elif version == 2:
        if filter_values is None:
            filter_values = [None] * len(messages)
    else:
        raise StreamFrameError(f"version: {version!r} is not 1 or 2")
    write_publish(buf, <uint8_t>_uint(publisher_id, 0xFF, "publisher_id"), ids, first, messages, filter_values)
    return buf.to_bytes()


cdef int _write_amqp10_message(WriteBuffer buf, object body, object properties, object application_properties,
                               Py_ssize_t i) except -1:
    """One AMQP 1.0 message of ``body``, size-prefixed (the size patched after)."""
    cdef Py_ssize_t at = buf._len, size
    if not PyBytes_CheckExact(body):
        if PyUnicode_Check(body) or not PyObject_CheckBuffer(body):
            raise StreamFrameError(f"bodies[{i}]: expected bytes, got {type(body).__name__}")
        body = bytes(body)
    buf.write_u32(0)
    write_message(buf, body, properties, application_properties)
    size = buf._len - at - 4
    if size > _MAX_MESSAGE:
        raise StreamFrameError(f"bodies[{i}]: a message of {size} bytes is over the limit of {_MAX_MESSAGE}")
    amqw_pack_u32(buf._buf + at, <uint32_t>size)
    return 0


def encode_publish_values(publisher_id, first_publishing_id, bodies, *, properties=None,
                          application_properties=None, filter_values=None):
    """One Publish frame of ``bodies`` (bytes-likes), each made into an AMQP 1.0 message
    (one data section, and ``properties`` / ``application_properties`` when given: the
    same for every message; see amqwire.codec.stream.amqp10) encoded straight into the
    frame, with publishing ids ``first_publishing_id``, +1, ...  ``filter_values``: one
    str or None per message, in a version 2 frame."""
    cdef WriteBuffer buf = WriteBuffer(512)
    cdef object seq = PySequence_Fast(bodies, b"bodies: expected a sequence of bytes")
    cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i
    cdef PyObject **items = PySequence_Fast_ITEMS(seq)
    cdef uint8_t pub = _uint(publisher_id, 0xFF, "publisher_id")
    cdef uint64_t first = _uint(first_publishing_id, 0xFFFFFFFFFFFFFFFF, "first_publishing_id")
    cdef Py_ssize_t start
    if n and first + <uint64_t>(n - 1) < first:
        raise StreamFrameError(f"publishing ids from {first} for {n} messages overflow a uint64")
    if n > 0xFFFFFFFF:
        raise StreamFrameError(f"bodies: {n} do not fit a uint32 count")
    if filter_values is not None:
        filter_values = list(filter_values)
        if len(filter_values) != n:
            raise StreamFrameError(f"filter_values: {len(filter_values)} values for {n} messages")
    start = _begin(buf, 0x0002, 1 if filter_values is None else 2)
    buf.write_u8(pub)
    buf.write_u32(<uint32_t>n)
    for i in range(n):
        buf.write_u64(first + <uint64_t>i)
        if filter_values is not None:
            _write_string(buf, _string(filter_values[i], f"filter_values[{i}]", True))
        _write_amqp10_message(buf, <object>items[i], properties, application_properties, i)
    _end(buf, start)
    return buf.to_bytes()


cdef object _compress(int compression, bytes data, object level):
    if compression == 0:
        return data
    if compression == 1:
        packer = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)   # gzip, as Java's GZIPOutputStream
        return packer.compress(data) + packer.flush()
    if compression == 4:
        try:
            zstandard = importlib.import_module("zstandard")
        except ImportError:
            raise StreamFrameError("compression zstd needs the zstandard package (pip install amqwire[zstd])") from None
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise StreamFrameError(f"compression {COMPRESSIONS.get(compression, compression)!s} is not supported "
                           f"(none, gzip, zstd are)")


def compression_code(compression):
    """A COMPRESSION_* code from itself or its name ("none", "gzip", "zstd", ...)."""
    if isinstance(compression, str):
        for code, name in COMPRESSIONS.items():
            if name == compression.lower():
                return code
        raise StreamFrameError(f"compression: unknown name {compression!r}")
    return _uint(compression, 7, "compression")


def encode_subentry(messages, compression=0, *, level=None):
    """A SubEntry of ``messages`` (AMQP 1.0 encoded bytes-likes): each record's uint32
    size and bytes, compressed with ``compression`` (a COMPRESSION_* code or its name;
    gzip as Java's GZIPOutputStream writes it, zstd with the zstandard package)."""
    cdef WriteBuffer inner = WriteBuffer(512)
    cdef int code = compression_code(compression)
    cdef Py_ssize_t n = 0
    for message in messages:
        _write_message(inner, message, b"messages")
        n += 1
    if n > 0xFFFF:
        raise StreamFrameError(f"messages: {n} records do not fit a sub-entry (at most 65535)")
    raw = inner.to_bytes()
    e = SubEntry.__new__(SubEntry)
    (<SubEntry>e).compression = code
    (<SubEntry>e).record_count = n
    (<SubEntry>e).uncompressed_size = len(raw)
    (<SubEntry>e).data = _compress(code, raw, level)
    return e


def encode_publish_subentry(publisher_id, publishing_id, messages, compression=0, *, level=None):
    """One Publish frame holding one sub-entry: ``messages`` (AMQP 1.0 encoded) batched
    under one ``publishing_id`` (one confirm for all), optionally compressed (see
    encode_subentry)."""
    cdef WriteBuffer buf = WriteBuffer(512)
    cdef SubEntry e = encode_subentry(messages, compression, level=level)
    cdef Py_ssize_t start = _begin(buf, 0x0002, 1)
    buf.write_u8(_uint(publisher_id, 0xFF, "publisher_id"))
    buf.write_u32(1)
    buf.write_u64(_uint(publishing_id, 0xFFFFFFFFFFFFFFFF, "publishing_id"))
    _write_subentry(buf, e)
    _end(buf, start)
    return buf.to_bytes()
