"""Stream messages to an Arrow record batch: the Spark stream source's per-batch work.

``--count`` deliveries from a stream (100-byte bodies, 3 headers plus the x-stream-offset
header RabbitMQ adds) are written as frames and parsed once by the codec into
``amqwire.client.Message`` objects, as the stream consumer hands them to the source.  Then,
``--repeats`` times each, in the same run:

- codec parse: the frames to Messages (``CommandParser(delivery_type=Message)``), the
  anchor: what the client pays per message before any batch is built
- stream_batch (Cython): ``amqwire.spark.stream_batch.build_batch(messages, stream)``
- pyarrow from lists: the same batch built the plain way, ``pa.array`` over lists of
  Python values (one dict/tuple per row for properties and headers), checked equal
- stream_rows (Python): ``amqwire.spark.stream_rows.build_batch``, when that module exists

Rows/s best and median, the ratio of the medians to the plain pyarrow builder, the
median CPU time per row of this process (steadier than wall time on a loaded machine),
and the load average around the run.  Nothing needs a broker.

    python -m bench.stream_batch_bench --count 100000 --repeats 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import time

import pyarrow as pa

import amqwire.codec as codec
from amqwire.client import Message
from amqwire.spark.decode import PROPERTY_FIELDS, header_text
from amqwire.spark.stream_batch import build_batch, stream_schema

BODY = bytes((i * 7 + 13) % 256 for i in range(100))
HEADERS = {"source": "bench", "tenant": 42, "trace": "0af7651916cd43dd8448eb211c80319c"}
STREAM = "orders"
FIRST_OFFSET = 1_000_000


def frames(count: int) -> bytes:
    """``count`` basic.deliver commands as RabbitMQ sends them from a stream queue."""
    entries = codec.encode_table(HEADERS)[4:]
    key = b"x-stream-offset"
    out = bytearray()
    for i in range(count):
        table = entries + bytes([len(key)]) + key + b"l" + struct.pack(">q", FIRST_OFFSET + i)
        props = struct.pack(">HI", 0x2000, len(table)) + table
        deliver = codec.BasicDeliver(consumer_tag="ctag", delivery_tag=i + 1, redelivered=False,
                                     exchange="", routing_key=STREAM)
        out += deliver.encode(1)
        header = struct.pack(">HHQ", 60, 0, len(BODY)) + props
        out += struct.pack(">BHI", 2, 1, len(header)) + header + b"\xce"
        out += struct.pack(">BHI", 3, 1, len(BODY)) + BODY + b"\xce"
    return bytes(out)


def parse(data: bytes) -> list:
    return codec.CommandParser(frame_max=131072, delivery_type=Message).feed(data)


def pyarrow_from_lists(messages: list, stream: str) -> pa.RecordBatch:
    """The plain builder: pa.array over lists of Python values (headers without the
    broker's x-stream-offset, as the source's)."""
    ts = pa.timestamp("us", tz="UTC")
    kinds = {"string": pa.string(), "int32": pa.int32(), "timestamp": ts}
    props = [m.properties for m in messages]
    columns = [
        pa.array([m.body for m in messages], pa.binary()),
        pa.array([stream] * len(messages), pa.string()),
        pa.array([m.stream_offset for m in messages], pa.int64()),
        pa.array([p.timestamp for p in props], ts),
        pa.array([m.exchange for m in messages], pa.string()),
        pa.array([m.routing_key for m in messages], pa.string()),
        pa.array([{name: getattr(p, name) for name, _ in PROPERTY_FIELDS} for p in props],
                 pa.struct([(name, kinds[kind]) for name, kind in PROPERTY_FIELDS])),
        pa.array([[(k, header_text(v)) for k, v in (p.headers or {}).items() if k != "x-stream-offset"] or None
                  for p in props], pa.map_(pa.string(), pa.string())),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=stream_schema())


def timed(fn, *args) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    data = frames(args.count)
    messages = parse(data)
    if len(messages) != args.count or messages[-1].stream_offset != FIRST_OFFSET + args.count - 1:
        raise SystemExit("the frames did not parse into the expected messages")
    expected = pyarrow_from_lists(messages, STREAM)
    if not build_batch(messages, STREAM).equals(expected):
        raise SystemExit("stream_batch.build_batch differs from the pyarrow builder")

    rows = {
        "codec parse": (parse, data),
        "stream_batch (Cython)": (build_batch, messages, STREAM),
        "pyarrow from lists": (pyarrow_from_lists, messages, STREAM),
    }
    try:
        from amqwire.spark import stream_rows
    except ImportError:
        stream_rows = None
    if stream_rows is not None:
        if not stream_rows.build_batch(messages, STREAM).equals(expected):
            raise SystemExit("stream_rows.build_batch differs from the pyarrow builder")
        rows["stream_rows (Python)"] = (stream_rows.build_batch, messages, STREAM)

    load_before = os.getloadavg()
    medians = {}
    print(f"{args.count:,} messages of {len(BODY)} B with {len(HEADERS)} headers (+ x-stream-offset), "
          f"best and median of {args.repeats}")
    print(f"{'row':<24} {'best rows/s':>13} {'median rows/s':>14} {'vs pyarrow':>11} {'CPU ns/row':>11}")
    results = {}
    for name, (fn, *fn_args) in rows.items():
        results[name] = [timed(fn, *fn_args) for _ in range(args.repeats)]
        medians[name] = args.count / statistics.median(wall for wall, _ in results[name])
    for name, runs in results.items():
        ratio = medians[name] / medians["pyarrow from lists"]
        best = args.count / min(wall for wall, _ in runs)
        cpu = statistics.median(cpu for _, cpu in runs) / args.count * 1e9
        print(f"{name:<24} {best:>13,.0f} {medians[name]:>14,.0f} {ratio:>10.1f}x {cpu:>11,.0f}")
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
