"""Publisher-confirm sequence numbers of one channel, compiled: each confirmed publish adds a
slot and each ack frame resolves a run of them, on the hot path of confirms.

Seqnos are consecutive from 1.  The unresolved ones live in a list from ``_head`` on
(``slots[_head]`` is ``base``, the lowest unresolved), so an in-order ack, single or
multiple, costs O(1) per publish, and an out-of-order single ack marks its slot done.  A
resolved slot lets go of its token at once; the list is cut when everything in it is
resolved, or when its resolved head outgrows the rest.
"""
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
        """Seqnos and tokens settled by an ack/nack; unknown tags settle nothing."""
        cdef list slots = self._slots
        cdef list seqnos = []
        cdef list tokens = []
        cdef Py_ssize_t size = len(slots)
        cdef Py_ssize_t head = self._head
        cdef Py_ssize_t index
        cdef long long base = self.base
        cdef object token
        if multiple:
            while head < size and base <= delivery_tag:
                token = slots[head]
                if token is not _DONE:
                    seqnos.append(base)
                    tokens.append(token)
                slots[head] = None
                head += 1
                base += 1
        else:
            if delivery_tag < base or delivery_tag - base >= size - head:
                return seqnos, tokens
            index = head + <Py_ssize_t>(delivery_tag - base)
            token = slots[index]
            if token is _DONE:
                return seqnos, tokens
            seqnos.append(delivery_tag)
            tokens.append(token)
            if index != head:
                slots[index] = _DONE
                return seqnos, tokens
            slots[head] = None
            head += 1
            base += 1
        while head < size and slots[head] is _DONE:  # settled out of order before: base stays the lowest unresolved
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
        return seqnos, tokens

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

    def take_returned(self, tag, list seqnos):
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
