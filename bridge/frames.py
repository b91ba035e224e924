"""basic.publish frames for a forwarded message, built around its property bytes as received.

The method frame is encoded once per (exchange, routing key) and reused; the content
header frame carries the properties' bytes untouched but for the path entry (see
``path.py``); the body is split into frames of the destination's ``frame_max``.
"""
from __future__ import annotations

import struct
from typing import Any

from amqwire.codec import BasicPublish

_HEADER_HEAD = struct.Struct(">BHIHHQ")  # type 2, channel, size, class 60, weight 0, body size
_BODY_HEAD = struct.Struct(">BHI")
_FRAME_END = b"\xce"
_FRAME_OVERHEAD = 8  # type, channel, size, end octet


class PublishFrames:
    """Frames of basic.publish on one channel of the destination."""

    def __init__(self, channel_id: int, frame_max: int, *, mandatory: bool = False) -> None:
        self.channel_id = channel_id
        self.frame_max = frame_max
        self.mandatory = mandatory
        self._methods: dict[tuple[str, str], bytes] = {}

    def method(self, exchange: str, routing_key: str) -> bytes:
        key = (exchange, routing_key)
        frame = self._methods.get(key)
        if frame is None:
            frame = BasicPublish(0, exchange, routing_key, self.mandatory, False).encode(self.channel_id)
            if len(self._methods) >= 4096:
                self._methods.clear()
            self._methods[key] = frame
        return frame

    def append(self, out: list[Any], exchange: str, routing_key: str, properties: bytes, body: bytes) -> None:
        """Add one message's frames (method, header, body) to ``out``."""
        channel = self.channel_id
        size = len(body)
        out.append(self.method(exchange, routing_key))
        out.append(_HEADER_HEAD.pack(2, channel, 12 + len(properties), 60, 0, size))
        out.append(properties)
        out.append(_FRAME_END)
        if not size:
            return
        chunk = self.frame_max - _FRAME_OVERHEAD if self.frame_max else size
        if size <= chunk:
            out.append(_BODY_HEAD.pack(3, channel, size))
            out.append(body)
            out.append(_FRAME_END)
            return
        view = memoryview(body)
        for start in range(0, size, chunk):
            piece = view[start:start + chunk]
            out.append(_BODY_HEAD.pack(3, channel, len(piece)))
            out.append(piece)
            out.append(_FRAME_END)
