"""The seed corpus of every fuzz target: valid inputs, generated (never hand-written bytes)
by the independent reference encoder of the tests (``tests/amqp_reference.py``, written
from the spec) and by the codec's own encoders.

    python fuzz/make_corpus.py [DIR]     # DIR/<target>/<sha1> files (default fuzz/corpus)

``seeds()`` gives the same inputs to ``tests/test_fuzz.py``.
"""
from __future__ import annotations

import datetime
import decimal
import hashlib
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import amqp_reference as R  # noqa: E402

import amqwire.codec as codec  # noqa: E402

RICH_TABLE = {
    "str": "text \u00fc",
    "bytes": b"\x00\xffraw",
    "true": True,
    "i8": -5,
    "i32": 70000,
    "i64": -(1 << 40),
    "float": 1.5,
    "decimal": decimal.Decimal("3.14"),
    "ts": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    "nested": {"a": 1, "list": [1, "two", None, [3.0]]},
    "void": None,
}
RICH_PROPERTIES = codec.BasicProperties(
    content_type="application/json", content_encoding="gzip", headers={"x-k": "v", "n": 7, "t": RICH_TABLE},
    delivery_mode=2, priority=9, correlation_id="c-1", reply_to="amq.rabbitmq.reply-to", expiration="60000",
    message_id="m-1", timestamp=datetime.datetime(2026, 5, 6, tzinfo=datetime.timezone.utc), type="t",
    user_id="guest", app_id="amqwire", cluster_id="",
)


def _method_frames(rnd: random.Random) -> list[bytes]:
    out = []
    for spec in R.METHOD_SPECS:
        if spec.content:
            continue
        for table in ({}, R.SMALL_TABLE):
            out.append(R.method_frame(spec, R.sample_values(spec, table), rnd.choice([0, 1, 7, 65535])))
    return out


def _contents(rnd: random.Random) -> list[bytes]:
    out = []
    for spec in R.METHOD_SPECS:
        if not spec.content:
            continue
        for size in (0, 1, 4088, 4089, 9000):
            props = R.properties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2) if size % 2 else b"\x00\x00"
            body = bytes(rnd.getrandbits(8) for _ in range(size))
            out.append(R.content(rnd.choice([1, 2]), spec, R.sample_values(spec), body, props, frame_max=4096))
    out.append(codec.encode_publish(3, "amq.topic", "a.b", b"x" * 5000, RICH_PROPERTIES, frame_max=4096))
    return out


def seeds() -> dict[str, list[bytes]]:
    """Valid inputs for each target (for the parsers, a config byte then a stream)."""
    rnd = random.Random(2026)
    methods, contents = _method_frames(rnd), _contents(rnd)
    streams = [m for m in methods] + contents + [R.HEARTBEAT_FRAME, b"".join(rnd.sample(methods, 5)) + contents[0]]
    parser_seeds = []
    for i, stream in enumerate(streams):
        config = rnd.randrange(256) & ~1           # bit 0: a protocol header comes first
        parser_seeds.append(bytes([config]) + stream)
        if i % 8 == 0:
            parser_seeds.append(bytes([config | 1]) + R.PROTOCOL_HEADER + stream)
    payloads = [R.method_payload(spec, R.sample_values(spec, table)) for spec in R.METHOD_SPECS for table in ({}, R.SMALL_TABLE)]
    tables = [codec.encode_table(t) for t in ({}, R.SMALL_TABLE, RICH_TABLE, {"deep": {"er": {"est": [[[]]]}}})]
    headers = [
        codec.BasicProperties().encode(),
        RICH_PROPERTIES.encode(),
        codec.BasicProperties(delivery_mode=1, priority=0, message_id="").encode(),
        R.properties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2),
    ]
    publishes = [c for c in contents if c[7:11] == b"\x00\x3c\x00\x28"]   # basic.publish rows, as Spark writes them
    publishes += [codec.encode_publish(0, "ex", "rk", bytes(n), RICH_PROPERTIES, frame_max=0) for n in (0, 10, 70000)]
    return {
        "frame_parser": parser_seeds,
        "command_parser": parser_seeds,
        "decode_method": payloads,
        "decode_table": tables,
        "content_header": headers,
        "spark_decoder": publishes,
    }


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else REPO / "fuzz" / "corpus"
    for target, inputs in seeds().items():
        folder = root / target
        folder.mkdir(parents=True, exist_ok=True)
        for data in inputs:
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        print(f"{target}: {len(inputs)} seeds in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
