# cython: language_level=3

cdef extern from "pythread.h":
    ctypedef void *PyThread_type_lock
    ctypedef long long PY_TIMEOUT_T
    ctypedef enum PyLockStatus:
        PY_LOCK_FAILURE
        PY_LOCK_ACQUIRED
        PY_LOCK_INTR
    PyThread_type_lock PyThread_allocate_lock()
    void PyThread_free_lock(PyThread_type_lock)
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock, PY_TIMEOUT_T microseconds, int intr_flag) nogil
    void PyThread_release_lock(PyThread_type_lock) nogil
    unsigned long PyThread_get_thread_ident()


cdef class ReentrantLock:
    # all read and written under the GIL (see the class)
    cdef PyThread_type_lock _signal  # held unless a give has signalled a waiter
    cdef bint _signalled
    cdef unsigned long _owner    # the holding thread's ident (meaningful while _count > 0)
    cdef Py_ssize_t _count       # how many times the owner holds it
    cdef Py_ssize_t _waiters     # threads in _wait

    cdef bint _wait(self, unsigned long me, PY_TIMEOUT_T microseconds) except -1
    cdef int _give(self, unsigned long me) except -1


cdef inline int lock_take(ReentrantLock lock) except -1:
    """``lock.acquire()``, from C (with the GIL, as every use of the lock)."""
    cdef unsigned long me = PyThread_get_thread_ident()
    if lock._count == 0:
        lock._owner = me
        lock._count = 1
    elif lock._owner == me:
        lock._count += 1
    else:
        lock._wait(me, -1)
    return 0


cdef inline int lock_give(ReentrantLock lock) except -1:
    """``lock.release()``, from C."""
    return lock._give(PyThread_get_thread_ident())
