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
    cdef PyThread_type_lock _lock
    cdef unsigned long _owner    # the holding thread's ident (meaningful while _count > 0)
    cdef Py_ssize_t _count       # how many times the owner holds it

    cdef bint _wait(self, PY_TIMEOUT_T microseconds) except -1
    cdef int _give(self, unsigned long me) except -1


cdef inline int lock_take(ReentrantLock lock) except -1:
    """``lock.acquire()``, from C."""
    cdef unsigned long me = PyThread_get_thread_ident()
    if lock._count > 0 and lock._owner == me:
        lock._count += 1
        return 0
    if PyThread_acquire_lock_timed(lock._lock, 0, 0) != PY_LOCK_ACQUIRED:
        lock._wait(-1)
    lock._owner = me
    lock._count = 1
    return 0


cdef inline int lock_give(ReentrantLock lock) except -1:
    """``lock.release()``, from C."""
    return lock._give(PyThread_get_thread_ident())
