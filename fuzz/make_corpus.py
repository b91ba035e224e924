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
import uuid
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


def _amqp10_seeds() -> tuple[list[bytes], list[bytes]]:
    """AMQP 1.0 values and messages, as the codec's encoder writes them."""
    from amqwire.codec.stream import amqp10 as A

    values = [
        None, True, 7, -70000, 2**40, 2**64 - 1, 1.5, "text \u00fc", b"\x00\xff", A.Symbol("x-opt"), A.UByte(1),
        A.UShort(2), A.UInt(0), A.UInt(300), A.ULong(5), A.Byte(-1), A.Short(-2), A.Long(3), A.Float(0.5),
        A.Char("\u00e9"), A.Timestamp(-1), datetime.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.timezone.utc),
        uuid.UUID(int=0x0123456789ABCDEF), A.Decimal32(b"1234"), A.Decimal64(b"12345678"), A.Decimal128(b"0123456789abcdef"),
        [], [1, "two", None, [3.0]], {"k": {"n": [A.Symbol("s")]}, 1: b""}, "x" * 300, list(range(300)),
        A.Described(A.Symbol("com:x"), [1, 2]), A.Described(0x70, None),
        A.Array([1, 2, 3]), A.Array([A.Symbol("a"), A.Symbol("b")]), A.Array(["s" * 300]), A.Array([True, False]),
        A.Array([], A.UInt), A.Array([[1], [2, "x"]]), A.Array([A.Array([A.UByte(1)])]),
        A.Array([A.UByte(1)], descriptor=0x42), A.Array([{"k": 1}]),
    ]
    properties = A.Properties(
        message_id=7, user_id=b"guest", to="/queues/q", subject="s", reply_to="r", correlation_id=uuid.UUID(int=1),
        content_type="application/json", content_encoding="gzip", absolute_expiry_time=1700000000000,
        creation_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), group_id="g", group_sequence=3,
        reply_to_group_id="rg")
    messages = [
        A.encode_message(b""), A.encode_message(b"x" * 100), A.encode_message(b"x" * 300),
        A.encode_message(b"body", properties=properties, application_properties={"k": "v", "n": 5, "t": True}),
        A.encode_message(A.Data([b"a", b"b"]), header=A.Header(durable=True, priority=5, ttl=60000),
                         message_annotations={"x-exchange": "", "x-routing-key": "rk", 7: A.UByte(1)}),
        A.encode_message(A.AmqpValue({"a": [1, 2.5, None]}), delivery_annotations={"d": 1}, footer={"f": b"\x00"}),
        A.encode_message(A.AmqpSequence([[1], ["two"]]), properties={"subject": "seq"}),
        A.encode_message(None, properties=A.Properties(message_id="m")),
        A.encode_message(b"\x00" * 70000, application_properties={"big": "y" * 1000}),
    ]
    return [A.encode_value(v) for v in values], messages


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
    amqp10_values, amqp10_messages = _amqp10_seeds()
    return {
        "amqp10_message": amqp10_messages,
        "amqp10_value": amqp10_values,
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
