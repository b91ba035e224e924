"""The blocking transport's one future (``ThreadFuture``) and a confirm-mode publish's
(``PublishFuture``), compiled.

A confirmed publish makes one future and an ack frame settles a run of them: in Python the
making alone cost more instructions than rabbitmq-c's whole confirmed publish.  Here their
fields are C fields, ``ConfirmFutures.new_token`` fills them without an ``__init__`` call
and ``ConfirmFutures.acked`` settles an ack frame's futures in one loop.

Settling takes no lock: it sets ``_state``, then reads ``_callbacks`` and ``_waiter``; who
adds a callback or waits writes those, then reads ``_state``.  Compiled, each of those steps
runs under the GIL without a bytecode boundary in between, and the boxes below make sure a
callback runs once even where another thread gets in (a callback's own code, a blocking
acquire of ``_ADDING_CALLBACKS``).
"""
import logging
import threading
import types
import weakref

from cpython.object cimport PyObject


cdef extern from "Python.h":
    void PyObject_GC_Track(void *op)
    void PyObject_GC_UnTrack(void *op)
    int PyObject_GC_IsTracked(PyObject *op)

log = logging.getLogger("amqwire.client")

# add_done_callback and _wait against each other (never held by a settling thread)
_ADDING_CALLBACKS = threading.Lock()

cdef object _weakref_type = weakref.ref


cdef inline void _track(object future) noexcept:
    """Watched by the cycle collector again (see ``ConfirmFutures.new_token``): before a
    future holds what could lead back to it (a callback, a value, an error's traceback)."""
    if not PyObject_GC_IsTracked(<PyObject *>future):
        PyObject_GC_Track(<PyObject *>future)


# The state a future is in (a C int; ``done()`` is ``_state != PENDING``).
cdef enum:
    PENDING = 0
    SUCCEEDED = 1
    FAILED = 2


cdef class ThreadFuture:
    """A result another thread sets, once: the blocking transport's one future.

    An RPC's waiter is one; ``PublishFuture``, the Producer's ``SendFuture`` and the stream
    client's ``StreamFuture`` are it with their own way of waiting (``_wait``) and of
    reporting a callback's failure (``_run``).
    """

    _log = log  # where a callback's failure is logged

    def __init__(self):
        self._state = PENDING
        self._value = None
        self._error = None
        self._callbacks = None
        self._waiter = None

    __class_getitem__ = classmethod(types.GenericAlias)

    def done(self):
        return self._state != PENDING

    def result(self, timeout=None):
        """The value; raises the error it failed with, or TimeoutError after ``timeout``."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout=None):
        self._wait(timeout)
        return self._error

    def set_result(self, value):
        self._settle(value, None)

    def set_exception(self, error):
        self._settle(None, error)

    def add_done_callback(self, fn):
        """``fn(future)``, once: now if the future is done, else when it settles (on the
        thread that settles it: keep it short)."""
        cdef list box
        if self._state == PENDING:
            box = [fn]  # whoever pops fn from its box runs it: only one side can
            _track(self)
            with _ADDING_CALLBACKS:
                if self._callbacks is None:
                    self._callbacks = [box]
                else:
                    self._callbacks.append(box)
            if self._state == PENDING:
                return
            if not box:
                return  # the settling thread ran it
            fn = box.pop()
        self._run(fn)

    def _wait(self, timeout):
        """Until settled; TimeoutError after ``timeout`` seconds."""
        if self._state != PENDING:
            return
        waiter = self._waiter
        if waiter is None:
            with _ADDING_CALLBACKS:
                waiter = self._waiter
                if waiter is None:
                    waiter = threading.Lock()
                    waiter.acquire()
                    self._waiter = waiter
        if self._state != PENDING:
            return  # settled before the settling thread could see the waiter
        if not waiter.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"no result within {timeout} s")
        waiter.release()  # the next waiter, if any

    def _settle(self, value, error):
        if self._state != PENDING:
            return
        if value is not None or error is not None:
            _track(self)
        self._value = value
        self._error = error
        self._state = FAILED if error is not None else SUCCEEDED  # before reading _callbacks and _waiter
        if self._callbacks is not None or self._waiter is not None:
            self._wake()

    def _wake(self):
        """After ``_state`` is set: release who waits, run each callback whose box this
        thread empties."""
        cdef list box
        waiter = self._waiter
        if waiter is not None:
            waiter.release()
        callbacks = self._callbacks
        if callbacks is not None:
            for box in callbacks:  # iterating a list others append to sees them
                if not box:
                    continue
                self._run(box.pop())

    def _run(self, fn):
        try:
            fn(self)
        except Exception:
            self._log.exception("send callback %r failed", fn)  # only sends' futures take callbacks here

    def __repr__(self):
        state = ("pending", "confirmed", "failed")[self._state]
        return f"<{type(self).__name__} {state}>"


cdef class PublishFuture(ThreadFuture):
    """The broker's verdict on one publish (or one ``publish_encoded`` batch) in confirm mode."""

    def __init__(self, channel, Py_ssize_t count=1):
        super().__init__()
        self._channel_ref = channel
        self.delivery_tag = 0
        self.count = count  # publishes it stands for (publish_encoded: a whole batch)
        self._pending = count
        if not count:
            self._state = SUCCEEDED
        self._retrieved = False  # a failure seen through result() is not reported again

    @property
    def _channel(self):
        """Its channel (held weakly by the futures ``new_token`` makes; None once gone)."""
        ref = self._channel_ref
        return ref() if type(ref) is _weakref_type else ref

    @_channel.setter
    def _channel(self, channel):
        _track(self)  # it may hold the channel strongly now
        self._channel_ref = channel

    def result(self, timeout=None):
        """None when the broker acked; raises PublishNacked, MessageReturned or PublishUnconfirmed."""
        self._wait(timeout)
        if self._error is not None:
            self._retrieved = True
            raise self._error

    def exception(self, timeout=None):
        self._wait(timeout)
        self._retrieved = True
        return self._error

    def _wait(self, timeout):
        # the channel's wait for confirms: it reads the socket itself while the I/O thread is parked
        if self._state == PENDING:
            channel = self._channel
            if channel is None:  # never while it is pending: a channel's end settles its futures
                raise RuntimeError("the publish's channel is gone and its future was never settled")
            channel._waits.wait_progress(self.done, timeout, "the broker's confirm")

    def _run(self, fn):
        try:
            fn(self)
        except Exception as exc:
            channel = self._channel
            if channel is None:
                log.exception("publish callback %r failed", fn)
            else:
                channel._connection._callback_failed(exc, fn, "publish", channel, self)

    def set_result(self, value):
        """One of the publishes it stands for was acked."""
        self._pending -= 1
        if self._pending <= 0:
            self._settle(None, None)

    def __repr__(self):
        state = ("pending", "acked", "failed")[self._state]
        return f"<PublishFuture delivery_tag={self.delivery_tag} {state}>"


# PublishFuture's memory, recycled.  A confirmed publish makes one (on the publishing
# thread) and its ack frees it (on the I/O thread), both with the GIL held; Cython keeps
# freelists for base types only, so the type's tp_alloc and tp_free, set at import, keep
# up to 4,096 freed futures' memory for the next ones: no PyType_GenericAlloc, malloc or
# free per publish.  The exact type only (a subclass allocates as usual); not where the
# GIL is disabled.
cdef extern from *:
    """
    #define AMQW_FUTURE_FREELIST 4096
    static PyObject *amqw_future_free[AMQW_FUTURE_FREELIST];
    static Py_ssize_t amqw_future_free_count = 0;
    static PyTypeObject *amqw_future_type = NULL;

    static PyObject *amqw_future_alloc(PyTypeObject *type, Py_ssize_t nitems) {
        if (type == amqw_future_type && nitems == 0 && amqw_future_free_count > 0) {
            PyObject *o = amqw_future_free[--amqw_future_free_count];
            memset((void *)o, 0, (size_t)type->tp_basicsize);
            (void)PyObject_Init(o, type);
            PyObject_GC_Track(o);  /* as PyType_GenericAlloc leaves it */
            return o;
        }
        return PyType_GenericAlloc(type, nitems);
    }

    static void amqw_future_release(void *p) {
        PyObject *o = (PyObject *)p;
        /* untracked by the type's tp_dealloc, its fields cleared */
        if (Py_TYPE(o) == amqw_future_type && amqw_future_free_count < AMQW_FUTURE_FREELIST) {
            amqw_future_free[amqw_future_free_count++] = o;
            return;
        }
        PyObject_GC_Del(p);
    }

    static int amqw_future_freelist_install(PyObject *type) {
    #if !defined(Py_GIL_DISABLED) && !defined(PYPY_VERSION)
        PyTypeObject *t = (PyTypeObject *)type;
        if (t->tp_alloc != PyType_GenericAlloc || t->tp_free != PyObject_GC_Del)
            return 0;  /* not what this replaces: leave it */
        amqw_future_type = t;
        t->tp_alloc = amqw_future_alloc;
        t->tp_free = amqw_future_release;
    #endif
        return 0;
    }

    static Py_ssize_t amqw_future_freelist_size(void) { return amqw_future_free_count; }
    static int amqw_future_freelist_on(void) { return amqw_future_type != NULL; }
    """
    int amqw_future_freelist_install(object type) except -1
    Py_ssize_t amqw_future_freelist_size()
    bint amqw_future_freelist_on()

amqw_future_freelist_install(PublishFuture)


def _freelist():
    """(in use, freed futures held): PublishFuture's freelist, for tests."""
    return amqw_future_freelist_on(), amqw_future_freelist_size()


cdef class ConfirmFutures:
    """How a channel of the blocking transport makes, hands out and settles the futures of
    its confirm-mode publishes, each a call into compiled code (``io_threads.ChannelWaits``
    is this with the waiting)."""

    def __init__(self, channel):
        self._channel = channel

    cpdef PublishFuture new_token(self, Py_ssize_t count, object callback):
        """The future of ``count`` confirm-mode publishes (one, or a publish_encoded batch):
        what ``PublishFuture(channel, count)`` makes, with ``callback`` given at publish,
        without the ``__init__`` call (once per confirmed publish).

        It holds its channel through one weak reference the channel's futures share, so
        nothing it holds can lead back to it: it is left out of the cycle collector (which
        would otherwise walk the thousands in flight at every collection) until it takes
        a callback, a value or an error (``_track``)."""
        cdef PublishFuture future = PublishFuture.__new__(PublishFuture)
        if self._channel_ref is None or self._channel_of_ref is not self._channel:
            self._bind_channel()
        future._channel_ref = self._channel_ref
        future.count = future._pending = count
        future._state = PENDING if count else SUCCEEDED
        # _value, _error, _waiter: None from __new__; delivery_tag: 0
        if callback is not None:
            future._callbacks = [[callback]]  # boxed: see add_done_callback
        elif type(self._channel_ref) is _weakref_type:
            PyObject_GC_UnTrack(<void *>future)
        return future

    cdef int _bind_channel(self) except -1:
        channel = self._channel
        try:
            self._channel_ref = weakref.ref(channel)
        except TypeError:  # not weakly referable (a test's stand-in): held, and collected as usual
            self._channel_ref = channel
        self._channel_of_ref = channel
        return 0

    @staticmethod
    def issued(PublishFuture token, unsigned long long seqno):
        """What the caller gets for a token whose first publish has ``seqno``."""
        token.delivery_tag = seqno
        return token

    @staticmethod
    def acked(list tokens):
        """Settle the futures of publishes the broker acked (one ack frame's: the hot path
        of confirms): ``set_result(None)`` on each, in one loop."""
        settle_acked(tokens)

    @staticmethod
    def token_error(PublishFuture token):
        """How a token failed, unless the caller saw it already."""
        return None if token._retrieved else token._error


cdef int settle_acked(list tokens) except -1:
    """``ConfirmFutures.acked``, for compiled callers."""
    cdef PublishFuture future
    for item in tokens:
        future = <PublishFuture?>item
        future._pending -= 1
        if future._pending == 0 and future._state == PENDING:
            future._state = SUCCEEDED  # before reading _callbacks and _waiter: see the module
            if future._callbacks is not None or future._waiter is not None:
                future._wake()
    return 0
