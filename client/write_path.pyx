# cython: language_level=3
"""The blocking transport's flush, compiled: ``ThreadIO.flush`` and ``flush_acks`` (one a
publish outside a batch, one an ack), and the core's ``buffers_to_send`` they take the
output with.

Each is the Python code it replaced, step for step, but for the write itself: the common
case (one piece, a plain socket, the kernel takes all of it) is sent here, anything else
goes to ``ThreadIO._write`` as it is (partial writes, vectored writes, TLS, a failed
write and the loss it means).  What they save is five Python frames a flush: ~13,000 of
the ~16,000 instructions of acking a delivery were its flush.
"""
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE

from amqwire.codec.writer cimport FrameWriter
from amqwire.client.slots cimport Slot, slot_get, slot_set
from amqwire.client.thread_lock cimport ReentrantLock, lock_take, lock_give

from .errors import InvalidStateError
from .publish_path import FLUSH_AT as _flush_at

cdef Py_ssize_t _FLUSH_AT = _flush_at  # flush_acks flushes inside batch() from this much output
cdef str _BUFFERS_TO_SEND = "buffers_to_send"

cdef extern from "Python.h":
    PyObject *_PyType_Lookup(PyTypeObject *kind, object name)  # borrowed; no bound method made

# The core (protocol.ConnectionProtocol).
cdef Slot _CORE_WRITER = Slot("_writer")
cdef Slot _CORE_IOV = Slot("_iov")
cdef Slot _CORE_FLUSH_DUE = Slot("flush_due")
cdef Slot _CORE_BYTES_SENT = Slot("bytes_sent")
# The blocking transport's I/O (io_threads.ThreadIO), its connection (operations_sync.
# SyncConnection) and that connection's lifecycle (lifecycle.Lifecycle).
cdef Slot _IO_CONNECTION = Slot("_connection")
cdef Slot _IO_WRITE_LOCK = Slot("_write_lock")
cdef Slot _IO_SOCK = Slot("_sock")
cdef Slot _IO_TLS = Slot("_tls")
cdef Slot _CONNECTION_LOCK = Slot("_lock")
cdef Slot _CONNECTION_CORE = Slot("_core")
cdef Slot _CONNECTION_OBSERVER = Slot("_observer")
cdef Slot _CONNECTION_LIFECYCLE = Slot("_lifecycle")
cdef Slot _CONNECTION_FLUSH_LATER = Slot("_flush_later")
cdef Slot _HAS_SOCKET = Slot("has_socket")


def core_buffers_to_send(core):
    """All output queued so far as a list of buffers for ``socket.sendmsg``: big bodies
    are memoryview slices of the caller's body and a big run of frames the writer's own
    memory (``FrameWriter.take_view``), not copies."""
    slot_set(_CORE_FLUSH_DUE, core, False)
    cdef list pieces = slot_get(_CORE_IOV, core)
    cdef Py_ssize_t size = 0
    if pieces:
        core._spill_writer()
        slot_set(_CORE_IOV, core, [])
        for piece in pieces:
            size += len(piece)
        slot_set(_CORE_BYTES_SENT, core, slot_get(_CORE_BYTES_SENT, core) + size)
        return pieces
    data = (<FrameWriter?>slot_get(_CORE_WRITER, core)).buf.take_view()  # big output: the writer's memory, not a copy
    size = len(data)
    if not size:
        return []
    slot_set(_CORE_BYTES_SENT, core, slot_get(_CORE_BYTES_SENT, core) + size)
    return [data]


cdef object _CORE_BUFFERS_TO_SEND = core_buffers_to_send


cdef bint _output_queued(object core) except -1:
    """``core.pending_output != 0``: read in C for the AMQP core (the one whose
    ``buffers_to_send`` this module has); the stream client's core is another type."""
    if _PyType_Lookup(Py_TYPE(core), _BUFFERS_TO_SEND) != <PyObject *>_CORE_BUFFERS_TO_SEND:
        return core.pending_output != 0
    if slot_get(_CORE_IOV, core):
        return True
    return len(<FrameWriter?>slot_get(_CORE_WRITER, core)) != 0


cdef int _write(object io, object sock, list pieces) except -1:
    """``ThreadIO._write``: one piece the kernel takes whole is sent here."""
    cdef Py_ssize_t sent
    if len(pieces) != 1 or slot_get(_IO_TLS, io):
        io._write(sock, pieces)
        return 0
    data = pieces[0]
    try:
        sent = sock.send(data)
    except OSError:
        # nothing was sent (BlockingIOError: the socket is full; else the connection is
        # going): the Python write waits for room, or handles the loss
        io._write(sock, pieces)
        return 0
    if sent != len(data):
        io._write(sock, [memoryview(data)[sent:]])
    return 0


cdef int _flush(object io) except -1:
    connection = slot_get(_IO_CONNECTION, io)
    write_lock = slot_get(_IO_WRITE_LOCK, io)
    lock = slot_get(_CONNECTION_LOCK, connection)
    cdef ReentrantLock thread_lock = lock if type(lock) is ReentrantLock else None
    cdef list pieces
    write_lock.acquire()
    try:
        while True:
            if thread_lock is not None:
                lock_take(thread_lock)
            else:
                lock.acquire()
            try:
                core = slot_get(_CONNECTION_CORE, connection)
                if slot_get(_CONNECTION_OBSERVER, connection) is None:
                    pieces = core.buffers_to_send()
                else:
                    pieces = connection._take_output()
                lifecycle = slot_get(_CONNECTION_LIFECYCLE, connection)
                sock = slot_get(_IO_SOCK, io) if slot_get(_HAS_SOCKET, lifecycle) else None
            finally:
                if thread_lock is not None:
                    lock_give(thread_lock)
                else:
                    lock.release()
            if not pieces:
                return 0
            if sock is None:
                raise lifecycle.error or InvalidStateError("the connection is closed")
            _write(io, sock, pieces)
            # What another thread queued while this one wrote (read without the lock: a
            # count queued after this look is written by the flush its writer calls).
            if not _output_queued(slot_get(_CONNECTION_CORE, connection)):
                return 0
    finally:
        write_lock.release()


def thread_flush(io):
    """Write everything the core has queued, in order."""
    _flush(io)


def thread_flush_acks(io):
    """An ack's flush: at once, unless inside ``batch()`` with little queued."""
    connection = slot_get(_IO_CONNECTION, io)
    if not slot_get(_CONNECTION_FLUSH_LATER, connection) \
            or slot_get(_CONNECTION_CORE, connection).pending_output >= _FLUSH_AT:
        _flush(io)
