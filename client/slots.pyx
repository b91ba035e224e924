# cython: language_level=3
"""A ``__slots__`` attribute read and written from C at the cost of the interpreter's own
specialized read (LOAD_ATTR_SLOT): the value's offset in the instance, taken from the
type's member descriptor and kept with the type's version tag, exactly as the interpreter
keeps it.  Any other object, a type changed since (its version tag moves), or a name that
is not a plain slot of the type takes the generic ``getattr``/``setattr``.

A generic attribute read from C costs ~125 instructions (the type's method cache, the
descriptor, its ``__get__``); this one ~10.  The compiled publish reads a dozen attributes
of the client's Python objects per message.
"""
from types import MemberDescriptorType

from cpython.object cimport PyObject

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    unsigned long Py_TPFLAGS_VALID_VERSION_TAG
    int T_OBJECT_EX


cdef object _member_descriptor = MemberDescriptorType


cdef class Slot:
    """One attribute name, bound to the type of the first object it is used on."""

    def __init__(self, str name):
        self.name = name
        self.owner = None
        self.offset = -1

    cdef int bind(self, object obj) except -1:
        kind = type(obj)
        self.owner = kind
        descriptor = getattr(kind, self.name, None)  # a type lookup: gives the type a version tag
        if type(descriptor) is not _member_descriptor:
            return 0  # a property, a method, an instance dict: always the generic way
        cdef PyMemberDef *member = (<PyMemberDescrObject *>descriptor).d_member
        cdef _TypeFields *fields = <_TypeFields *><PyObject *>kind
        if member.type != T_OBJECT_EX or not (fields.tp_flags & Py_TPFLAGS_VALID_VERSION_TAG):
            return 0
        if fields.tp_version_tag == 0:
            return 0
        self.version = fields.tp_version_tag
        self.offset = member.offset
        return 0

    @property
    def fast(self):
        """True when the slot is read and written at its offset (its type as when bound)."""
        if self.owner is None or self.offset < 0:
            return False
        return (<_TypeFields *><PyObject *>self.owner).tp_version_tag == self.version

    def get(self, obj):
        return slot_get(self, obj)

    def set(self, obj, value):
        slot_set(self, obj, value)

    def __repr__(self):
        owner = "unbound" if self.owner is None else self.owner.__qualname__
        return f"Slot({self.name!r}, {owner}, {'fast' if self.fast else 'generic'})"


cdef int _bound(Slot slot, object obj) except -1:
    """Bind a slot not bound yet to ``obj``'s type; 1 if that made it fast for ``obj``."""
    if slot.owner is None:
        slot.bind(obj)
        return slot_address(slot, obj) != NULL
    return 0


cdef object slot_get_generic(Slot slot, object obj):
    """``slot_get`` for what its fast path does not take: the first use (which binds the
    slot), another type, a changed type, an empty slot (getattr raises AttributeError)."""
    cdef PyObject **address
    if _bound(slot, obj):
        address = slot_address(slot, obj)
        if address[0] != NULL:
            return <object>address[0]
    return getattr(obj, slot.name)


cdef int slot_set_generic(Slot slot, object obj, object value) except -1:
    if _bound(slot, obj):
        return slot_set(slot, obj, value)
    setattr(obj, slot.name, value)
    return 0
