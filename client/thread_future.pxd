cdef class ThreadFuture:
    cdef public int _state  # 0 pending, 1 settled with a value, 2 failed
    cdef public object _value
    cdef public object _error
    cdef public object _callbacks  # boxed callbacks: see add_done_callback
    cdef public object _waiter  # a lock held until settled; made by the first wait
    cdef object __weakref__


cdef class PublishFuture(ThreadFuture):
    cdef object _channel_ref  # a weakref.ref to the channel (see new_token), or the channel
    cdef public unsigned long long delivery_tag
    cdef public Py_ssize_t count
    cdef public Py_ssize_t _pending
    cdef public bint _retrieved


cdef class ConfirmFutures:
    cdef public object _channel
    cdef object _channel_ref     # the weak reference to it the futures share
    cdef object _channel_of_ref  # the channel _channel_ref was made for

    cdef int _bind_channel(self) except -1

    cpdef PublishFuture new_token(self, Py_ssize_t count, object callback)


cdef int settle_acked(list tokens) except -1
