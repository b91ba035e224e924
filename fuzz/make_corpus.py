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
import amqwire.codec.stream as S  # noqa: E402
import stream_reference as SR  # noqa: E402

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


def _stream_chunks() -> list[bytes]:
    """Chunks as a Deliver carries them (stream_reference.py), simple and sub-entries."""
    return [
        SR.chunk([SR.data_section(b"hello")] * 3, 0),
        SR.chunk([b"a", ("sub", [b"b", b"cc"], 0), b"d"], 1000, trailer=b"t" * 17),
        SR.chunk([("sub", [SR.data_section(b"g%d" % i) for i in range(20)], 1)], 2**40),
        SR.chunk([("sub", [b"z" * 30, b"y"], 4), b"after"], 7, filter_size=16),
        SR.chunk([b"\x00\x01snapshot"], 3, chunk_type=2),
        SR.chunk([], 5),
        SR.chunk([b"x"], 9, trailer=b"tt", include_trailer=True),
    ]


def _stream_commands(chunks: list[bytes]) -> list[bytes]:
    """One frame per command kind, by the codec's encoders."""
    commands = [
        S.DeclarePublisher(1, 2, "ref", "s"), S.DeclarePublisherResponse(1, 1),
        S.Publish(3, [(1, b"ab"), (2, S.encode_subentry([b"x", b"yz"], "gzip"))]),
        S.Publish(3, [(1, b"ab")], ["f"]), S.PublishConfirm(3, [1, 2, 3]), S.PublishError(3, [(5, 18)]),
        S.QueryPublisherSequence(2, "ref", "s"), S.QueryPublisherSequenceResponse(2, 1, 99),
        S.DeletePublisher(3, 2), S.DeletePublisherResponse(3, 1),
        S.Subscribe(4, 1, "s", S.OFFSET_TYPE_OFFSET, 10, 5, {"name": "c"}), S.Subscribe(4, 1, "s", S.OFFSET_TYPE_TIMESTAMP, -5),
        S.SubscribeResponse(4, 1), S.Credit(1, 7), S.CreditResponse(4, 1), S.StoreOffset("c", "s", 5),
        S.QueryOffset(5, "c", "s"), S.QueryOffsetResponse(5, 19, 0), S.Unsubscribe(6, 1), S.UnsubscribeResponse(6, 1),
        S.Create(7, "s", {"max-age": "1h"}), S.CreateResponse(7, 1), S.Delete(8, "s"), S.DeleteResponse(8, 1),
        S.Metadata(9, ["a", "b"]), S.MetadataResponse(9, [(0, "h", 5552)], [("a", 1, 0, [0]), ("b", 2, 65535, [])]),
        S.MetadataUpdate(6, "s"), S.PeerProperties(10, {"product": "x"}), S.PeerPropertiesResponse(10, 1, {"v": "3"}),
        S.SaslHandshake(11), S.SaslHandshakeResponse(11, 1, ["PLAIN"]), S.SaslAuthenticate(12, "PLAIN", b"\0u\0p"),
        S.SaslAuthenticate(12, "EXTERNAL", None), S.SaslAuthenticateResponse(12, 10, b"nonce"), S.Tune(1 << 20, 60),
        S.TuneResponse(1 << 20, 0), S.Open(13, "/"), S.OpenResponse(13, 1, {"advertised_host": "h"}), S.OpenResponse(13, 12),
        S.Close(14, 1, "bye"), S.CloseResponse(14, 1), S.Heartbeat(), S.Route(15, "rk", "ss"), S.RouteResponse(15, 1, ["p"]),
        S.Partitions(16, "ss"), S.PartitionsResponse(16, 1, ["p0", "p1"]), S.ConsumerUpdate(17, 1, True),
        S.ConsumerUpdateResponse(17, 1, S.OFFSET_TYPE_OFFSET, 5), S.ExchangeCommandVersions(18, [(8, 1, 2)]),
        S.ExchangeCommandVersionsResponse(18, 1, [(2, 1, 2)]), S.StreamStats(19, "s"),
        S.StreamStatsResponse(19, 1, {"committed_chunk_id": -1}), S.CreateSuperStream(20, "ss", ["p0"], ["0"], {}),
        S.CreateSuperStreamResponse(20, 1), S.DeleteSuperStream(21, "ss"), S.DeleteSuperStreamResponse(21, 1),
        S.ResolveOffsetSpec(22, "s", S.OFFSET_TYPE_FIRST, 0, {"filter.0": "a"}), S.ResolveOffsetSpecResponse(22, 1, 4, 9),
    ]
    frames = [c.encode() for c in commands]
    frames += [S.Deliver(1, c).encode() for c in chunks] + [S.Deliver(2, chunks[0], 77).encode()]
    frames += [S.encode_publish(1, 1, [SR.data_section(b"m%d" % i) for i in range(10)]),
               S.encode_publish_values(1, 1, [b"v"] * 5), S.encode_publish_subentry(1, 1, [b"a", b"b"], "zstd"),
               SR.frame(0x0018, 1, SR.u32(1) + SR.u16(2) + SR.u32(0))]       # RabbitMQ 3.10's Route response
    return frames


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
    chunks = _stream_chunks()
    frames = _stream_commands(chunks)
    stream_seeds = [bytes([i * 37 % 256]) + frame for i, frame in enumerate(frames)]
    stream_seeds += [bytes([i]) + b"".join(rnd.sample(frames, 6)) for i in range(12)]
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
        "stream_parser": stream_seeds,
        "stream_frame": frames,
        "stream_chunk": chunks,
        "spark_chunks": chunks + _spark_chunks(amqp10_messages),
    }


def _spark_chunks(messages: list[bytes]) -> list[bytes]:
    """Chunks of AMQP 1.0 messages, as the Spark stream source reads them: simple entries,
    an uncompressed and a gzip sub-entry, and a message among raw records."""
    import stream_reference as SR

    return [
        SR.chunk(messages, 0),
        SR.chunk([("sub", messages[:8], 0)], 100),
        SR.chunk([("sub", messages[8:16], 1), messages[0]], 2**33),
        SR.chunk([b"raw record", messages[-1], b""], 7),
    ]


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
