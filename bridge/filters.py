"""Include / exclude filters on routing keys, in AMQP topic syntax.

A pattern is words separated by dots; ``*`` matches exactly one word and ``#`` zero or
more, as a topic exchange binds (``orders.*.eu``, ``audit.#``, ``#``).  A key crosses the
bridge when it matches one of the include patterns (all keys, when there are none) and
none of the exclude patterns.
"""
from __future__ import annotations

from typing import Iterable, Sequence


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Whether ``routing_key`` matches the topic ``pattern``."""
    return _match(pattern.split("."), 0, routing_key.split("."), 0)


def _match(pat: Sequence[str], i: int, words: Sequence[str], j: int) -> bool:
    while i < len(pat):
        p = pat[i]
        if p == "#":
            while i + 1 < len(pat) and pat[i + 1] == "#":
                i += 1
            if i + 1 == len(pat):
                return True
            return any(_match(pat, i + 1, words, k) for k in range(j, len(words) + 1))
        if j == len(words) or (p != "*" and p != words[j]):
            return False
        i += 1
        j += 1
    return j == len(words)


class TopicFilter:
    """``allows(routing_key)``: the include / exclude verdict, cached per key."""

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> None:
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        for pattern in (*self.include, *self.exclude):
            if not isinstance(pattern, str):
                raise TypeError(f"a topic pattern must be a str, not {type(pattern).__name__}: {pattern!r}")
        self.active = bool(self.include or self.exclude)
        self._cache: dict[str, bool] = {}

    def allows(self, routing_key: str) -> bool:
        verdict = self._cache.get(routing_key)
        if verdict is None:
            verdict = (not self.include or any(topic_matches(p, routing_key) for p in self.include)) and not any(
                topic_matches(p, routing_key) for p in self.exclude
            )
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[routing_key] = verdict
        return verdict

    def __repr__(self) -> str:
        return f"TopicFilter(include={list(self.include)!r}, exclude={list(self.exclude)!r})"
