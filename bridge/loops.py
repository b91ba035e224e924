"""Whether a bridge's destination routes back into a queue it consumes: refused at start.

Whether source and destination are the same broker (or nodes of one cluster, which
share their queues) and vhost is probed by ``runner.py``: a queue declared exclusive
through the source connection is locked (405) to a passive declare through the
destination connection there, and missing (404) anywhere else -- whatever the host
names, aliases or load balancers in between.  When the probe cannot run (the source user
may not declare a queue), :func:`same_broker` judges from equal vhosts and either the
same ``cluster_name`` or a common resolved address with the same port.  On the same
broker, a direction loops when it publishes:

- to the default exchange with the source queue's name as routing key (a fixed one, or
  each message's own with ``keep_routing_key``: a message that reached the queue through
  the default exchange carries its name);
- to an exchange with a binding to the source queue that the routing key matches (direct:
  equal, topic: the pattern, fanout and headers: any), when the bindings are known (the
  management API answered; see ``runner.py``), following exchange-to-exchange bindings;
- ``duplex`` onto the same broker and vhost: the reverse direction consumes and
  publishes on the same broker as the forward one.

Not detected: alternate exchanges, policies and plugins that re-route, a binding whose
headers arguments would not match, and exchange bindings when the management API is not
reachable with the source URL's credentials.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Optional, Sequence

from .filters import topic_matches


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """What identifies a broker for the loop check."""

    addresses: frozenset[tuple[str, int]]  # resolved (address, port) of the URL's host
    vhost: str
    cluster_name: Optional[str]


def same_broker(a: Endpoint, b: Endpoint) -> bool:
    if a.vhost != b.vhost:
        return False
    if a.cluster_name and b.cluster_name and a.cluster_name == b.cluster_name:
        return True
    return bool(a.addresses & b.addresses)


@dataclasses.dataclass(frozen=True)
class Binding:
    """One binding of an exchange (from the management API's ``bindings/source``)."""

    destination: str
    destination_type: str  # "queue" or "exchange"
    routing_key: str


def _routes(exchange_type: str, binding_key: str, routing_key: Optional[str]) -> bool:
    if exchange_type in ("fanout", "headers"):
        return True
    if routing_key is None:  # each message's own routing key: any binding may match one
        return True
    if exchange_type == "topic":
        return topic_matches(binding_key, routing_key)
    return binding_key == routing_key


def find_loop(
    *,
    queue: str,
    exchange: str,
    routing_key: Optional[str],
    exchange_types: Mapping[str, str] = {},
    bindings: Optional[Mapping[str, Sequence[Binding]]] = None,
) -> Optional[str]:
    """How publishing to ``exchange`` with ``routing_key`` (None: each message's own)
    reaches ``queue`` on the same broker, in words; None when it does not (as far as
    known).  ``bindings``: exchange -> its bindings, for the exchanges reached."""
    if not exchange:
        if routing_key is None:
            return f"the default exchange routes each message's own routing key, {queue!r} for what came through it, " \
                   f"back into queue {queue!r}"
        if routing_key == queue:
            return f"the default exchange routes routing key {routing_key!r} back into queue {queue!r}"
        return None
    if bindings is None:
        return None
    seen: set[str] = set()
    route: list[str] = []

    def walk(name: str) -> bool:
        if name in seen:
            return False
        seen.add(name)
        kind = exchange_types.get(name, "direct")
        for binding in bindings.get(name, ()):
            if not _routes(kind, binding.routing_key, routing_key):
                continue
            if binding.destination_type == "queue" and binding.destination == queue:
                route.append(f"exchange {name!r} ({kind}) is bound to queue {queue!r} with key {binding.routing_key!r}")
                return True
            if binding.destination_type == "exchange" and walk(binding.destination):
                route.insert(0, f"exchange {name!r} is bound to exchange {binding.destination!r}")
                return True
        return False

    if walk(exchange):
        return ", ".join(route) + f": routing key {routing_key!r} comes back" if routing_key is not None else \
            ", ".join(route) + ": messages come back"
    return None


def describe(endpoint: Endpoint, hosts: Iterable[str] = ()) -> str:
    return f"{'/'.join(hosts) or endpoint.cluster_name or '?'} vhost {endpoint.vhost!r}"
