cdef class SeqnoRun:
    cdef readonly long long start, stop  # the seqnos start .. stop - 1

    cdef bint join(self, object after) except -1


cdef struct AckFrame:
    unsigned long long tag
    Py_ssize_t end
    bint multiple


cdef class AckFrames:
    cdef AckFrame *_frames
    cdef Py_ssize_t _len, _cap

    cdef int add(self, unsigned long long tag, bint multiple, Py_ssize_t end) except -1
    cdef tuple _frame(self, Py_ssize_t i)


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
    cdef Py_ssize_t take_in_order(self, long long delivery_tag, bint multiple, list tokens) except -2
    cdef Py_ssize_t _advance(self, list slots, Py_ssize_t head, long long base) except -1
