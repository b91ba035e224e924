# cython: language_level=3

cdef class LoopConfirmFutures:
    cdef public object _channel
    cdef object _connection
    cdef object _loop
    cdef bint _plain_loop

    cpdef object new_token(self, Py_ssize_t count, object callback)
    cpdef object issued(self, object token, unsigned long long seqno)


cdef int loop_settle_acked(list tokens) except -1
