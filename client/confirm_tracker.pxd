cdef class SeqnoRun:
    cdef readonly long long start, stop  # the seqnos start .. stop - 1

    cdef bint join(self, object after) except -1


cdef class ConfirmTracker:
    cdef public long long base  # the lowest unresolved seqno
    cdef list _slots  # tokens by seqno, from _head on
    cdef Py_ssize_t _head
    cdef public dict mandatory
    cdef public dict returned
    cdef public object unmatched_return

    cpdef long long add(self, object token) except -1
    cpdef long long add_run(self, object token, Py_ssize_t count) except -1
    cpdef tuple resolve(self, long long delivery_tag, bint multiple)
