"""The stream-protocol client (amqwire.client.stream) against a broker with the stream plugin.

For each transport: publish ``--messages`` messages of ``--size`` bytes with ``send()`` per
message (each with its future), flush, then consume them all from "first"; and a bare
publisher beside it (the client's sans-IO core on a plain socket, frames of 100 pre-made
bodies, a window of 10,000, no futures) to set the rates against.  Prints the wall-clock
rate and the client's own CPU per message (``time.process_time``: what the machine's load
does not change), with the load average.

    python -m bench.stream_client_bench --url rabbitmq-stream://guest:guest@localhost:5552/ [--messages 200000]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time
import uuid

from amqwire.client import stream
from amqwire.client.stream import aio
from amqwire.client.stream.protocol import Confirmed, HandshakeDone, Reply, StreamProtocol
from amqwire.client.stream.url import parse_stream_url


def _line(what: str, count: int, seconds: float, cpu: float) -> str:
    return f"{what:<28} {count / seconds:>12,.0f} msg/s {cpu / count * 1e6:>7.2f} us CPU/msg"


def blocking(url: str, count: int, body: bytes) -> list[str]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    lines = []
    with stream.connect(url) as conn:
        conn.create_stream(name)
        try:
            with conn.producer(name) as producer:
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(count):
                    producer.send(body)
                producer.flush()
                lines.append(_line("blocking publish", count, time.perf_counter() - start, time.process_time() - cpu))
            with conn.consumer(name, offset="first", end=count - 1) as consumer:
                start, cpu = time.perf_counter(), time.process_time()
                read = sum(1 for _ in consumer)
                lines.append(_line("blocking consume", read, time.perf_counter() - start, time.process_time() - cpu))
        finally:
            conn.delete_stream(name)
    return lines


async def asyncio_run(url: str, count: int, body: bytes) -> list[str]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    lines = []
    async with aio.connect(url) as conn:
        await conn.create_stream(name)
        try:
            async with conn.producer(name) as producer:
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(count):
                    await producer.send(body)
                await producer.flush()
                lines.append(_line("asyncio publish", count, time.perf_counter() - start, time.process_time() - cpu))
            async with conn.consumer(name, offset="first", end=count - 1) as consumer:
                start, cpu = time.perf_counter(), time.process_time()
                read = 0
                async for _ in consumer:
                    read += 1
                lines.append(_line("asyncio consume", read, time.perf_counter() - start, time.process_time() - cpu))
        finally:
            await conn.delete_stream(name)
    return lines


def bare(url: str, count: int, body: bytes) -> str:
    """Frames of 100 pre-made bodies on a plain socket, a window of 10,000 confirms."""
    params = parse_stream_url(url)
    name = f"bench-bare-{uuid.uuid4().hex[:8]}"
    with stream.connect(url) as conn:
        conn.create_stream(name)
    sock = socket.create_connection((params.host, params.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    core = StreamProtocol(params.username, params.password, params.vhost)
    core.initiate()

    def until(kind: type) -> None:
        while True:
            for piece in core.buffers_to_send():
                sock.sendall(piece)
            events = core.receive(sock.recv(1 << 20))
            for piece in core.buffers_to_send():
                sock.sendall(piece)
            if any(isinstance(e, kind) for e in events):
                return

    until(HandshakeDone)
    core.declare_publisher(0, None, name)
    until(Reply)
    bodies = [body] * 100
    sent = confirmed = 0
    start, cpu = time.perf_counter(), time.process_time()
    while confirmed < count:
        while sent < count and sent - confirmed < 10_000:
            core.publish_bodies(0, sent + 1, bodies)
            sent += 100
        for piece in core.buffers_to_send():
            sock.sendall(piece)
        for event in core.receive(sock.recv(1 << 20)):
            if isinstance(event, Confirmed):
                confirmed += len(event.publishing_ids)
    line = _line("bare publisher (no futures)", count, time.perf_counter() - start, time.process_time() - cpu)
    sock.close()
    with stream.connect(url) as conn:
        conn.delete_stream(name)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="rabbitmq-stream://guest:guest@localhost:5552/")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    body = b"x" * args.size
    print(f"load average {os.getloadavg()[0]:.2f}, {args.messages} messages of {args.size} B")
    print(bare(args.url, args.messages - args.messages % 100, body))
    for line in blocking(args.url, args.messages, body):
        print(line)
    for line in asyncio.run(asyncio_run(args.url, args.messages, body)):
        print(line)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
