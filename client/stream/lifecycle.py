"""Where each thing of the stream client is: one state from an explicit set, one table each.

- A **link** (one socket to one node) and the **connection** a user holds (which outlives
  the locator links its recovery replaces) use the 0-9-1 client's connection lifecycle
  (``amqwire.client.lifecycle``: ``ConnectionStatus``, ``TRANSITIONS``, ``Lifecycle``):
  the same states, the same events, the same table.  A link never recovers by itself
  (it is made with no recovery: a loss takes it to FAILED); the connection does.
- A **producer** and a **consumer** have their tables here, run by the same ``Machine``.

Only ``fire`` changes a state, by looking up (state, event) in the table; what a call may
do is read from the state, never from another flag.  An event the table does not allow is
a bug of the client: ``InvalidStateError`` names both.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..lifecycle import Machine, Named

__all__ = [
    "ProducerPhase", "ProducerSignal", "PRODUCER_PHASES", "PRODUCER_SENDING_PHASES",
    "ConsumerPhase", "ConsumerSignal", "CONSUMER_PHASES", "CONSUMER_LIVE_PHASES",
    "new_producer_machine", "new_consumer_machine",
]


class ProducerPhase(Named):
    DECLARING = "declaring"  # DeclarePublisher sent (the first time, or after a relocation)
    OPEN = "open"            # declared on the stream's leader: sends go out
    DOWN = "down"            # its link was lost or the stream moved: sends wait for a relocation
    CLOSING = "closing"      # close(): flushing what was sent, then DeletePublisher
    CLOSED = "closed"        # closed by the user, for good
    FAILED = "failed"        # refused, the stream deleted, or lost with recovery off: for good


class ProducerSignal(Named):
    DECLARED = "publisher declared"
    LOST = "link lost or stream moved, recoverable"
    RELOCATE = "declaring again on the leader"
    FAIL = "failed for good"
    CLOSE = "close()"
    CLOSED = "publisher deleted"


P, PE = ProducerPhase, ProducerSignal
#: Sends are written now (in the others they wait, or fail in the final ones).
PRODUCER_SENDING_PHASES = frozenset({P.OPEN, P.CLOSING})
PRODUCER_PHASES: Final[Mapping[tuple[ProducerPhase, ProducerSignal], ProducerPhase]] = {
    (P.DECLARING, PE.DECLARED): P.OPEN,
    (P.DECLARING, PE.LOST): P.DOWN,
    (P.DECLARING, PE.FAIL): P.FAILED,
    (P.DECLARING, PE.CLOSE): P.CLOSED,  # closed while its relocation runs: nothing left on the broker

    (P.OPEN, PE.LOST): P.DOWN,
    (P.OPEN, PE.FAIL): P.FAILED,
    (P.OPEN, PE.CLOSE): P.CLOSING,

    (P.DOWN, PE.LOST): P.DOWN,  # a relocation attempt failed
    (P.DOWN, PE.RELOCATE): P.DECLARING,
    (P.DOWN, PE.FAIL): P.FAILED,
    (P.DOWN, PE.CLOSE): P.CLOSED,

    (P.CLOSING, PE.LOST): P.CLOSED,  # lost while closing: what was unconfirmed has failed
    (P.CLOSING, PE.FAIL): P.CLOSED,
    (P.CLOSING, PE.CLOSE): P.CLOSING,
    (P.CLOSING, PE.CLOSED): P.CLOSED,

    (P.CLOSED, PE.DECLARED): P.CLOSED,
    (P.CLOSED, PE.LOST): P.CLOSED,  # late news of a producer that ended changes nothing
    (P.CLOSED, PE.FAIL): P.CLOSED,
    (P.CLOSED, PE.CLOSE): P.CLOSED,
    (P.CLOSED, PE.CLOSED): P.CLOSED,

    (P.FAILED, PE.DECLARED): P.FAILED,
    (P.FAILED, PE.LOST): P.FAILED,  # late news, as above
    (P.FAILED, PE.FAIL): P.FAILED,
    (P.FAILED, PE.CLOSE): P.CLOSED,
    (P.FAILED, PE.CLOSED): P.FAILED,
}


class ConsumerPhase(Named):
    SUBSCRIBING = "subscribing"  # Subscribe sent (the first time, or after a relocation)
    ACTIVE = "active"            # subscribed: chunks come as credit allows
    DOWN = "down"                # its link was lost or the stream moved: resubscribed after the last offset received
    ENDED = "ended"              # reached its end offset, unsubscribed: the iterator stops
    CLOSING = "closing"          # close(): Unsubscribe sent
    CLOSED = "closed"            # closed by the user, for good
    FAILED = "failed"            # refused, the stream deleted, or lost with recovery off: for good


class ConsumerSignal(Named):
    SUBSCRIBED = "subscribed"
    LOST = "link lost or stream moved, recoverable"
    RESUBSCRIBE = "subscribing again"
    END = "end offset reached"
    FAIL = "failed for good"
    CLOSE = "close()"
    CLOSED = "unsubscribed"


C, CE = ConsumerPhase, ConsumerSignal
#: The iterator waits for more in these (in the others it ends, or raises why).
CONSUMER_LIVE_PHASES = frozenset({C.SUBSCRIBING, C.ACTIVE, C.DOWN})
CONSUMER_PHASES: Final[Mapping[tuple[ConsumerPhase, ConsumerSignal], ConsumerPhase]] = {
    (C.SUBSCRIBING, CE.SUBSCRIBED): C.ACTIVE,
    (C.SUBSCRIBING, CE.LOST): C.DOWN,
    (C.SUBSCRIBING, CE.END): C.ENDED,  # the end was reached before the resubscription: nothing more to read
    (C.SUBSCRIBING, CE.FAIL): C.FAILED,
    (C.SUBSCRIBING, CE.CLOSE): C.CLOSED,

    (C.ACTIVE, CE.LOST): C.DOWN,
    (C.ACTIVE, CE.END): C.ENDED,
    (C.ACTIVE, CE.FAIL): C.FAILED,
    (C.ACTIVE, CE.CLOSE): C.CLOSING,

    (C.DOWN, CE.LOST): C.DOWN,
    (C.DOWN, CE.RESUBSCRIBE): C.SUBSCRIBING,
    (C.DOWN, CE.END): C.ENDED,
    (C.DOWN, CE.FAIL): C.FAILED,
    (C.DOWN, CE.CLOSE): C.CLOSED,

    (C.ENDED, CE.SUBSCRIBED): C.ENDED,
    (C.ENDED, CE.LOST): C.ENDED,  # late news of a consumer that ended changes nothing
    (C.ENDED, CE.END): C.ENDED,
    (C.ENDED, CE.FAIL): C.ENDED,
    (C.ENDED, CE.CLOSE): C.CLOSED,
    (C.ENDED, CE.CLOSED): C.ENDED,

    (C.CLOSING, CE.LOST): C.CLOSED,
    (C.CLOSING, CE.END): C.CLOSING,
    (C.CLOSING, CE.FAIL): C.CLOSED,
    (C.CLOSING, CE.CLOSE): C.CLOSING,
    (C.CLOSING, CE.CLOSED): C.CLOSED,

    (C.CLOSED, CE.SUBSCRIBED): C.CLOSED,
    (C.CLOSED, CE.LOST): C.CLOSED,  # late news, as above
    (C.CLOSED, CE.END): C.CLOSED,
    (C.CLOSED, CE.FAIL): C.CLOSED,
    (C.CLOSED, CE.CLOSE): C.CLOSED,
    (C.CLOSED, CE.CLOSED): C.CLOSED,

    (C.FAILED, CE.SUBSCRIBED): C.FAILED,
    (C.FAILED, CE.LOST): C.FAILED,  # late news, as above
    (C.FAILED, CE.END): C.FAILED,
    (C.FAILED, CE.FAIL): C.FAILED,
    (C.FAILED, CE.CLOSE): C.CLOSED,
    (C.FAILED, CE.CLOSED): C.FAILED,
}


def new_producer_machine(name: str) -> Machine:
    """A producer's state: DECLARING, with its table; ``reason`` is why it FAILED."""
    return Machine(PRODUCER_PHASES, P.DECLARING, P.FAILED, name)


def new_consumer_machine(name: str) -> Machine:
    """A consumer's state: SUBSCRIBING, with its table; ``reason`` is why it FAILED."""
    return Machine(CONSUMER_PHASES, C.SUBSCRIBING, C.FAILED, name)
