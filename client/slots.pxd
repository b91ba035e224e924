# cython: language_level=3
from cpython.object cimport PyObject, Py_TYPE
from cpython.ref cimport Py_INCREF, Py_XDECREF


cdef extern from "Python.h":
    # Only the fields read here; the real struct is CPython's.
    ctypedef struct _TypeFields "PyTypeObject":
        unsigned long tp_flags
        unsigned int tp_version_tag


cdef class Slot:
    cdef readonly str name
    cdef object owner            # the type the offset belongs to (None until the first object)
    cdef unsigned int version    # the owner's version tag when the offset was taken
    cdef Py_ssize_t offset       # -1: no fast path (not a plain __slots__ member of the owner)

    cdef int bind(self, object obj) except -1


cdef object slot_get_generic(Slot slot, object obj)
cdef int slot_set_generic(Slot slot, object obj, object value) except -1


# The fast paths are small enough for the C compiler to inline them where they are used;
# everything else (binding the slot, another type, the generic way) is a call away.

cdef inline PyObject **slot_address(Slot slot, object obj) noexcept:
    """Where ``obj``'s slot lives, or NULL if ``obj`` is not of the slot's type as it was
    bound (or the slot is not bound yet)."""
    cdef PyObject *kind = <PyObject *>Py_TYPE(obj)
    if kind != <PyObject *>slot.owner or slot.offset < 0 or (<_TypeFields *>kind).tp_version_tag != slot.version:
        return NULL
    return <PyObject **>((<char *><PyObject *>obj) + slot.offset)


cdef inline object slot_get(Slot slot, object obj):
    """``getattr(obj, slot.name)``."""
    cdef PyObject **address = slot_address(slot, obj)
    if address != NULL and address[0] != NULL:
        return <object>address[0]
    return slot_get_generic(slot, obj)


cdef inline int slot_set(Slot slot, object obj, object value) except -1:
    """``setattr(obj, slot.name, value)``."""
    cdef PyObject **address = slot_address(slot, obj)
    cdef PyObject *old
    if address == NULL:
        return slot_set_generic(slot, obj, value)
    old = address[0]
    Py_INCREF(value)
    address[0] = <PyObject *>value
    Py_XDECREF(old)
    return 0
