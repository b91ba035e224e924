"""A message read from a stream: its offset, its chunk's timestamp, and its AMQP 1.0 sections.

The broker stores each message as AMQP 1.0 bytes (a 0-9-1 publish is converted on the way
in).  ``StreamMessage`` keeps those bytes and decodes them the first time a section is
read (``amqwire.codec.stream.amqp10.decode_message``), so a consumer that only counts or
forwards messages (``.data``) never pays for decoding.
"""
from __future__ import annotations

import datetime
from typing import Any, Optional

from amqwire.codec.stream.amqp10 import decode_message

__all__ = ["StreamMessage"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class StreamMessage:
    """One message of a stream.  ``offset``: its offset; ``chunk_timestamp``: when the broker
    wrote its chunk (an aware UTC datetime; ``chunk_timestamp_ms`` the milliseconds since
    the epoch); ``data``: the AMQP 1.0 bytes as stored.  ``body``, ``properties``,
    ``application_properties``, ``message_annotations``, ``header``: decoded on first use
    (``body`` is bytes for a message of one data section, as every message a producer of
    this client sends without a body wrapper)."""

    __slots__ = ("offset", "chunk_timestamp_ms", "data", "_decoded")

    def __init__(self, offset: int, chunk_timestamp_ms: int, data: Any) -> None:
        self.offset = offset
        self.chunk_timestamp_ms = chunk_timestamp_ms
        self.data = data
        self._decoded: Any = None

    @property
    def chunk_timestamp(self) -> datetime.datetime:
        return _EPOCH + datetime.timedelta(milliseconds=self.chunk_timestamp_ms)

    @property
    def message(self) -> Any:
        """The decoded ``amqwire.codec.stream.amqp10.Message``."""
        decoded = self._decoded
        if decoded is None:
            decoded = self._decoded = decode_message(self.data)
        return decoded

    @property
    def body(self) -> Any:
        return self.message.body

    @property
    def properties(self) -> Any:
        """The AMQP 1.0 properties section (``amqp10.Properties``), or None."""
        return self.message.properties

    @property
    def application_properties(self) -> Optional[dict[Any, Any]]:
        result: Optional[dict[Any, Any]] = self.message.application_properties
        return result

    @property
    def message_annotations(self) -> Optional[dict[Any, Any]]:
        result: Optional[dict[Any, Any]] = self.message.message_annotations
        return result

    @property
    def header(self) -> Any:
        return self.message.header

    def __repr__(self) -> str:
        return f"<StreamMessage offset={self.offset} {len(self.data)} bytes>"
