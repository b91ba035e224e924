"""amqwire.bridge against RabbitMQ's Shovel: forwarding a backlog between two brokers.

Run from the repository root (RabbitMQ installed: tests/ensure_rabbitmq.sh)::

    python bench/bridge_bench.py               # 200,000 messages x 3 repeats per row
    python bench/bridge_bench.py --quick       # CI smoke: 2,000 messages, 1 repeat, no verdict
    python bench/bridge_bench.py --count 50000 --repeats 5 --only bridge,shovel

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

Repeats run round-robin across the rows so a slow moment of the machine hits all rows
alike; best and median msg/s of each row are printed, and the ratio bridge / shovel for
each ack mode, best and median, with the load average before and after.  Target: bridge
on-confirm >= 1.5x shovel on-confirm.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

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


WINDOW_ROW = "confirm publish, prefetch window (ceiling)"
BOTH_ROW = "consume + publish at once (ceiling)"


def rows(only: list[str]) -> list[tuple[str, object, str]]:
    out = [(f"bridge {m}", run_bridge, m) for m in MODES]
    out += [(f"shovel {m}", run_shovel, m) for m in MODES]
    out += [("consume (ceiling)", run_consume, ""), ("confirm publish (ceiling)", run_publish, ""),
            (WINDOW_ROW, run_publish_window, ""), (BOTH_ROW, run_both, "")]
    if only:
        out = [r for r in out if any(o in r[0] for o in only)]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CI smoke: 2,000 messages, 1 repeat (start-up dominates: no verdict)")
    p.add_argument("--count", type=int, default=None, help="messages per run (200,000)")
    p.add_argument("--repeats", type=int, default=None, help="runs per row (3)")
    p.add_argument("--only", default="", help="comma-separated substrings of row names")
    p.add_argument("--prefetch", type=int, default=1000,
                   help="prefetch of the bridge, the shovel (src-prefetch-count) and the consume ceiling (1000: "
                        "the default of both; in on-confirm mode it bounds the messages in flight)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--erl-args", default="", help="extra Erlang VM arguments for both nodes (e.g. '+sbwt none': "
                   "no scheduler busy-waiting, for hosts with fewer cores than busy processes); default: none")
    args = p.parse_args(argv)
    n = args.count or (2000 if args.quick else 200_000)
    repeats = args.repeats or (1 if args.quick else 3)
    selected = rows([s.strip() for s in args.only.split(",") if s.strip()])
    print(f"bridge benchmark: {n:,} persistent 100-byte messages, {repeats} repeat(s), prefetch {args.prefetch:,}; "
          f"{load()}", flush=True)
    node_a = BrokerNode(plugins=("rabbitmq_shovel",), erl_args=args.erl_args)
    node_b = BrokerNode(erl_args=args.erl_args)
    if args.erl_args:
        print(f"both nodes run with Erlang arguments: {args.erl_args}", flush=True)
    results: dict[str, list[float]] = {name: [] for name, _, _ in selected}
    failures: dict[str, str] = {}
    try:
        node_a.start()
        node_b.start()
        print(f"nodes: A {node_a.name} (shovel), B {node_b.name}; {load()}", flush=True)
        for rep in range(repeats):
            for name, fn, mode in selected:
                if name in failures:
                    continue
                try:
                    rate = asyncio.run(fn(node_a, node_b, mode, n, args.prefetch))
                except Exception as exc:  # noqa: BLE001 - a failed row is reported, the rest goes on
                    failures[name] = f"{type(exc).__name__}: {exc}"
                    print(f"  {name}: FAILED {failures[name]}", flush=True)
                    continue
                results[name].append(rate)
                print(f"  run {rep + 1} {name:42s} {rate:10,.0f} msg/s   ({load()})", flush=True)
    finally:
        node_a.cleanup(graceful=False)
        node_b.cleanup(graceful=False)
    print(f"\n{'row':42s} {'best msg/s':>12s} {'median msg/s':>13s}   ({load()})")
    summary = {}
    for name, _, _ in selected:
        rates = results[name]
        if not rates:
            print(f"{name:42s} {'FAILED':>12s}   {failures.get(name, '')}")
            continue
        best, median = max(rates), statistics.median(rates)
        summary[name] = {"best": best, "median": median, "runs": rates}
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
    if failures:
        verdict = 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"count": n, "repeats": repeats, "prefetch": args.prefetch, "erl_args": args.erl_args,
                       "results": summary, "failures": failures}, f, indent=1)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
