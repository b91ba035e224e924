# cython: language_level=3
"""AMQP 1.0 values and the AMQP 1.0 message format, the format of stream messages.

RabbitMQ's stream protocol carries each message as an AMQP 1.0 message (OASIS AMQP 1.0,
part 3, section 3.2): a sequence of described sections.  :func:`encode_message` writes one,
:func:`decode_message` reads one; :func:`encode_value` and :func:`decode_value` do single
values of the type system (part 1).

Python -> AMQP 1.0 (what the encoder writes for each Python type)::

    None                        null                    0x40
    bool                        boolean                 0x41 true / 0x42 false
    int                         int if it fits 32 bits  0x54 smallint / 0x71
                                else long (64 bits)     0x81
                                else ulong (< 2**64)    0x80; larger: AMQP10EncodeError
    float                       double                  0x82
    str                         string                  0xa1 str8 / 0xb1 str32 (UTF-8)
    bytes, bytearray, memoryview binary                 0xa0 vbin8 / 0xb0 vbin32
    uuid.UUID                   uuid                    0x98
    datetime.datetime           timestamp               0x83: ms since the epoch, floored;
                                                        naive means UTC
    list, tuple                 list                    0x45 list0 / 0xc0 list8 / 0xd0 list32
    dict                        map                     0xc1 map8 / 0xd1 map32
    Symbol (a str)              symbol                  0xa3 sym8 / 0xb3 sym32 (ASCII only)
    UByte UShort UInt ULong     ubyte ushort uint ulong 0x50 0x60 0x43/0x52/0x70 0x44/0x53/0x80
    Byte Short Int Long (ints)  byte short int long     0x51 0x61 0x54/0x71 0x55/0x81
    Float (a float)             float                   0x72 (the value rounded to 32 bits)
    Char (a 1-character str)    char                    0x73 (UTF-32BE)
    Timestamp (an int: ms)      timestamp               0x83
    Decimal32/64/128(raw)       decimal32/64/128        0x74 0x84 0x94 (the IEEE 754 bytes as is)
    Described(descriptor, v)    described type          0x00 descriptor value; an int
                                                        descriptor is a ulong, a str a symbol
    Array(items, type)          array                   0xe0 array8 / 0xf0 array32

The encoder always picks the smallest encoding of a type (uint0, smalluint, str8, list8 ...),
and leaves trailing null fields out of properties and header lists.  In arrays, integer
elements are written at full width (0x70 0x71 0x80 0x81) and list, map and array elements
in their 32-bit forms.

AMQP 1.0 -> Python (what the decoder gives): a plain Python value whenever the encoder would
write that value back as the same type, a wrapper otherwise, so that ``encode(decode(x))``
has the types of ``x`` (and its bytes, for everything this encoder writes):

    null None; boolean bool; int (0x54, 0x71) int; double float; string str; binary bytes;
    uuid uuid.UUID; list list; map dict; symbol Symbol;
    long: int if outside the 32-bit range, else Long; ulong: int above 2**63-1, else ULong;
    ubyte ushort uint byte short: UByte UShort UInt Byte Short; float Float; char Char;
    timestamp: an aware UTC datetime (years 1..9999), else Timestamp;
    decimal32/64/128: Decimal32/64/128; described: Described; array: Array.

Wrappers compare and hash as their base type (``UByte(5) == 5``, ``Symbol("a") == "a"``),
so a decoded map is looked up with plain keys.  Because of that, a map whose keys are
distinct in AMQP 1.0 but equal in Python (the symbol ``a`` and the string ``a``; ``true``
and ``1``) cannot be a dict: decoding it raises AMQP10DecodeError.  Map keys that Python
cannot hash (lists, maps, arrays) are refused the same way.

Message sections (section 3.2), in the order the encoder writes them (the spec's)::

    header 0x70                 Header (durable, priority, ttl, first_acquirer, delivery_count)
    delivery-annotations 0x71   dict, keys: str -> symbol, int -> ulong
    message-annotations 0x72    dict, keys: str -> symbol, int -> ulong
    properties 0x73             Properties (13 fields)
    application-properties 0x74 dict (keys str -> string; values as above)
    body                        bytes: one data section (0x75); Data([b1, b2, ...]): several;
                                AmqpSequence([list1, ...]): amqp-sequence sections (0x76);
                                AmqpValue(v): one amqp-value section (0x77); None: no body
    footer 0x78                 dict, keys as for annotations

The decoder reads sections in any order, as RabbitMQ does (Azure's AMQP 1.0 encoder writes
delivery-annotations last); a section that comes twice, a second kind of body, or a second
amqp-value is an error.  An annotation key that is neither a str nor a plain int is written
as its own type.

Descriptors are written as smallulong codes and read as any ulong or as their symbolic
names (``amqp:data:binary`` ...).  Fields of Properties and Header whose type the spec
fixes are plain Python values: an int message_id or correlation_id is a ulong, content_type
and content_encoding str (symbols), the two times datetimes (an int is milliseconds),
group_sequence, ttl and delivery_count ints (uints), priority an int (ubyte), user_id bytes
(a str is written as its UTF-8); a wrapper in such a field is written as its own type, and
a field decoded with another type than the spec's comes back wrapped so that it re-encodes
as it came.

Limits: a length over the bytes left, a count that cannot fit in the bytes left, values
nested deeper than 64, and arrays of zero-width elements (null, true, false, uint0, ulong0,
list0: the spec gives them no width, RabbitMQ 3.10 reads one byte for each) are refused
before anything is allocated, with AMQP10DecodeError naming the byte offset and what was
read.  Nothing beyond what the message needs is ever read: trailing bytes are an error.
"""

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.datetime cimport (
    import_datetime, datetime_new, datetime_tzinfo, PyDateTime_Check,
    PyDateTime_GET_YEAR, PyDateTime_GET_MONTH, PyDateTime_GET_DAY,
    PyDateTime_DATE_GET_HOUR, PyDateTime_DATE_GET_MINUTE, PyDateTime_DATE_GET_SECOND,
    PyDateTime_DATE_GET_MICROSECOND,
)
from cpython.object cimport PyObject
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memmove, memset

from amqwire.codec.buffer cimport (
    MAX_NESTING, WriteBuffer, amqw_pack_u32, amqw_unpack_f32, amqw_unpack_f64,
    amqw_unpack_u16, amqw_unpack_u32, amqw_unpack_u64, decode_utf8_or_null, utf8_of,
)
from amqwire.codec.table cimport civil_from_days

import datetime as _dt
import uuid as _uuid

from amqwire.codec.errors import CodecError

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object o)
    bint PyUnicode_Check(object o)
    bint PyLong_Check(object o)
    bint PyBool_Check(object o)
    bint PyFloat_Check(object o)
    bint PyObject_CheckBuffer(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    unsigned long long PyLong_AsUnsignedLongLong(object o) except? -1
    object PyLong_FromUnsignedLongLong(unsigned long long v)
    double PyFloat_AsDouble(object o) except? -1.0
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)
    bint PyUnicode_IS_ASCII(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    Py_UCS4 PyUnicode_READ_CHAR(object o, Py_ssize_t index)
    object PyUnicode_FromOrdinal(int ordinal)
    Py_ssize_t PyList_GET_SIZE(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject *PyList_GET_ITEM(object o, Py_ssize_t i)
    PyObject *PyTuple_GET_ITEM(object o, Py_ssize_t i)
    bint PyList_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    void Py_XDECREF(PyObject *o)
    void Py_XINCREF(PyObject *o)

cdef extern from "_compat.h":
    dict amqw_dict_presized(Py_ssize_t n)

# A wrapper built from a value known to fit it, skipping its Python-level __new__ (the
# base type's constructor makes the subclass instance).
cdef extern from *:
    """
    static PyObject *amqw_new_int(PyObject *cls, PyObject *args) {
        return PyLong_Type.tp_new((PyTypeObject *)cls, args, NULL);
    }
    static PyObject *amqw_new_float(PyObject *cls, PyObject *args) {
        return PyFloat_Type.tp_new((PyTypeObject *)cls, args, NULL);
    }
    static PyObject *amqw_new_str(PyObject *cls, PyObject *args) {
        return PyUnicode_Type.tp_new((PyTypeObject *)cls, args, NULL);
    }
    """
    object amqw_new_int(object cls, tuple args)
    object amqw_new_float(object cls, tuple args)
    object amqw_new_str(object cls, tuple args)

import_datetime()

cdef object _UTC = _dt.timezone.utc
cdef object _UUID = _uuid.UUID


# --- errors ------------------------------------------------------------------------------

class AMQP10DecodeError(CodecError):
    """Bytes that are not a well-formed AMQP 1.0 value or message; ``offset`` is where."""


class AMQP10EncodeError(CodecError):
    """A value that cannot be written as the AMQP 1.0 type asked for (out of range, too
    long, not ASCII for a symbol ...)."""


class AMQP10UnsupportedValueError(AMQP10EncodeError, TypeError):
    """A Python value with no AMQP 1.0 type (also a ``TypeError``)."""


# --- wrappers for the types Python lacks ---------------------------------------------------

class Symbol(str):
    """An AMQP 1.0 symbol: an ASCII string from a restricted vocabulary (annotation keys,
    content types, descriptors).  Equal to, and hashed as, the same ``str``."""
    __slots__ = ()

    def __repr__(self):
        return f"Symbol({str.__repr__(self)})"


class _FixedInt(int):
    __slots__ = ()
    MIN = 0
    MAX = 0

    def __new__(cls, value=0):
        self = int.__new__(cls, value)
        if not cls.MIN <= self <= cls.MAX:
            raise AMQP10EncodeError(f"{cls.__name__}: {int(self)} is out of range {cls.MIN}..{cls.MAX}")
        return self

    def __repr__(self):
        return f"{type(self).__name__}({int(self)})"


class UByte(_FixedInt):
    """AMQP 1.0 ubyte: an int 0..255."""
    __slots__ = ()
    MAX = 0xFF


class UShort(_FixedInt):
    """AMQP 1.0 ushort: an int 0..65535."""
    __slots__ = ()
    MAX = 0xFFFF


class UInt(_FixedInt):
    """AMQP 1.0 uint: an int 0..2**32-1."""
    __slots__ = ()
    MAX = 0xFFFFFFFF


class ULong(_FixedInt):
    """AMQP 1.0 ulong: an int 0..2**64-1."""
    __slots__ = ()
    MAX = 0xFFFFFFFFFFFFFFFF


class Byte(_FixedInt):
    """AMQP 1.0 byte: an int -128..127."""
    __slots__ = ()
    MIN = -0x80
    MAX = 0x7F


class Short(_FixedInt):
    """AMQP 1.0 short: an int -32768..32767."""
    __slots__ = ()
    MIN = -0x8000
    MAX = 0x7FFF


class Int(_FixedInt):
    """AMQP 1.0 int: a 32-bit signed int (what a plain int in that range is written as)."""
    __slots__ = ()
    MIN = -0x80000000
    MAX = 0x7FFFFFFF


class Long(_FixedInt):
    """AMQP 1.0 long: a 64-bit signed int."""
    __slots__ = ()
    MIN = -0x8000000000000000
    MAX = 0x7FFFFFFFFFFFFFFF


class Timestamp(_FixedInt):
    """AMQP 1.0 timestamp as milliseconds since the epoch (decoded this way only when a
    datetime cannot hold it; a datetime is written as a timestamp too)."""
    __slots__ = ()
    MIN = -0x8000000000000000
    MAX = 0x7FFFFFFFFFFFFFFF


class Float(float):
    """AMQP 1.0 float: a 32-bit IEEE 754 value (rounded to 32 bits when built)."""
    __slots__ = ()

    def __new__(cls, value=0.0):
        cdef float single = <float>PyFloat_AsDouble(float(value))
        return float.__new__(cls, <double>single)

    def __repr__(self):
        return f"Float({float.__repr__(self)})"


class Char(str):
    """AMQP 1.0 char: one Unicode code point (UTF-32BE on the wire)."""
    __slots__ = ()

    def __new__(cls, value):
        self = str.__new__(cls, value)
        if len(self) != 1:
            raise AMQP10EncodeError(f"Char: {str(self)!r} is not one character")
        return self

    def __repr__(self):
        return f"Char({str.__repr__(self)})"


class _Decimal:
    __slots__ = ("raw",)
    SIZE = 0

    def __init__(self, raw):
        raw = bytes(raw)
        if len(raw) != self.SIZE:
            raise AMQP10EncodeError(f"{type(self).__name__}: {len(raw)} bytes, needs {self.SIZE}")
        self.raw = raw

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self.raw == other.raw

    def __hash__(self):
        return hash((type(self).__name__, self.raw))

    def __repr__(self):
        return f"{type(self).__name__}({self.raw!r})"


class Decimal32(_Decimal):
    """AMQP 1.0 decimal32: the 4 bytes of an IEEE 754-2008 decimal32, kept as they are."""
    __slots__ = ()
    SIZE = 4


class Decimal64(_Decimal):
    """AMQP 1.0 decimal64: the 8 bytes of an IEEE 754-2008 decimal64, kept as they are."""
    __slots__ = ()
    SIZE = 8


class Decimal128(_Decimal):
    """AMQP 1.0 decimal128: the 16 bytes of an IEEE 754-2008 decimal128, kept as they are."""
    __slots__ = ()
    SIZE = 16


class Described:
    """A described type: ``descriptor`` (a ulong code or a symbol) and ``value``."""
    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor, value):
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other):
        if not isinstance(other, Described):
            return NotImplemented
        return self.descriptor == other.descriptor and self.value == other.value

    def __hash__(self):
        return hash((self.descriptor, self.value))

    def __repr__(self):
        return f"Described({self.descriptor!r}, {self.value!r})"


class Array:
    """An AMQP 1.0 array: ``items`` of one type.

    ``type`` names the element type with a Python class: Symbol, str, bytes, bool, float,
    UByte, UShort, UInt, ULong, Byte, Short, Int, Long, Float, Char, Timestamp, uuid.UUID,
    Decimal32/64/128, list, dict or Array.  None infers it from the first item (a plain
    int gives Int, Long or ULong, whichever holds all the items).  ``descriptor``: an
    array of described values, all with this descriptor (``items`` are the values).
    Decoding gives the type; an empty array needs one to be encoded."""
    __slots__ = ("items", "type", "descriptor")

    def __init__(self, items, type=None, descriptor=None):
        self.items = list(items)
        if type is not None and type not in _ARRAY_TYPES:
            raise AMQP10UnsupportedValueError(f"Array: {type!r} is not an element type")
        self.type = type
        self.descriptor = descriptor

    def __eq__(self, other):
        if not isinstance(other, Array):
            return NotImplemented
        return (_array_type_name(self) == _array_type_name(other) and self.descriptor == other.descriptor
                and self.items == other.items)

    __hash__ = None

    def __repr__(self):
        extra = "" if self.descriptor is None else f", descriptor={self.descriptor!r}"
        kind = "None" if self.type is None else self.type.__name__
        return f"Array({self.items!r}, {kind}{extra})"


# --- message body wrappers ----------------------------------------------------------------

class Data:
    """A body of several data sections, one per bytes-like part (one part decodes as bytes)."""
    __slots__ = ("parts",)

    def __init__(self, parts):
        self.parts = list(parts)

    def __eq__(self, other):
        if not isinstance(other, Data):
            return NotImplemented
        return self.parts == other.parts

    __hash__ = None

    def __repr__(self):
        return f"Data({self.parts!r})"


class AmqpSequence:
    """A body of amqp-sequence sections, one per list in ``sequences``."""
    __slots__ = ("sequences",)

    def __init__(self, sequences):
        self.sequences = [list(s) for s in sequences]

    def __eq__(self, other):
        if not isinstance(other, AmqpSequence):
            return NotImplemented
        return self.sequences == other.sequences

    __hash__ = None

    def __repr__(self):
        return f"AmqpSequence({self.sequences!r})"


class AmqpValue:
    """A body of one amqp-value section holding any value."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        if not isinstance(other, AmqpValue):
            return NotImplemented
        return self.value == other.value

    __hash__ = None

    def __repr__(self):
        return f"AmqpValue({self.value!r})"


# --- constructor codes -----------------------------------------------------------------------

cdef enum:
    C_DESCRIBED = 0x00
    C_NULL = 0x40
    C_TRUE = 0x41
    C_FALSE = 0x42
    C_UINT0 = 0x43
    C_ULONG0 = 0x44
    C_LIST0 = 0x45
    C_UBYTE = 0x50
    C_BYTE = 0x51
    C_SMALLUINT = 0x52
    C_SMALLULONG = 0x53
    C_SMALLINT = 0x54
    C_SMALLLONG = 0x55
    C_BOOLEAN = 0x56
    C_USHORT = 0x60
    C_SHORT = 0x61
    C_UINT = 0x70
    C_INT = 0x71
    C_FLOAT = 0x72
    C_CHAR = 0x73
    C_DECIMAL32 = 0x74
    C_ULONG = 0x80
    C_LONG = 0x81
    C_DOUBLE = 0x82
    C_TIMESTAMP = 0x83
    C_DECIMAL64 = 0x84
    C_DECIMAL128 = 0x94
    C_UUID = 0x98
    C_VBIN8 = 0xa0
    C_STR8 = 0xa1
    C_SYM8 = 0xa3
    C_VBIN32 = 0xb0
    C_STR32 = 0xb1
    C_SYM32 = 0xb3
    C_LIST8 = 0xc0
    C_MAP8 = 0xc1
    C_LIST32 = 0xd0
    C_MAP32 = 0xd1
    C_ARRAY8 = 0xe0
    C_ARRAY32 = 0xf0

# Section descriptor codes (0x00000000:0x000000NN).
cdef enum:
    S_HEADER = 0x70
    S_DELIVERY_ANNOTATIONS = 0x71
    S_MESSAGE_ANNOTATIONS = 0x72
    S_PROPERTIES = 0x73
    S_APPLICATION_PROPERTIES = 0x74
    S_DATA = 0x75
    S_AMQP_SEQUENCE = 0x76
    S_AMQP_VALUE = 0x77
    S_FOOTER = 0x78

SECTION_CODES = {
    "header": S_HEADER, "delivery-annotations": S_DELIVERY_ANNOTATIONS,
    "message-annotations": S_MESSAGE_ANNOTATIONS, "properties": S_PROPERTIES,
    "application-properties": S_APPLICATION_PROPERTIES, "data": S_DATA,
    "amqp-sequence": S_AMQP_SEQUENCE, "amqp-value": S_AMQP_VALUE, "footer": S_FOOTER,
}
cdef dict _SECTION_SYMBOLS = {
    b"amqp:header:list": S_HEADER, b"amqp:delivery-annotations:map": S_DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": S_MESSAGE_ANNOTATIONS, b"amqp:properties:list": S_PROPERTIES,
    b"amqp:application-properties:map": S_APPLICATION_PROPERTIES, b"amqp:data:binary": S_DATA,
    b"amqp:amqp-sequence:list": S_AMQP_SEQUENCE, b"amqp:amqp-value:*": S_AMQP_VALUE,
    b"amqp:footer:map": S_FOOTER,
}
cdef dict _SECTION_NAMES = {code: name for name, code in SECTION_CODES.items()}


# --- reading ---------------------------------------------------------------------------------

# A window over a message: buf[0] is the message's first byte (offsets in errors count
# from it); reads stop at `end`, which a list, map or array narrows to its own size.
cdef struct Src:
    const char *buf
    Py_ssize_t pos
    Py_ssize_t end


cdef int _short(Src *s, Py_ssize_t at, Py_ssize_t need, str what) except -1:
    raise AMQP10DecodeError(
        f"{what} at offset {at}: needs {need} bytes, {s.end - s.pos} left", offset=at)


cdef int _bad(Py_ssize_t at, str what) except -1:
    raise AMQP10DecodeError(f"{what} at offset {at}", offset=at)


cdef inline const char *_take(Src *s, Py_ssize_t n, Py_ssize_t at, str what) except NULL:
    cdef const char *p
    if s.end - s.pos < n:
        _short(s, at, n, what)
        return NULL
    p = s.buf + s.pos
    s.pos += n
    return p


cdef inline uint8_t _u8(Src *s, Py_ssize_t at, str what) except? 0xFF:
    if s.end - s.pos < 1:
        _short(s, at, 1, what)
    s.pos += 1
    return <uint8_t>s.buf[s.pos - 1]


cdef inline uint32_t _size(Src *s, bint wide, Py_ssize_t at, str what) except? 0xFFFFFFFF:
    """A size or count field: one byte, or four for the 32-bit forms."""
    if wide:
        return amqw_unpack_u32(_take(s, 4, at, what))
    return <uint8_t>_take(s, 1, at, what)[0]


cdef object _utf8(const char *p, Py_ssize_t n, Py_ssize_t at):
    cdef PyObject *raw = decode_utf8_or_null(p, n)
    if raw is NULL:
        _bad(at, "string: invalid UTF-8")
    result = <object>raw
    Py_XDECREF(raw)
    return result


cdef inline int _check_ascii(const char *p, Py_ssize_t n, Py_ssize_t at) except -1:
    cdef Py_ssize_t i
    for i in range(n):
        if <uint8_t>p[i] >= 0x80:
            _bad(at, f"symbol: byte 0x{<uint8_t>p[i]:02x} is not ASCII (at {at + i})")
    return 0


# Symbols repeat (annotation keys such as x-exchange, content types, descriptors): a small
# direct-mapped cache of the short ones turns most into a hash and a memcmp.  Each entry
# owns a reference to its Symbol; the GIL guards the table.
cdef enum:
    _SYMBOL_SLOTS = 256                 # a power of two
    _SYMBOL_MAX_LEN = 48

cdef struct _CachedSymbol:
    PyObject *obj
    Py_ssize_t len
    char data[_SYMBOL_MAX_LEN]

cdef _CachedSymbol _symbol_cache[_SYMBOL_SLOTS]
memset(_symbol_cache, 0, sizeof(_symbol_cache))


cdef object _symbol(const char *p, Py_ssize_t n, Py_ssize_t at):
    cdef _CachedSymbol *slot
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t i
    if n > _SYMBOL_MAX_LEN:
        _check_ascii(p, n, at)
        return amqw_new_str(Symbol, (PyUnicode_DecodeASCII(p, n, NULL),))
    for i in range(n):                  # FNV-1a
        h = (h ^ <uint8_t>p[i]) * 16777619u
    slot = &_symbol_cache[(h ^ (h >> 16)) & (_SYMBOL_SLOTS - 1)]
    if slot.obj is not NULL and slot.len == n and memcmp(slot.data, p, <size_t>n) == 0:
        return <object>slot.obj
    _check_ascii(p, n, at)
    symbol = amqw_new_str(Symbol, (PyUnicode_DecodeASCII(p, n, NULL),))
    Py_XDECREF(slot.obj)
    Py_XINCREF(<PyObject *>symbol)
    slot.obj = <PyObject *>symbol
    slot.len = n
    memcpy(slot.data, p, <size_t>n)
    return symbol


# Milliseconds from 0001-01-01T00:00:00Z and to 9999-12-31T23:59:59.999Z: what a datetime holds.
cdef int64_t _MIN_DATETIME_MS = -62135596800000
cdef int64_t _MAX_DATETIME_MS = 253402300799999


cdef object _timestamp(int64_t ms):
    cdef int64_t days, rest, y
    cdef int m = 0, d = 0
    if ms < _MIN_DATETIME_MS or ms > _MAX_DATETIME_MS:
        return amqw_new_int(Timestamp, (ms,))
    days = ms // 86400000
    rest = ms - days * 86400000
    if rest < 0:                      # C division truncates: floor it
        days -= 1
        rest += 86400000
    civil_from_days(days, &y, &m, &d)
    return datetime_new(<int>y, m, d, <int>(rest // 3600000), <int>(rest // 60000 % 60),
                        <int>(rest // 1000 % 60), <int>(rest % 1000) * 1000, _UTC)


cdef inline bint _is_ulong(uint8_t code) noexcept:
    return code == C_ULONG0 or code == C_SMALLULONG or code == C_ULONG


cdef inline bint _is_uint(uint8_t code) noexcept:
    return code == C_UINT0 or code == C_SMALLUINT or code == C_UINT


cdef object _read_unsigned(Src *s, uint8_t code, Py_ssize_t at):
    """A plain int of a ubyte, uint or ulong after its constructor ``code``."""
    if code == C_SMALLULONG or code == C_SMALLUINT or code == C_UBYTE:
        return _u8(s, at, "smallulong" if code == C_SMALLULONG else "smalluint" if code == C_SMALLUINT else "ubyte")
    if code == C_UINT:
        return amqw_unpack_u32(_take(s, 4, at, "uint"))
    if code == C_ULONG:
        return PyLong_FromUnsignedLongLong(amqw_unpack_u64(_take(s, 8, at, "ulong")))
    return 0


cdef object _read_value(Src *s, int depth):
    cdef Py_ssize_t at = s.pos
    cdef uint8_t code = _u8(s, at, "constructor")
    if code == C_DESCRIBED:
        if depth >= MAX_NESTING:
            _bad(at, f"described value nested deeper than {MAX_NESTING}")
        descriptor = _read_descriptor(s, depth + 1)
        return Described(descriptor, _read_value(s, depth + 1))
    return _read_payload(s, code, depth, at)


cdef object _read_descriptor(Src *s, int depth):
    """A descriptor (or an annotation key): a ulong is a plain int, a symbol a Symbol."""
    cdef uint8_t code = <uint8_t>s.buf[s.pos] if s.pos < s.end else 0
    if _is_ulong(code):
        s.pos += 1
        return _read_unsigned(s, code, s.pos - 1)
    return _exact_code(_read_value(s, depth), code)


cdef object _read_payload(Src *s, uint8_t code, int depth, Py_ssize_t at):
    """The value after constructor ``code`` (also an array element, which has no
    constructor of its own)."""
    cdef const char *p
    cdef uint32_t n
    cdef uint64_t u64
    cdef int64_t i64
    cdef uint8_t b
    if code == C_NULL:
        return None
    if code == C_TRUE:
        return True
    if code == C_FALSE:
        return False
    if code == C_BOOLEAN:
        b = _u8(s, at, "boolean")
        if b > 1:
            _bad(at, f"boolean: 0x{b:02x} is neither 0x00 nor 0x01")
        return b == 1
    if code == C_SMALLINT:
        return <int8_t>_u8(s, at, "smallint")
    if code == C_INT:
        return <int32_t>amqw_unpack_u32(_take(s, 4, at, "int"))
    if code == C_VBIN8 or code == C_VBIN32:
        n = _size(s, code == C_VBIN32, at, "binary size")
        p = _take(s, n, at, "binary")
        return PyBytes_FromStringAndSize(p, n)
    if code == C_STR8 or code == C_STR32:
        n = _size(s, code == C_STR32, at, "string size")
        p = _take(s, n, at, "string")
        return _utf8(p, n, at)
    if code == C_SYM8 or code == C_SYM32:
        n = _size(s, code == C_SYM32, at, "symbol size")
        p = _take(s, n, at, "symbol")
        return _symbol(p, n, at)
    if code == C_LIST0:
        if depth >= MAX_NESTING:
            _bad(at, f"list nested deeper than {MAX_NESTING}")
        return []
    if code == C_LIST8 or code == C_LIST32 or code == C_MAP8 or code == C_MAP32:
        return _read_compound(s, code, depth, at)
    if code == C_ARRAY8 or code == C_ARRAY32:
        return _read_array(s, code == C_ARRAY32, depth, at)
    if code == C_DOUBLE:
        return amqw_unpack_f64(_take(s, 8, at, "double"))
    if code == C_LONG:
        i64 = <int64_t>amqw_unpack_u64(_take(s, 8, at, "long"))
        if -0x80000000 <= i64 <= 0x7FFFFFFF:
            return amqw_new_int(Long, (i64,))
        return i64
    if code == C_SMALLLONG:
        return amqw_new_int(Long, (<int8_t>_u8(s, at, "smalllong"),))
    if code == C_ULONG:
        u64 = amqw_unpack_u64(_take(s, 8, at, "ulong"))
        if u64 > 0x7FFFFFFFFFFFFFFF:
            return PyLong_FromUnsignedLongLong(u64)
        return amqw_new_int(ULong, (u64,))
    if code == C_SMALLULONG:
        return amqw_new_int(ULong, (_u8(s, at, "smallulong"),))
    if code == C_ULONG0:
        return amqw_new_int(ULong, (0,))
    if code == C_UINT:
        return amqw_new_int(UInt, (amqw_unpack_u32(_take(s, 4, at, "uint")),))
    if code == C_SMALLUINT:
        return amqw_new_int(UInt, (_u8(s, at, "smalluint"),))
    if code == C_UINT0:
        return amqw_new_int(UInt, (0,))
    if code == C_UBYTE:
        return amqw_new_int(UByte, (_u8(s, at, "ubyte"),))
    if code == C_BYTE:
        return amqw_new_int(Byte, (<int8_t>_u8(s, at, "byte"),))
    if code == C_USHORT:
        return amqw_new_int(UShort, (amqw_unpack_u16(_take(s, 2, at, "ushort")),))
    if code == C_SHORT:
        return amqw_new_int(Short, (<int16_t>amqw_unpack_u16(_take(s, 2, at, "short")),))
    if code == C_FLOAT:
        return amqw_new_float(Float, (<double>amqw_unpack_f32(_take(s, 4, at, "float")),))
    if code == C_TIMESTAMP:
        return _timestamp(<int64_t>amqw_unpack_u64(_take(s, 8, at, "timestamp")))
    if code == C_UUID:
        return _UUID(bytes=PyBytes_FromStringAndSize(_take(s, 16, at, "uuid"), 16))
    if code == C_CHAR:
        n = amqw_unpack_u32(_take(s, 4, at, "char"))
        if n > 0x10FFFF:
            _bad(at, f"char: U+{n:X} is not a Unicode code point")
        return amqw_new_str(Char, (PyUnicode_FromOrdinal(<int>n),))
    if code == C_DECIMAL32:
        return Decimal32(PyBytes_FromStringAndSize(_take(s, 4, at, "decimal32"), 4))
    if code == C_DECIMAL64:
        return Decimal64(PyBytes_FromStringAndSize(_take(s, 8, at, "decimal64"), 8))
    if code == C_DECIMAL128:
        return Decimal128(PyBytes_FromStringAndSize(_take(s, 16, at, "decimal128"), 16))
    _bad(at, f"unknown constructor 0x{code:02x}")


cdef object _read_compound(Src *s, uint8_t code, int depth, Py_ssize_t at, bint annotation_keys=False):
    """A list or a map (its size and count fields next); ``annotation_keys``: a map whose
    ulong keys are plain ints (annotations)."""
    cdef bint wide = code == C_LIST32 or code == C_MAP32
    cdef bint is_map = code == C_MAP8 or code == C_MAP32
    cdef str what = "map" if is_map else "list"
    cdef uint32_t size, count, i
    cdef Py_ssize_t outer_end = s.end
    cdef list items
    if depth >= MAX_NESTING:
        _bad(at, f"{what} nested deeper than {MAX_NESTING}")
    size = _size(s, wide, at, "map size" if is_map else "list size")
    if size > <uint64_t>(s.end - s.pos):
        _bad(at, f"{what}: size {size} is over the {s.end - s.pos} bytes left")
    s.end = s.pos + size
    count = _size(s, wide, at, "map count" if is_map else "list count")
    if count > <uint64_t>(s.end - s.pos):    # every element takes at least one byte
        _bad(at, f"{what}: {count} elements cannot fit in {s.end - s.pos} bytes")
    if is_map:
        if count & 1:
            _bad(at, f"map: odd element count {count}")
        result = _read_pairs(s, count // 2, depth + 1, annotation_keys)
    else:
        items = [None] * count
        for i in range(count):
            items[i] = _read_value(s, depth + 1)
        result = items
    if s.pos != s.end:
        _bad(at, f"{what}: {count} elements end {s.end - s.pos} bytes before its size")
    s.end = outer_end
    return result


cdef dict _read_pairs(Src *s, uint32_t pairs, int depth, bint annotation_keys):
    cdef uint32_t _pair
    cdef Py_ssize_t key_at
    cdef dict mapping = amqw_dict_presized(pairs)
    for _pair in range(pairs):
        key_at = s.pos
        key = _read_descriptor(s, depth) if annotation_keys else _read_value(s, depth)
        _map_set(mapping, key, _read_value(s, depth), key_at)
    return mapping


cdef int _map_set(dict mapping, object key, object value, Py_ssize_t at) except -1:
    cdef Py_ssize_t before = len(mapping)
    try:
        mapping[key] = value
    except TypeError:
        _bad(at, f"map: key of type {type(key).__name__} cannot be a dict key")
    if len(mapping) == before:
        _bad(at, f"map: key {key!r} repeats (or equals an earlier key in Python)")
    return 0


cdef inline Py_ssize_t _fixed_width(uint8_t code) noexcept:
    """Bytes per element of a fixed-width constructor; -1 for variable ones, 0 for none."""
    if code == C_BOOLEAN or code == C_UBYTE or code == C_BYTE or code == C_SMALLUINT \
            or code == C_SMALLULONG or code == C_SMALLINT or code == C_SMALLLONG:
        return 1
    if code == C_USHORT or code == C_SHORT:
        return 2
    if code == C_UINT or code == C_INT or code == C_FLOAT or code == C_CHAR or code == C_DECIMAL32:
        return 4
    if code == C_ULONG or code == C_LONG or code == C_DOUBLE or code == C_TIMESTAMP or code == C_DECIMAL64:
        return 8
    if code == C_DECIMAL128 or code == C_UUID:
        return 16
    if code >= 0xa0:
        return -1
    return 0


cdef object _read_array(Src *s, bint wide, int depth, Py_ssize_t at):
    cdef uint32_t size, count, i
    cdef Py_ssize_t outer_end = s.end, width, ctor_at
    cdef uint8_t code
    cdef list items
    descriptor = None
    if depth >= MAX_NESTING:
        _bad(at, f"array nested deeper than {MAX_NESTING}")
    size = _size(s, wide, at, "array size")
    if size > <uint64_t>(s.end - s.pos):
        _bad(at, f"array: size {size} is over the {s.end - s.pos} bytes left")
    s.end = s.pos + size
    count = _size(s, wide, at, "array count")
    ctor_at = s.pos
    code = _u8(s, ctor_at, "array element constructor")
    if code == C_DESCRIBED:
        descriptor = _read_descriptor(s, depth + 1)
        ctor_at = s.pos
        code = _u8(s, ctor_at, "array element constructor")
        if code == C_DESCRIBED:
            _bad(ctor_at, "array: a described element type whose values are described again is not supported")
    element_type = _CODE_TYPES.get(code)
    width = _fixed_width(code)
    if element_type is None or width == 0:
        _bad(ctor_at, f"array: element constructor 0x{code:02x} has no width or is unknown")
    if width > 0 and <uint64_t>count * <uint64_t>width != <uint64_t>(s.end - s.pos):
        _bad(at, f"array: {count} elements of {width} bytes do not fill its {s.end - s.pos} bytes")
    if width < 0 and count > <uint64_t>(s.end - s.pos):
        _bad(at, f"array: {count} elements cannot fit in {s.end - s.pos} bytes")
    items = [None] * count
    for i in range(count):
        items[i] = _read_payload(s, code, depth + 1, s.pos)
    if s.pos != s.end:
        _bad(at, f"array: {count} elements end {s.end - s.pos} bytes before its size")
    s.end = outer_end
    result = Array.__new__(Array)
    result.items = items
    result.type = element_type
    result.descriptor = descriptor
    return result


# --- writing ---------------------------------------------------------------------------------

# Kinds of Python values, found by exact type first (one dict lookup), then by isinstance.
cdef enum:
    K_NONE = 1
    K_BOOL
    K_INT
    K_DOUBLE
    K_STR
    K_BINARY
    K_MAP
    K_LIST
    K_SYMBOL
    K_UBYTE
    K_USHORT
    K_UINT
    K_ULONG
    K_BYTE
    K_SHORT
    K_XINT
    K_LONG
    K_FLOAT
    K_CHAR
    K_TIMESTAMP
    K_UUID
    K_DECIMAL32
    K_DECIMAL64
    K_DECIMAL128
    K_DESCRIBED
    K_ARRAY

cdef dict _KINDS = {
    type(None): K_NONE, bool: K_BOOL, int: K_INT, float: K_DOUBLE, str: K_STR, bytes: K_BINARY,
    bytearray: K_BINARY, memoryview: K_BINARY, dict: K_MAP, list: K_LIST, tuple: K_LIST,
    Symbol: K_SYMBOL, UByte: K_UBYTE, UShort: K_USHORT, UInt: K_UINT, ULong: K_ULONG, Byte: K_BYTE,
    Short: K_SHORT, Int: K_XINT, Long: K_LONG, Float: K_FLOAT, Char: K_CHAR, Timestamp: K_TIMESTAMP,
    _dt.datetime: K_TIMESTAMP, _UUID: K_UUID, Decimal32: K_DECIMAL32, Decimal64: K_DECIMAL64,
    Decimal128: K_DECIMAL128, Described: K_DESCRIBED, Array: K_ARRAY,
}
# Subclasses, most derived first.
cdef tuple _KIND_CHECKS = (
    (Symbol, K_SYMBOL), (Char, K_CHAR), (UByte, K_UBYTE), (UShort, K_USHORT), (UInt, K_UINT),
    (ULong, K_ULONG), (Byte, K_BYTE), (Short, K_SHORT), (Int, K_XINT), (Long, K_LONG),
    (Timestamp, K_TIMESTAMP), (Float, K_FLOAT), (bool, K_BOOL), (int, K_INT), (float, K_DOUBLE),
    (str, K_STR), (_dt.datetime, K_TIMESTAMP), (_UUID, K_UUID), (dict, K_MAP), (list, K_LIST),
    (tuple, K_LIST), (Described, K_DESCRIBED), (Array, K_ARRAY), (Decimal32, K_DECIMAL32),
    (Decimal64, K_DECIMAL64), (Decimal128, K_DECIMAL128),
)

# Array element types: the Python class, the element constructor (variable-width types
# get their 8-bit or 32-bit form from their items).
cdef dict _ARRAY_TYPES = {
    Symbol: C_SYM32, str: C_STR32, bytes: C_VBIN32, bool: C_BOOLEAN, float: C_DOUBLE,
    UByte: C_UBYTE, UShort: C_USHORT, UInt: C_UINT, ULong: C_ULONG, Byte: C_BYTE, Short: C_SHORT,
    Int: C_INT, Long: C_LONG, Float: C_FLOAT, Char: C_CHAR, Timestamp: C_TIMESTAMP, _UUID: C_UUID,
    Decimal32: C_DECIMAL32, Decimal64: C_DECIMAL64, Decimal128: C_DECIMAL128, list: C_LIST32,
    dict: C_MAP32, Array: C_ARRAY32,
}
cdef dict _CODE_TYPES = {
    C_SYM8: Symbol, C_SYM32: Symbol, C_STR8: str, C_STR32: str, C_VBIN8: bytes, C_VBIN32: bytes,
    C_BOOLEAN: bool, C_DOUBLE: float, C_UBYTE: UByte, C_USHORT: UShort, C_UINT: UInt,
    C_SMALLUINT: UInt, C_ULONG: ULong, C_SMALLULONG: ULong, C_BYTE: Byte, C_SHORT: Short,
    C_INT: Int, C_SMALLINT: Int, C_LONG: Long, C_SMALLLONG: Long, C_FLOAT: Float, C_CHAR: Char,
    C_TIMESTAMP: Timestamp, C_UUID: _UUID, C_DECIMAL32: Decimal32, C_DECIMAL64: Decimal64,
    C_DECIMAL128: Decimal128, C_LIST8: list, C_LIST32: list, C_MAP8: dict, C_MAP32: dict,
    C_ARRAY8: Array, C_ARRAY32: Array,
}
# The kind whose scalar form each array type's elements are written with.
cdef dict _TYPE_KINDS = {
    Symbol: K_SYMBOL, str: K_STR, bytes: K_BINARY, bool: K_BOOL, float: K_DOUBLE, UByte: K_UBYTE,
    UShort: K_USHORT, UInt: K_UINT, ULong: K_ULONG, Byte: K_BYTE, Short: K_SHORT, Int: K_XINT,
    Long: K_LONG, Float: K_FLOAT, Char: K_CHAR, Timestamp: K_TIMESTAMP, _UUID: K_UUID,
    Decimal32: K_DECIMAL32, Decimal64: K_DECIMAL64, Decimal128: K_DECIMAL128, list: K_LIST,
    dict: K_MAP, Array: K_ARRAY,
}


cdef inline int _kind(object value) except -1:
    cdef object k = _KINDS.get(type(value))
    if k is not None:
        return k
    for cls, kind in _KIND_CHECKS:
        if isinstance(value, cls):
            return kind
    if PyObject_CheckBuffer(value):
        return K_BINARY
    raise AMQP10UnsupportedValueError(f"{type(value).__name__} has no AMQP 1.0 type: {value!r:.80}")


cdef int _encode_error(str what) except -1:
    raise AMQP10EncodeError(what)


cdef int64_t _signed(object value, int64_t lo, int64_t hi, str what) except? -1:
    """An int in lo..hi; AMQP10EncodeError naming ``what`` otherwise."""
    cdef int overflow = 0
    cdef long long v
    if not PyLong_Check(value) or PyBool_Check(value):
        raise AMQP10UnsupportedValueError(f"{what}: expected an int, got {type(value).__name__}")
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or v < lo or v > hi:
        _encode_error(f"{what}: {value} is out of range {lo}..{hi}")
    return v


cdef uint64_t _unsigned(object value, uint64_t hi, str what) except? 0xFFFFFFFFFFFFFFFF:
    cdef int overflow = 0
    cdef long long v
    if not PyLong_Check(value) or PyBool_Check(value):
        raise AMQP10UnsupportedValueError(f"{what}: expected an int, got {type(value).__name__}")
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow == 0:
        if v < 0 or <uint64_t>v > hi:
            _encode_error(f"{what}: {value} is out of range 0..{hi}")
        return <uint64_t>v
    if overflow < 0 or hi != 0xFFFFFFFFFFFFFFFF or value > 0xFFFFFFFFFFFFFFFF:
        _encode_error(f"{what}: {value} is out of range 0..{hi}")
    return PyLong_AsUnsignedLongLong(value)


cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d) noexcept:
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    y -= m <= 2
    cdef int64_t era = (y if y >= 0 else y - 399) // 400
    cdef int64_t yoe = y - era * 400
    cdef int64_t doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    cdef int64_t doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef int64_t _epoch_ms(object value, str what) except? -1:
    """Milliseconds since the epoch of a datetime (naive: UTC), floored; a Timestamp or an
    int as it is."""
    cdef int64_t us, ms
    if not PyDateTime_Check(value):
        return _signed(value, Timestamp.MIN, Timestamp.MAX, what)
    us = ((_days_from_civil(PyDateTime_GET_YEAR(value), PyDateTime_GET_MONTH(value),
                            PyDateTime_GET_DAY(value)) * 86400
           + PyDateTime_DATE_GET_HOUR(value) * 3600 + PyDateTime_DATE_GET_MINUTE(value) * 60
           + PyDateTime_DATE_GET_SECOND(value)) * 1000000 + PyDateTime_DATE_GET_MICROSECOND(value))
    tz = <object>datetime_tzinfo(value)
    if tz is not None and tz is not _UTC:
        offset = value.utcoffset()
        if offset is not None:
            us -= (offset.days * 86400 + offset.seconds) * 1000000 + offset.microseconds
    ms = us // 1000
    if ms * 1000 > us:               # C division truncates: floor it
        ms -= 1
    return ms


cdef inline int _write_sized(WriteBuffer buf, uint8_t code8, const char *data, Py_ssize_t n,
                             str what) except -1:
    """A variable-width value with its constructor: the 8-bit form when it fits."""
    if n <= 0xFF:
        buf.ensure(2 + n)
        buf._buf[buf._len] = <char>code8
        buf._buf[buf._len + 1] = <char><uint8_t>n
        memcpy(buf._buf + buf._len + 2, data, <size_t>n)
        buf._len += 2 + n
        return 0
    if n > 0xFFFFFFFF:
        _encode_error(f"{what} of {n} bytes is over the 2**32-1 an AMQP 1.0 size holds")
    buf.ensure(5 + n)
    buf._buf[buf._len] = <char>(code8 + 0x10)
    amqw_pack_u32(buf._buf + buf._len + 1, <uint32_t>n)
    memcpy(buf._buf + buf._len + 5, data, <size_t>n)
    buf._len += 5 + n
    return 0


cdef inline int _write_payload_sized(WriteBuffer buf, bint wide, const char *data, Py_ssize_t n,
                                     str what) except -1:
    """A variable-width array element: its size (1 or 4 bytes) and data."""
    if wide:
        if n > 0xFFFFFFFF:
            _encode_error(f"{what} of {n} bytes is over the 2**32-1 an AMQP 1.0 size holds")
        buf.write_u32(<uint32_t>n)
    else:
        buf.write_u8(<uint8_t>n)
    return buf.write_raw(data, n)


cdef const char *_symbol_ascii(object value, Py_ssize_t *n) except NULL:
    if not PyUnicode_IS_ASCII(value):
        _encode_error(f"symbol {str(value)!r:.80} is not ASCII")
    return utf8_of(value, n, b"symbol")


cdef int _write_binary(WriteBuffer buf, object value, uint8_t code8, int wide) except -1:
    """Bytes-like ``value``: with its constructor (wide < 0) or as an array element."""
    cdef Py_buffer view
    if PyBytes_CheckExact(value):
        if wide < 0:
            return _write_sized(buf, code8, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), "binary")
        return _write_payload_sized(buf, wide, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), "binary")
    if not PyObject_CheckBuffer(value):
        raise AMQP10UnsupportedValueError(f"binary: expected bytes-like, got {type(value).__name__}")
    try:
        PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)
    except BufferError:
        return _write_binary(buf, bytes(value), code8, wide)
    try:
        if wide < 0:
            _write_sized(buf, code8, <const char *>view.buf, view.len, "binary")
        else:
            _write_payload_sized(buf, wide, <const char *>view.buf, view.len, "binary")
    finally:
        PyBuffer_Release(&view)
    return 0


cdef inline Py_ssize_t _begin_compound(WriteBuffer buf, uint8_t code32, bint as_element) except -1:
    """Room for the 32-bit form's size and count (and its constructor, unless the value is
    an array element); returns where it starts, for _end_compound."""
    cdef Py_ssize_t start = buf._len
    if as_element:
        buf.ensure(8)
        buf._len += 8
    else:
        buf.ensure(9)
        buf._buf[start] = <char>code32
        buf._len += 9
    return start


cdef int _end_compound(WriteBuffer buf, Py_ssize_t start, Py_ssize_t count, bint as_element,
                       uint8_t empty_code) except -1:
    """Fill in the size and count.  A value (not an array element) moves to its 8-bit form
    when that fits, or to ``empty_code`` (list0) when it has no elements."""
    cdef Py_ssize_t head = 8 if as_element else 9
    cdef Py_ssize_t n = buf._len - start - head
    if not as_element:
        if count == 0 and empty_code:
            buf._buf[start] = <char>empty_code
            buf._len = start + 1
            return 0
        if count <= 0xFF and n + 1 <= 0xFF:
            buf._buf[start] = <char>(<uint8_t>buf._buf[start] - 0x10)
            buf._buf[start + 1] = <char><uint8_t>(n + 1)
            buf._buf[start + 2] = <char><uint8_t>count
            memmove(buf._buf + start + 3, buf._buf + start + 9, <size_t>n)
            buf._len -= 6
            return 0
    if n + 4 > 0xFFFFFFFF or count > 0xFFFFFFFF:
        buf._len = start
        _encode_error(f"compound value of {n} bytes is over the 2**32-1 an AMQP 1.0 size holds")
    amqw_pack_u32(buf._buf + start + head - 8, <uint32_t>(n + 4))
    amqw_pack_u32(buf._buf + start + head - 4, <uint32_t>count)
    return 0


cdef inline int _check_depth(int depth) except -1:
    if depth >= MAX_NESTING:
        _encode_error(f"values nested deeper than {MAX_NESTING} (a list that contains itself?)")
    return 0


cdef Py_ssize_t _write_list_items(WriteBuffer buf, object seq, int depth) except -1:
    cdef Py_ssize_t i, n
    if PyList_CheckExact(seq):
        i = 0
        while i < PyList_GET_SIZE(seq):      # the list may change while we write it
            write_value(buf, <object>PyList_GET_ITEM(seq, i), depth)
            i += 1
        return i
    if PyTuple_CheckExact(seq):
        n = PyTuple_GET_SIZE(seq)
        for i in range(n):
            write_value(buf, <object>PyTuple_GET_ITEM(seq, i), depth)
        return n
    n = 0
    for item in seq:
        write_value(buf, item, depth)
        n += 1
    return n


cdef int _write_list(WriteBuffer buf, object seq, int depth, bint as_element) except -1:
    cdef Py_ssize_t start, count
    _check_depth(depth)
    start = _begin_compound(buf, C_LIST32, as_element)
    count = _write_list_items(buf, seq, depth + 1)
    return _end_compound(buf, start, count, as_element, C_LIST0)


cdef int _write_map(WriteBuffer buf, object mapping, int depth, bint as_element) except -1:
    cdef Py_ssize_t start, count = 0
    _check_depth(depth)
    start = _begin_compound(buf, C_MAP32, as_element)
    for key, value in mapping.items():
        write_value(buf, key, depth + 1)
        write_value(buf, value, depth + 1)
        count += 2
    return _end_compound(buf, start, count, as_element, 0)


cdef int write_value(WriteBuffer buf, object value, int depth) except -1:
    cdef int kind = _kind(value)
    cdef Py_ssize_t n = 0
    cdef const char *p
    cdef int64_t i64
    cdef uint64_t u64
    cdef int overflow = 0
    if kind == K_STR:
        p = utf8_of(value, &n, b"string")
        return _write_sized(buf, C_STR8, p, n, "string")
    if kind == K_INT:
        i64 = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow == 0:
            if -0x80 <= i64 <= 0x7F:
                buf.write_u8(C_SMALLINT)
                return buf.write_u8(<uint8_t>i64)
            if -0x80000000 <= i64 <= 0x7FFFFFFF:
                buf.write_u8(C_INT)
                return buf.write_u32(<uint32_t>i64)
            buf.write_u8(C_LONG)
            return buf.write_u64(<uint64_t>i64)
        if overflow < 0 or value > 0xFFFFFFFFFFFFFFFF:
            _encode_error(f"int: {value} is outside -2**63..2**64-1, what AMQP 1.0 long and ulong hold")
        u64 = PyLong_AsUnsignedLongLong(value)
        buf.write_u8(C_ULONG)
        return buf.write_u64(u64)
    if kind == K_BINARY:
        return _write_binary(buf, value, C_VBIN8, -1)
    if kind == K_NONE:
        return buf.write_u8(C_NULL)
    if kind == K_BOOL:
        return buf.write_u8(C_TRUE if value else C_FALSE)
    if kind == K_MAP:
        return _write_map(buf, value, depth, False)
    if kind == K_LIST:
        return _write_list(buf, value, depth, False)
    if kind == K_SYMBOL:
        p = _symbol_ascii(value, &n)
        return _write_sized(buf, C_SYM8, p, n, "symbol")
    if kind == K_DOUBLE:
        buf.write_u8(C_DOUBLE)
        return buf.write_f64(PyFloat_AsDouble(value))
    if kind == K_UINT:
        return _write_ulong(buf, _unsigned(value, 0xFFFFFFFF, "uint"), True)
    if kind == K_ULONG:
        return _write_ulong(buf, _unsigned(value, 0xFFFFFFFFFFFFFFFF, "ulong"))
    if kind == K_XINT:
        i64 = _signed(value, -0x80000000, 0x7FFFFFFF, "int")
        if -0x80 <= i64 <= 0x7F:
            buf.write_u8(C_SMALLINT)
            return buf.write_u8(<uint8_t>i64)
        buf.write_u8(C_INT)
        return buf.write_u32(<uint32_t>i64)
    if kind == K_LONG:
        i64 = _signed(value, Long.MIN, Long.MAX, "long")
        if -0x80 <= i64 <= 0x7F:
            buf.write_u8(C_SMALLLONG)
            return buf.write_u8(<uint8_t>i64)
        buf.write_u8(C_LONG)
        return buf.write_u64(<uint64_t>i64)
    if kind == K_DESCRIBED:
        _check_depth(depth)
        buf.write_u8(C_DESCRIBED)
        _write_descriptor(buf, value.descriptor, depth + 1)
        return write_value(buf, value.value, depth + 1)
    if kind == K_ARRAY:
        return _write_array(buf, value, depth, False)
    return _write_fixed(buf, kind, value, True)


cdef int _write_ulong(WriteBuffer buf, uint64_t v, bint uint=False) except -1:
    """A ulong (or, with ``uint``, a uint) in its smallest encoding."""
    if v == 0:
        return buf.write_u8(C_UINT0 if uint else C_ULONG0)
    if v <= 0xFF:
        buf.ensure(2)
        buf._buf[buf._len] = <char>(C_SMALLUINT if uint else C_SMALLULONG)
        buf._buf[buf._len + 1] = <char><uint8_t>v
        buf._len += 2
        return 0
    if uint:
        buf.write_u8(C_UINT)
        return buf.write_u32(<uint32_t>v)
    buf.write_u8(C_ULONG)
    return buf.write_u64(v)


cdef int _write_descriptor(WriteBuffer buf, object descriptor, int depth) except -1:
    """A plain int is a ulong code, a str a symbol; anything else as itself."""
    cdef Py_ssize_t n = 0
    cdef const char *p
    if type(descriptor) is int:
        return _write_ulong(buf, _unsigned(descriptor, 0xFFFFFFFFFFFFFFFF, "ulong"))
    if type(descriptor) is str:
        p = _symbol_ascii(descriptor, &n)
        return _write_sized(buf, C_SYM8, p, n, "symbol")
    return write_value(buf, descriptor, depth)


# Constructors of the fixed-width kinds, for _write_fixed (0: not fixed-width).
cdef uint8_t _FIXED_CODES[K_ARRAY + 1]
_FIXED_CODES[K_BOOL] = C_BOOLEAN
_FIXED_CODES[K_DOUBLE] = C_DOUBLE
_FIXED_CODES[K_UBYTE] = C_UBYTE
_FIXED_CODES[K_USHORT] = C_USHORT
_FIXED_CODES[K_UINT] = C_UINT
_FIXED_CODES[K_ULONG] = C_ULONG
_FIXED_CODES[K_BYTE] = C_BYTE
_FIXED_CODES[K_SHORT] = C_SHORT
_FIXED_CODES[K_XINT] = C_INT
_FIXED_CODES[K_LONG] = C_LONG
_FIXED_CODES[K_FLOAT] = C_FLOAT
_FIXED_CODES[K_CHAR] = C_CHAR
_FIXED_CODES[K_TIMESTAMP] = C_TIMESTAMP
_FIXED_CODES[K_UUID] = C_UUID
_FIXED_CODES[K_DECIMAL32] = C_DECIMAL32
_FIXED_CODES[K_DECIMAL64] = C_DECIMAL64
_FIXED_CODES[K_DECIMAL128] = C_DECIMAL128


cdef int _write_fixed(WriteBuffer buf, int kind, object value, bint with_code) except -1:
    """A value of a fixed-width kind at full width (an array element: ``with_code`` False)."""
    cdef uint8_t code = _FIXED_CODES[kind]
    cdef Py_ssize_t n = 0
    cdef object raw
    if with_code:
        buf.write_u8(code)
    if kind == K_BOOL:
        if not PyBool_Check(value):
            raise AMQP10UnsupportedValueError(f"boolean: expected a bool, got {type(value).__name__}")
        return buf.write_u8(1 if value else 0)
    if kind == K_DOUBLE or kind == K_FLOAT:
        if not (PyFloat_Check(value) or PyLong_Check(value)) or PyBool_Check(value):
            raise AMQP10UnsupportedValueError(f"float: expected a float, got {type(value).__name__}")
        if kind == K_FLOAT:
            return buf.write_f32(<float>PyFloat_AsDouble(value))
        return buf.write_f64(PyFloat_AsDouble(value))
    if kind == K_UBYTE:
        return buf.write_u8(<uint8_t>_unsigned(value, 0xFF, "ubyte"))
    if kind == K_USHORT:
        return buf.write_u16(<uint16_t>_unsigned(value, 0xFFFF, "ushort"))
    if kind == K_UINT:
        return buf.write_u32(<uint32_t>_unsigned(value, 0xFFFFFFFF, "uint"))
    if kind == K_ULONG:
        return buf.write_u64(_unsigned(value, 0xFFFFFFFFFFFFFFFF, "ulong"))
    if kind == K_BYTE:
        return buf.write_u8(<uint8_t>_signed(value, -0x80, 0x7F, "byte"))
    if kind == K_SHORT:
        return buf.write_u16(<uint16_t>_signed(value, -0x8000, 0x7FFF, "short"))
    if kind == K_XINT:
        return buf.write_u32(<uint32_t>_signed(value, -0x80000000, 0x7FFFFFFF, "int"))
    if kind == K_LONG:
        return buf.write_u64(<uint64_t>_signed(value, Long.MIN, Long.MAX, "long"))
    if kind == K_TIMESTAMP:
        return buf.write_u64(<uint64_t>_epoch_ms(value, "timestamp"))
    if kind == K_CHAR:
        if not PyUnicode_Check(value) or PyUnicode_GET_LENGTH(value) != 1:
            _encode_error(f"char: expected one character, got {value!r:.80}")
        return buf.write_u32(<uint32_t>PyUnicode_READ_CHAR(value, 0))
    if kind == K_UUID:
        if not isinstance(value, _UUID):
            raise AMQP10UnsupportedValueError(f"uuid: expected uuid.UUID, got {type(value).__name__}")
        raw = value.bytes
        return buf.write_raw(PyBytes_AS_STRING(raw), 16)
    if kind == K_DECIMAL32 or kind == K_DECIMAL64 or kind == K_DECIMAL128:
        n = 4 if kind == K_DECIMAL32 else 8 if kind == K_DECIMAL64 else 16
        raw = getattr(value, "raw", None)
        if type(raw) is not bytes or PyBytes_GET_SIZE(raw) != n:
            raise AMQP10UnsupportedValueError(f"decimal{n * 8}: expected Decimal{n * 8}, got {type(value).__name__}")
        return buf.write_raw(PyBytes_AS_STRING(raw), n)
    raise AMQP10UnsupportedValueError(f"{type(value).__name__} is not a fixed-width AMQP 1.0 type")


cdef object _array_type_name(object array):
    """The element type an Array is (or would be) written with, for equality."""
    try:
        return _array_plan(array)[0]
    except CodecError:
        return None


cdef tuple _array_plan(object array):
    """(element type, descriptor, items) of an Array: its ``type``, or inferred."""
    items = array.items
    kind = array.type
    descriptor = array.descriptor
    if descriptor is None and items and type(items[0]) is Described:
        descriptor = items[0].descriptor
    if descriptor is not None:
        values = []
        for item in items:
            if isinstance(item, Described):
                if item.descriptor != descriptor:
                    _encode_error(f"array: descriptor {item.descriptor!r} differs from {descriptor!r}")
                item = item.value
            values.append(item)
        items = values
    if kind is None:
        kind = _infer_array_type(items)
    return kind, descriptor, items


cdef object _infer_array_type(list items):
    if not items:
        raise AMQP10EncodeError("array: an empty Array needs its element type (Array([], UInt) ...)")
    first = items[0]
    kind = _kind(first)
    if kind == K_INT:
        if not all(type(item) is int for item in items):
            raise AMQP10UnsupportedValueError("array: items of several types; give the Array its type")
        lo, hi = min(items), max(items)
        if lo >= Int.MIN and hi <= Int.MAX:
            return Int
        if lo >= Long.MIN and hi <= Long.MAX:
            return Long
        return ULong
    if kind == K_NONE:
        raise AMQP10EncodeError("array: null elements have no width; an Array cannot hold None")
    if kind == K_DESCRIBED:
        raise AMQP10EncodeError("array: described elements must share one descriptor")
    for cls, k in _TYPE_KINDS.items():
        if k == kind:
            return cls
    raise AMQP10UnsupportedValueError(f"array: no element type for {type(first).__name__}")


cdef int _write_array(WriteBuffer buf, object array, int depth, bint as_element) except -1:
    """An Array: as a value (constructor, the 8-bit form when it fits) or as an array
    element (32-bit form, no constructor)."""
    cdef Py_ssize_t start, count
    cdef uint8_t code
    cdef int element_kind
    cdef bint wide = False
    _check_depth(depth)
    element_type, descriptor, items = _array_plan(array)
    code = _ARRAY_TYPES[element_type]
    element_kind = _TYPE_KINDS[element_type]
    if code == C_SYM32 or code == C_STR32 or code == C_VBIN32:
        wide = _any_over_255(items, element_kind)
        if not wide:
            code -= 0x10
    start = _begin_compound(buf, C_ARRAY32, as_element)
    if descriptor is not None:
        buf.write_u8(C_DESCRIBED)
        _write_descriptor(buf, descriptor, depth + 1)
    buf.write_u8(code)
    count = len(items)
    for item in items:
        _write_element(buf, element_kind, item, wide, depth + 1)
    return _end_compound(buf, start, count, as_element, 0)


cdef bint _any_over_255(list items, int kind) except -1:
    cdef Py_ssize_t n = 0
    for item in items:
        if kind == K_BINARY:
            n = len(item) if PyBytes_CheckExact(item) else memoryview(item).nbytes
        elif not PyUnicode_Check(item):
            raise AMQP10UnsupportedValueError(f"array: expected str elements, got {type(item).__name__}")
        else:
            utf8_of(item, &n, b"string")
        if n > 0xFF:
            return True
    return False


cdef int _write_element(WriteBuffer buf, int kind, object item, bint wide, int depth) except -1:
    """One array element: the value without its constructor."""
    cdef Py_ssize_t n = 0
    cdef const char *p
    if kind == K_STR or kind == K_SYMBOL:
        if not PyUnicode_Check(item):
            raise AMQP10UnsupportedValueError(f"array: expected str elements, got {type(item).__name__}")
        p = _symbol_ascii(item, &n) if kind == K_SYMBOL else utf8_of(item, &n, b"string")
        return _write_payload_sized(buf, wide, p, n, "string")
    if kind == K_BINARY:
        return _write_binary(buf, item, 0, wide)
    if kind == K_LIST:
        if not isinstance(item, (list, tuple)):
            raise AMQP10UnsupportedValueError(f"array: expected list elements, got {type(item).__name__}")
        return _write_list(buf, item, depth, True)
    if kind == K_MAP:
        if not isinstance(item, dict):
            raise AMQP10UnsupportedValueError(f"array: expected dict elements, got {type(item).__name__}")
        return _write_map(buf, item, depth, True)
    if kind == K_ARRAY:
        if not isinstance(item, Array):
            raise AMQP10UnsupportedValueError(f"array: expected Array elements, got {type(item).__name__}")
        return _write_array(buf, item, depth, True)
    return _write_fixed(buf, kind, item, False)


# --- message sections ------------------------------------------------------------------------

# How a field of the header or properties list is written and read.
cdef enum:
    F_ANY = 0           # by the general mapping
    F_UBYTE             # a plain int is a ubyte
    F_UINT              # a plain int is a uint
    F_MESSAGE_ID        # a plain int is a ulong
    F_SYMBOL            # a str is a symbol
    F_BINARY            # a str is its UTF-8 as binary
    F_TIMESTAMP         # a datetime or a plain int (ms) is a timestamp

HEADER_FIELDS = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTIES_FIELDS = (
    "message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
    "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id",
)
cdef int[5] _HEADER_KINDS = [F_ANY, F_UBYTE, F_UINT, F_ANY, F_UINT]
cdef int[13] _PROPERTIES_KINDS = [
    F_MESSAGE_ID, F_BINARY, F_ANY, F_ANY, F_ANY, F_MESSAGE_ID, F_SYMBOL, F_SYMBOL, F_TIMESTAMP,
    F_TIMESTAMP, F_ANY, F_UINT, F_ANY,
]


cdef str _fields_repr(str name, tuple names, tuple values):
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in zip(names, values) if v is not None) + ")"


@cython.freelist(64)
cdef class Header:
    """The header section: delivery details (None: absent, the spec's default applies:
    durable False, priority 4, ttl none, first_acquirer False, delivery_count 0)."""

    def __init__(self, *, durable=None, priority=None, ttl=None, first_acquirer=None,
                 delivery_count=None):
        self.durable = durable
        self.priority = priority
        self.ttl = ttl
        self.first_acquirer = first_acquirer
        self.delivery_count = delivery_count

    cdef tuple _values(self):
        return (self.durable, self.priority, self.ttl, self.first_acquirer, self.delivery_count)

    def as_dict(self):
        """The fields that are set, by name."""
        return {k: v for k, v in zip(HEADER_FIELDS, self._values()) if v is not None}

    def __eq__(self, other):
        if not isinstance(other, Header):
            return NotImplemented
        return self._values() == (<Header>other)._values()

    __hash__ = None

    def __repr__(self):
        return _fields_repr("Header", HEADER_FIELDS, self._values())


@cython.freelist(64)
cdef class Properties:
    """The properties section's 13 fields (None: absent)."""

    def __init__(self, *, message_id=None, user_id=None, to=None, subject=None, reply_to=None,
                 correlation_id=None, content_type=None, content_encoding=None,
                 absolute_expiry_time=None, creation_time=None, group_id=None,
                 group_sequence=None, reply_to_group_id=None):
        self.message_id = message_id
        self.user_id = user_id
        self.to = to
        self.subject = subject
        self.reply_to = reply_to
        self.correlation_id = correlation_id
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.absolute_expiry_time = absolute_expiry_time
        self.creation_time = creation_time
        self.group_id = group_id
        self.group_sequence = group_sequence
        self.reply_to_group_id = reply_to_group_id

    cdef tuple _values(self):
        return (self.message_id, self.user_id, self.to, self.subject, self.reply_to,
                self.correlation_id, self.content_type, self.content_encoding,
                self.absolute_expiry_time, self.creation_time, self.group_id,
                self.group_sequence, self.reply_to_group_id)

    def as_dict(self):
        """The fields that are set, by name."""
        return {k: v for k, v in zip(PROPERTIES_FIELDS, self._values()) if v is not None}

    def __eq__(self, other):
        if not isinstance(other, Properties):
            return NotImplemented
        return self._values() == (<Properties>other)._values()

    __hash__ = None

    def __repr__(self):
        return _fields_repr("Properties", PROPERTIES_FIELDS, self._values())


MESSAGE_FIELDS = ("header", "delivery_annotations", "message_annotations", "properties",
                  "application_properties", "body", "footer")


@cython.freelist(256)
cdef class Message:
    """An AMQP 1.0 message: its sections (None: absent).  ``body`` is bytes for one data
    section, else Data, AmqpSequence, AmqpValue or None (see the module docstring)."""

    def __init__(self, body=None, *, header=None, delivery_annotations=None,
                 message_annotations=None, properties=None, application_properties=None,
                 footer=None):
        self.body = body
        self.header = header
        self.delivery_annotations = delivery_annotations
        self.message_annotations = message_annotations
        self.properties = properties
        self.application_properties = application_properties
        self.footer = footer

    cdef tuple _values(self):
        return (self.header, self.delivery_annotations, self.message_annotations, self.properties,
                self.application_properties, self.body, self.footer)

    def encode(self):
        """The message's bytes (as :func:`encode_message` writes them)."""
        cdef WriteBuffer buf = WriteBuffer(_initial_capacity(self.body))
        _write_sections(buf, self.header, self.delivery_annotations, self.message_annotations,
                        self.properties, self.application_properties, self.body, self.footer)
        return buf.to_bytes()

    def __eq__(self, other):
        if not isinstance(other, Message):
            return NotImplemented
        return self._values() == (<Message>other)._values()

    __hash__ = None

    def __repr__(self):
        return _fields_repr("Message", MESSAGE_FIELDS, self._values())


# --- writing sections ---------------------------------------------------------------------

cdef inline int _section(WriteBuffer buf, uint8_t code) except -1:
    buf.ensure(3)
    buf._buf[buf._len] = <char>C_DESCRIBED
    buf._buf[buf._len + 1] = <char>C_SMALLULONG
    buf._buf[buf._len + 2] = <char>code
    buf._len += 3
    return 0


cdef int _write_field(WriteBuffer buf, object value, int kind) except -1:
    cdef Py_ssize_t n = 0
    cdef const char *p
    if value is None:
        return buf.write_u8(C_NULL)
    if kind == F_ANY:
        return write_value(buf, value, 1)
    if kind == F_SYMBOL:
        if PyUnicode_Check(value):
            p = _symbol_ascii(value, &n)
            return _write_sized(buf, C_SYM8, p, n, "symbol")
    elif kind == F_MESSAGE_ID:
        if type(value) is int:
            return _write_ulong(buf, _unsigned(value, 0xFFFFFFFFFFFFFFFF, "ulong"))
    elif kind == F_UINT:
        if type(value) is int:
            return _write_ulong(buf, _unsigned(value, 0xFFFFFFFF, "uint"), True)
    elif kind == F_UBYTE:
        if type(value) is int:
            buf.write_u8(C_UBYTE)
            return buf.write_u8(<uint8_t>_unsigned(value, 0xFF, "ubyte"))
    elif kind == F_TIMESTAMP:
        if type(value) is int or PyDateTime_Check(value):
            buf.write_u8(C_TIMESTAMP)
            return buf.write_u64(<uint64_t>_epoch_ms(value, "timestamp"))
    elif kind == F_BINARY:
        if PyUnicode_Check(value):
            p = utf8_of(value, &n, b"user_id")
            return _write_sized(buf, C_VBIN8, p, n, "binary")
    return write_value(buf, value, 1)


cdef int _write_composite(WriteBuffer buf, uint8_t code, tuple values, const int *kinds,
                          tuple names) except -1:
    """A header or properties section: a list of its fields, trailing nulls left out."""
    cdef Py_ssize_t count = len(values), start, i
    while count > 0 and values[count - 1] is None:
        count -= 1
    _section(buf, code)
    start = _begin_compound(buf, C_LIST32, False)
    for i in range(count):
        try:
            _write_field(buf, values[i], kinds[i])
        except CodecError as exc:
            exc.args = (f"{names[i]}: {exc.args[0] if exc.args else ''}",)
            raise
    return _end_compound(buf, start, count, False, C_LIST0)


cdef int _write_annotations(WriteBuffer buf, uint8_t code, object mapping, str what) except -1:
    """Annotations: a map whose keys are symbols (a str) or ulongs (a plain int); other
    keys (wrappers, decoded from a peer that wrote them) as themselves."""
    cdef Py_ssize_t start, count = 0, n = 0
    cdef const char *p
    if not isinstance(mapping, dict):
        raise AMQP10UnsupportedValueError(f"{what}: expected a dict, got {type(mapping).__name__}")
    _section(buf, code)
    start = _begin_compound(buf, C_MAP32, False)
    for key, value in mapping.items():
        try:
            if PyUnicode_Check(key):
                p = _symbol_ascii(key, &n)
                _write_sized(buf, C_SYM8, p, n, "symbol")
            elif type(key) is int:
                _write_ulong(buf, _unsigned(key, 0xFFFFFFFFFFFFFFFF, "ulong"))
            else:
                write_value(buf, key, 1)
            write_value(buf, value, 1)
        except CodecError as exc:
            exc.args = (f"{what}[{key!r}]: {exc.args[0] if exc.args else ''}",)
            raise
        count += 2
    return _end_compound(buf, start, count, False, 0)


cdef int _write_application_properties(WriteBuffer buf, object mapping) except -1:
    cdef Py_ssize_t start, count = 0
    if not isinstance(mapping, dict):
        raise AMQP10UnsupportedValueError(
            f"application_properties: expected a dict, got {type(mapping).__name__}")
    _section(buf, S_APPLICATION_PROPERTIES)
    start = _begin_compound(buf, C_MAP32, False)
    for key, value in mapping.items():
        try:
            write_value(buf, key, 1)
            write_value(buf, value, 1)
        except CodecError as exc:
            exc.args = (f"application_properties[{key!r}]: {exc.args[0] if exc.args else ''}",)
            raise
        count += 2
    return _end_compound(buf, start, count, False, 0)


cdef int _write_data(WriteBuffer buf, object part) except -1:
    _section(buf, S_DATA)
    return _write_binary(buf, part, C_VBIN8, -1)


cdef int _write_body(WriteBuffer buf, object body) except -1:
    if PyBytes_CheckExact(body):
        return _write_data(buf, body)
    if body is None:
        return 0
    if isinstance(body, Data):
        if not body.parts:
            _encode_error("body: Data needs at least one part")
        for part in body.parts:
            if not PyObject_CheckBuffer(part):
                raise AMQP10UnsupportedValueError(f"body: a Data part must be bytes-like, got {type(part).__name__}")
            _write_data(buf, part)
        return 0
    if isinstance(body, AmqpValue):
        _section(buf, S_AMQP_VALUE)
        return write_value(buf, body.value, 1)
    if isinstance(body, AmqpSequence):
        if not body.sequences:
            _encode_error("body: AmqpSequence needs at least one list")
        for sequence in body.sequences:
            _section(buf, S_AMQP_SEQUENCE)
            _write_list(buf, sequence, 1, False)
        return 0
    if PyObject_CheckBuffer(body):
        return _write_data(buf, body)
    raise AMQP10UnsupportedValueError(
        f"body: expected bytes-like, Data, AmqpSequence or AmqpValue, got {type(body).__name__} "
        "(wrap other values in AmqpValue)")


cdef object _as_section_object(object value, type cls, tuple names, str what):
    """A Header or Properties as given, or built from a dict of its fields."""
    if isinstance(value, cls):
        return value
    if isinstance(value, dict):
        for key in value:
            if key not in names:
                raise AMQP10UnsupportedValueError(f"{what}: no field named {key!r}; the fields: {', '.join(names)}")
        return cls(**value)
    raise AMQP10UnsupportedValueError(f"{what}: expected {cls.__name__} or a dict, got {type(value).__name__}")


cdef int _write_sections(WriteBuffer buf, object header, object delivery_annotations,
                         object message_annotations, object properties,
                         object application_properties, object body, object footer) except -1:
    cdef Py_ssize_t start = buf._len
    try:
        if header is not None:
            header = _as_section_object(header, Header, HEADER_FIELDS, "header")
            _write_composite(buf, S_HEADER, (<Header>header)._values(), _HEADER_KINDS, HEADER_FIELDS)
        if delivery_annotations is not None:
            _write_annotations(buf, S_DELIVERY_ANNOTATIONS, delivery_annotations, "delivery_annotations")
        if message_annotations is not None:
            _write_annotations(buf, S_MESSAGE_ANNOTATIONS, message_annotations, "message_annotations")
        if properties is not None:
            properties = _as_section_object(properties, Properties, PROPERTIES_FIELDS, "properties")
            _write_composite(buf, S_PROPERTIES, (<Properties>properties)._values(), _PROPERTIES_KINDS,
                             PROPERTIES_FIELDS)
        if application_properties is not None:
            _write_application_properties(buf, application_properties)
        _write_body(buf, body)
        if footer is not None:
            _write_annotations(buf, S_FOOTER, footer, "footer")
        if buf._len == start:
            _encode_error("message: no sections (no body and nothing else); an AMQP 1.0 message has at least one")
    except BaseException:
        buf._len = start                 # nothing of a message that could not be written
        raise
    return 0


cdef int write_message(WriteBuffer buf, object body, object properties,
                       object application_properties) except -1:
    if PyBytes_CheckExact(body) and properties is None and application_properties is None:
        return _write_data(buf, body)      # the common case: nothing to undo on an error
    return _write_sections(buf, None, None, None, properties, application_properties, body, None)


cdef inline Py_ssize_t _initial_capacity(object body) noexcept:
    if PyBytes_CheckExact(body):
        return PyBytes_GET_SIZE(body) + 256
    return 256


def encode_message(body, *, properties=None, application_properties=None, message_annotations=None,
                   header=None, delivery_annotations=None, footer=None):
    """The bytes of one AMQP 1.0 message (no size prefix): the sections given, in the
    spec's order.  ``body``: bytes-like (one data section), Data, AmqpSequence, AmqpValue or
    None; ``properties`` a Properties or a dict of its fields, ``header`` a Header or a dict;
    the annotations and ``application_properties`` dicts."""
    cdef Py_ssize_t n
    cdef bytes out
    cdef char *p
    cdef WriteBuffer buf
    if (PyBytes_CheckExact(body) and properties is None and application_properties is None
            and message_annotations is None and header is None and delivery_annotations is None
            and footer is None):
        # The common case, a message that is only its body: written straight into its bytes.
        n = PyBytes_GET_SIZE(body)
        if n <= 0xFF:
            out = PyBytes_FromStringAndSize(NULL, n + 5)
            p = PyBytes_AS_STRING(out)
            p[3] = <char>C_VBIN8
            p[4] = <char><uint8_t>n
            memcpy(p + 5, PyBytes_AS_STRING(body), <size_t>n)
        elif n <= 0xFFFFFFFF:
            out = PyBytes_FromStringAndSize(NULL, n + 8)
            p = PyBytes_AS_STRING(out)
            p[3] = <char>C_VBIN32
            amqw_pack_u32(p + 4, <uint32_t>n)
            memcpy(p + 8, PyBytes_AS_STRING(body), <size_t>n)
        else:
            raise AMQP10EncodeError(f"body: {n} bytes is over the 2**32-1 a data section holds")
        p[0] = <char>C_DESCRIBED
        p[1] = <char>C_SMALLULONG
        p[2] = <char>S_DATA
        return out
    buf = WriteBuffer(_initial_capacity(body))
    _write_sections(buf, header, delivery_annotations, message_annotations, properties,
                    application_properties, body, footer)
    return buf.to_bytes()


def encode_value(value):
    """The bytes of one AMQP 1.0 value, by the mapping of the module docstring."""
    cdef WriteBuffer buf = WriteBuffer(64)
    write_value(buf, value, 0)
    return buf.to_bytes()


# --- reading sections -----------------------------------------------------------------------

cdef object _exact_code(object value, uint8_t code):
    """A decoded value for a place where a plain int means another type than the one it
    was read as (a ulong descriptor or key, a uint field ...): wrapped in its own type."""
    if type(value) is not int:
        return value
    if code == C_LONG or code == C_SMALLLONG:
        return amqw_new_int(Long, (value,))
    if code == C_ULONG:
        return amqw_new_int(ULong, (value,)) if value <= Long.MAX else value
    return amqw_new_int(Int, (value,))


cdef object _field(Src *s, int kind):
    """One field of the header or properties list: plain Python when its type is the
    field's own (see _write_field), else as it came."""
    cdef uint8_t code = <uint8_t>s.buf[s.pos] if s.pos < s.end else 0
    cdef uint32_t n
    cdef const char *p
    cdef Py_ssize_t at = s.pos
    if kind == F_SYMBOL and (code == C_SYM8 or code == C_SYM32):    # a str, no Symbol
        s.pos += 1
        n = _size(s, code == C_SYM32, at, "symbol size")
        p = _take(s, n, at, "symbol")
        _check_ascii(p, n, at)
        return _utf8(p, n, at)              # ASCII is UTF-8; short ones come from a cache
    if (kind == F_MESSAGE_ID and _is_ulong(code) or kind == F_UINT and _is_uint(code)
            or kind == F_UBYTE and code == C_UBYTE):                   # a plain int
        s.pos += 1
        return _read_unsigned(s, code, at)
    value = _read_value(s, 1)
    if kind == F_ANY or kind == F_BINARY or kind == F_SYMBOL:
        return value
    return _exact_code(value, code)


cdef list _read_composite(Src *s, Py_ssize_t at, int nfields, const int *kinds, str what):
    """The fields of a header or properties list, nfields of them (absent ones None)."""
    cdef uint8_t code = _u8(s, s.pos, what)
    cdef uint32_t size, count, i
    cdef Py_ssize_t outer_end = s.end
    cdef list values = [None] * nfields
    if code == C_LIST0:
        return values
    if code != C_LIST8 and code != C_LIST32:
        _bad(s.pos - 1, f"{what}: expected a list, found constructor 0x{code:02x}")
    size = _size(s, code == C_LIST32, at, "list size")
    if size > <uint64_t>(s.end - s.pos):
        _bad(at, f"{what}: size {size} is over the {s.end - s.pos} bytes left")
    s.end = s.pos + size
    count = _size(s, code == C_LIST32, at, "list count")
    if count > <uint32_t>nfields:
        _bad(at, f"{what}: {count} fields, the spec defines {nfields}")
    for i in range(count):
        values[i] = _field(s, kinds[i])
    if s.pos != s.end:
        _bad(at, f"{what}: {count} fields end {s.end - s.pos} bytes before its size")
    s.end = outer_end
    return values


cdef dict _read_map_section(Src *s, Py_ssize_t at, bint annotations, str what):
    """An annotations or application-properties map; annotation keys that are ulongs are
    plain ints."""
    cdef uint8_t code = _u8(s, s.pos, what)
    if code != C_MAP8 and code != C_MAP32:
        _bad(s.pos - 1, f"{what}: expected a map, found constructor 0x{code:02x}")
    try:
        return _read_compound(s, code, 1, s.pos - 1, annotations)
    except AMQP10DecodeError as exc:
        exc.args = (f"{what}: {exc.args[0]}",)
        raise


cdef int _section_code(Src *s, Py_ssize_t at) except -1:
    """The section a descriptor names: a ulong 0x70..0x78 or the section's symbol."""
    cdef uint8_t code = _u8(s, s.pos, "section descriptor")
    cdef uint64_t value = 0
    cdef uint32_t n
    cdef const char *p
    if code == C_SMALLULONG:
        value = _u8(s, at, "section descriptor")
    elif code == C_ULONG:
        value = amqw_unpack_u64(_take(s, 8, at, "section descriptor"))
    elif code == C_SYM8 or code == C_SYM32:
        n = _size(s, code == C_SYM32, at, "section descriptor")
        p = _take(s, n, at, "section descriptor")
        found = _SECTION_SYMBOLS.get(PyBytes_FromStringAndSize(p, n))
        if found is None:
            _bad(at, f"section: unknown descriptor {PyBytes_FromStringAndSize(p, n)!r}")
        return found
    elif code == C_ULONG0:
        value = 0
    else:
        _bad(at + 1, f"section: a descriptor is a ulong or a symbol, found constructor 0x{code:02x}")
    if value < S_HEADER or value > S_FOOTER:
        _bad(at, f"section: unknown descriptor 0x{value:x}")
    return <int>value


cdef Message _read_sections(const char *data, Py_ssize_t size):
    cdef Src s
    cdef Message m = Message.__new__(Message)
    cdef Py_ssize_t at
    cdef uint8_t code
    cdef int section, seen = 0, body_kind = 0
    cdef list parts = None
    cdef Properties props
    cdef Header header
    cdef list values
    s.buf = data
    s.pos = 0
    s.end = size
    if size == 0:
        _bad(0, "message: no sections (0 bytes)")
    while s.pos < s.end:
        at = s.pos
        code = <uint8_t>data[at]
        s.pos += 1
        if code != C_DESCRIBED:
            _bad(at, f"message: expected a section (a described value, 0x00), found constructor 0x{code:02x}")
        section = _section_code(&s, at)
        if S_DATA <= section <= S_AMQP_VALUE:
            if body_kind and (section != body_kind or section == S_AMQP_VALUE):
                _bad(at, f"message: {_SECTION_NAMES[section]} section after the "
                         f"{_SECTION_NAMES[body_kind]} body")
        elif seen & (1 << (section - S_HEADER)):
            _bad(at, f"message: a second {_SECTION_NAMES[section]} section")
        seen |= 1 << (section - S_HEADER)
        if section == S_DATA:
            code = _u8(&s, s.pos, "data")
            if code != C_VBIN8 and code != C_VBIN32:
                _bad(s.pos - 1, f"data: expected binary, found constructor 0x{code:02x}")
            part = _read_payload(&s, code, 1, s.pos - 1)
            if parts is None:
                parts = [part]
            else:
                parts.append(part)
            body_kind = S_DATA
        elif section == S_PROPERTIES:
            values = _read_composite(&s, at, 13, _PROPERTIES_KINDS, "properties")
            props = Properties.__new__(Properties)
            props.message_id = values[0]
            props.user_id = values[1]
            props.to = values[2]
            props.subject = values[3]
            props.reply_to = values[4]
            props.correlation_id = values[5]
            props.content_type = values[6]
            props.content_encoding = values[7]
            props.absolute_expiry_time = values[8]
            props.creation_time = values[9]
            props.group_id = values[10]
            props.group_sequence = values[11]
            props.reply_to_group_id = values[12]
            m.properties = props
        elif section == S_APPLICATION_PROPERTIES:
            m.application_properties = _read_map_section(&s, at, False, "application-properties")
        elif section == S_MESSAGE_ANNOTATIONS:
            m.message_annotations = _read_map_section(&s, at, True, "message-annotations")
        elif section == S_HEADER:
            values = _read_composite(&s, at, 5, _HEADER_KINDS, "header")
            header = Header.__new__(Header)
            header.durable = values[0]
            header.priority = values[1]
            header.ttl = values[2]
            header.first_acquirer = values[3]
            header.delivery_count = values[4]
            m.header = header
        elif section == S_DELIVERY_ANNOTATIONS:
            m.delivery_annotations = _read_map_section(&s, at, True, "delivery-annotations")
        elif section == S_FOOTER:
            m.footer = _read_map_section(&s, at, True, "footer")
        elif section == S_AMQP_VALUE:
            m.body = AmqpValue(_read_value(&s, 1))
            body_kind = S_AMQP_VALUE
        else:
            code = _u8(&s, s.pos, "amqp-sequence")
            if code != C_LIST0 and code != C_LIST8 and code != C_LIST32:
                _bad(s.pos - 1, f"amqp-sequence: expected a list, found constructor 0x{code:02x}")
            sequence = _read_payload(&s, code, 1, s.pos - 1)
            if body_kind == S_AMQP_SEQUENCE:
                m.body.sequences.append(sequence)
            else:
                m.body = AmqpSequence(())
                m.body.sequences.append(sequence)
            body_kind = S_AMQP_SEQUENCE
    if parts is not None:
        m.body = parts[0] if len(parts) == 1 else Data(parts)
    return m


cdef Message message_from(const char *data, Py_ssize_t size):
    cdef Message m
    cdef uint32_t n
    # The common case, a message that is one data section: its body, and nothing to parse.
    if size >= 5 and data[0] == 0 and <uint8_t>data[1] == C_SMALLULONG and <uint8_t>data[2] == S_DATA:
        if <uint8_t>data[3] == C_VBIN8 and 5 + <Py_ssize_t><uint8_t>data[4] == size:
            m = Message.__new__(Message)
            m.body = PyBytes_FromStringAndSize(data + 5, size - 5)
            return m
        if <uint8_t>data[3] == C_VBIN32 and size >= 8:
            n = amqw_unpack_u32(data + 4)
            if 8 + <Py_ssize_t>n == size:
                m = Message.__new__(Message)
                m.body = PyBytes_FromStringAndSize(data + 8, size - 8)
                return m
    return _read_sections(data, size)


def decode_message(data):
    """The Message in ``data`` (bytes-like), which must hold exactly one message."""
    cdef Py_buffer view
    if PyBytes_CheckExact(data):
        return message_from(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return message_from(<const char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


def decode_value(data):
    """The one AMQP 1.0 value ``data`` (bytes-like) holds, by the mapping of the module
    docstring; AMQP10DecodeError for trailing bytes."""
    cdef Py_buffer view
    cdef Src s
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        s.buf = <const char *>view.buf
        s.pos = 0
        s.end = view.len
        value = _read_value(&s, 0)
        if s.pos != s.end:
            _bad(s.pos, f"value: {s.end - s.pos} trailing bytes")
        return value
    finally:
        PyBuffer_Release(&view)
