# cython: language_level=3
"""The blocking transport's connection lock, compiled: a reentrant lock as
``threading.RLock`` is, that the compiled publish takes and gives back in C.

Every confirmed publish takes the connection's lock once, and so does every read of the
I/O thread.  ``RLock.acquire`` parses its optional arguments from a tuple and a dict on
each call and reads the clock: ~430 instructions a pair, one sixth of a confirmed
publish's own cost.  ``lock_take``/``lock_give`` (thread_lock.pxd) skip the call
altogether, and a lock nobody holds is taken without a call into the platform's lock;
called from Python, ``acquire()`` and ``with`` cost what RLock's do, or less.

Waiting releases the GIL, can be interrupted by a signal whose handler raises (as
RLock's), and ``timeout`` is honoured across such interruptions.
"""
from libc.math cimport isnan
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from cpython.exc cimport PyErr_CheckSignals

import sysconfig
from threading import TIMEOUT_MAX as _THREADING_TIMEOUT_MAX

if sysconfig.get_config_var("Py_GIL_DISABLED"):
    # ReentrantLock's state is guarded by the GIL (see the class)
    raise ImportError("amqwire.client.thread_lock needs an interpreter with the GIL")

cdef double _TIMEOUT_MAX = _THREADING_TIMEOUT_MAX  # the longest wait the platform's lock takes (s)


cdef double _now() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class ReentrantLock:
    """A lock one thread may take again while it holds it; released as often as taken.

    ``acquire(blocking=True, timeout=-1)``, ``release()`` and ``with`` as
    ``threading.RLock``'s: releasing a lock this thread does not hold raises RuntimeError.

    Its state (owner, count, waiters) is read and written only under the GIL, so a lock
    nobody else holds is taken by setting two fields, without a call into the platform's
    lock (which reads the clock on every call, even a try).  A thread that finds it held
    waits without the GIL on ``_signal``, a platform lock that stands for "given back
    while someone waited": held while no such signal is pending (``_signalled`` false).
    """

    def __cinit__(self):
        self._signal = PyThread_allocate_lock()
        if self._signal == NULL:
            raise MemoryError("cannot allocate a lock")
        PyThread_acquire_lock_timed(self._signal, 0, 0)  # no signal pending
        self._signalled = False
        self._owner = 0
        self._count = 0
        self._waiters = 0

    def __dealloc__(self):
        if self._signal != NULL:
            if not self._signalled:  # a held lock is never freed (undefined on some platforms)
                PyThread_release_lock(self._signal)
            PyThread_free_lock(self._signal)

    def acquire(self, bint blocking=True, double timeout=-1):
        """Take the lock (again, if this thread holds it); True once held, False if
        ``blocking`` is false and another thread holds it, or ``timeout`` seconds passed."""
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef PY_TIMEOUT_T microseconds
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if isnan(timeout) or (timeout < 0 and timeout != -1):
            raise ValueError("timeout value must be a non-negative number or -1")
        if timeout > _TIMEOUT_MAX:
            raise OverflowError("timeout value is too large")
        if self._count == 0:
            self._owner = me
            self._count = 1
            return True
        if self._owner == me:
            self._count += 1
            return True
        if not blocking:
            return False
        microseconds = -1 if timeout == -1 else <PY_TIMEOUT_T>(timeout * 1e6)
        return microseconds != 0 and self._wait(me, microseconds)

    def release(self):
        """Give the lock back once; another thread may take it when this thread has given
        it back as often as it took it."""
        self._give(PyThread_get_thread_ident())

    def __enter__(self):
        lock_take(self)
        return True

    def __exit__(self, exc_type, exc, traceback):
        self._give(PyThread_get_thread_ident())
        return None

    def _is_owned(self):
        """Whether this thread holds the lock (as RLock's, which threading.Condition asks)."""
        return self._count > 0 and self._owner == PyThread_get_thread_ident()

    def __repr__(self):
        if self._count > 0:
            return "<%s held by thread %d, %d time(s)>" % (type(self).__qualname__, self._owner, self._count)
        return "<%s free>" % type(self).__qualname__

    cdef bint _wait(self, unsigned long me, PY_TIMEOUT_T microseconds) except -1:
        """Another thread holds the lock: wait until it is given back and take it, without
        the GIL while waiting (-1: for ever); False once ``microseconds`` passed.  A signal's
        handler runs meanwhile, and if it raises, so does this."""
        cdef PyLockStatus status
        cdef double deadline = _now() + microseconds * 1e-6 if microseconds > 0 else 0
        self._waiters += 1
        try:
            while self._count > 0:
                with nogil:
                    status = PyThread_acquire_lock_timed(self._signal, microseconds, 1)
                if status == PY_LOCK_ACQUIRED:
                    self._signalled = False  # taken up: the next give signals again
                elif status == PY_LOCK_INTR:
                    PyErr_CheckSignals()  # raises what a signal handler raised
                if microseconds > 0 and self._count > 0:
                    microseconds = <PY_TIMEOUT_T>((deadline - _now()) * 1e6)
                    if microseconds <= 0:
                        return False
            self._owner = me
            self._count = 1
            return True
        finally:
            self._waiters -= 1

    cdef int _give(self, unsigned long me) except -1:
        if self._count == 0 or self._owner != me:
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            self._owner = 0
            if self._waiters > 0 and not self._signalled:
                self._signalled = True
                PyThread_release_lock(self._signal)
        return 0
