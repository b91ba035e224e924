"""The Producer's compression policy: which method, from which body size; the encodings
themselves are the client's (``client/encoding.py``, which Message.decoded_body undoes).
"""
from __future__ import annotations

from typing import Callable, Optional

from amqwire.codec import BasicProperties

from ..encoding import encoder, zstd_available
from ..message import replace_properties


class Compressor:
    """Compresses bodies of at least ``threshold`` bytes: ``zstd`` (the ``zstd`` extra, or
    Python 3.14's compression.zstd), ``zlib`` (content_encoding ``deflate``), or ``auto``
    (zstd when available, else zlib)."""

    def __init__(self, method: Optional[str], threshold: int, level: Optional[int] = None) -> None:
        if method not in (None, "auto", "zstd", "zlib"):
            raise ValueError(f"compression must be 'auto', 'zstd', 'zlib' or None, not {method!r}")
        if threshold < 0:
            raise ValueError(f"compress_threshold must be >= 0, not {threshold}")
        self.threshold = threshold
        self.encoding: Optional[str] = None
        self._compress: Optional[Callable[[bytes], bytes]] = None
        zstd = zstd_available() if method in ("auto", "zstd") else False
        if method == "zstd" and not zstd:
            raise ValueError("compression='zstd' needs the zstandard package: pip install amqwire[zstd]")
        if zstd:
            self.encoding = "zstd"
        elif method is not None:
            self.encoding = "deflate"
        if self.encoding is not None:
            self._compress = encoder(self.encoding, level)

    def apply(self, body: bytes, properties: Optional[BasicProperties]) -> tuple[bytes, Optional[BasicProperties]]:
        if self._compress is None or len(body) < self.threshold:
            return body, properties
        if properties is not None and properties.content_encoding:
            return body, properties  # the caller encoded it already: left alone
        packed = self._compress(body)
        if len(packed) >= len(body):
            return body, properties
        if properties is None:
            return packed, BasicProperties(content_encoding=self.encoding)
        return packed, replace_properties(properties, content_encoding=self.encoding)
