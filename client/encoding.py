"""Content encodings: compressing and decompressing a body by its ``content_encoding``.

A client-level role: ``Message.decoded_body()`` undoes what a publisher compressed, and the
Producer's compression policy (``producer/compression.py``: which method, above which size)
compresses with the functions made here.  ``zstd`` comes from Python 3.14's
compression.zstd or the ``zstandard`` package (the ``zstd`` extra); ``deflate`` and ``gzip``
from zlib.
"""
from __future__ import annotations

import threading
import zlib
from typing import Any, Callable, Optional


def zstd_module() -> Any:
    """compression.zstd (Python 3.14), else the zstandard package, else None."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
        return zstd
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found, import-untyped, unused-ignore]
        return zstandard
    except ImportError:
        return None


def zstd_available() -> bool:
    return zstd_module() is not None


def encoder(content_encoding: str, level: Optional[int] = None) -> Callable[[bytes], bytes]:
    """A function that compresses a body for ``content_encoding`` ``zstd`` (level 3 unless
    given) or ``deflate`` (zlib, level 6 unless given)."""
    if content_encoding == "zstd":
        zstd = zstd_module()
        if zstd is None:
            raise ValueError("zstd compression needs the zstandard package: pip install amqwire[zstd]")
        zlevel = 3 if level is None else level
        if hasattr(zstd, "ZstdCompressor") and hasattr(zstd.ZstdCompressor, "copy_stream"):  # zstandard
            local = threading.local()

            def compress_zstd(data: bytes) -> bytes:
                compressor = getattr(local, "c", None)
                if compressor is None:
                    compressor = local.c = zstd.ZstdCompressor(level=zlevel)
                return bytes(compressor.compress(data))
            return compress_zstd
        return lambda data: bytes(zstd.compress(data, level=zlevel))
    if content_encoding == "deflate":
        zl = 6 if level is None else level
        return lambda data: zlib.compress(data, zl)
    raise ValueError(f"no encoder for content_encoding {content_encoding!r}: 'zstd' or 'deflate'")


def decode_body(body: bytes, content_encoding: Optional[str]) -> bytes:
    """The body with a compression named by ``content_encoding`` undone (``zstd``,
    ``deflate``, ``gzip``); any other encoding (or none) leaves it as it is."""
    if not content_encoding:
        return body
    encoding = content_encoding.strip().lower()
    if encoding == "deflate":
        return zlib.decompress(body)
    if encoding == "gzip":
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "zstd":
        zstd = zstd_module()
        if zstd is None:
            raise ValueError("the body is zstd-compressed: decoding it needs the zstandard package "
                             "(pip install amqwire[zstd])")
        if hasattr(zstd, "ZstdDecompressor") and hasattr(zstd.ZstdDecompressor, "copy_stream"):
            return bytes(zstd.ZstdDecompressor().decompressobj().decompress(bytes(body)))
        return bytes(zstd.decompress(bytes(body)))
    return body
