"""Who watches a connection or a channel: its listeners (by kind) and, for a connection,
its metrics collector, in one object.

A connection holds ``_observer`` and a channel ``_listeners``, each None while nothing
watches: the hot paths (a publish, an ack, a read, a confirm) check that one attribute and
go on.  Registering the first listener (or passing ``metrics=``) creates the object;
removing the last one drops it again.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from .metrics import MetricsCollector

__all__ = ["Listeners", "Observer"]


class Listeners:
    """Listeners by kind ("close", "blocked", "confirm", ...), in the order they were added."""

    __slots__ = ("_by_kind",)

    def __init__(self) -> None:
        self._by_kind: dict[str, list[Callable[[Any], Any]]] = {}

    def add(self, kind: str, fn: Callable[[Any], Any]) -> None:
        self._by_kind.setdefault(kind, []).append(fn)

    def remove(self, kind: str, fn: Callable[[Any], Any]) -> None:
        """Remove one registration of ``fn``; ValueError naming it when it has none."""
        fns = self._by_kind.get(kind)
        if not fns or fn not in fns:
            raise ValueError(f"{fn!r} is not a registered listener (of {kind} events)")
        fns.remove(fn)
        if not fns:
            del self._by_kind[kind]

    def of(self, kind: str) -> tuple[Callable[[Any], Any], ...]:
        """The listeners of ``kind`` now (a copy: a listener may remove itself)."""
        fns = self._by_kind.get(kind)
        return tuple(fns) if fns else ()

    @property
    def empty(self) -> bool:
        return not self._by_kind


class Observer(Listeners):
    """A connection's listeners and its metrics collector (None: nothing is counted)."""

    __slots__ = ("metrics",)

    def __init__(self, metrics: Optional[MetricsCollector] = None) -> None:
        super().__init__()
        self.metrics = metrics

    @property
    def empty(self) -> bool:
        return self.metrics is None and not self._by_kind
