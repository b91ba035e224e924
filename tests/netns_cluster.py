"""A RabbitMQ cluster of real hosts for network-fault tests: three nodes, each in a network
namespace of its own, on a Linux bridge, with the client (the test process) in the root
namespace reaching them through the bridge.

    cluster = NetnsCluster(size=3).start()    # about 30 s: boot, then join_cluster
    cluster.url(1)                            # amqp://guest:guest@10.a.b.11:5672/
    cluster.partition({"client"}, {1})       # drop everything between them, both ways
    cluster.partition({1}, {2, 3})           # node 1 in a minority of its own
    cluster.drop(0.02, between=("client", 1)) # 2 % random packet loss both ways
    proxy = cluster.delay_proxy(1, delay=0.1, jitter=0.02)   # a slow link, in user space
    cluster.heal()                            # every rule gone, proxies untouched
    cluster.kill(1); cluster.restart(1)       # SIGKILL the beam; start it again (rejoins)
    cluster.cleanup()                         # nodes, epmds, namespaces, bridge: all gone

Layout, for an id ``aw-<6 hex>`` unique to the cluster: bridge ``aw-<hex>`` holding
10.<a>.<b>.1/24 in the root namespace (``a``, ``b`` random, a subnet no route uses),
namespaces ``aw-<hex>-<i>`` each with veth ``aw-<hex>-n<i>`` at 10.<a>.<b>.<10+i> (its
host end ``aw-<hex>-h<i>`` on the bridge), its own loopback, its own epmd (started here,
on 127.0.0.1 and the node's address) and a node ``rabbit@aw-<hex>-<i>`` from
tests/broker_node.py (run through ``ip netns exec``, with the cluster's shared cookie).

Why short names and ``/etc/netns/<namespace>/hosts``: ``ip netns exec`` mounts the files
of ``/etc/netns/<namespace>/`` over ``/etc/``, so each namespace (the node and every
rabbitmqctl run there) resolves ``aw-<hex>-<i>`` to the nodes' addresses without
touching the machine's /etc/hosts; Erlang's short names need no DNS domain and
RabbitMQ's CLI tools default to them.  Long names with IP addresses would also resolve,
but every rabbitmqctl call and RABBITMQ_NODENAME would then need RABBITMQ_USE_LONGNAME
everywhere, and the node name would change with the random subnet.

Faults never touch the root namespace's firewall: every rule lives in a chain ``AW`` of
a node's namespace (jumped to from INPUT and OUTPUT).  Between two nodes, each drops
what comes from the other (INPUT), so both sides see silence.  Between the client and a
node, the node's namespace drops what comes from the client (INPUT) and what it sends to
the client (OUTPUT): the client sees silence, no RST; the node's own sends fail locally
and its TCP retransmits, as behind a dead link.

Ownership: ``/run/amqwire-netns/<id>`` holds the owning pid; :func:`reap_stale` (run
before a cluster starts) removes the namespaces, bridge and processes of clusters whose
owner is gone, and nothing else.
"""
from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from broker_node import BrokerNode, BrokerNodeError, _pid_alive
from delay_proxy import DelayProxy

__all__ = ["NetnsCluster", "NetnsError", "netns_unsupported", "reap_stale", "CLIENT"]

log = logging.getLogger("tests.netns_cluster")

CLIENT = "client"
Member = Union[int, str]  # a node number (1-based) or CLIENT
PREFIX = "aw-"
OWNERS = Path("/run/amqwire-netns")
CHAIN = "AW"
_ENV = {**os.environ, "LC_ALL": "C"}


class NetnsError(RuntimeError):
    """A namespace, link, address or firewall rule could not be made or removed."""


def _run(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_ENV, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed with status {done.returncode}: "
                         f"{(done.stderr or done.stdout).strip()[:800]}")
    return done


def netns_unsupported() -> Optional[str]:
    """Why this kernel cannot run the cluster (no network namespaces), or None.  Anything
    else that fails (no root, no ``ip``, no iptables) is an error, not a reason to skip."""
    if not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces (/proc/self/ns/net is absent)"
    return None


def _iptables_binary() -> str:
    found = shutil.which("iptables") or shutil.which("iptables", path="/usr/sbin:/sbin")
    if found is None:
        raise NetnsError("iptables is not installed: run tests/ensure_iptables.sh (tests/run does)")
    return found


# --------------------------------------------------------------------------- stale leftovers


def _namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _remove(cluster_id: str) -> None:
    """Everything named after ``cluster_id``: processes in its namespaces, the namespaces,
    their /etc/netns files, the bridge."""
    for ns in _namespaces():
        if ns.startswith(cluster_id + "-"):
            pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            deadline = time.monotonic() + 10
            while any(_pid_alive(int(p)) for p in pids if p.isdigit()) and time.monotonic() < deadline:
                time.sleep(0.05)
            _run("ip", "netns", "delete", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
    _run("ip", "link", "delete", cluster_id, check=False)


def reap_stale() -> list[str]:
    """Remove the clusters whose owning process is gone (killed with SIGKILL: no teardown
    ran).  Clusters of live processes, and anything without an owner file, are left alone."""
    reaped = []
    if not OWNERS.is_dir():
        return reaped
    for owner in OWNERS.iterdir():
        try:
            pid = int(owner.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if _pid_alive(pid):
            continue
        _remove(owner.name)
        owner.unlink(missing_ok=True)
        reaped.append(owner.name)
    if reaped:
        log.info("removed stale network-fault clusters: %s", reaped)
    return reaped


_live: set["NetnsCluster"] = set()


@atexit.register
def _cleanup_leftovers() -> None:  # pragma: no cover - the fixture cleans up
    for cluster in list(_live):
        try:
            cluster.cleanup()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


# --------------------------------------------------------------------------- the cluster


def _free_subnet() -> ipaddress.IPv4Network:
    routes = _run("ip", "-4", "route", "show", "table", "all", check=False).stdout
    used = []
    for line in routes.split("\n"):
        word = line.split()[1] if line.startswith(("local", "broadcast", "unicast")) and len(line.split()) > 1 \
            else (line.split() or [""])[0]
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            pass
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise NetnsError("no free 10.x.y.0/24 subnet for the test cluster")


class NetnsCluster:
    """See the module docstring.  Not started on creation: :meth:`start`."""

    def __init__(self, size: int = 3, *, node_config: Optional[dict] = None, start_timeout: float = 120,
                 plugins: Iterable[str] = (), node_config_of: Optional[Callable[[str], dict]] = None):
        """``plugins``: enabled on every node; ``node_config_of(address)``: settings of one
        node, given its address (e.g. ``stream.advertised_host``), after ``node_config``."""
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        reason = netns_unsupported()
        if reason:
            raise NetnsError(reason)
        if os.geteuid() != 0:
            raise NetnsError("network namespaces need root (ip netns add): run the network-fault tests as root")
        self.iptables = _iptables_binary()
        reap_stale()
        self.size = size
        self.id = f"{PREFIX}{uuid.uuid4().hex[:6]}"
        self.subnet = _free_subnet()
        hosts = list(self.subnet.hosts())
        self.gateway = str(hosts[0])  # the bridge: the client's address as the nodes see it
        self.addresses = {i: str(hosts[9 + i]) for i in range(1, size + 1)}
        self.namespaces = {i: f"{self.id}-{i}" for i in range(1, size + 1)}
        self.cookie = uuid.uuid4().hex.upper()
        self.node_config = {
            "loopback_users": "none",  # the client connects over the bridge, not loopback
            "cluster_partition_handling": "pause_minority",
            **(node_config or {}),
        }
        self.start_timeout = start_timeout
        self.plugins = tuple(plugins)
        self.node_config_of = node_config_of
        self.nodes: dict[int, BrokerNode] = {}
        self._epmds: dict[int, subprocess.Popen] = {}
        self._proxies: list[DelayProxy] = []
        self._made = False
        self._touched = False  # a partition, a drop or a kill since the last ensure_whole

    # ------------------------------------------------------------------ naming

    def name(self, i: int) -> str:
        return f"rabbit@{self.namespaces[i]}"

    def url(self, i: int, **query: object) -> str:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"amqp://guest:guest@{self.addresses[i]}:5672/" + (f"?{q}" if q else "")

    def urls(self, **query: object) -> list[str]:
        return [self.url(i, **query) for i in sorted(self.nodes)]

    def address(self, member: Member) -> str:
        return self.gateway if member == CLIENT else self.addresses[self._node(member)]

    def _node(self, member: Member) -> int:
        if member == CLIENT or member not in self.namespaces:
            raise ValueError(f"not a node of the cluster: {member!r} (nodes are {sorted(self.namespaces)})")
        return int(member)

    def __repr__(self) -> str:
        return f"<NetnsCluster {self.id} {self.subnet} nodes={sorted(self.nodes)}>"

    # ------------------------------------------------------------------ set-up

    def start(self) -> "NetnsCluster":
        """Make the network, boot the nodes (in parallel), join them into one cluster.
        On failure everything made so far is removed and the error names the step."""
        OWNERS.mkdir(parents=True, exist_ok=True)
        (OWNERS / self.id).write_text(f"{os.getpid()}\n")
        _live.add(self)
        self._made = True
        try:
            self._make_network()
            for i in self.namespaces:
                self._start_epmd(i)
                own = self.node_config_of(self.addresses[i]) if self.node_config_of else {}
                self.nodes[i] = BrokerNode(
                    config={**self.node_config, **own}, start_timeout=self.start_timeout, netns=self.namespaces[i],
                    host=self.addresses[i], name=self.name(i), cookie=self.cookie, plugins=self.plugins,
                )
            self._parallel(lambda i: self.nodes[i].start(), self.nodes)
            for i in sorted(self.nodes)[1:]:
                node = self.nodes[i]
                node.rabbitmqctl("stop_app")
                node.rabbitmqctl("join_cluster", self.name(1))
                node.rabbitmqctl("start_app")
            running = self.running_nodes(1)
            if len(running) != self.size:
                raise NetnsError(f"after join_cluster, {self.name(1)} sees running nodes {running}")
        except BaseException:
            self.cleanup()
            raise
        return self

    @staticmethod
    def _parallel(fn, items: Iterable) -> None:
        errors: list[BaseException] = []

        def call(item):
            try:
                fn(item)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(item,), daemon=True) for item in items]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _make_network(self) -> None:
        ip = lambda *a: _run("ip", *a)  # noqa: E731
        ip("link", "add", self.id, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.id)
        ip("link", "set", self.id, "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.addresses[i]} {ns}\n" for i, ns in self.namespaces.items())
        for i, ns in self.namespaces.items():
            host_end, ns_end = f"{self.id}-h{i}", f"{self.id}-n{i}"
            ip("netns", "add", ns)
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
            ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            ip("link", "set", ns_end, "netns", ns)
            ip("link", "set", host_end, "master", self.id)
            ip("link", "set", host_end, "up")
            ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            ip("netns", "exec", ns, "ip", "addr", "add", f"{self.addresses[i]}/{self.subnet.prefixlen}", "dev", ns_end)
            ip("netns", "exec", ns, "ip", "link", "set", ns_end, "up")
            self._ns_iptables(i, "-N", CHAIN)
            self._ns_iptables(i, "-I", "INPUT", "-j", CHAIN)
            self._ns_iptables(i, "-I", "OUTPUT", "-j", CHAIN)

    def _start_epmd(self, i: int) -> None:
        epmd = shutil.which("epmd") or "epmd"
        self._epmds[i] = subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[i], epmd, "-address", f"127.0.0.1,{self.addresses[i]}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )

    def running_nodes(self, i: int) -> list[str]:
        """The running nodes node ``i`` sees (``rabbit_mnesia:cluster_nodes(running)``)."""
        out = self.nodes[i].eval("rabbit_mnesia:cluster_nodes(running).")
        return sorted(part.strip(" []'\n") for part in out.split(",") if part.strip(" []'\n"))

    def partitions(self, i: int) -> str:
        """The partitions node ``i``'s Mnesia remembers ('' if none): a node that came back
        from a partition without rejoining keeps its own view of queues and bindings."""
        out = self.nodes[i].eval("rabbit_node_monitor:partitions().")
        return "" if out == "[]" else out

    # ------------------------------------------------------------------ faults

    def _ns_iptables(self, i: int, *rule: str) -> None:
        _run("ip", "netns", "exec", self.namespaces[i], self.iptables, "-w", "5", *rule)

    def _drop_between(self, x: Member, y: Member, extra: tuple[str, ...] = ()) -> None:
        if x == CLIENT and y == CLIENT:
            raise ValueError("the client cannot be partitioned from itself")
        if x == CLIENT:
            x, y = y, x
        i = self._node(x)
        self._touched = True
        self._ns_iptables(i, "-A", CHAIN, "-s", self.address(y), *extra, "-j", "DROP")
        if y == CLIENT:
            self._ns_iptables(i, "-A", CHAIN, "-d", self.address(y), *extra, "-j", "DROP")
        else:
            self._ns_iptables(self._node(y), "-A", CHAIN, "-s", self.address(x), *extra, "-j", "DROP")

    def partition(self, side_a: Iterable[Member], side_b: Iterable[Member]) -> None:
        """Drop every packet between each member of ``side_a`` and each of ``side_b``
        (nodes by number, the test process as ``CLIENT``), both ways, silently."""
        a, b = set(side_a), set(side_b)
        if a & b:
            raise ValueError(f"a member on both sides of a partition: {sorted(map(str, a & b))}")
        for x in a:
            for y in b:
                self._drop_between(x, y)
        log.info("%s: partitioned %s from %s", self.id, sorted(map(str, a)), sorted(map(str, b)))

    def isolate(self, i: int) -> None:
        """Node ``i`` cut off from the other nodes and the client."""
        self.partition({i}, {CLIENT, *(j for j in self.namespaces if j != i)})

    def drop(self, share: float, between: tuple[Member, Member]) -> None:
        """Drop ``share`` (0..1) of the packets between two members, at random, both ways."""
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        x, y = between
        self._drop_between(x, y, ("-m", "statistic", "--mode", "random", "--probability", f"{share:.4f}"))

    def heal(self) -> None:
        """Remove every partition and packet-loss rule (the proxies stay)."""
        for i in self.namespaces:
            self._ns_iptables(i, "-F", CHAIN)
        log.info("%s: healed", self.id)

    def delay_proxy(self, i: int, delay: float, jitter: float = 0.0) -> DelayProxy:
        """A user-space link to node ``i``'s AMQP port on 127.0.0.1: every byte both ways
        ``delay`` ± ``jitter`` seconds late (order kept).  Closed by :meth:`cleanup`."""
        proxy = DelayProxy(self.addresses[self._node(i)], 5672, delay=delay, jitter=jitter, both_ways=True)
        self._proxies.append(proxy)
        return proxy

    def proxy_url(self, proxy: DelayProxy, **query: object) -> str:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"amqp://guest:guest@127.0.0.1:{proxy.port}/" + (f"?{q}" if q else "")

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``'s Erlang VM (clients see the TCP connection drop)."""
        self._touched = True
        self.nodes[self._node(i)].kill()

    def restart(self, i: int) -> None:
        """Start node ``i`` again (after :meth:`kill` or a stop): same data, so it rejoins."""
        self.nodes[self._node(i)].start()

    # Per node: how many nodes it sees running, and the partitions it remembers (one
    # rabbitmqctl call for the whole cluster: each call starts an Erlang VM, a second or two).
    _HEALTH = ("[{N, catch length(rpc:call(N, rabbit_mnesia, cluster_nodes, [running], 5000)), "
               "catch rpc:call(N, rabbit_node_monitor, partitions, [], 5000)} "
               "|| N <- rabbit_mnesia:cluster_nodes(all)].")

    def whole(self) -> tuple[bool, str]:
        """(every node runs, sees all the others and remembers no partition; what was seen)."""
        for i in sorted(self.nodes):
            if not self.nodes[i].is_running:
                continue
            try:
                out = self.nodes[i].eval(self._HEALTH, timeout=30)
            except BrokerNodeError as exc:
                return False, str(exc)[-300:]
            healthy = out.count(f",{self.size},[]}}") == self.size
            return healthy, out
        return False, "no node runs"

    def ensure_whole(self, timeout: float = 120) -> None:
        """Heal, restart any node that is down, and wait until every node sees every
        other running and none remembers a partition: what each test's teardown leaves
        for the next.  Nothing broken since the last call: only the heal."""
        self.heal()
        if not self._touched and all(node.is_running for node in self.nodes.values()):
            return
        down = [i for i, node in self.nodes.items() if not node.is_running]
        self._parallel(self.restart, down)
        deadline = time.monotonic() + timeout
        while True:
            ok, seen = self.whole()
            if ok:
                self._touched = False
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"{self.id}: the cluster is not whole {timeout:.0f} s after healing: "
                                 f"(node, running nodes it sees, its partitions): {seen}")
            time.sleep(0.5)

    # ------------------------------------------------------------------ teardown

    def cleanup(self) -> None:
        """Stop everything this cluster started and remove its network.  Safe to call
        twice; raises the first error after trying every step."""
        if not self._made:
            return
        errors: list[BaseException] = []
        for proxy in self._proxies:
            proxy.close()
        self._proxies.clear()
        for node in self.nodes.values():
            try:
                node.cleanup(graceful=False)
            except BaseException as exc:  # noqa: BLE001 - every step runs
                errors.append(exc)
        for epmd in self._epmds.values():
            if epmd.poll() is None:
                try:
                    os.killpg(epmd.pid, signal.SIGKILL)
                except OSError:
                    pass
            epmd.wait(10)
        try:
            _remove(self.id)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        (OWNERS / self.id).unlink(missing_ok=True)
        _live.discard(self)
        self._made = False
        if errors:
            raise errors[0]
