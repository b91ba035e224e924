"""Stream consume rate: reading a RabbitMQ stream from offset 0 to its last offset.

One stream is filled once with ``--count`` messages of 100 bytes with 3 headers; each row
then reads all of it, ``--repeats`` times, and reports the best and the median rate with the
load average around the run (a shared machine moves rates by ~10%), and the client
process's CPU time per message (median; all its threads):

- amqwire blocking: ``for m in ch.consume_stream(q, offset=0, end=last)``, reading
  ``m.stream_offset`` (the codec reads it from the header bytes; the reader acks)
- amqwire asyncio: the same with ``async for``
- pika: BlockingConnection, basic_qos(1000), basic_consume with ``x-stream-offset: 0``,
  the offset from ``properties.headers["x-stream-offset"]``, basic_ack(multiple) every
  500th message (as amqwire's half-prefetch credit), stop at the last offset

    python -m bench.stream_bench --count 200000 --repeats 3
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

import pika

from amqwire.client import BasicProperties
from amqwire.client import aio as aw_aio
from amqwire.client import blocking as aw_blocking

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
BODY = bytes((i * 7 + 13) % 256 for i in range(100))
HEADERS = {"source": "bench", "tenant": 42, "trace": "0af7651916cd43dd8448eb211c80319c"}
PREFETCH = 1000


def fill(url: str, queue: str, count: int) -> int:
    """Declare the stream, publish ``count`` messages with confirms; returns the last offset."""
    props = BasicProperties(headers=HEADERS)
    with aw_blocking.connect(url) as conn, conn.channel() as ch:
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_select(max_in_flight=5000)
        with ch.batch():
            for _ in range(count):
                ch.publish_async("", queue, BODY, props)
        ch.wait_for_confirms(timeout=300)
        offsets = ch.stream_offsets(queue)
    if offsets.last != count - 1:
        raise SystemExit(f"the stream holds offsets {offsets}, expected 0 .. {count - 1}")
    return count - 1


def amqwire_blocking(url: str, queue: str, last: int) -> tuple[float, float]:
    with aw_blocking.connect(url) as conn, conn.channel() as ch:
        seen = -1
        t0, c0 = time.perf_counter(), time.process_time()
        for message in ch.consume_stream(queue, offset=0, end=last, prefetch=PREFETCH):
            seen = message.stream_offset
        t1, c1 = time.perf_counter(), time.process_time()
    if seen != last:
        raise SystemExit(f"amqwire blocking ended at {seen}, not {last}")
    return t1 - t0, c1 - c0


def amqwire_asyncio(url: str, queue: str, last: int) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        async with aw_aio.connect(url) as conn, conn.channel() as ch:
            seen = -1
            t0, c0 = time.perf_counter(), time.process_time()
            async for message in await ch.consume_stream(queue, offset=0, end=last, prefetch=PREFETCH):
                seen = message.stream_offset
            t1, c1 = time.perf_counter(), time.process_time()
        if seen != last:
            raise SystemExit(f"amqwire asyncio ended at {seen}, not {last}")
        return t1 - t0, c1 - c0

    return asyncio.run(main())


def pika_blocking(url: str, queue: str, last: int) -> tuple[float, float]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=PREFETCH)
        state = {"count": 0, "seen": -1}

        def on_message(channel, method, properties, body):
            offset = properties.headers["x-stream-offset"]
            state["seen"] = offset
            state["count"] += 1
            if offset >= last:
                channel.basic_ack(method.delivery_tag, multiple=True)
                channel.stop_consuming()
            elif state["count"] % (PREFETCH // 2) == 0:
                channel.basic_ack(method.delivery_tag, multiple=True)

        t0, c0 = time.perf_counter(), time.process_time()
        ch.basic_consume(queue, on_message, arguments={"x-stream-offset": 0})
        ch.start_consuming()
        t1, c1 = time.perf_counter(), time.process_time()
        if state["seen"] != last:
            raise SystemExit(f"pika ended at {state['seen']}, not {last}")
        return t1 - t0, c1 - c0
    finally:
        conn.close()


ROWS = {"amqwire blocking": amqwire_blocking, "amqwire asyncio": amqwire_asyncio, "pika": pika_blocking}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="run the rows whose name contains this")
    args = parser.parse_args()
    queue = f"amqwire-bench-stream-{uuid.uuid4().hex[:8]}"
    print(f"filling {queue} with {args.count} messages (100 B, 3 headers) ...", file=sys.stderr)
    last = fill(args.url, queue, args.count)
    try:
        load_before = os.getloadavg()
        print(f"{'row':<18} {'best msg/s':>12} {'median msg/s':>13} {'client CPU us/msg':>18}")
        for name, fn in ROWS.items():
            if args.only not in name:
                continue
            runs = [fn(args.url, queue, last) for _ in range(args.repeats)]
            rates = [args.count / wall for wall, _ in runs]
            cpu = statistics.median(cpu for _, cpu in runs) / args.count * 1e6
            print(f"{name:<18} {max(rates):>12,.0f} {statistics.median(rates):>13,.0f} {cpu:>18.1f}", flush=True)
        load_after = os.getloadavg()
        print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
              f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} CPUs")
    finally:
        with aw_blocking.connect(args.url) as conn, conn.channel() as ch:
            ch.queue_delete(queue)


if __name__ == "__main__":
    main()
