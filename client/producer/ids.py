"""Message ids: unique and time-ordered (the UUIDv7 layout)."""
from __future__ import annotations

import itertools
import os
import time


_time_ns = time.time_ns


_HEX3 = tuple(f"{i:03x}" for i in range(4096))


class MessageIds:
    """Unique, time-ordered message ids in the UUIDv7 layout: 48 bits of Unix time in ms,
    then (where v7 has random bits) 30 random bits fixed per generator and a 44-bit counter,
    so ids of one producer sort in the order they were made and never repeat, and ids of
    different producers differ."""

    __slots__ = ("_rand_a", "_node_b", "_node_low", "_counter", "_cached")

    def __init__(self) -> None:
        node = int.from_bytes(os.urandom(4), "big") >> 2
        self._rand_a = (0x7 << 12) | ((node >> 18) & 0xFFF)
        # the variant bits, 18 node bits and the counter's top 12 bits: the 4th group
        self._node_b = (0x2 << 14) | ((node & 0x3FFFF) >> 4)
        self._node_low = node & 0xF  # the node's last 4 bits start the 5th group
        # next() on a count is atomic under the GIL: ids stay unique across threads
        self._counter = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._cached: tuple[int, str] = (-1, "")

    def next(self) -> str:
        n = next(self._counter) & 0xFFFFFFFFFFF
        key = (_time_ns() // 1_000_000) << 32 | n >> 12
        # Everything but the counter's last 3 hex digits changes at most once a millisecond
        # or every 4,096 ids: that prefix is made then, and the id is the prefix and a
        # digit string from a table.  One (key, prefix) pair, read once: a thread that
        # races another's update still gets a pair that belongs together.
        cached = self._cached
        if cached[0] != key:
            h = f"{(key >> 32) << 16 | self._rand_a:016x}"
            # rand_b (62 bits) = node (18 bits: 14 in the 4th group, 4 in the 5th) + counter (44 bits)
            cached = (key, f"{h[:8]}-{h[8:12]}-{h[12:16]}-{self._node_b:04x}-{self._node_low:x}{n >> 12:08x}")
            self._cached = cached
        return cached[1] + _HEX3[n & 0xFFF]
