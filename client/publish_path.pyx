# cython: language_level=3
"""A confirmed publish's hot calls, compiled: the core's ``publish``; each transport's
``Channel.publish_async`` (a function on threads, a coroutine on asyncio) and what it does
when it has room; and the core's handling of the broker's ack or nack frame.

Each is the Python code it replaced, step for step; what they save is the interpreter
running ~180 bytecodes and five Python calls per publish and ~60 per ack frame.  The
objects they read are the client's Python objects, read through ``slots.Slot`` (at the
offset of the ``__slots__`` member, as the interpreter's specialized read does: a
generic read from C costs ~125 instructions, a dozen of them per publish); the codec's
writer, the seqno tracker, the blocking connection's lock and both transports' confirm
futures are typed and called in C.
"""
cimport cython
from libc.stdint cimport uint16_t, uint64_t
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF

from amqwire.codec.parser cimport command_confirm
from amqwire.codec.properties cimport BasicProperties
from amqwire.codec.writer cimport FrameWriter
from amqwire.client.confirm_tracker cimport AckFrame, AckFrames, ConfirmTracker, SeqnoRun
from amqwire.client.thread_future cimport ConfirmFutures, PublishFuture, settle_acked
from amqwire.client.loop_future cimport LoopConfirmFutures, loop_settle_acked
from amqwire.client.slots cimport Slot, slot_get, slot_set
from amqwire.client.thread_lock cimport ReentrantLock, lock_take, lock_give

from amqwire.codec import BasicAck, encode_publish_iov

from .errors import InvalidStateError
from .events import Confirmed
from .lifecycle import ChannelPhase, ChannelStatus, ConnectionState

#: Bodies this big (bytes) are sent from the caller's buffer, not copied into the writer.
ZERO_COPY_THRESHOLD = 65536
#: Publishes are written together until this much output is queued (``flush_due``).
FLUSH_AT = 256 * 1024

cdef Py_ssize_t _ZERO_COPY_THRESHOLD = ZERO_COPY_THRESHOLD
cdef Py_ssize_t _FLUSH_AT = FLUSH_AT
cdef object _CHANNEL_OPEN = ChannelStatus.OPEN
cdef object _PHASE_OPEN = ChannelPhase.OPEN
cdef object _CONNECTION_OPEN = ConnectionState.OPEN
cdef long long _MAX_SEQNO = 0x7FFFFFFFFFFFFFFF  # a tag above it names no publish (seqnos are long long)

# The core (protocol.ConnectionProtocol) and its channels' states (protocol.ChannelState).
cdef Slot _CORE_CHANNELS = Slot("_channels")
cdef Slot _CORE_WRITER = Slot("_writer")
cdef Slot _CORE_IOV = Slot("_iov")
cdef Slot _CORE_FLUSH_DUE = Slot("flush_due")
cdef Slot _CORE_STATE = Slot("state")
cdef Slot _STATE_STATE = Slot("state")
cdef Slot _STATE_CONFIRMS = Slot("confirms")
cdef Slot _CORE_ACKED = Slot("publishes_acked")
cdef Slot _CORE_NACKED = Slot("publishes_nacked")
cdef Slot _CORE_RETURNED = Slot("publishes_returned")
cdef Slot _STATE_ID = Slot("id")
# The connection's lifecycle (lifecycle.Lifecycle); a channel's (lifecycle.Machine).
cdef Slot _USABLE = Slot("usable")
cdef Slot _PHASE = Slot("state")
# A channel of the blocking transport (operations_sync.SyncChannel); one of asyncio's
# (operations_async.AsyncChannel): a Slot keeps the offset of one type.
cdef Slot _CHANNEL_PUBLISHER = Slot("_publisher")
cdef Slot _AIO_CHANNEL_PUBLISHER = Slot("_publisher")
# A Confirmed event (events.Confirmed).
cdef Slot _EVENT_ACK = Slot("ack")
cdef Slot _EVENT_CHANNEL = Slot("channel_id")
cdef Slot _EVENT_SEQNOS = Slot("seqnos")
cdef Slot _EVENT_TOKENS = Slot("tokens")
cdef Slot _EVENT_RETURNED = Slot("returned")
cdef Slot _EVENT_TAG = Slot("delivery_tag")
cdef Slot _EVENT_MULTIPLE = Slot("multiple")
cdef Slot _EVENT_ACKS = Slot("acks")

cdef extern from "Python.h":
    ctypedef struct _TypeAlloc "PyTypeObject":
        PyObject *(*tp_alloc)(void *, Py_ssize_t)

cdef object _CONFIRMED = Confirmed

# The channel's and connection's flags are Python bools or ints (session.py writes them);
# this reads the common case, True, False or a small exact int, without a call into the int type.
cdef extern from *:
    """
    #if PY_VERSION_HEX >= 0x030C0000 && !defined(PYPY_VERSION)
    #define AMQW_SMALL_INT(o) (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)(o)))
    #define AMQW_SMALL_VALUE(o) PyUnstable_Long_CompactValue((PyLongObject *)(o))
    #elif !defined(PYPY_VERSION)
    #define AMQW_SMALL_INT(o) (PyLong_CheckExact(o) && Py_SIZE(o) >= -1 && Py_SIZE(o) <= 1)
    #define AMQW_SMALL_VALUE(o) ((Py_ssize_t)Py_SIZE(o) * (Py_ssize_t)((PyLongObject *)(o))->ob_digit[0])
    #else
    #define AMQW_SMALL_INT(o) 0
    #define AMQW_SMALL_VALUE(o) 0
    #endif
    /* bool(o) */
    static CYTHON_INLINE int amqw_truth(PyObject *o) {
        if (o == Py_True) return 1;
        if (o == Py_False || o == Py_None) return 0;
        if (AMQW_SMALL_INT(o)) return AMQW_SMALL_VALUE(o) != 0;
        return PyObject_IsTrue(o);
    }
    """
    int amqw_truth(object o) except -1


cdef object _new_confirmed(object channel_id, bint ack, object seqnos, list tokens, object returned, object tag,
                           bint multiple):
    """``Confirmed(channel_id, ack, seqnos, tokens, returned, tag, multiple)``, its fields set
    here rather than by a call of its Python ``__init__`` (once per ack frame)."""
    cdef PyObject *raw = (<_TypeAlloc *><PyObject *>_CONFIRMED).tp_alloc(<void *><PyObject *>_CONFIRMED, 0)
    if raw == NULL:
        raise MemoryError()
    event = <object>raw
    Py_DECREF(event)  # the cast took a reference of its own
    slot_set(_EVENT_CHANNEL, event, channel_id)
    slot_set(_EVENT_ACK, event, ack)
    slot_set(_EVENT_SEQNOS, event, seqnos)
    slot_set(_EVENT_TOKENS, event, tokens)
    slot_set(_EVENT_RETURNED, event, returned)
    slot_set(_EVENT_TAG, event, tag)
    slot_set(_EVENT_MULTIPLE, event, multiple)
    slot_set(_EVENT_ACKS, event, None)
    return event


cdef int _COMMAND_INVALID = 503
cdef int _PRECONDITION_FAILED = 406


cdef class NoLock:
    """The connection's lock on asyncio: everything runs in the loop's thread, so the
    shared layer's critical sections need no lock there.  Compiled, and known to
    ``ChannelPublisher``, which skips it."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None

    def acquire(self):
        return True

    def release(self):
        return None


def core_publish(core, channel, exchange, routing_key, body, properties=None, mandatory=False,
                 immediate=False, token=None):
    """Queue basic.publish with its content; returns its confirm seqno (0 without confirms).

    ``ConnectionProtocol.publish`` (``core`` is the protocol object)."""
    return _publish(core, channel, exchange, routing_key, body, properties, mandatory, immediate, token)


cdef object _open_channel_state(object core, object channel):
    """The core's state of ``channel``, open; else InvalidStateError saying why."""
    state = (<dict>slot_get(_CORE_CHANNELS, core)).get(channel)
    if state is None or slot_get(_STATE_STATE, state) is not _CHANNEL_OPEN:
        core._open_state(channel)  # raises
    return state


cdef long long _publish(object core, object channel, object exchange, object routing_key, object body,
                        object properties, bint mandatory, bint immediate, object token) except -1:
    return _publish_on(core, _open_channel_state(core, channel), channel, exchange, routing_key, body,
                       properties, mandatory, immediate, token)


cdef long long _publish_on(object core, object state, object channel, object exchange, object routing_key,
                           object body, object properties, bint mandatory, bint immediate, object token) except -1:
    """``_publish`` on the core's open ``state`` of ``channel``."""
    cdef FrameWriter writer = slot_get(_CORE_WRITER, core)
    iov = slot_get(_CORE_IOV, core)
    if PyBytes_CheckExact(body) and PyBytes_GET_SIZE(body) >= _ZERO_COPY_THRESHOLD:
        pieces = encode_publish_iov(
            channel, exchange, routing_key, body, properties, mandatory, immediate, writer._frame_max
        )
        core._publishes_beside_writer += 1
        core._spill_writer()
        iov.extend(pieces)
        if core.pending_output >= _FLUSH_AT:
            slot_set(_CORE_FLUSH_DUE, core, True)
    else:
        if PyBytes_CheckExact(body) and (properties is None or isinstance(properties, BasicProperties)):
            # a channel the core has open is a valid channel number
            writer.publish_bytes(<uint16_t>channel, exchange, routing_key, body, properties, mandatory, immediate)
        else:  # a buffer-protocol body, or properties of the wrong type (TypeError)
            writer.publish(channel, exchange, routing_key, body, properties, mandatory, immediate)
        if writer.buf._len >= _FLUSH_AT or (iov and core.pending_output >= _FLUSH_AT):
            slot_set(_CORE_FLUSH_DUE, core, True)
    confirms = slot_get(_STATE_CONFIRMS, state)
    if confirms is None:
        return 0
    cdef ConfirmTracker tracker = <ConfirmTracker?>confirms
    cdef long long seqno = tracker.add(token)
    if mandatory:
        tracker.mandatory[seqno] = (exchange, routing_key, body, properties)
    return seqno


def core_on_confirm(core, state, method, command, list events):
    """basic.ack or basic.nack from the broker: publisher confirms.

    ``ConnectionProtocol._on_confirm``: settles the publishes up to the frame's tag in the
    channel's seqno tracker and adds their ``Confirmed`` event (an ack right after another
    ack of the same channel in the same read is folded into its event)."""
    cdef uint64_t tag = method.delivery_tag
    if slot_get(_STATE_CONFIRMS, state) is None:
        core._protocol_error(
            _COMMAND_INVALID, f"{method.NAME} on channel {slot_get(_STATE_ID, state)}, which is not in confirm mode",
            method,
        )
    elif not _settle(core, state, type(method) is BasicAck, tag, method.multiple, events, NULL):
        core._protocol_error(
            _PRECONDITION_FAILED,
            f"{method.NAME} for delivery tag {tag} on channel {slot_get(_STATE_ID, state)}, "
            f"which is not an unconfirmed publish",
            method,
        )


cdef struct Folds:
    # What a run of folded acks (_fold_in_order) leaves to do once, at the end of the run:
    PyObject *event  # the event (held by the events list) whose delivery_tag and multiple are not set yet
    Py_ssize_t acked  # publishes acked, not counted in publishes_acked yet


def core_confirm_run(core, list items, list events):
    """The leading basic.ack and basic.nack frames of a read (``items``, from the parser),
    for channels open in confirm mode, handled as ``core_on_confirm`` would; returns how
    many were handled.  ``ConnectionProtocol.receive_data`` hands the rest, from the first
    other item (or a frame it must refuse), to ``_handle``: a read of acks alone never runs
    the Python loop."""
    cdef Py_ssize_t i, n = len(items)
    cdef int channel = 0
    cdef uint64_t tag = 0
    cdef bint multiple = False
    cdef int kind
    cdef int state_of = 0  # the channel ``state`` is of (nothing in the loop changes it)
    if slot_get(_CORE_STATE, core) is not _CONNECTION_OPEN:
        return 0
    cdef dict channels = slot_get(_CORE_CHANNELS, core)
    cdef Folds folds
    folds.event = NULL
    folds.acked = 0
    state = None
    try:
        for i in range(n):
            kind = command_confirm(items[i], &channel, &tag, &multiple)
            if kind == 0 or channel == 0:
                return i
            if channel != state_of:
                state = channels.get(channel)
                if (state is None or slot_get(_STATE_STATE, state) is not _CHANNEL_OPEN
                        or slot_get(_STATE_CONFIRMS, state) is None):
                    return i  # refused by _handle (or a closing channel's, which it discards)
                state_of = channel
            if not _settle(core, state, kind == 1, tag, multiple, events, &folds):
                return i
        return n
    finally:
        _finish_folds(core, &folds)


cdef int _finish_folds(object core, Folds *folds) except -1:
    """Set the event's ``delivery_tag`` and ``multiple`` (its last frame's) and count the
    publishes acked."""
    if folds.event != NULL:
        _finish_event(<object>folds.event)
        folds.event = NULL
    if folds.acked:
        slot_set(_CORE_ACKED, core, slot_get(_CORE_ACKED, core) + folds.acked)
        folds.acked = 0
    return 0


cdef int _finish_event(object event) except -1:
    cdef AckFrames acks = <AckFrames>slot_get(_EVENT_ACKS, event)
    cdef AckFrame *last = &acks._frames[acks._len - 1]
    slot_set(_EVENT_TAG, event, last.tag)
    slot_set(_EVENT_MULTIPLE, event, last.multiple)
    return 0


cdef bint _settle(object core, object state, bint ack, uint64_t tag, bint multiple, list events,
                 Folds *folds) except -1:
    """Settle an ack or nack of ``tag`` on ``state``'s channel (in confirm mode) and add or
    fold its ``Confirmed`` event; False if it names no unconfirmed publish (a protocol
    error the caller reports; nothing was changed)."""
    cdef ConfirmTracker tracker = <ConfirmTracker>slot_get(_STATE_CONFIRMS, state)
    if tag > <uint64_t>_MAX_SEQNO:
        return False
    if (ack and events and tracker.unmatched_return is None and not tracker.mandatory
            and _fold_in_order(core, state, tracker, events[len(events) - 1], <long long>tag, multiple, folds)):
        return True
    seqnos, tokens = tracker.resolve(<long long>tag, multiple)
    if not seqnos:
        # nothing left up to tag, all of it confirmed one by one already: not an error
        return multiple and 0 < tag < <uint64_t>tracker.next_seqno
    tag_object = tag
    returned = tracker.take_returned(tag_object, seqnos) \
        if tracker.unmatched_return is not None or tracker.mandatory else None
    cdef Py_ssize_t settled = len(seqnos)
    if returned is not None:
        slot_set(_CORE_RETURNED, core, slot_get(_CORE_RETURNED, core) + len(returned))
        settled -= len(returned)
    channel_id = slot_get(_STATE_ID, state)
    if ack:
        slot_set(_CORE_ACKED, core, slot_get(_CORE_ACKED, core) + settled)
        if events:
            last = events[len(events) - 1]  # (built with wraparound off)
            if (type(last) is Confirmed and slot_get(_EVENT_ACK, last)
                    and slot_get(_EVENT_CHANNEL, last) == channel_id):
                # the ack before this one in this read, on this channel: one event for both
                _fold(last, seqnos, tokens, returned, tag_object, multiple)
                return True
        events.append(_new_confirmed(channel_id, True, seqnos, tokens, returned, tag_object, multiple))
    else:
        slot_set(_CORE_NACKED, core, slot_get(_CORE_NACKED, core) + settled)
        events.append(_new_confirmed(channel_id, False, seqnos, tokens, returned, tag_object, multiple))
    return True


cdef AckFrames _ack_frames(object event, Py_ssize_t end):
    """The ``acks`` of an event a frame is folded into: made on the first fold, with the
    event's own frame (its publishes end at ``end``) first."""
    acks = slot_get(_EVENT_ACKS, event)
    if acks is None:
        acks = AckFrames.__new__(AckFrames)
        (<AckFrames>acks).add(slot_get(_EVENT_TAG, event), slot_get(_EVENT_MULTIPLE, event), end)
        slot_set(_EVENT_ACKS, event, acks)
    return <AckFrames?>acks


cdef bint _fold_in_order(object core, object state, ConfirmTracker tracker, object last, long long tag,
                         bint multiple, Folds *folds) except -1:
    """An ack that goes on from the ack before it in the read (``last``'s, on the same
    channel): its publishes' tokens appended to that event's, its run of seqnos extended,
    the frame recorded in ``acks`` (as ``_fold`` does), and nothing else made for it (the
    common case pipelined: the broker acks each publish or a few at a time).  False when
    it is not that: nothing changed, ``_settle`` goes the general way."""
    if type(last) is not Confirmed or slot_get(_EVENT_ACK, last) is not True:
        return False
    channel_id = slot_get(_STATE_ID, state)
    event_channel = slot_get(_EVENT_CHANNEL, last)
    if event_channel is not channel_id and event_channel != channel_id:
        return False
    seqnos = slot_get(_EVENT_SEQNOS, last)
    if type(seqnos) is not SeqnoRun or (<SeqnoRun>seqnos).stop != tracker.base:
        return False
    cdef list tokens = slot_get(_EVENT_TOKENS, last)
    cdef Py_ssize_t before = len(tokens)
    cdef Py_ssize_t count = tracker.take_in_order(tag, multiple, tokens)
    if count < 0:
        return False
    (<SeqnoRun>seqnos).stop += count
    cdef AckFrames acks = _ack_frames(last, before)
    acks.add(<uint64_t>tag, multiple, before + count)
    if folds == NULL:
        slot_set(_CORE_ACKED, core, slot_get(_CORE_ACKED, core) + count)
        _finish_event(last)
        return True
    # a read's run of acks (core_confirm_run): the event's tag and the count set once, at its end
    if folds.event != <PyObject *>last:
        _finish_folds(core, folds)
        folds.event = <PyObject *>last
    folds.acked += count
    return True


cdef int _fold(object event, object seqnos, list tokens, object returned, object tag, bint multiple) except -1:
    """Add an ack frame's publishes to the Confirmed event of the ack frame before it:
    ``acks`` lists each frame as it came, ``(delivery_tag, multiple, end)``, and the
    event's ``delivery_tag`` and ``multiple`` become the last frame's.  Two runs of
    seqnos that meet (in-order acks) stay one run."""
    cdef list event_tokens = slot_get(_EVENT_TOKENS, event)
    cdef AckFrames acks = _ack_frames(event, len(event_tokens))
    event_seqnos = slot_get(_EVENT_SEQNOS, event)
    if type(event_seqnos) is not SeqnoRun or not (<SeqnoRun>event_seqnos).join(seqnos):
        # not the run that follows on (single acks out of order): a list of what was settled
        if type(event_seqnos) is not list:
            event_seqnos = list(event_seqnos)
            slot_set(_EVENT_SEQNOS, event, event_seqnos)
        (<list>event_seqnos).extend(seqnos)
    event_tokens.extend(tokens)
    acks.add(tag, multiple, len(event_tokens))
    if returned is not None:
        event_returned = slot_get(_EVENT_RETURNED, event)
        if event_returned is None:
            slot_set(_EVENT_RETURNED, event, returned)
        else:
            event_returned.update(returned)
    slot_set(_EVENT_TAG, event, tag)
    slot_set(_EVENT_MULTIPLE, event, multiple)
    return 0


@cython.final
cdef class ChannelPublisher:
    """A channel's confirm-mode publishes once ``publish_async`` has room (the channel in
    confirm mode, its connection not held): ``publish`` makes the future, queues the
    publish under the connection's lock, counts it unsettled, has it written, and returns
    the future.  It keeps what that reads and never changes (the channel's connection, its
    lock, lifecycle and I/O, the channel's futures): each is a generic attribute read
    less per publish.

    It holds the channel's confirm window, as C counts that every publish and ack frame
    reads and writes without making an int (the channel's ``_confirm_window``,
    ``_max_in_flight``, ``_unsettled`` and ``_progress_below`` are these fields)."""

    cdef public long long confirm_window  # confirm_select's max_in_flight; 0: not in confirm mode
    cdef public long long max_in_flight  # unconfirmed publishes allowed now: the window, or less while watched
    cdef public long long unsettled  # confirm-mode publishes whose futures are not settled yet
    cdef public long long progress_below  # wake confirm waiters once unsettled is at most this
    cdef object channel, connection, lifecycle, io
    # The core's state of the channel as of the last publish, and that core: a state leaves
    # the core's channels only by a transition out of OPEN, never to come back (lifecycle's
    # CHANNEL_TRANSITIONS), so while it is OPEN and the connection has that core, it is
    # the channel's, without a lookup per publish.
    cdef object open_state, state_core
    cdef ReentrantLock thread_lock  # the blocking transport's, taken in C; None on asyncio (NoLock)
    # the channel's futures, made and issued in C: the blocking transport's, or asyncio's
    cdef ConfirmFutures thread_futures
    cdef LoopConfirmFutures loop_futures
    # of the channel and the connection (their types differ between the transports)
    cdef Slot channel_id, core, observer, to_stamp, flush_later
    cdef Slot flow_paused, tracing, held
    cdef Slot listeners, channel_lifecycle

    def __init__(self, channel, connection, waits, long long progress_below):
        self.progress_below = progress_below
        self.channel = channel
        self.connection = connection
        self.lifecycle = connection._lifecycle
        self.io = connection._io
        lock = connection._lock
        if type(lock) is ReentrantLock:
            self.thread_lock = lock
        elif type(lock) is not NoLock:
            raise TypeError(f"a connection's lock is a ReentrantLock or a NoLock, not {type(lock).__name__}")
        if isinstance(waits, ConfirmFutures):
            self.thread_futures = waits
        elif isinstance(waits, LoopConfirmFutures):
            self.loop_futures = waits
        else:
            raise TypeError(f"a channel's futures are ConfirmFutures or LoopConfirmFutures, not {type(waits).__name__}")
        self.channel_id = Slot("channel_id")
        self.core = Slot("_core")
        self.observer = Slot("_observer")
        self.to_stamp = Slot("_to_stamp")
        self.flush_later = Slot("_flush_later")
        self.flow_paused = Slot("_flow_paused")
        self.tracing = Slot("_tracing")
        self.held = Slot("_held")
        self.listeners = Slot("_listeners")
        self.channel_lifecycle = Slot("_lifecycle")

    cdef object if_room(self, object exchange, object routing_key, object body, object properties,
                        bint mandatory, object callback):
        cdef object channel = self.channel, connection = self.connection
        if (not self.confirm_window or self.unsettled >= self.max_in_flight
                or slot_get(self.tracing, connection) is not None
                or amqw_truth(slot_get(self.held, connection))
                or amqw_truth(slot_get(self.flow_paused, channel))):
            return None
        return self.publish_now(exchange, routing_key, body, properties, mandatory, callback)

    def publish(self, exchange, routing_key, body, properties, bint mandatory, callback):
        """Publish now (``publish_async`` has made room): returns the future."""
        return self.publish_now(exchange, routing_key, body, properties, mandatory, callback)

    cdef object publish_now(self, object exchange, object routing_key, object body, object properties,
                            bint mandatory, object callback):
        cdef object channel = self.channel, connection = self.connection
        if self.thread_futures is not None:
            token = self.thread_futures.new_token(1, callback)
        else:
            token = self.loop_futures.new_token(1, callback)
        cdef long long seqno
        cdef ReentrantLock thread_lock = self.thread_lock
        if thread_lock is not None:
            lock_take(thread_lock)
        try:
            # Checked again under the lock: a connection lost while we waited has drained
            # its unconfirmed publishes already, and one queued now would never settle.
            if not slot_get(_USABLE, self.lifecycle):  # a closed channel: the core refuses it below
                channel._check()
            core = slot_get(self.core, connection)
            channel_id = slot_get(self.channel_id, channel)
            try:
                state = self.open_state
                if (state is None or core is not self.state_core
                        or slot_get(_STATE_STATE, state) is not _CHANNEL_OPEN):
                    self.open_state = self.state_core = None
                    state = _open_channel_state(core, channel_id)
                    self.open_state, self.state_core = state, core
                seqno = _publish_on(core, state, channel_id, exchange, routing_key, body,
                                    properties, mandatory, False, token)
            except InvalidStateError:
                channel._check()  # the connection or channel went away meanwhile: say why
                raise
            self.unsettled += 1
            if slot_get(self.observer, connection) is not None and connection._metrics is not None:  # (a property)
                # stamped when written (see ConnectionBase._take_output)
                slot_get(self.to_stamp, connection)[channel] = None
        finally:
            if thread_lock is not None:
                lock_give(thread_lock)
        if not amqw_truth(slot_get(self.flush_later, connection)) or amqw_truth(slot_get(_CORE_FLUSH_DUE, core)):
            self.io.flush_soon()
        if self.thread_futures is not None:
            (<PublishFuture>token).delivery_tag = seqno
            return token
        return self.loop_futures.issued(token, seqno)

    def on_confirmed(self, event):
        """The broker's verdict (a ``Confirmed`` event) on the channel's publishes: settle
        their futures (confirm listeners are told first), count them settled, watch a
        restored channel's verdicts, and wake who waits for room or for confirms."""
        cdef object channel = self.channel
        cdef list tokens = slot_get(_EVENT_TOKENS, event)
        cdef Py_ssize_t count = len(tokens)
        ack = slot_get(_EVENT_ACK, event)
        listeners = slot_get(self.listeners, channel)
        if listeners is not None:
            listeners = listeners.of("confirm")
        if listeners:
            channel._tell_and_settle(event, listeners)
        elif ack and slot_get(_EVENT_RETURNED, event) is None:
            if self.thread_futures is not None:
                settle_acked(tokens)
            else:
                loop_settle_acked(tokens)
        else:
            channel._settle_tokens(event, 0, count)
        cdef ReentrantLock thread_lock = self.thread_lock
        if thread_lock is not None:
            lock_take(thread_lock)
        try:
            self.unsettled -= count
        finally:
            if thread_lock is not None:
                lock_give(thread_lock)
        if slot_get(_PHASE, slot_get(self.channel_lifecycle, channel)) is not _PHASE_OPEN:
            channel._watch_verdict(ack, count)  # restored by a recovery: watched
        if self.unsettled <= self.progress_below:
            # else no waiter is ready to go on yet
            (self.thread_futures if self.thread_futures is not None else self.loop_futures).notify_progress()


cdef enum:
    _CONFIRM_WINDOW = 0
    _MAX_IN_FLIGHT = 1
    _UNSETTLED = 2
    _PROGRESS_BELOW = 3

cdef dict _WINDOW_FIELDS = {"confirm_window": _CONFIRM_WINDOW, "max_in_flight": _MAX_IN_FLIGHT,
                            "unsettled": _UNSETTLED, "progress_below": _PROGRESS_BELOW}


@cython.final
cdef class WindowCount:
    """A channel's name for one of its ``ChannelPublisher``'s window counts (a descriptor:
    ``ChannelBase._unsettled = WindowCount("unsettled")``), compiled: a read from Python
    code costs a fraction of a Python descriptor's call (``basic_publish`` reads
    ``_confirm_window`` every time)."""

    cdef readonly str field
    cdef int index
    cdef Slot publisher

    def __init__(self, str field):
        if field not in _WINDOW_FIELDS:
            raise ValueError(f"not a window count of ChannelPublisher: {field!r}")
        self.field = field
        self.index = _WINDOW_FIELDS[field]
        self.publisher = Slot("_publisher")

    def __get__(self, channel, owner):
        if channel is None:
            return self
        cdef ChannelPublisher publisher = <ChannelPublisher?>slot_get(self.publisher, channel)
        if self.index == _CONFIRM_WINDOW:
            return publisher.confirm_window
        if self.index == _MAX_IN_FLIGHT:
            return publisher.max_in_flight
        if self.index == _UNSETTLED:
            return publisher.unsettled
        return publisher.progress_below

    def __set__(self, channel, value):
        cdef ChannelPublisher publisher = <ChannelPublisher?>slot_get(self.publisher, channel)
        cdef long long count = value
        if self.index == _CONFIRM_WINDOW:
            publisher.confirm_window = count
        elif self.index == _MAX_IN_FLIGHT:
            publisher.max_in_flight = count
        elif self.index == _UNSETTLED:
            publisher.unsettled = count
        else:
            publisher.progress_below = count


def channel_on_confirmed(self, event):
    """``ChannelBase._on_confirmed``: the channel's ``ChannelPublisher.on_confirmed``."""
    (<ChannelPublisher?>self._publisher).on_confirmed(event)


def blocking_publish_async(self, exchange, routing_key, body, properties=None, *, mandatory=False,
                           callback=None, timeout=None):
    """Publish in confirm mode without waiting for the broker: returns a future of its
    verdict (None when acked; PublishNacked, MessageReturned or PublishUnconfirmed).

    Waits only while ``max_in_flight`` publishes are unconfirmed, or under
    back-pressure; ``timeout`` bounds that wait.  ``callback(future)`` runs once the
    broker has answered (on the I/O thread).
    """
    # The blocking transport's Channel.publish_async (io_threads.ThreadChannelAPI): a
    # compiled function, so a publish with room runs no Python frame at all.
    cdef ChannelPublisher publisher = <ChannelPublisher?>slot_get(_CHANNEL_PUBLISHER, self)
    future = publisher.if_room(exchange, routing_key, body, properties, mandatory, callback)
    if future is not None:
        return future
    return self._publish_waiting(exchange, routing_key, body, properties, mandatory, callback, timeout)


async def aio_publish_async(self, exchange, routing_key, body, properties=None, *, mandatory=False,
                            callback=None, timeout=None):
    """Publish in confirm mode without waiting for the broker: returns a future of its
    verdict (None when acked; PublishNacked, MessageReturned or PublishUnconfirmed).

    Waits only while ``max_in_flight`` publishes are unconfirmed, or under
    back-pressure; ``timeout`` bounds that wait.  ``callback(future)`` runs once the
    broker has answered (in the loop).
    """
    # The asyncio transport's Channel.publish_async (io_asyncio.AsyncioChannelAPI): a
    # compiled coroutine, which costs a fraction of a Python one's frame and defaults.
    cdef ChannelPublisher publisher = <ChannelPublisher?>slot_get(_AIO_CHANNEL_PUBLISHER, self)
    future = publisher.if_room(exchange, routing_key, body, properties, mandatory, callback)
    if future is not None:
        return future
    return await self._publish_waiting(exchange, routing_key, body, properties, mandatory, callback, timeout)
