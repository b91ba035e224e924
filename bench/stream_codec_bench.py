"""The stream protocol codec's hot paths, alone (no broker): best and median of the repeats.

- parse: Deliver frames, each a chunk of 100 records of 100 B, fed to a StreamParser in
  64 KiB reads (as a socket gives them): frames/s and MB/s;
- chunk_messages(decode=False): the records of such a chunk as bytes: records/s;
- chunk_messages(decode=True): each record an AMQP 1.0 Message: records/s;
- encode_publish: 100 pre-encoded messages of 100 B per frame: messages/s;
- encode_publish_values: 100 bodies of 100 B made into AMQP 1.0 messages in the frame: messages/s.

    python -m bench.stream_codec_bench [--repeats 5] [--frames 2000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
import zlib

import amqwire.codec.stream as S

RECORDS = 100
RECORD = 100


def _chunk(first_offset: int) -> bytes:
    """A chunk of RECORDS AMQP 1.0 messages of RECORD bytes (one data section each)."""
    body = bytes((i * 7 + 13) % 256 for i in range(RECORD - 5))
    record = b"\x00\x53\x75\xa0" + bytes([len(body)]) + body
    data = b"".join(struct.pack(">I", len(record)) + record for _ in range(RECORDS))
    header = struct.pack(">BBHIqQQIIIB3x", 0x50, 0, RECORDS, RECORDS, int(time.time() * 1000), 1, first_offset,
                         zlib.crc32(data), len(data), 0, 0)
    return header + data


def _time(fn, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--frames", type=int, default=2000)
    args = parser.parse_args(argv)

    chunk = _chunk(0)
    stream = b"".join(S.Deliver(1, chunk).encode() for _ in range(args.frames))
    reads = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]

    def parse():
        p = S.StreamParser(1 << 20)
        n = 0
        for data in reads:
            n += len(p.feed(data))
        assert n == args.frames

    count = 2000
    rows = []
    best, median = _time(parse, args.repeats)
    rows.append(("parse Deliver (100 x 100 B)", args.frames / best, args.frames / median, "frames/s",
                 f"{len(stream) / best / 1e6:.0f} MB/s"))
    best, median = _time(lambda: [S.chunk_messages(chunk, 0, decode=False) for _ in range(count)], args.repeats)
    rows.append(("chunk_messages decode=False", count * RECORDS / best, count * RECORDS / median, "records/s", ""))
    best, median = _time(lambda: [S.chunk_messages(chunk, 0) for _ in range(count)], args.repeats)
    rows.append(("chunk_messages decode=True", count * RECORDS / best, count * RECORDS / median, "records/s", ""))
    messages = [chunk[48 + 4 : 48 + 4 + RECORD]] * RECORDS
    best, median = _time(lambda: [S.encode_publish(1, i * RECORDS, messages) for i in range(count)], args.repeats)
    rows.append(("encode_publish (100 x 100 B)", count * RECORDS / best, count * RECORDS / median, "messages/s", ""))
    bodies = [m[5:] for m in messages]
    best, median = _time(lambda: [S.encode_publish_values(1, i * RECORDS, bodies) for i in range(count)], args.repeats)
    rows.append(("encode_publish_values (100 x 95 B)", count * RECORDS / best, count * RECORDS / median, "messages/s", ""))

    print(f"load average {os.getloadavg()[0]:.1f}; best / median of {args.repeats}")
    for name, best_rate, median_rate, unit, extra in rows:
        print(f"{name:38} {best_rate / 1e6:8.2f} M / {median_rate / 1e6:6.2f} M {unit} {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
