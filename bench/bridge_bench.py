"""amqwire.bridge against RabbitMQ's Shovel: forwarding a backlog between two brokers.

Run from the repository root (RabbitMQ installed: tests/ensure_rabbitmq.sh)::

    python bench/bridge_bench.py               # 200,000 messages x 3 repeats per row
    python bench/bridge_bench.py --quick       # CI smoke: 2,000 messages (8 x 500), 1 repeat, no verdict
    python bench/bridge_bench.py --count 50000 --repeats 5 --only bridge,shovel
    python bench/bridge_bench.py --only "8 queues" --repeats 5    # the many-queue rows alone

Two private RabbitMQ nodes on this machine (tests/broker_node.py; never the shared
broker): A with the rabbitmq_shovel plugin, B.  For every run, N persistent 100-byte
messages wait in a durable queue on A (published with confirms, not timed) and a durable
queue on B is empty; the clock runs from the start of the forwarding until B's queue holds
all N and A's queue is empty (polled every 20 ms on a connection of their own).

Rows:
  bridge <mode>   amqwire.bridge.Bridge (asyncio, in this process) from A's queue to B's
                  default exchange with B's queue name as routing key, prefetch 1000 (--prefetch)
  shovel <mode>   a dynamic shovel declared on A with ``rabbitmqctl set_parameter shovel``:
                  the same queues, ``ack-mode`` and ``src-prefetch-count``; cleared after
  consume         ceiling: amqwire.client (asyncio) consuming the N messages from A,
                  the same prefetch, ack multiple every 100 (nothing published)
  confirm publish ceiling: amqwire.client (asyncio) publishing N persistent 100-byte
                  messages to B's queue with confirms (window 2000), until all confirmed
  confirm publish, prefetch window
                  the same with at most --prefetch messages unconfirmed: what on-confirm
                  forwarding, which holds at most that many, can reach at best
  consume + publish at once
                  both ceilings at once in this process (prefetch window), not coupled:
                  B's intake while A delivers, on the same cores as a forwarding run

Many queues (issue 25): 8 durable source queues on A (``bench.fan.0`` .. ``.7``) of
--fan-count (25,000) persistent 100-byte messages each, forwarded to the queues of the
same names on B:
  bridge 8 queues on-confirm (1 process)
                  ONE ``python -m amqwire.bridge`` process with a --src-queue per queue (the
                  Connector: one pair of connections, a channel per queue), its defaults
                  (on-confirm, mandatory, requeue on refusal) but --prefetch; the URLs come
                  from the environment
  shovel 8 queues on-confirm (8 shovels)
                  8 dynamic shovels on A, one per queue, ``ack-mode`` on-confirm and the same
                  ``src-prefetch-count``, set (and cleared) together by one ``rabbitmqctl eval``
The clock runs from the first forwarded message seen at B (8 passive declares polled in a
loop: seen at most one poll late) until every queue at B holds exactly its share (more
fails the run: a duplicate), so neither the process start nor rabbitmqctl is timed.  Then
the run waits until A's queues hold nothing, ready or unacked (every message acked at the
source), stops the forwarder and checks the counts again.  CPU microseconds per message:
the bridge process' whole life (``os.wait4``'s rusage: start-up and drain included) and
its share in the timed window, and each node's beam process (``/proc/<pid>/stat``
utime + stime) over the timed window.  Target (informational, never asserted): the bridge
process at least 1.2x the 8 shovels' combined rate, best and median.

Repeats run round-robin across the rows so a slow moment of the machine hits all rows
alike; best and median msg/s of each row are printed, and the ratio bridge / shovel for
each ack mode, best and median, with the load average before and after (and ``uptime``).
Target: bridge on-confirm >= 1.5x shovel on-confirm.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from broker_node import BrokerNode  # noqa: E402

from amqwire.bridge import Bridge  # noqa: E402
from amqwire.client import BasicProperties, aio  # noqa: E402

MODES = ("on-confirm", "on-publish", "no-ack")
SRC, DST = "bench.bridge.src", "bench.bridge.dst"
BODY = b"m" * 100
PERSISTENT = BasicProperties(delivery_mode=2)


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return load()


async def fill(url: str, queue: str, n: int) -> None:
    async with aio.connect(url) as conn, conn.channel() as ch:
        await ch.confirm_select(max_in_flight=5000)
        for _ in range(n):
            await ch.publish_async("", queue, BODY, PERSISTENT)
        await ch.wait_for_confirms()


async def reset(a: str, b: str) -> None:
    async with aio.connect(a) as ca, aio.connect(b) as cb:
        cha, chb = await ca.channel(), await cb.channel()
        for ch, q in ((cha, SRC), (chb, DST)):
            await ch.queue_declare(q, durable=True)
            await ch.queue_purge(q)


async def wait_done(a: str, b: str, n: int, limit: float) -> None:
    async with aio.connect(a) as ca, aio.connect(b) as cb:
        cha, chb = await ca.channel(), await cb.channel()
        deadline = time.monotonic() + limit
        while True:
            dst = (await chb.queue_declare(DST, passive=True)).message_count
            src = (await cha.queue_declare(SRC, passive=True)).message_count
            if dst >= n and src == 0:
                if dst != n:
                    raise RuntimeError(f"{dst} messages at the destination, {n} sent")
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out: source {src}, destination {dst} of {n}")
            await asyncio.sleep(0.02)


async def run_bridge(node_a: BrokerNode, node_b: BrokerNode, mode: str, n: int, prefetch: int) -> float:
    a, b = node_a.url, node_b.url
    await reset(a, b)
    await fill(a, SRC, n)
    t0 = time.perf_counter()
    async with Bridge(a, SRC, b, dest_routing_key=DST, ack_mode=mode, prefetch=prefetch):
        await wait_done(a, b, n, 600)
        elapsed = time.perf_counter() - t0
    return n / elapsed


async def run_shovel(node_a: BrokerNode, node_b: BrokerNode, mode: str, n: int, prefetch: int) -> float:
    a, b = node_a.url, node_b.url
    await reset(a, b)
    await fill(a, SRC, n)
    definition = {
        "src-protocol": "amqp091", "src-uri": a.rstrip("/"), "src-queue": SRC,
        "dest-protocol": "amqp091", "dest-uri": b.rstrip("/"), "dest-queue": DST,
        "ack-mode": mode, "src-prefetch-count": prefetch, "src-delete-after": "never",
    }
    t0 = time.perf_counter()
    node_a.rabbitmqctl("set_parameter", "shovel", "bench", json.dumps(definition))
    try:
        await wait_done(a, b, n, 600)
        elapsed = time.perf_counter() - t0
    finally:
        node_a.rabbitmqctl("clear_parameter", "shovel", "bench")
    return n / elapsed


async def _consume_all(ch: Any, n: int) -> None:
    """Take n messages from A's queue on ``ch`` (prefetch set), acking every 100 with multiple."""
    count = 0
    async with ch.consume(SRC) as consumer:
        async for message in consumer:
            count += 1
            if count % 100 == 0 or count == n:
                await message.ack(multiple=True)
            if count == n:
                break


async def _publish_all(ch: Any, n: int) -> None:
    """Publish n persistent messages to B's queue on ``ch`` (in confirm mode); return when all are confirmed."""
    for _ in range(n):
        await ch.publish_async("", DST, BODY, PERSISTENT)
    await ch.wait_for_confirms()


async def run_consume(node_a: BrokerNode, node_b: BrokerNode, mode: str, n: int, prefetch: int) -> float:
    a, b = node_a.url, node_b.url
    await reset(a, b)
    await fill(a, SRC, n)
    async with aio.connect(a) as conn, conn.channel() as ch:
        await ch.basic_qos(prefetch)
        t0 = time.perf_counter()
        await _consume_all(ch, n)
        elapsed = time.perf_counter() - t0
    return n / elapsed


async def _publish(node_a: BrokerNode, node_b: BrokerNode, n: int, window: int) -> float:
    a, b = node_a.url, node_b.url
    await reset(a, b)
    async with aio.connect(b) as conn, conn.channel() as ch:
        await ch.confirm_select(max_in_flight=window)
        t0 = time.perf_counter()
        await _publish_all(ch, n)
        elapsed = time.perf_counter() - t0
    return n / elapsed


async def run_publish(node_a: BrokerNode, node_b: BrokerNode, mode: str, n: int, prefetch: int) -> float:
    return await _publish(node_a, node_b, n, 2000)


async def run_publish_window(node_a: BrokerNode, node_b: BrokerNode, mode: str, n: int, prefetch: int) -> float:
    """On-confirm forwarding holds at most ``prefetch`` messages unconfirmed; so does this."""
    return await _publish(node_a, node_b, n, prefetch)


async def run_both(node_a: BrokerNode, node_b: BrokerNode, mode: str, n: int, prefetch: int) -> float:
    """The consume ceiling and the prefetch-window publish ceiling at once, in this process,
    not coupled: what a forwarder could reach if nothing it did depended on the other
    broker.  Both brokers work on the same two cores, as in a forwarding run."""
    a, b = node_a.url, node_b.url
    await reset(a, b)
    await fill(a, SRC, n)
    async with aio.connect(a) as ca, ca.channel() as cha, aio.connect(b) as cb, cb.channel() as chb:
        await cha.basic_qos(prefetch)
        await chb.confirm_select(max_in_flight=prefetch)
        t0 = time.perf_counter()
        await asyncio.gather(_consume_all(cha, n), _publish_all(chb, n))
        elapsed = time.perf_counter() - t0
    return n / elapsed


# --------------------------------------------------------------------------- many queues

FAN_QUEUES = tuple(f"bench.fan.{i}" for i in range(8))
FAN_BRIDGE_ROW = "bridge 8 queues on-confirm (1 process)"
FAN_SHOVEL_ROW = "shovel 8 queues on-confirm (8 shovels)"
FAN_TARGET = 1.2
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Measured:
    """One run of a row: msg/s, and CPU microseconds per message by whom (many-queue rows)."""

    rate: float
    cpu_us: dict[str, float] = dataclasses.field(default_factory=dict)
    note: str = ""


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process so far (/proc/<pid>/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()  # fields[0] is field 3 (state): a name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class NodeCpu:
    """The two nodes' beam CPU seconds between ``start()`` and ``stop()``."""

    def __init__(self, node_a: BrokerNode, node_b: BrokerNode) -> None:
        self.pids = {}
        for label, node in (("node A", node_a), ("node B", node_b)):
            if node.beam_pid is None:
                raise RuntimeError(f"{label}: the beam process' pid is not known")
            self.pids[label] = node.beam_pid
        self.used: dict[str, float] = {}
        self._at_start: dict[str, float] = {}

    def start(self) -> None:
        self._at_start = {label: cpu_seconds(pid) for label, pid in self.pids.items()}

    def stop(self) -> None:
        self.used = {label: cpu_seconds(pid) - self._at_start[label] for label, pid in self.pids.items()}


async def _counts(ch: Any, queues: Sequence[str]) -> list[int]:
    return [(await ch.queue_declare(q, passive=True)).message_count for q in queues]


async def reset_fan(a: str, b: str) -> None:
    async with aio.connect(a) as ca, aio.connect(b) as cb:
        cha, chb = await ca.channel(), await cb.channel()
        for ch in (cha, chb):
            for q in FAN_QUEUES:
                await ch.queue_declare(q, durable=True)
                await ch.queue_purge(q)


async def fill_fan(a: str, per_queue: int) -> None:
    """``per_queue`` persistent messages into each source queue, in turn (confirmed, not timed)."""
    async with aio.connect(a) as conn, conn.channel() as ch:
        await ch.confirm_select(max_in_flight=5000)
        for _ in range(per_queue):
            for q in FAN_QUEUES:
                await ch.publish_async("", q, BODY, PERSISTENT)
        await ch.wait_for_confirms()


async def watch_fan(b: str, per_queue: int, limit: float, on_first: Any,
                    check: Any = None) -> tuple[float, float]:
    """Poll B's queues: the time the first forwarded message is seen there (``on_first()``
    is called then) and the time every queue holds exactly ``per_queue`` (a queue with
    more fails the run: a duplicate).  The first is seen at most one poll (8 passive
    declares, ~1-3 ms) late.  ``check()``, called at each poll, raises when the forwarder
    is gone."""
    async with aio.connect(b) as cb, cb.channel() as ch:
        deadline = time.monotonic() + limit
        while True:
            if check is not None:
                check()
            counts = await _counts(ch, FAN_QUEUES)
            if any(counts):
                first = time.perf_counter()
                on_first()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out: nothing reached the destination in {limit:.0f} s")
            await asyncio.sleep(0.001)
        while True:
            over = [(q, c) for q, c in zip(FAN_QUEUES, counts) if c > per_queue]
            if over:
                raise RuntimeError(f"duplicates at the destination: {over} (each queue was sent {per_queue})")
            if all(c == per_queue for c in counts):
                return first, time.perf_counter()
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out: destination {counts}, {per_queue} sent to each")
            await asyncio.sleep(0.02)
            if check is not None:
                check()
            counts = await _counts(ch, FAN_QUEUES)


def settled_at_source(node_a: BrokerNode, limit: float = 60) -> None:
    """Until A's fan queues hold nothing, ready or unacked: every message acked at the source."""
    deadline = time.monotonic() + limit
    while True:
        out = node_a.rabbitmqctl("list_queues", "-q", "--no-table-headers", "name", "messages")
        left = {name: int(count) for name, count in (line.split("\t") for line in out.strip().splitlines())
                if name in FAN_QUEUES and int(count)}
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all acked at the source {limit:.0f} s after the destination had all: {left}")
        time.sleep(0.2)


async def check_fan(a: str, b: str, per_queue: int) -> None:
    """After the forwarder stopped: the sources empty, each destination exactly ``per_queue``."""
    async with aio.connect(a) as ca, aio.connect(b) as cb:
        src = await _counts(await ca.channel(), FAN_QUEUES)
        dst = await _counts(await cb.channel(), FAN_QUEUES)
    if any(src) or any(c != per_queue for c in dst):
        raise RuntimeError(f"after the run: sources {src}, destinations {dst} ({per_queue} sent to each)")


def _per_message(seconds: float, n: int) -> float:
    return seconds / n * 1e6


async def run_fan_bridge(node_a: BrokerNode, node_b: BrokerNode, mode: str, per_queue: int, prefetch: int,
                         profile: Optional[str] = None) -> Measured:
    """One amqwire bridge process (``python -m amqwire.bridge`` with a --src-queue per
    queue: the Connector) with its defaults but the prefetch; URLs from the environment.
    ``profile``: run it under cProfile, writing ``<profile>.<n>.prof`` (slower: diagnosis only)."""
    a, b = node_a.url, node_b.url
    n = per_queue * len(FAN_QUEUES)
    await reset_fan(a, b)
    await fill_fan(a, per_queue)
    nodes = NodeCpu(node_a, node_b)
    command = [sys.executable, "-m", "amqwire.bridge", "--prefetch", str(prefetch)]
    if profile:
        n_profiles = len(glob.glob(glob.escape(profile) + ".*.prof"))
        command[1:1] = ["-m", "cProfile", "-o", f"{profile}.{n_profiles + 1}.prof"]
    for q in FAN_QUEUES:
        command += ["--src-queue", q]
    env = dict(os.environ, AMQWIRE_SRC_URL=a, AMQWIRE_DEST_URL=b)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # Popen, not asyncio's subprocesses: their child watcher would reap it before os.wait4 has its rusage
        proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)  # noqa: ASYNC220
        bridge_at_first = 0.0

        def on_first() -> None:
            nonlocal bridge_at_first
            nodes.start()
            bridge_at_first = cpu_seconds(proc.pid)

        def running() -> None:  # without reaping it: os.wait4 does, for its rusage
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                raise RuntimeError("the bridge process ended before the destination had every message")

        failure: Optional[BaseException] = None
        try:
            first, done = await watch_fan(b, per_queue, 600, on_first, running)
            bridge_window = cpu_seconds(proc.pid) - bridge_at_first
            nodes.stop()
            settled_at_source(node_a)
        except Exception as exc:  # noqa: BLE001 - raised below, with the bridge's stderr
            failure = exc
        finally:
            # os.kill, not send_signal (which reaps an ended child): until os.wait4 reaps it,
            # its pid is not reused; it drains, then exits 0 (a no-op if it ended)
            os.kill(proc.pid, signal.SIGTERM)
            _, status, usage = await asyncio.to_thread(os.wait4, proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stopped = [line for line in out.read().splitlines() if line.startswith("stopped:")]
        if failure is not None or proc.returncode != 0 or not stopped:
            raise RuntimeError(f"{failure or 'the bridge process failed'} (exit status {proc.returncode}); "
                               f"its stderr: {err.read()[-1500:]}") from failure
    await check_fan(a, b, per_queue)
    cpu = {"bridge process": _per_message(usage.ru_utime + usage.ru_stime, n),
           "bridge, timed window": _per_message(bridge_window, n)}
    cpu.update({label: _per_message(used, n) for label, used in nodes.used.items()})
    return Measured(n / (done - first), cpu, stopped[0][len("stopped: "):].split("  in flight")[0])


def _shovels_eval(action: str, definitions: dict[str, str]) -> str:
    """One ``rabbitmqctl eval`` setting (or clearing) every shovel at once, so that the 8
    start together (one rabbitmqctl per shovel takes a second or more each here)."""
    def binary(text: str) -> str:
        return '<<"' + text.replace("\\", "\\\\").replace('"', '\\"') + '">>'
    if action == "set":
        items = ", ".join(f"{{{binary(name)}, {binary(d)}}}" for name, d in definitions.items())
        return (f"[rabbit_runtime_parameters:parse_set(<<\"/\">>, <<\"shovel\">>, N, D, <<\"amqwire-bench\">>)"
                f" || {{N, D}} <- [{items}]].")
    names = ", ".join(binary(name) for name in definitions)
    return f"[rabbit_runtime_parameters:clear(<<\"/\">>, <<\"shovel\">>, N, <<\"amqwire-bench\">>) || N <- [{names}]]."


async def run_fan_shovel(node_a: BrokerNode, node_b: BrokerNode, mode: str, per_queue: int, prefetch: int) -> Measured:
    """8 dynamic shovels on A, one per queue (on-confirm, the same prefetch), set at once."""
    a, b = node_a.url, node_b.url
    n = per_queue * len(FAN_QUEUES)
    await reset_fan(a, b)
    await fill_fan(a, per_queue)
    nodes = NodeCpu(node_a, node_b)
    definitions = {
        f"bench-fan-{i}": json.dumps({
            "src-protocol": "amqp091", "src-uri": a.rstrip("/"), "src-queue": q,
            "dest-protocol": "amqp091", "dest-uri": b.rstrip("/"), "dest-queue": q,
            "ack-mode": "on-confirm", "src-prefetch-count": prefetch, "src-delete-after": "never",
        }) for i, q in enumerate(FAN_QUEUES)
    }
    result = await asyncio.to_thread(node_a.eval, _shovels_eval("set", definitions))
    try:
        if result.replace(" ", "") != "[" + ",".join(["ok"] * len(definitions)) + "]":
            raise RuntimeError(f"setting the shovels: {result}")
        first, done = await watch_fan(b, per_queue, 600, nodes.start)
        nodes.stop()
        settled_at_source(node_a)
    finally:
        node_a.eval(_shovels_eval("clear", definitions))
    await check_fan(a, b, per_queue)
    return Measured(n / (done - first), {label: _per_message(used, n) for label, used in nodes.used.items()})


WINDOW_ROW = "confirm publish, prefetch window (ceiling)"
BOTH_ROW = "consume + publish at once (ceiling)"


def rows(only: list[str], n: int, per_queue: int, profile: Optional[str] = None) -> list[tuple[str, Any, str, int]]:
    """(name, function, ack mode, its count argument) of each row, in the order they run."""
    out = [(f"bridge {m}", run_bridge, m, n) for m in MODES]
    out += [(f"shovel {m}", run_shovel, m, n) for m in MODES]
    out += [(FAN_BRIDGE_ROW, functools.partial(run_fan_bridge, profile=profile), "on-confirm", per_queue),
            (FAN_SHOVEL_ROW, run_fan_shovel, "on-confirm", per_queue)]
    out += [("consume (ceiling)", run_consume, "", n), ("confirm publish (ceiling)", run_publish, "", n),
            (WINDOW_ROW, run_publish_window, "", n), (BOTH_ROW, run_both, "", n)]
    if only:
        out = [r for r in out if any(o in r[0] for o in only)]
    return out


def _cpu_text(cpu_us: dict[str, float]) -> str:
    return ", ".join(f"{who} {us:.1f}" for who, us in cpu_us.items())


def _fan_verdict(summary: dict[str, Any], per_queue: int) -> Optional[str]:
    b, s = summary.get(FAN_BRIDGE_ROW), summary.get(FAN_SHOVEL_ROW)
    if not (b and s):
        return None
    rb, rm = b["best"] / s["best"], b["median"] / s["median"]
    line = f"8 queues: 1 bridge process / 8 shovels: {rb:.2f}x best, {rm:.2f}x median"
    if per_queue < 10_000:
        line += f"  (too few messages for the {FAN_TARGET}x target: no verdict)"
    else:
        line += f"  -> target {FAN_TARGET}x (best and median, informational) " + (
            "MET" if min(rb, rm) >= FAN_TARGET else "MISSED")
    if len(b["runs"]) == len(s["runs"]):  # run side by side in each repeat: the spread the target is judged against
        line += "\n  per repeat: " + ", ".join(f"{x / y:.2f}x" for x, y in zip(b["runs"], s["runs"]))
    for name, row in ((FAN_BRIDGE_ROW, b), (FAN_SHOVEL_ROW, s)):
        cpu = row.get("cpu_us_median")
        if cpu:
            total = sum(us for who, us in cpu.items() if who != "bridge process")
            line += (f"\n  CPU us/msg, median of the runs, {name}: {_cpu_text(cpu)}; "
                     f"all processes in the timed window {total:.1f}")
    return line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CI smoke: 2,000 messages (8 x 500 for the 8-queue rows), "
                   "1 repeat (start-up dominates: no verdict)")
    p.add_argument("--count", type=int, default=None, help="messages per run of the one-queue rows (200,000)")
    p.add_argument("--fan-count", type=int, default=None,
                   help="messages per queue of the 8-queue rows (25,000: 200,000 in all)")
    p.add_argument("--repeats", type=int, default=None, help="runs per row (3)")
    p.add_argument("--only", default="", help="comma-separated substrings of row names")
    p.add_argument("--prefetch", type=int, default=1000,
                   help="prefetch of the bridge, the shovel (src-prefetch-count) and the consume ceiling (1000: "
                        "the default of both; in on-confirm mode it bounds the messages in flight)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--bridge-profile", default=None, metavar="PREFIX",
                   help="run the 8-queue bridge process under cProfile, one PREFIX.<n>.prof per run (slows it: "
                        "for diagnosis, not for the numbers)")
    p.add_argument("--erl-args", default="", help="extra Erlang VM arguments for both nodes (e.g. '+sbwt none': "
                   "no scheduler busy-waiting, for hosts with fewer cores than busy processes); default: none")
    args = p.parse_args(argv)
    for option in ("count", "fan_count", "repeats"):
        value = getattr(args, option)
        if value is not None and value < 1:
            p.error(f"--{option.replace('_', '-')} must be a positive integer, not {value}")
    n = args.count or (2000 if args.quick else 200_000)
    per_queue = args.fan_count or (500 if args.quick else 25_000)
    repeats = args.repeats or (1 if args.quick else 3)
    selected = rows([s.strip() for s in args.only.split(",") if s.strip()], n, per_queue, args.bridge_profile)
    print(f"bridge benchmark: {n:,} persistent 100-byte messages ({len(FAN_QUEUES)} queues x {per_queue:,} in the "
          f"8-queue rows), {repeats} repeat(s), prefetch {args.prefetch:,}; {load()}", flush=True)
    print(f"uptime: {uptime()}", flush=True)
    node_a = BrokerNode(plugins=("rabbitmq_shovel",), erl_args=args.erl_args)
    node_b = BrokerNode(erl_args=args.erl_args)
    if args.erl_args:
        print(f"both nodes run with Erlang arguments: {args.erl_args}", flush=True)
    results: dict[str, list[Measured]] = {name: [] for name, _, _, _ in selected}
    failures: dict[str, str] = {}
    try:
        node_a.start()
        node_b.start()
        print(f"nodes: A {node_a.name} (shovel), B {node_b.name}; {load()}", flush=True)
        for rep in range(repeats):
            for name, fn, mode, count in selected:
                if name in failures:
                    continue
                try:
                    got = asyncio.run(fn(node_a, node_b, mode, count, args.prefetch))
                except Exception as exc:  # noqa: BLE001 - a failed row is reported, the rest goes on
                    failures[name] = f"{type(exc).__name__}: {exc}"
                    print(f"  {name}: FAILED {failures[name]}", flush=True)
                    continue
                run = got if isinstance(got, Measured) else Measured(got)
                results[name].append(run)
                print(f"  run {rep + 1} {name:42s} {run.rate:10,.0f} msg/s   ({load()})", flush=True)
                if run.cpu_us:
                    print(f"        CPU us/msg: {_cpu_text(run.cpu_us)}" + (f"; {run.note}" if run.note else ""),
                          flush=True)
    finally:
        node_a.cleanup(graceful=False)
        node_b.cleanup(graceful=False)
    print(f"\n{'row':42s} {'best msg/s':>12s} {'median msg/s':>13s}   ({load()})")
    summary: dict[str, Any] = {}
    for name, _, _, _ in selected:
        runs = results[name]
        if not runs:
            print(f"{name:42s} {'FAILED':>12s}   {failures.get(name, '')}")
            continue
        rates = [r.rate for r in runs]
        best, median = max(rates), statistics.median(rates)
        summary[name] = {"best": best, "median": median, "runs": rates}
        if runs[0].cpu_us:
            summary[name]["cpu_us_runs"] = [r.cpu_us for r in runs]
            summary[name]["cpu_us_median"] = {who: statistics.median(r.cpu_us[who] for r in runs)
                                              for who in runs[0].cpu_us}
        print(f"{name:42s} {best:12,.0f} {median:13,.0f}")
    verdict = 0
    for mode in MODES:
        b, s = summary.get(f"bridge {mode}"), summary.get(f"shovel {mode}")
        if b and s:
            rb, rm = b["best"] / s["best"], b["median"] / s["median"]
            line = f"bridge / shovel {mode}: {rb:.2f}x best, {rm:.2f}x median"
            if mode == "on-confirm":
                if n < 100_000:  # Shovel's start (rabbitmqctl set_parameter) would weigh in the ratio
                    line += "  (too few messages for the 1.5x target: no verdict)"
                else:
                    line += "  -> target 1.5x (best and median) " + ("MET" if min(rb, rm) >= 1.5 else "MISSED")
                for ceiling, what in ((WINDOW_ROW, f"B's confirmed intake with {args.prefetch:,} unconfirmed"),
                                      (BOTH_ROW, "that intake while A delivers as fast (not coupled)")):
                    c = summary.get(ceiling)
                    if c:  # what on-confirm forwarding could reach at best
                        line += (f"\n  {what}: bridge on-confirm {b['best'] / c['best']:.0%} / {b['median'] / c['median']:.0%}"
                                 f" of it, 1.5x shovel {1.5 * s['best'] / c['best']:.0%} / {1.5 * s['median'] / c['median']:.0%}")
            print(line)
    fan = _fan_verdict(summary, per_queue)
    if fan:
        print(fan)
    print(f"uptime: {uptime()}")
    if failures:
        verdict = 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"count": n, "fan_count": per_queue, "fan_queues": len(FAN_QUEUES), "repeats": repeats,
                       "prefetch": args.prefetch, "erl_args": args.erl_args, "results": summary,
                       "failures": failures}, f, indent=1)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
