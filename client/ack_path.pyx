# cython: language_level=3
"""A delivery's ack, compiled: the message's ``ack``, the blocking channel's ``basic_ack``,
the channel's ``_answer_delivery`` (ack, nack and reject, both transports) and the core's
``basic_ack``.

Each is the Python code it replaced, step for step; acking each delivery is a hot path of
consuming (one ack a message).  With the flush compiled too (write_path.pyx), a blocking
ack runs no Python frame: it went through nine, ~60% of the instructions of consuming
with an ack per delivery.  The objects they read are the client's, through
``slots.Slot`` as the compiled publish reads them; the blocking connection's lock is
taken in C.
"""
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE

from amqwire.codec.parser cimport Delivery
from amqwire.codec.writer cimport FrameWriter
from amqwire.client.slots cimport Slot, slot_get
from amqwire.client.thread_lock cimport ReentrantLock, lock_take, lock_give

import logging

from .errors import InvalidStateError
from .lifecycle import ChannelStatus

log = logging.getLogger("amqwire.client")

cdef extern from "Python.h":
    PyObject *_PyType_Lookup(PyTypeObject *kind, object name)  # borrowed; no bound method made

cdef object _CHANNEL_OPEN = ChannelStatus.OPEN
cdef str _BASIC_ACK = "basic_ack"
cdef str _BASIC_REJECT = "basic_reject"
cdef str _BASIC_ACK_ATTR = "basic_ack"

# The core (protocol.ConnectionProtocol) and its channels' states (protocol.ChannelState):
# one type each for both transports.
cdef Slot _CORE_CHANNELS = Slot("_channels")
cdef Slot _CORE_WRITER = Slot("_writer")
cdef Slot _STATE_STATE = Slot("state")
cdef Slot _STATE_TAG_BASE = Slot("tag_base")
cdef Slot _STATE_LAST_TAG = Slot("last_delivery_tag")
cdef Slot _ANSWERABLE = Slot("answerable")  # of the connection's lifecycle (lifecycle.Lifecycle)


cdef class _Reads:
    """What answering a delivery reads of a channel and its connection.  A ``Slot`` keeps
    the offset of one type, and the transports' channels and connections are two types:
    the blocking ack has a set of its own, the other callers share one."""

    cdef Slot connection, channel_id, lock, lifecycle, core, observer, io

    def __init__(self):
        self.connection = Slot("_connection")
        self.channel_id = Slot("channel_id")
        self.lock = Slot("_lock")
        self.lifecycle = Slot("_lifecycle")
        self.core = Slot("_core")
        self.observer = Slot("_observer")
        self.io = Slot("_io")


cdef _Reads _BLOCKING = _Reads()
cdef _Reads _ANY = _Reads()


cdef int _core_ack(object core, object channel, object delivery_tag, object multiple) except -1:
    """``ConnectionProtocol.basic_ack``: 1 queued; 0 for a delivery of an earlier
    connection (nothing queued: the broker requeued it when that connection was lost)."""
    cdef dict channels = slot_get(_CORE_CHANNELS, core)
    state = channels.get(channel)
    if state is None or slot_get(_STATE_STATE, state) is not _CHANNEL_OPEN:
        core._open_state(channel)  # raises why
        raise InvalidStateError(f"channel {channel} is not open")  # (unreached: _open_state raises)
    tag = delivery_tag - slot_get(_STATE_TAG_BASE, state)
    if tag <= 0 or tag > slot_get(_STATE_LAST_TAG, state):
        # 0 ("every one so far"), an earlier connection's, or never delivered; else (acking
        # each delivery, the hot path) _broker_tag's answer without a call
        tag = core._broker_tag(state, delivery_tag)
        if tag < 0:
            return 0
    (<FrameWriter?>slot_get(_CORE_WRITER, core)).ack(channel, tag, multiple)
    return 1


def core_basic_ack(core, channel, delivery_tag, multiple=False):
    """Queue basic.ack; False (nothing queued) for a delivery of an earlier connection:
    the broker requeued it when that connection was lost."""
    return _core_ack(core, channel, delivery_tag, multiple) == 1


cdef int _answer(_Reads reads, object channel, str core_method, object delivery_tag, tuple args) except -1:
    """``_answer_delivery`` up to the flush, under the connection's lock: 1 when queued (the
    caller flushes), 0 when void (a delivery of an earlier connection, logged)."""
    connection = slot_get(reads.connection, channel)
    lock = slot_get(reads.lock, connection)
    cdef ReentrantLock thread_lock = lock if type(lock) is ReentrantLock else None
    cdef int sent
    if thread_lock is not None:
        lock_take(thread_lock)
    else:
        lock.acquire()
    try:
        if not slot_get(_ANSWERABLE, slot_get(reads.lifecycle, connection)):  # a closed channel: the core refuses it below
            channel._check()
        core = slot_get(reads.core, connection)
        channel_id = slot_get(reads.channel_id, channel)
        try:
            if core_method == _BASIC_ACK and _PyType_Lookup(Py_TYPE(core), _BASIC_ACK_ATTR) == <PyObject *>_CORE_BASIC_ACK:
                sent = _core_ack(core, channel_id, delivery_tag, args[0])
            else:
                sent = 1 if getattr(core, core_method)(channel_id, delivery_tag, *args) else 0
        except InvalidStateError:
            channel._check()
            raise
        if not sent:
            log.info("channel %d: %s of delivery %d from before a recovery ignored (the broker requeued it)",
                     channel_id, core_method, delivery_tag)
            return 0
        observer = slot_get(reads.observer, connection)
        if observer is not None and observer.metrics is not None:
            channel._count_settled(observer.metrics, core_method, delivery_tag,
                                   core_method != _BASIC_REJECT and args[0])
    finally:
        if thread_lock is not None:
            lock_give(thread_lock)
        else:
            lock.release()
    return 1


cdef int _answer_and_flush(_Reads reads, object channel, str core_method, object delivery_tag,
                           tuple args) except -1:
    if _answer(reads, channel, core_method, delivery_tag, args):
        # At once: a consumer busy with its buffered messages would otherwise hold back
        # the acks that let the broker send more.
        slot_get(reads.io, slot_get(reads.connection, channel)).flush_acks()
    return 0


def channel_answer_delivery(self, str core_method, delivery_tag, *args):
    """ack, nack or reject (``ChannelBase._answer_delivery``): never waits, so both
    transports share it as it is.

    Whether it may go ahead is the channel's own state on the current connection: a
    delivery of that connection is always answered there, even while a recovery is still
    re-subscribing other consumers; one of a lost connection is refused with the loss
    while the connection is down, and void (logged) once the channel is back: the broker
    requeued it."""
    _answer_and_flush(_ANY, self, core_method, delivery_tag, args)


def blocking_basic_ack(self, delivery_tag, multiple=False):
    """Acknowledge a delivery (``multiple``: and every one before it on this channel);
    written at once."""
    # The blocking transport's Channel.basic_ack (io_threads.ThreadChannelAPI): compiled,
    # as its flush is (ThreadIO.flush_acks), so an ack runs no Python frame.
    _answer_and_flush(_BLOCKING, self, _BASIC_ACK, delivery_tag, (multiple,))


cdef object _BLOCKING_BASIC_ACK = blocking_basic_ack
cdef object _CORE_BASIC_ACK = core_basic_ack


def message_ack(self, multiple=False):
    """``Message.ack``: what the message's channel's ``basic_ack`` returns (None on the
    blocking transport, a coroutine on asyncio)."""
    cdef PyObject *channel = <PyObject *>(<Delivery?>self).channel
    cdef PyObject *tag = <PyObject *>(<Delivery>self).delivery_tag
    if channel == NULL or tag == NULL or <object>channel is None:
        return self._target().basic_ack(self.delivery_tag, multiple)  # raises why
    if _PyType_Lookup(Py_TYPE(<object>channel), _BASIC_ACK_ATTR) == <PyObject *>_BLOCKING_BASIC_ACK:
        _answer_and_flush(_BLOCKING, <object>channel, _BASIC_ACK, <object>tag, (multiple,))
        return None
    return (<object>channel).basic_ack(<object>tag, multiple)
