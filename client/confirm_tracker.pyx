"""Publisher-confirm sequence numbers of one channel, compiled: each confirmed publish adds a
slot and each ack frame resolves a run of them, on the hot path of confirms.

Seqnos are consecutive from 1.  The unresolved ones live in a list from ``_head`` on
(``slots[_head]`` is ``base``, the lowest unresolved), so an in-order ack, single or
multiple, costs O(1) per publish, and an out-of-order single ack marks its slot done.  A
resolved slot lets go of its token at once; the list is cut when everything in it is
resolved, or when its resolved head outgrows the rest.
"""
cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Realloc

from collections.abc import Sequence

from amqwire.codec.properties import BasicProperties

cdef object _DONE = object()  # a slot settled out of order, before the lowest unresolved
cdef object _EMPTY_PROPERTIES = BasicProperties()
cdef Py_ssize_t _CUT_AT = 4096  # a resolved head this long is cut once it is half the list


cdef bint _same_body(object sent, bytes returned) except -1:
    if isinstance(sent, str):
        return sent.encode() == returned
    if isinstance(sent, (bytes, bytearray)):
        return sent == returned
    return bytes(sent) == returned


@cython.final
@cython.freelist(16)
cdef class SeqnoRun:
    """Consecutive seqnos, ``start`` to ``stop - 1``: what an ack frame settles, unless single
    acks came out of order.  A read-only sequence of ints (equal to any sequence of the same
    ints) that costs one small object, not an int and a list slot per publish."""

    def __cinit__(self, long long start, long long stop):
        self.start = start
        self.stop = stop if stop > start else start

    cdef bint join(self, object after) except -1:
        """Take in the run right after this one (the next in-order ack of a read); False if
        ``after`` is not that."""
        if type(after) is not SeqnoRun or (<SeqnoRun>after).start != self.stop:
            return False
        self.stop = (<SeqnoRun>after).stop
        return True

    def __len__(self):
        return self.stop - self.start

    def __iter__(self):
        return iter(range(self.start, self.stop))

    def __reversed__(self):
        return reversed(range(self.start, self.stop))

    def __getitem__(self, index, /):
        return range(self.start, self.stop)[index]  # an int, or a range for a slice

    def __contains__(self, value, /):
        return value in range(self.start, self.stop)

    def index(self, value, start=0, stop=None):
        """Where ``value`` is (between ``start`` and ``stop``, as ``list.index``)."""
        seqnos = range(self.start, self.stop)
        if start == 0 and stop is None:
            return seqnos.index(value)
        return list(seqnos).index(value, start, len(seqnos) if stop is None else stop)

    def count(self, value):
        return 1 if value in range(self.start, self.stop) else 0

    def __eq__(self, other, /):
        if type(other) is SeqnoRun:
            return self.start == (<SeqnoRun>other).start and self.stop == (<SeqnoRun>other).stop
        if isinstance(other, (list, tuple, range)):
            return list(range(self.start, self.stop)) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"SeqnoRun({self.start}, {self.stop})"

    def __reduce__(self):
        return SeqnoRun, (self.start, self.stop)


Sequence.register(SeqnoRun)


@cython.final
cdef class AckFrames:
    """The ack frames folded into one ``Confirmed`` event, as they came: a read-only sequence
    of ``(delivery_tag, multiple, end)``, equal to the list of those tuples.  Kept as C
    values, so a frame folded in costs no tuple and no ints (the tuples are made when
    read: by a confirm listener's dispatch, or a test)."""

    def __init__(self, frames=()):
        for tag, multiple, end in frames:
            self.add(tag, multiple, end)

    def __dealloc__(self):
        PyMem_Free(self._frames)

    cdef int add(self, unsigned long long tag, bint multiple, Py_ssize_t end) except -1:
        """One more frame: its delivery tag, multiple flag, and where its publishes end."""
        cdef Py_ssize_t cap
        cdef AckFrame *grown
        if self._len == self._cap:
            cap = 8 if self._cap == 0 else 2 * self._cap
            grown = <AckFrame *>PyMem_Realloc(self._frames, cap * sizeof(AckFrame))
            if grown == NULL:
                raise MemoryError()
            self._frames, self._cap = grown, cap
        self._frames[self._len].tag = tag
        self._frames[self._len].multiple = multiple
        self._frames[self._len].end = end
        self._len += 1
        return 0

    cdef tuple _frame(self, Py_ssize_t i):
        cdef AckFrame *frame = &self._frames[i]
        return (frame.tag, frame.multiple, frame.end)

    def __len__(self):
        return self._len

    def __getitem__(self, index, /):
        cdef Py_ssize_t i
        if isinstance(index, slice):
            return [self._frame(i) for i in range(*index.indices(self._len))]
        i = index
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("ack frame index out of range")
        return self._frame(i)

    def __iter__(self):
        cdef Py_ssize_t i = 0
        while i < self._len:  # (frames added meanwhile are seen, as a list's iterator would)
            yield self._frame(i)
            i += 1

    def __eq__(self, other, /):
        if isinstance(other, (AckFrames, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"AckFrames({list(self)!r})"

    def __reduce__(self):
        return AckFrames, (list(self),)


Sequence.register(AckFrames)


cdef class ConfirmTracker:
    """The unconfirmed publishes of one channel in confirm mode, by seqno."""

    def __init__(self):
        self.base = 1
        self._slots = []
        self._head = 0
        # seqno -> (exchange, routing_key, body, properties) of unconfirmed mandatory
        # publishes, in order: a basic.return names none of them, so it is matched on these
        self.mandatory = {}
        self.returned = {}
        # A return matching no recorded publish (publish_encoded sends none): RabbitMQ
        # follows a basic.return with the basic.ack of the same message, so it belongs to
        # the delivery tag of the next ack or nack.
        self.unmatched_return = None

    @property
    def next_seqno(self):
        return self.base + (len(self._slots) - self._head)

    def __len__(self):
        """Unconfirmed publishes."""
        cdef Py_ssize_t i, count = 0
        for i in range(self._head, len(self._slots)):
            if self._slots[i] is not _DONE:
                count += 1
        return count

    def __bool__(self):
        """Any seqno not resolved yet (an out-of-order settled one counts until the lower
        ones are)."""
        return self._head < len(self._slots)

    cpdef long long add(self, object token) except -1:
        """Record one publish; its seqno."""
        self._slots.append(token)
        return self.base + (len(self._slots) - self._head) - 1

    cpdef long long add_run(self, object token, Py_ssize_t count) except -1:
        """Record ``count`` publishes of one token; the seqno of the first."""
        cdef long long first = self.base + (len(self._slots) - self._head)
        cdef Py_ssize_t i
        for i in range(count):
            self._slots.append(token)
        return first

    cpdef tuple resolve(self, long long delivery_tag, bint multiple):
        """Seqnos and tokens settled by an ack/nack; unknown tags settle nothing.

        The seqnos are a ``SeqnoRun`` when they are consecutive (always, unless single acks
        came out of order before): no Python int per publish on the hot path of confirms."""
        cdef list slots = self._slots
        cdef list seqnos
        cdef list tokens = []
        cdef Py_ssize_t size = len(slots)
        cdef Py_ssize_t head = self._head
        cdef Py_ssize_t index
        cdef long long base = self.base
        cdef long long first = base
        cdef object token
        if multiple:
            seqnos = None  # until a slot settled out of order breaks the run
            while head < size and base <= delivery_tag:
                token = slots[head]
                if token is not _DONE:
                    if seqnos is not None:
                        seqnos.append(base)
                    tokens.append(token)
                elif seqnos is None:
                    seqnos = list(range(first, base))
                slots[head] = None
                head += 1
                base += 1
            if seqnos is None:
                result = SeqnoRun(first, base)
            else:
                result = seqnos
        else:
            if delivery_tag < base or delivery_tag - base >= size - head:
                return [], tokens
            index = head + <Py_ssize_t>(delivery_tag - base)
            token = slots[index]
            if token is _DONE:
                return [], tokens
            result = SeqnoRun(delivery_tag, delivery_tag + 1)
            tokens.append(token)
            if index != head:
                slots[index] = _DONE
                return result, tokens
            slots[head] = None
            head += 1
            base += 1
        self._advance(slots, head, base)
        return result, tokens

    cdef Py_ssize_t take_in_order(self, long long delivery_tag, bint multiple, list tokens) except -2:
        """``resolve`` of an ack that settles the lowest unresolved seqnos in order (a single
        ack of ``base``, or a multiple ack up to ``delivery_tag`` of seqnos none of which was
        settled out of order): their tokens appended to ``tokens``, no result objects made;
        how many it settled (the seqnos ``base`` before the call on).  -1 when the ack is
        not that: nothing changed, ``resolve`` decides (the next in-order ack of a read,
        folded into the event of the one before: publish_path._settle)."""
        cdef list slots = self._slots
        cdef Py_ssize_t head = self._head
        cdef long long base = self.base
        cdef Py_ssize_t count, i
        if delivery_tag < base or delivery_tag - base >= len(slots) - head:
            return -1
        if not multiple:
            if delivery_tag != base:
                return -1
            count = 1
        else:
            count = <Py_ssize_t>(delivery_tag - base) + 1
        for i in range(head, head + count):
            if slots[i] is _DONE:
                return -1
        for i in range(head, head + count):
            tokens.append(slots[i])
            slots[i] = None
        self._advance(slots, head + count, base + count)
        return count

    cdef Py_ssize_t _advance(self, list slots, Py_ssize_t head, long long base) except -1:
        """Resolved up to ``head`` (seqno ``base``): past the slots settled out of order that
        follow (base stays the lowest unresolved), the list cut when it can be."""
        cdef Py_ssize_t size = len(slots)
        while head < size and slots[head] is _DONE:
            slots[head] = None
            head += 1
            base += 1
        self.base = base
        if head == size:
            del slots[:]
            head = 0
        elif head >= _CUT_AT and 2 * head >= size:
            del slots[:head]
            head = 0
        self._head = head
        return 0

    def match_return(self, returned):
        """Record a basic.return against the first unconfirmed mandatory publish it matches."""
        for seqno, (exchange, routing_key, body, properties) in self.mandatory.items():
            if (
                seqno not in self.returned
                and exchange == returned.exchange
                and routing_key == returned.routing_key
                and _same_body(body, returned.body)
                and (properties or _EMPTY_PROPERTIES) == returned.properties
            ):
                self.returned[seqno] = returned
                return
        self.unmatched_return = returned

    def take_returned(self, tag, seqnos):
        """The returns among the publishes ``seqnos`` an ack/nack of ``tag`` just settled."""
        returned = None
        if self.unmatched_return is not None:
            if tag in seqnos:
                returned = {tag: self.unmatched_return}
            self.unmatched_return = None
        if self.mandatory:
            mandatory = self.mandatory
            for seqno in seqnos:
                if mandatory.pop(seqno, None) is not None and seqno in self.returned:
                    if returned is None:
                        returned = {}
                    returned[seqno] = self.returned.pop(seqno)
        return returned

    def drain(self):
        """Everything unresolved (the channel or connection is gone)."""
        cdef list seqnos = []
        cdef list tokens = []
        cdef Py_ssize_t i
        cdef long long seqno = self.base
        for i in range(self._head, len(self._slots)):
            token = self._slots[i]
            if token is not _DONE:
                seqnos.append(seqno)
                tokens.append(token)
            seqno += 1
        self.base = seqno
        del self._slots[:]
        self._head = 0
        self.mandatory.clear()
        self.returned.clear()
        self.unmatched_return = None
        return seqnos, tokens
