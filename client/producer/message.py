"""A send on its way (OutgoingMessage: what the hooks see) and the result of a confirmed one
(SendResult).
"""
from __future__ import annotations

import time
from typing import Any, NamedTuple, Optional

from amqwire.codec import BasicProperties

from ..message import replace_properties
from .policy import Attempt

#: The deadline of a send without a timeout.
FOREVER = float("inf")


class SendResult(NamedTuple):
    """A confirmed send: the broker it landed on (URL without password), how many attempts
    it took, its message id and the time from the call to the confirm (seconds)."""

    broker: str
    attempts: int
    message_id: Optional[str]
    latency: float


class OutgoingMessage:
    """A send on its way: what the hooks see.  ``body`` and ``properties`` are what goes on
    the wire (compressed, with the message id)."""

    __slots__ = (
        "exchange", "routing_key", "body", "_properties", "_id_to_add", "mandatory", "message_id", "oneway",
        "timeout", "deadline", "started", "attempts", "future", "size", "not_before", "stage",
        "epoch", "done", "broker", "solo", "span", "key", "delay_route",
    )

    def __init__(self, exchange: str, routing_key: str, body: bytes, properties: Optional[BasicProperties],
                 mandatory: bool, message_id: Optional[str], oneway: bool, timeout: Optional[float],
                 with_id: bool = False) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.body = body
        # with_id: message_id was made by the producer and is not in _properties yet
        # (_id_to_add).  The properties carrying it are made when asked for: a long-lived
        # object less per send (the garbage collector's work grows with every object alive
        # until the confirm).
        self._properties = properties
        self._id_to_add = message_id if with_id else None
        self.mandatory = mandatory
        self.message_id = message_id
        self.oneway = oneway
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = FOREVER if timeout is None else self.started + timeout
        self.attempts: Optional[list[Attempt]] = None
        self.future: Any = None
        self.size = len(body)
        self.not_before = 0.0
        self.stage = "the producer's queue"  # the wait it is in, for its timeout error
        self.epoch = 0
        self.done = False
        self.broker: Any = None
        self.solo = False  # sent alone, its confirm awaited before the next (see _batch_cb)
        self.span: Any = None  # its OpenTelemetry send span, with tracing on
        self.key: Optional[str] = None  # an ordered send's key: its broker is chosen by it
        self.delay_route: Any = None  # a delayed send's DelayRoute (delays.py): declared before it is written

    @property
    def properties(self) -> Optional[BasicProperties]:
        if self._id_to_add is not None:
            self._properties = self.wire_properties()
            self._id_to_add = None
        return self._properties

    @properties.setter
    def properties(self, value: Optional[BasicProperties]) -> None:
        self._properties = value
        self._id_to_add = None

    def wire_properties(self) -> Optional[BasicProperties]:
        """The properties to encode (``properties``, without keeping what it makes)."""
        message_id = self._id_to_add
        if message_id is None:
            return self._properties
        if self._properties is None:
            return BasicProperties(message_id=message_id)
        return replace_properties(self._properties, message_id=message_id)

    def __repr__(self) -> str:
        return (f"<OutgoingMessage {self.message_id} exchange={self.exchange!r} "
                f"routing_key={self.routing_key!r} body={self.size} bytes>")
