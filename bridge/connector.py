"""Many queues, one process: :class:`Connector`, as ActiveMQ's network connector runs
many bridges over one pair of connections.

A connector forwards every source queue chosen by one of its :class:`BridgeSpec`s (by
explicit names, or by ``fnmatch`` globs on the source's queue names with exclusions),
each with the spec's destination and ack mode, as one :class:`Bridge` per queue on one
shared pair of connections (a channel per queue on each).  Queue names given without a
glob character (``*``, ``?``, ``[``) are taken as they are; patterns are matched
against the queues the source's management API lists at start (``management_port``,
with the source URL's credentials; exclusive queues are left out, as no other
connection may consume them).  The list is read again every ``rescan_interval`` seconds
(30; None: never) and queues created since are forwarded too (one that cannot start is
logged and tried again at the next rescan).  A queue
chosen by several specs is forwarded by the first.

The configuration file (``--config``) is TOML: one ``[[bridge]]`` table per spec, see
:func:`load_config` and docs/bridge.md.
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import fnmatch
import logging
import sys
import time
import urllib.parse
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from amqwire.client.errors import AMQPError, NotFound
from amqwire.client.url import parse_url

from .errors import BadConfiguration, BridgeError, MissingResource
from .forwarder import AckMode, Refused
from .runner import DEFAULT_RECOVERY, OWN_QUEUES, Bridge, _close_quietly, _connect, _get_json, subscription_queue
from .stats import BridgeStats

log = logging.getLogger("amqwire.bridge")

_GLOB = frozenset("*?[")
# The [[bridge]] keys and the Bridge arguments they set.
_OPTIONS = {
    "dest_exchange": str,
    "dest_routing_key": str,
    "keep_routing_key": bool,
    "ack_mode": str,
    "prefetch": int,
    "demand": bool,
    "max_hops": int,
    "include_keys": list,
    "exclude_keys": list,
    "on_refused": str,
    "max_attempts": int,
    "dead_letter_exchange": str,
    "src_exchange": str,
    "binding_key": str,
    "name": str,
    "delete_subscription": bool,
    "probe": bool,
}
_KIND_NAMES = {str: "a string", bool: "true or false", int: "an integer", list: "a list of strings"}
_KEYS = {"include_keys": "include", "exclude_keys": "exclude", "on_refused": "refused", "binding_key": "src_binding_key"}


@dataclasses.dataclass(frozen=True)
class BridgeSpec:
    """Which source queues to forward (``include``: names or globs; ``exclude``: globs
    taken out) and how: ``options`` are :class:`Bridge` keyword arguments."""

    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    name: str = "bridge"

    @property
    def exchange(self) -> Optional[str]:
        """The source exchange of a spec that forwards one (through the bridge's own queue)."""
        value = self.options.get("src_exchange")
        return value if isinstance(value, str) else None

    @property
    def subscription(self) -> str:
        """An exchange spec's queue (the bridge's own)."""
        return subscription_queue(self.exchange or "", self.options.get("src_binding_key", "#"),
                                  self.options.get("name"))

    @property
    def needs_listing(self) -> bool:
        return any(_GLOB & set(pattern) for pattern in self.include)

    def chooses(self, queue: str) -> bool:
        return (any(fnmatch.fnmatchcase(queue, p) for p in self.include)
                and not any(fnmatch.fnmatchcase(queue, p) for p in self.exclude))


def _read_toml(path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            import tomli as tomllib
        except ImportError:
            raise BadConfiguration("--config: reading TOML needs Python 3.11 or the tomli package "
                                   "(pip install tomli)") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise BadConfiguration(f"--config: cannot read {path!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadConfiguration(f"--config: {path!r} is not TOML: {exc}") from None


def load_config(path: str, defaults: Optional[Mapping[str, Any]] = None) -> tuple[list[BridgeSpec], dict[str, Any]]:
    """The specs of a TOML file's ``[[bridge]]`` tables (``defaults``: Bridge arguments
    for what a table leaves out), and its top-level settings (``management_port``)."""
    document = _read_toml(path)
    return specs_from(document, defaults or {}, f"--config {path}")


def specs_from(document: Mapping[str, Any], defaults: Mapping[str, Any],
               where: str = "--config") -> tuple[list[BridgeSpec], dict[str, Any]]:
    settings: dict[str, Any] = {}
    for key, value in document.items():
        if key == "bridge":
            continue
        if key == "management_port":
            if not isinstance(value, int) or not 0 <= value <= 65535:
                raise BadConfiguration(f"{where}: management_port must be a port number (0: none), not {value!r}")
            settings[key] = value
        else:
            raise BadConfiguration(f"{where}: unknown setting {key!r} (known: management_port, [[bridge]])")
    tables = document.get("bridge")
    if not isinstance(tables, list) or not tables:
        raise BadConfiguration(f"{where}: no [[bridge]] table")
    specs = []
    for number, table in enumerate(tables, 1):
        name = f"[[bridge]] {number}"
        if not isinstance(table, dict):
            raise BadConfiguration(f"{where}: {name} must be a table")
        if "src_exchange" in table:  # an exchange, through a queue of the bridge's own
            if "include" in table or "exclude" in table:
                raise BadConfiguration(f"{where}: {name}: src_exchange or include/exclude: a table forwards an "
                                       "exchange or queues, not both")
            include: tuple[str, ...] = ()
            exclude: tuple[str, ...] = ()
        else:
            include = _names(table.get("include"), f"{where}: {name}: include", required=True)
            exclude = _names(table.get("exclude", []), f"{where}: {name}: exclude", required=False)
        options = dict(defaults)
        for key, value in table.items():
            if key in ("include", "exclude"):
                continue
            kind = _OPTIONS.get(key)
            if kind is None:
                raise BadConfiguration(f"{where}: {name}: unknown key {key!r} (known: include, exclude, "
                                       f"{', '.join(_OPTIONS)})")
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise BadConfiguration(f"{where}: {name}: {key} must be {_KIND_NAMES[kind]}, not {value!r}")
            if key == "ack_mode" and value not in {m.value for m in AckMode}:
                raise BadConfiguration(f"{where}: {name}: ack_mode must be one of "
                                       f"{', '.join(m.value for m in AckMode)}, not {value!r}")
            if key == "on_refused" and value not in {r.value for r in Refused}:
                raise BadConfiguration(f"{where}: {name}: on_refused must be one of "
                                       f"{', '.join(r.value for r in Refused)}, not {value!r}")
            options[_KEYS.get(key, key)] = value
        if "dest_routing_key" in table and table.get("keep_routing_key"):
            raise BadConfiguration(f"{where}: {name}: dest_routing_key and keep_routing_key: give one")
        specs.append(BridgeSpec(include, exclude, options, name))
    return specs, settings


def _names(value: Any, what: str, *, required: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value) or (required and not value):
        raise BadConfiguration(f"{what} must be a {'non-empty ' if required else ''}list of queue names or globs, "
                               f"not {value!r}")
    return tuple(value)


def list_queues(params: Any, port: int) -> list[str]:
    """The non-exclusive queues of the connection's vhost, from the management API on its
    host (its credentials)."""
    scheme = "https" if params.ssl else "http"
    auth = base64.b64encode(f"{params.username}:{params.password}".encode()).decode()
    vhost = urllib.parse.quote(params.vhost, safe="")
    url = f"{scheme}://{params.host}:{port}/api/queues/{vhost}?columns=name,exclusive"
    return sorted(str(q["name"]) for q in _get_json(url, auth)
                  if not q.get("exclusive") and not str(q["name"]).startswith(OWN_QUEUES))


def choose(specs: Sequence[BridgeSpec], queues: Iterable[str]) -> list[tuple[str, BridgeSpec]]:
    """Each queue with the first spec that chooses it, in the order of ``queues``."""
    chosen = []
    for queue in queues:
        spec = next((s for s in specs if s.chooses(queue)), None)
        if spec is not None:
            chosen.append((queue, spec))
    return chosen


class Connector:
    """Forward many source queues over one pair of connections: one :class:`Bridge` per
    queue (see the module's docstring).  ``specs``: a :class:`BridgeSpec` list, or
    queue names (each forwarded with ``options``).  ``stats_interval``: log each queue's
    statistics and the total every that many seconds (and call ``on_stats(connector)``).

        async with Connector(src, dest, ["orders", "invoices"], ack_mode="auto") as connector:
            await connector.wait()
    """

    def __init__(
        self,
        src: str,
        dest: str,
        specs: Sequence[Any],
        *,
        management_port: Optional[int] = 15672,
        stats_interval: Optional[float] = None,
        on_stats: Optional[Callable[["Connector"], Any]] = None,
        connection_timeout: float = 10.0,
        heartbeat: Optional[int] = None,
        rescan_interval: Optional[float] = 30.0,
        **options: Any,
    ) -> None:
        if not specs:
            raise ValueError("specs must name at least one queue")
        self.specs = [s if isinstance(s, BridgeSpec) else BridgeSpec((s,), (), options) for s in specs]
        for name, url in (("src", src), ("dest", dest)):
            try:
                parse_url(url)
            except ValueError as exc:
                raise BadConfiguration(f"bad {name} URL: {exc}") from None
        for spec in self.specs:  # each spec's options checked now, before anything connects
            try:
                Bridge(src, spec.include[0] if spec.exchange is None else None, dest, **spec.options)
            except TypeError as exc:
                raise BadConfiguration(f"{spec.name}: {exc}") from None
            except ValueError as exc:
                raise BadConfiguration(f"{spec.name}: {exc}") from None
        if stats_interval is not None and not stats_interval > 0:
            raise ValueError(f"stats_interval must be a positive number of seconds, not {stats_interval!r}")
        if rescan_interval is not None and not rescan_interval > 0:
            raise ValueError(f"rescan_interval must be a positive number of seconds, not {rescan_interval!r}")
        self.rescan_interval = rescan_interval
        self.src, self.dest = src, dest
        self.management_port = management_port
        self.stats_interval = stats_interval
        self.on_stats = on_stats
        self.connection_timeout = connection_timeout
        self.heartbeat = heartbeat
        self.bridges: dict[str, Bridge] = {}
        self._src_conn: Any = None
        self._dest_conn: Any = None
        self._watch: Optional["asyncio.Task[None]"] = None
        self._rescan: Optional["asyncio.Task[None]"] = None
        self._waits: list["asyncio.Future[None]"] = []
        self._finished: Optional[asyncio.Event] = None
        self._failure: Optional[BaseException] = None
        self._retired = BridgeStats()  # the counters of bridges whose queue was deleted
        self._stopped = False

    async def _queues(self) -> list[str]:
        named = [p for spec in self.specs for p in spec.include if not _GLOB & set(p)]
        if not any(spec.include for spec in self.specs):
            return []
        if not any(spec.needs_listing for spec in self.specs):
            return list(dict.fromkeys(named))
        if self.management_port is None:
            raise BadConfiguration("queue name patterns need the source's management API: give its port "
                                   "(--management-port), or name the queues")
        try:
            listed = await asyncio.to_thread(list_queues, self._src_conn.params, self.management_port)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BadConfiguration(f"queue name patterns: the source's management API (port "
                                   f"{self.management_port}) did not list the queues ({exc}); name them "
                                   "instead") from None
        return list(dict.fromkeys([*named, *listed]))

    async def start(self) -> "Connector":
        """Connect, choose the queues, start a bridge on each (all at once); a
        :class:`BridgeError` (and nothing left open) if any cannot start: the first
        failure in the order of the queues."""
        self._finished = asyncio.Event()
        try:
            self._src_conn = await _connect(self.src, "source", DEFAULT_RECOVERY, self.connection_timeout,
                                            self.heartbeat)
            self._dest_conn = await _connect(self.dest, "destination", DEFAULT_RECOVERY, self.connection_timeout,
                                             self.heartbeat)
            chosen = choose(self.specs, await self._queues())
            chosen += [(spec.subscription, spec) for spec in self.specs if spec.exchange is not None]
            if not chosen:
                raise MissingResource("no source queue matches the bridges' include lists")
            # All at once: one after the other, each start's round trips queue behind the
            # traffic of the bridges already forwarding on the same connections (8 queues
            # took 8 s to start on a loaded 2-core machine, the first forwarding alone).
            started = await asyncio.gather(*(self._add(queue, spec) for queue, spec in chosen),
                                           return_exceptions=True)
            failed = next((r for r in started if isinstance(r, BaseException)), None)
            if failed is not None:
                raise failed
        except BaseException:
            for bridge in self.bridges.values():
                await bridge.stop(timeout=0)
            await self._close()
            raise
        loop = asyncio.get_running_loop()
        self._watch = loop.create_task(self._report(), name="amqwire.bridge connector stats")
        if self.rescan_interval is not None and any(spec.needs_listing for spec in self.specs):
            self._rescan = loop.create_task(self._rescan_queues(self.rescan_interval),
                                            name="amqwire.bridge connector rescan")
        return self

    async def _add(self, queue: str, spec: BridgeSpec) -> None:
        bridge = Bridge(self.src, queue if spec.exchange is None else None, self.dest,
                        management_port=self.management_port, **spec.options)
        self.bridges[queue] = bridge
        try:
            await bridge.start_on(self._src_conn, self._dest_conn)
        except BaseException:
            del self.bridges[queue]
            await bridge.stop(timeout=0)  # closes the channels it opened
            raise
        waiting = asyncio.ensure_future(bridge.wait())
        waiting.add_done_callback(lambda w: self._bridge_ended(queue, bridge, w))
        self._waits.append(waiting)
        log.info("%s: forwarding queue %r", spec.name, queue)

    def _bridge_ended(self, queue: str, bridge: Bridge, waiting: "asyncio.Future[None]") -> None:
        if waiting.cancelled():
            return
        error = waiting.exception()
        if error is not None and not self._stopped:
            task = asyncio.get_running_loop().create_task(self._failed(queue, bridge, error))
            self._waits.append(task)
            return
        self._fail(error)

    def _fail(self, error: Optional[BaseException]) -> None:
        if error is not None and self._failure is None:
            self._failure = error
        if self._finished is not None:
            self._finished.set()

    async def _failed(self, queue: str, bridge: Bridge, error: BaseException) -> None:
        """A bridge failed: when its queue was deleted at the source, the others go on
        (ActiveMQ's network connector follows destinations as they come and go); any
        other failure ends the connector."""
        channel: Any = None
        try:
            channel = await self._src_conn.channel()
            await channel.queue_declare(queue, passive=True)
            gone = False
        except NotFound:
            gone = True
        except AMQPError:
            gone = False
        finally:
            if channel is not None and channel.is_open:
                await _close_quietly(channel)
        if not gone or self._stopped:
            self._fail(error)
            return
        log.warning("queue %r was deleted at the source: no longer forwarded%s", queue,
                    " (a new one is found by the next rescan)" if self._rescan is not None else "")
        await bridge.stop(timeout=10)
        self.bridges.pop(queue, None)
        self._retired = self._retired + bridge.stats()
        if not self.bridges and self._rescan is None:
            self._fail(MissingResource("every source queue of the connector was deleted"))

    async def _rescan_queues(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                queues = await self._queues()
            except BadConfiguration as exc:
                log.warning("rescan: %s", exc)
                continue
            for queue, spec in choose(self.specs, queues):
                if queue in self.bridges or self._stopped:
                    continue
                try:
                    await self._add(queue, spec)
                except (BridgeError, AMQPError) as exc:
                    log.warning("%s: queue %r not forwarded (tried again at the next rescan): %s", spec.name, queue,
                                exc)

    async def _report(self) -> None:
        interval = self.stats_interval
        if interval is None:
            return
        next_at = time.monotonic() + interval
        while True:
            await asyncio.sleep(max(next_at - time.monotonic(), 0))
            next_at += interval
            for queue, stats in self.queue_stats().items():
                log.info("queue %r: %s", queue, stats.line())
            log.info("total: %s", self.stats().line())
            if self.on_stats is not None:
                try:
                    self.on_stats(self)
                except Exception:  # noqa: BLE001 - a display must not stop the connector
                    log.exception("on_stats callback failed")

    def queue_stats(self) -> dict[str, BridgeStats]:
        """Each forwarded queue's counters."""
        return {queue: bridge.stats() for queue, bridge in self.bridges.items()}

    def stats(self) -> BridgeStats:
        """The counters summed over the queues (those deleted since included)."""
        total = self._retired
        for bridge in self.bridges.values():
            total = total + bridge.stats()
        return total

    async def wait(self) -> None:
        """Until a bridge fails (raises its error) or the connector is stopped."""
        if self._finished is None:
            raise BridgeError("the connector was not started")
        await self._finished.wait()
        if self._failure is not None:
            raise self._failure

    async def stop(self, timeout: Optional[float] = 60.0) -> None:
        """Stop every bridge (each drains, as :meth:`Bridge.stop`), then close the connections."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for task in (self._watch, self._rescan):
                if task is not None:
                    task.cancel()
                    await asyncio.wait({task})
            await asyncio.gather(*(b.stop(timeout) for b in self.bridges.values()))
        finally:
            await self._close()
            if self._finished is not None:
                self._finished.set()
        log.info("connector stopped: %s", self.stats().line())

    async def _close(self) -> None:
        for connection in (self._dest_conn, self._src_conn):
            await _close_quietly(connection)

    async def __aenter__(self) -> "Connector":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
