"""The stream protocol's frames (amqwire.codec.stream.frames): every command's bytes against
an independent reference (tests/stream_reference.py, and literal hex for a few), decoded
whole, byte by byte, with trailing bytes and cut at every byte; the parser's errors,
limits and hot paths; hypothesis round trips."""
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amqwire.codec.stream as S
from amqwire.codec import CodecError
from amqwire.codec.stream import StreamFrameError

import stream_reference as R
from stream_reference import frame, i64, string, string_map, strings, u8, u16, u32, u64

CLIENT, SERVER = "client", "server"

# (command, its bytes, who sends it)
VECTORS = [
    (S.DeclarePublisher(7, 3, "ref", "s1"), frame(0x0001, 1, u32(7) + u8(3) + string("ref") + string("s1")), CLIENT),
    (S.DeclarePublisher(7, 3, "", "s1"), frame(0x0001, 1, u32(7) + u8(3) + string("") + string("s1")), CLIENT),
    (S.DeclarePublisherResponse(7, 1), frame(0x8001, 1, u32(7) + u16(1)), SERVER),
    (S.Publish(3, [(1, b"ab"), (2, b"")]),
     frame(0x0002, 1, u8(3) + u32(2) + u64(1) + u32(2) + b"ab" + u64(2) + u32(0)), CLIENT),
    (S.Publish(3, [(9, S.SubEntry(1, 2, 10, b"xyz"))]),
     frame(0x0002, 1, u8(3) + u32(1) + u64(9) + b"\x90" + u16(2) + u32(10) + u32(3) + b"xyz"), CLIENT),
    (S.Publish(3, [(1, b"ab"), (2, b"c")], filter_values=["red", None]),
     frame(0x0002, 2, u8(3) + u32(2) + u64(1) + string("red") + u32(2) + b"ab" + u64(2) + b"\xff\xff" + u32(1) + b"c"),
     CLIENT),
    (S.PublishConfirm(3, [1, 2, 2**64 - 1]), frame(0x0003, 1, u8(3) + u32(3) + u64(1) + u64(2) + u64(2**64 - 1)), SERVER),
    (S.PublishError(3, [(5, 0x12), (6, 0x10)]), frame(0x0004, 1, u8(3) + u32(2) + u64(5) + u16(0x12) + u64(6) + u16(0x10)),
     SERVER),
    (S.QueryPublisherSequence(8, "ref", "s1"), frame(0x0005, 1, u32(8) + string("ref") + string("s1")), CLIENT),
    (S.QueryPublisherSequenceResponse(8, 1, 41), frame(0x8005, 1, u32(8) + u16(1) + u64(41)), SERVER),
    (S.DeletePublisher(9, 3), frame(0x0006, 1, u32(9) + u8(3)), CLIENT),
    (S.DeletePublisherResponse(9, 0x12), frame(0x8006, 1, u32(9) + u16(0x12)), SERVER),
    (S.Subscribe(10, 1, "s1", S.OFFSET_TYPE_FIRST, 0, 10), frame(0x0007, 1, u32(10) + u8(1) + string("s1") + u16(1) + u16(10)),
     CLIENT),
    (S.Subscribe(10, 1, "s1", S.OFFSET_TYPE_LAST, credit=2), frame(0x0007, 1, u32(10) + u8(1) + string("s1") + u16(2) + u16(2)),
     CLIENT),
    (S.Subscribe(10, 1, "s1", S.OFFSET_TYPE_NEXT, credit=2), frame(0x0007, 1, u32(10) + u8(1) + string("s1") + u16(3) + u16(2)),
     CLIENT),
    (S.Subscribe(10, 255, "s1", S.OFFSET_TYPE_OFFSET, 2**64 - 1, 65535, {"name": "c1", "single-active-consumer": "true"}),
     frame(0x0007, 1, u32(10) + u8(255) + string("s1") + u16(4) + u64(2**64 - 1) + u16(65535)
           + string_map({"name": "c1", "single-active-consumer": "true"})), CLIENT),
    (S.Subscribe(10, 1, "s1", S.OFFSET_TYPE_TIMESTAMP, -1000, 1),
     frame(0x0007, 1, u32(10) + u8(1) + string("s1") + u16(5) + i64(-1000) + u16(1)), CLIENT),
    (S.SubscribeResponse(10, 0x03), frame(0x8007, 1, u32(10) + u16(3)), SERVER),
    (S.Deliver(1, b"\x50chunk"), frame(0x0008, 1, u8(1) + b"\x50chunk"), SERVER),
    (S.Deliver(2, b"\x50chunk", 77), frame(0x0008, 2, u8(2) + u64(77) + b"\x50chunk"), SERVER),
    (S.Credit(1, 32767), frame(0x0009, 1, u8(1) + u16(32767)), CLIENT),
    (S.CreditResponse(4, 9), frame(0x8009, 1, u16(4) + u8(9)), SERVER),
    (S.StoreOffset("c1", "s1", 12345), frame(0x000A, 1, string("c1") + string("s1") + u64(12345)), CLIENT),
    (S.QueryOffset(11, "c1", "s1"), frame(0x000B, 1, u32(11) + string("c1") + string("s1")), CLIENT),
    (S.QueryOffsetResponse(11, 0x13, 0), frame(0x800B, 1, u32(11) + u16(0x13) + u64(0)), SERVER),
    (S.Unsubscribe(12, 1), frame(0x000C, 1, u32(12) + u8(1)), CLIENT),
    (S.UnsubscribeResponse(12, 1), frame(0x800C, 1, u32(12) + u16(1)), SERVER),
    (S.Create(13, "s1", {"max-length-bytes": "1000000", "max-age": "1h"}),
     frame(0x000D, 1, u32(13) + string("s1") + string_map({"max-length-bytes": "1000000", "max-age": "1h"})), CLIENT),
    (S.Create(13, "s1"), frame(0x000D, 1, u32(13) + string("s1") + u32(0)), CLIENT),
    (S.CreateResponse(13, 0x05), frame(0x800D, 1, u32(13) + u16(5)), SERVER),
    (S.Delete(14, "s1"), frame(0x000E, 1, u32(14) + string("s1")), CLIENT),
    (S.DeleteResponse(14, 1), frame(0x800E, 1, u32(14) + u16(1)), SERVER),
    (S.Metadata(15, ["s1", "s2"]), frame(0x000F, 1, u32(15) + strings(["s1", "s2"])), CLIENT),
    (S.MetadataResponse(15, [(0, "node-a", 5552), (1, "node-b", 5553)], [("s1", 1, 0, [1]), ("s2", 2, 0xFFFF, [])]),
     frame(0x800F, 1, u32(15) + u32(2) + u16(0) + string("node-a") + u32(5552) + u16(1) + string("node-b") + u32(5553)
           + u32(2) + string("s1") + u16(1) + u16(0) + u32(1) + u16(1) + string("s2") + u16(2) + u16(0xFFFF) + u32(0)),
     SERVER),
    (S.MetadataUpdate(6, "s1"), frame(0x0010, 1, u16(6) + string("s1")), SERVER),
    (S.PeerProperties(16, {"product": "amqwire"}), frame(0x0011, 1, u32(16) + string_map({"product": "amqwire"})), CLIENT),
    (S.PeerPropertiesResponse(16, 1, {"version": "3.10.8"}), frame(0x8011, 1, u32(16) + u16(1) + string_map({"version": "3.10.8"})),
     SERVER),
    (S.SaslHandshake(17), frame(0x0012, 1, u32(17)), CLIENT),
    (S.SaslHandshakeResponse(17, 1, ["AMQPLAIN", "PLAIN"]), frame(0x8012, 1, u32(17) + u16(1) + strings(["AMQPLAIN", "PLAIN"])),
     SERVER),
    (S.SaslAuthenticate(18, "PLAIN", b"\0guest\0guest"),
     frame(0x0013, 1, u32(18) + string("PLAIN") + u32(12) + b"\0guest\0guest"), CLIENT),
    (S.SaslAuthenticate(18, "EXTERNAL", None), frame(0x0013, 1, u32(18) + string("EXTERNAL") + b"\xff\xff\xff\xff"), CLIENT),
    (S.SaslAuthenticate(18, "EXTERNAL", b""), frame(0x0013, 1, u32(18) + string("EXTERNAL") + u32(0)), CLIENT),
    (S.SaslAuthenticateResponse(18, 1), frame(0x8013, 1, u32(18) + u16(1)), SERVER),
    (S.SaslAuthenticateResponse(18, 0x0A, b"nonce"), frame(0x8013, 1, u32(18) + u16(0x0A) + u16(5) + b"nonce"), SERVER),
    (S.Tune(1048576, 60), frame(0x0014, 1, u32(1048576) + u32(60)), SERVER),
    (S.TuneResponse(131072, 0), frame(0x8014, 1, u32(131072) + u32(0)), CLIENT),
    (S.Open(19, "/"), frame(0x0015, 1, u32(19) + string("/")), CLIENT),
    (S.OpenResponse(19, 1, {"advertised_host": "localhost", "advertised_port": "5552"}),
     frame(0x8015, 1, u32(19) + u16(1) + string_map({"advertised_host": "localhost", "advertised_port": "5552"})), SERVER),
    (S.OpenResponse(19, 0x0C), frame(0x8015, 1, u32(19) + u16(0x0C)), SERVER),
    (S.Close(20, 1, "bye"), frame(0x0016, 1, u32(20) + u16(1) + string("bye")), CLIENT),
    (S.Close(1, 0x0D, "unknown frame"), frame(0x0016, 1, u32(1) + u16(0x0D) + string("unknown frame")), SERVER),
    (S.CloseResponse(20, 1), frame(0x8016, 1, u32(20) + u16(1)), SERVER),
    (S.CloseResponse(1, 1), frame(0x8016, 1, u32(1) + u16(1)), CLIENT),
    (S.Heartbeat(), frame(0x0017, 1), SERVER),
    (S.Route(21, "eu", "orders"), frame(0x0018, 1, u32(21) + string("eu") + string("orders")), CLIENT),
    (S.RouteResponse(21, 1, ["orders-eu"]), frame(0x8018, 1, u32(21) + u16(1) + strings(["orders-eu"])), SERVER),
    (S.Partitions(22, "orders"), frame(0x0019, 1, u32(22) + string("orders")), CLIENT),
    (S.PartitionsResponse(22, 1, ["orders-0", "orders-1"]), frame(0x8019, 1, u32(22) + u16(1) + strings(["orders-0", "orders-1"])),
     SERVER),
    (S.ConsumerUpdate(23, 1, True), frame(0x001A, 1, u32(23) + u8(1) + u8(1)), SERVER),
    (S.ConsumerUpdate(23, 1, False), frame(0x001A, 1, u32(23) + u8(1) + u8(0)), SERVER),
    (S.ConsumerUpdateResponse(23, 1, S.OFFSET_TYPE_NONE), frame(0x801A, 1, u32(23) + u16(1) + u16(0)), CLIENT),
    (S.ConsumerUpdateResponse(23, 1, S.OFFSET_TYPE_OFFSET, 500), frame(0x801A, 1, u32(23) + u16(1) + u16(4) + u64(500)), CLIENT),
    (S.ExchangeCommandVersions(24, [(0x0008, 1, 2), (0x0002, 1, 2)]),
     frame(0x001B, 1, u32(24) + u32(2) + u16(8) + u16(1) + u16(2) + u16(2) + u16(1) + u16(2)), CLIENT),
    (S.ExchangeCommandVersionsResponse(24, 1, [(0x0001, 1, 1)]),
     frame(0x801B, 1, u32(24) + u16(1) + u32(1) + u16(1) + u16(1) + u16(1)), SERVER),
    (S.StreamStats(25, "s1"), frame(0x001C, 1, u32(25) + string("s1")), CLIENT),
    (S.StreamStatsResponse(25, 1, {"first_chunk_id": 0, "committed_chunk_id": -1}),
     frame(0x801C, 1, u32(25) + u16(1) + u32(2) + string("first_chunk_id") + i64(0) + string("committed_chunk_id") + i64(-1)),
     SERVER),
    (S.CreateSuperStream(26, "orders", ["orders-0", "orders-1"], ["0", "1"], {"max-age": "1h"}),
     frame(0x001D, 1, u32(26) + string("orders") + strings(["orders-0", "orders-1"]) + strings(["0", "1"])
           + string_map({"max-age": "1h"})), CLIENT),
    (S.CreateSuperStreamResponse(26, 1), frame(0x801D, 1, u32(26) + u16(1)), SERVER),
    (S.DeleteSuperStream(27, "orders"), frame(0x001E, 1, u32(27) + string("orders")), CLIENT),
    (S.DeleteSuperStreamResponse(27, 1), frame(0x801E, 1, u32(27) + u16(1)), SERVER),
    (S.ResolveOffsetSpec(28, "s1", S.OFFSET_TYPE_TIMESTAMP, 1_700_000_000_000, {"filter.0": "red"}),
     frame(0x001F, 1, u32(28) + string("s1") + u16(5) + i64(1_700_000_000_000) + string_map({"filter.0": "red"})), CLIENT),
    (S.ResolveOffsetSpec(28, "s1", S.OFFSET_TYPE_FIRST), frame(0x001F, 1, u32(28) + string("s1") + u16(1)), CLIENT),
    (S.ResolveOffsetSpecResponse(28, 1, 4, 99), frame(0x801F, 1, u32(28) + u16(1) + u16(4) + u64(99)), SERVER),
]
IDS = [f"{type(c).__name__}-{i}" for i, (c, _, _) in enumerate(VECTORS)]
ALL_BYTES = b"".join(data for _, data, _ in VECTORS)


def test_every_command_of_the_protocol_has_a_vector():
    """Every key of PROTOCOL.adoc (up to ResolveOffsetSpec, 0x1f), requests and responses."""
    covered = {type(c) for c, _, _ in VECTORS}
    assert covered == set(S.COMMANDS.values())
    assert sorted(S.COMMAND_NAMES) == list(range(1, 0x20))
    assert len(S.COMMANDS) == 55
    for key, cls in S.COMMANDS.items():
        assert cls.KEY == key and cls.__name__.startswith(S.COMMAND_NAMES[key & 0x7FFF])
        assert cls.__name__.endswith("Response") == bool(key & S.RESPONSE_FLAG)


def test_literal_bytes():
    assert S.Heartbeat().encode() == bytes.fromhex("00000004 0017 0001")
    assert S.Credit(1, 10).encode() == bytes.fromhex("00000007 0009 0001 01 000a")
    assert S.Tune(1048576, 60).encode() == bytes.fromhex("0000000c 0014 0001 00100000 0000003c")
    assert S.DeclarePublisher(1, 2, "ref", "stream").encode() == bytes.fromhex(
        "00000016 0001 0001 00000001 02 0003 726566 0006 73747265616d")
    assert S.Deliver(0, b"\x50").encode() == bytes.fromhex("00000006 0008 0001 00 50")


@pytest.mark.parametrize("command,data,sender", VECTORS, ids=IDS)
def test_encodes_to_its_vector_and_decodes_back(command, data, sender):
    assert command.encode() == data
    assert S.decode_frame(data, sender=sender) == command
    assert S.decode_frame(data, sender="any") == command
    assert S.decode_frame(bytearray(data), sender=sender) == command
    assert S.decode_frame(memoryview(data), sender=sender) == command
    again = S.decode_frame(data, sender=sender)
    assert repr(again) == repr(command) and again.encode() == data
    assert again.version == struct.unpack(">H", data[6:8])[0]


@pytest.mark.parametrize("command,data,sender", VECTORS, ids=IDS)
def test_fed_byte_by_byte_and_with_trailing_bytes(command, data, sender):
    parser = S.StreamParser(sender=sender)
    got = []
    for i in range(len(data)):
        got += parser.feed(data[i : i + 1])
        assert parser.buffered == (0 if i == len(data) - 1 else i + 1)
    assert got == [command]
    parser = S.StreamParser(sender=sender)
    assert parser.feed(data + data[:5]) == [command]
    assert parser.buffered == 5
    with pytest.raises(StreamFrameError, match="after the frame"):
        S.decode_frame(data + b"\x00", sender=sender)


@pytest.mark.parametrize("command,data,sender", VECTORS, ids=IDS)
def test_cut_at_every_byte(command, data, sender):
    for cut in range(len(data)):
        with pytest.raises(StreamFrameError) as info:
            S.decode_frame(data[:cut], sender=sender)
        assert info.value.offset is not None and 0 <= info.value.offset <= cut
        assert S.StreamParser(sender=sender).feed(data[:cut]) == []


@pytest.mark.parametrize("command,data,sender", VECTORS, ids=IDS)
def test_a_command_cut_short_inside_its_frame_names_its_key(command, data, sender):
    """The frame's size says less than the command needs: truncated at every byte of its
    content, the size patched to match."""
    for cut in range(8, len(data)):
        shorter = u32(cut - 4) + data[4:cut]
        try:
            got = S.decode_frame(shorter, sender=sender)
        except StreamFrameError as exc:
            assert exc.key == struct.unpack(">H", data[4:6])[0]
            assert exc.version == struct.unpack(">H", data[6:8])[0]
            assert f"0x{exc.key:04x}" in str(exc) and exc.offset is not None and 8 <= exc.offset <= cut
        else:  # commands that end in a variable part: a shorter one is still a command
            assert type(got) is type(command) and got.encode() == shorter


@pytest.mark.parametrize("command,data,sender", VECTORS, ids=IDS)
def test_an_over_long_command_names_its_key_and_offset(command, data, sender):
    longer = u32(len(data) - 4 + 3) + data[4:] + b"\x01\x02\x03"
    if type(command) in (S.Deliver, S.Publish):
        return  # a chunk / the last message takes what follows (Publish: checked below)
    with pytest.raises(StreamFrameError, match=r"bytes after the command at offset|needs \d+ bytes") as info:
        S.decode_frame(longer, sender=sender)
    assert info.value.key == struct.unpack(">H", data[4:6])[0]


def test_every_command_in_one_stream_whole_byte_by_byte_and_in_pieces():
    commands = [c for c, _, _ in VECTORS]
    assert S.StreamParser(sender="any").feed(ALL_BYTES) == commands
    parser = S.StreamParser(sender="any")
    got = []
    for i in range(len(ALL_BYTES)):
        got += parser.feed(ALL_BYTES[i : i + 1])
    assert got == commands
    for size in (2, 3, 7, 9, 17, 64, 1000):
        parser = S.StreamParser(sender="any")
        got = []
        for i in range(0, len(ALL_BYTES), size):
            got += parser.feed(memoryview(ALL_BYTES)[i : i + size])
        assert got == commands and parser.buffered == 0


# --------------------------------------------------------------------------- the parser's errors


def test_a_frame_over_max_frame_size_fails_before_its_content_arrives():
    parser = S.StreamParser(max_frame_size=100)
    ok = S.Deliver(1, bytes(95)).encode()          # size field 100: key, version, id, 95 bytes
    assert parser.feed(ok) == [S.Deliver(1, bytes(95))]
    big = S.Deliver(1, bytes(96)).encode()
    with pytest.raises(StreamFrameError, match=r"frame of 101 bytes at offset 208 exceeds max_frame_size 100") as info:
        parser.feed(ok + big[:4])
    assert info.value.response_code == S.RESPONSE_FRAME_TOO_LARGE and info.value.offset == 208
    assert info.value.parsed == [S.Deliver(1, bytes(95))]


def test_a_size_of_four_gigabytes_with_no_limit_is_not_allocated_up_front():
    parser = S.StreamParser()
    assert parser.feed(b"\xff\xff\xff\xff\x00\x17\x00\x01") == []
    assert parser.buffered == 8


def test_a_huge_deliver_with_no_limit_is_an_error_not_a_memory_error():
    parser = S.StreamParser()
    try:
        parser.feed(b"\xff\xff\xff\xff\x00\x08\x00\x01\x00")
    except StreamFrameError as exc:  # the allocation failed
        assert "more than this process can allocate" in str(exc)
    else:  # 4 GiB allocated lazily by the OS: the parser waits for the chunk
        assert parser.buffered == 9


def test_max_frame_size_can_be_set_after_tune():
    parser = S.StreamParser()
    assert parser.max_frame_size == 0
    parser.max_frame_size = 16
    assert parser.max_frame_size == 16
    with pytest.raises(StreamFrameError, match="exceeds max_frame_size 16"):
        parser.feed(S.Create(1, "a-long-stream-name").encode())
    with pytest.raises(StreamFrameError, match="out of range"):
        parser.max_frame_size = -1


def test_a_size_too_short_for_a_key_and_version():
    with pytest.raises(StreamFrameError, match="frame size 3 at offset 8 is shorter than a key and a version") as info:
        S.StreamParser().feed(S.Heartbeat().encode() + b"\x00\x00\x00\x03\x00")
    assert info.value.offset == 8 and info.value.parsed == [S.Heartbeat()]


@pytest.mark.parametrize("key,version,message", [
    (0x0000, 1, "unknown key 0x0000"),
    (0x0020, 1, "unknown key 0x0020"),
    (0x7FFF, 1, "unknown key 0x7fff"),
    (0x8002, 1, "unknown key 0x8002"),      # Publish has no response
    (0x8017, 1, "unknown key 0x8017"),      # nor Heartbeat
    (0x0017, 2, r"Heartbeat \(key 0x0017\): version 2 is not known"),
    (0x0008, 3, r"Deliver \(key 0x0008\): version 3 is not known"),
    (0x0001, 0, r"DeclarePublisher \(key 0x0001\): version 0 is not known"),
    (0x8001, 2, r"DeclarePublisherResponse \(key 0x8001\): version 2 is not known"),
])
def test_unknown_keys_and_versions(key, version, message):
    data = frame(key, version, b"\x00" * 8)
    with pytest.raises(StreamFrameError, match=message) as info:
        S.StreamParser(sender="any").feed(S.Heartbeat().encode() + data)
    assert (info.value.key, info.value.version, info.value.offset) == (key, version, 8)
    assert info.value.parsed == [S.Heartbeat()]
    assert isinstance(info.value, CodecError)


def test_a_command_from_the_wrong_side():
    with pytest.raises(StreamFrameError, match=r"DeclarePublisher \(key 0x0001\) at offset 0 is never sent by a server"):
        S.decode_frame(S.DeclarePublisher(1, 2, "", "s").encode())
    with pytest.raises(StreamFrameError, match=r"Deliver \(key 0x0008\) at offset 0 is never sent by a client"):
        S.decode_frame(S.Deliver(1, b"x").encode(), sender="client")
    with pytest.raises(StreamFrameError, match="never sent by a client"):  # cut short: refused when its head is in
        S.StreamParser(sender="client").feed(S.Deliver(1, bytes(100)).encode()[:20])
    with pytest.raises(StreamFrameError, match=r"TuneResponse \(key 0x8014\) at offset 0 is never sent by a server"):
        S.decode_frame(S.TuneResponse(1, 1).encode())
    with pytest.raises(ValueError, match="sender"):
        S.StreamParser(sender="broker")


def test_rabbitmq_3_10_answers_route_and_partitions_without_the_response_bit():
    """rabbit_stream_reader.erl (3.10) writes ``<<?COMMAND_ROUTE:16, ?VERSION_1:16,
    CorrelationId:32, ResponseCode:16, Count:32, Streams>>``; seen from 3.10.8 in
    test_stream_codec_broker.py."""
    route = frame(0x0018, 1, u32(5) + u16(1) + strings(["orders-eu"]))
    partitions = frame(0x0019, 1, u32(6) + u16(2) + u32(0))
    assert S.StreamParser().feed(route + partitions) == [
        S.RouteResponse(5, 1, ["orders-eu"]), S.PartitionsResponse(6, 2, [])]
    assert S.decode_frame(route) == S.RouteResponse(5, 1, ["orders-eu"])
    # from a client (or read as "any"), the same key is the request
    request = S.Route(5, "eu", "orders").encode()
    assert S.decode_frame(request, sender="client") == S.Route(5, "eu", "orders")


def test_the_error_keeps_what_was_parsed_and_the_parser_stays_failed():
    good = S.Heartbeat().encode() + S.PublishConfirm(1, [1]).encode()
    bad = frame(0x0003, 1, u8(1) + u32(2) + u64(1))   # announces 2 ids, holds 1
    parser = S.StreamParser()
    with pytest.raises(StreamFrameError, match=r"PublishConfirm \(key 0x0003\), version 1: publishing_ids: 2 items") as info:
        parser.feed(good + bad + S.Heartbeat().encode())
    assert info.value.parsed == [S.Heartbeat(), S.PublishConfirm(1, [1])]
    assert info.value.offset == len(good) + 8 + 1
    with pytest.raises(StreamFrameError, match="the parser failed earlier"):
        parser.feed(S.Heartbeat().encode())


def test_the_same_error_however_the_input_is_cut():
    data = S.Heartbeat().encode() + frame(0x000F, 1, u32(1) + u32(2) + string("a") + u16(1) + b"\xff")  # bad UTF-8
    errors = set()
    for cut in range(len(data) + 1):
        parser = S.StreamParser(sender="any")
        try:
            parser.feed(data[:cut])
            parser.feed(data[cut:])
        except StreamFrameError as exc:
            errors.add((str(exc), exc.offset, len(exc.parsed) >= 0))
    assert len(errors) == 1, errors
    (text, offset, _), = errors
    assert "invalid UTF-8" in text and "Metadata (key 0x000f)" in text and offset == len(data) - 1


@pytest.mark.parametrize("content,message", [
    (u32(1) + u8(2) + b"\xff\xfe" + string("s"), "string length -2"),
    (u32(1) + u8(2) + b"\xff\xff" + string("s"), "string length -1"),      # null where a string is due
    (u32(1) + u8(2) + string("r") + u16(3) + b"\xc3\x28x", "invalid UTF-8 at offset 18"),
])
def test_bad_strings(content, message):
    with pytest.raises(StreamFrameError, match=message):
        S.decode_frame(frame(0x0001, 1, content), sender="client")


@pytest.mark.parametrize("key,content,message", [
    (0x0007, u32(1) + u8(1) + string("s") + u16(9) + u16(1), "unknown offset type 9"),
    (0x0007, u32(1) + u8(1) + string("s") + u16(0) + u16(1), "unknown offset type 0"),
    (0x001A, u32(1) + u8(1) + u8(2), "active: 2 at offset 13 is not 0 or 1"),
    (0x0009, u8(1) + u16(0x8000), "negative as the int16 RabbitMQ reads"),
    (0x0013, u32(1) + string("PLAIN") + struct.pack(">i", -2), "data: length -2"),
    (0x8013, u32(1) + u16(10) + u16(0), "an empty challenge is left out"),
    (0x0002, u8(1) + u32(1) + u64(1) + b"\x8f" + u16(1) + u32(0) + u32(0), "reserved bits set in 0x8f"),
    (0x0002, u8(1) + u32(3) + u64(1) + u32(0), "messages: 3 items"),
    (0x0003, u8(1) + u32(0x40000000), "publishing_ids: 1073741824 items"),
    (0x000F, u32(1) + u32(0xFFFFFFFF), "streams: 4294967295 items"),
])
def test_malformed_content(key, content, message):
    sender = "any"
    with pytest.raises(StreamFrameError, match=message) as info:
        S.decode_frame(frame(key, 1, content), sender=sender)
    assert info.value.key == key


def test_a_sub_entry_in_a_version_2_publish_is_refused():
    data = frame(0x0002, 2, u8(1) + u32(1) + u64(1) + string(None) + R.subentry([b"a"]))
    with pytest.raises(StreamFrameError, match="sub-entry in a version 2 publish"):
        S.decode_frame(data, sender="client")


def test_optional_maps_absent_and_present():
    """Subscribe, Open's response and ResolveOffsetSpec leave an empty map out; a map with
    no entries is read too (and written back without it)."""
    with_count = frame(0x0007, 1, u32(1) + u8(1) + string("s") + u16(1) + u16(1) + u32(0))
    assert S.decode_frame(with_count, sender="client") == S.Subscribe(1, 1, "s", S.OFFSET_TYPE_FIRST, 0, 1)
    assert S.decode_frame(frame(0x8015, 1, u32(1) + u16(1) + u32(0))) == S.OpenResponse(1, 1)


# --------------------------------------------------------------------------- Deliver, the hot path


def test_a_deliver_cut_anywhere_assembles_the_same_chunk():
    chunk = R.chunk([bytes([i]) * 100 for i in range(100)])
    for version, deliver in ((1, S.Deliver(3, chunk)), (2, S.Deliver(3, chunk, 12345))):
        data = S.Heartbeat().encode() + deliver.encode() + S.Heartbeat().encode()
        assert deliver.version == version
        for cut in list(range(40)) + [len(data) // 2, len(data) - 9, len(data) - 1]:
            parser = S.StreamParser()
            got = parser.feed(data[:cut])
            got += parser.feed(data[cut:])
            assert got == [S.Heartbeat(), deliver, S.Heartbeat()]
            assert type(got[1].chunk) is bytes and got[1].chunk == chunk
        parser = S.StreamParser()
        got = []
        for i in range(len(data)):
            got += parser.feed(data[i : i + 1])
            if i == 30:
                assert parser.buffered == 30 - 8 + 1
        assert got == [S.Heartbeat(), deliver, S.Heartbeat()]


def test_an_empty_deliver_and_a_deliver_shorter_than_its_head():
    assert S.StreamParser().feed(frame(0x0008, 1, u8(1))) == [S.Deliver(1, b"")]
    data = frame(0x0008, 2, u8(1) + b"\x00" * 4)
    for cut in range(len(data)):
        parser = S.StreamParser()
        with pytest.raises(StreamFrameError, match=r"Deliver \(key 0x0008\), version 2: committed_offset: needs 8 bytes"):
            parser.feed(data[:cut])
            parser.feed(data[cut:])


# --------------------------------------------------------------------------- constants


def test_commands_3_10():
    """What RabbitMQ 3.10.8's rabbit_stream_reader.erl handles (pre and post auth)."""
    assert set(S.COMMANDS_3_10) == {1, 2, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25}
    assert all(versions == {1} for versions in S.COMMANDS_3_10.values())
    for key in (0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F):
        assert key not in S.COMMANDS_3_10


def test_response_codes():
    assert S.RESPONSE_CODES[1] == "ok" and S.RESPONSE_CODES[0x13] == "no offset"
    assert sorted(S.RESPONSE_CODES) == list(range(1, 0x16))
    assert S.RESPONSE_OK == 1 and S.RESPONSE_FRAME_TOO_LARGE == 0x0E
    assert S.SubscribeResponse(1, 1).ok and not S.SubscribeResponse(1, 2).ok


# --------------------------------------------------------------------------- constructors


@pytest.mark.parametrize("make,message", [
    (lambda: S.DeclarePublisher(1, 256, "", "s"), r"DeclarePublisher.publisher_id: 256 is out of range 0..255"),
    (lambda: S.DeclarePublisher(-1, 1, "", "s"), r"DeclarePublisher.correlation_id: -1 is out of range"),
    (lambda: S.DeclarePublisher(1, 1, None, "s"), r"DeclarePublisher.reference: expected str, got NoneType"),
    (lambda: S.DeclarePublisher(1, True, "", "s"), r"publisher_id: expected int, got bool"),
    (lambda: S.Create(1, "x" * 32768), r"Create.stream: 32768 bytes in UTF-8, a string holds at most 32767"),
    (lambda: S.Create(1, "s", {"a": 1}), r"Create.arguments\['a'\]: expected str, got int"),
    (lambda: S.Create(1, "s", [("a", "b")]), r"Create.arguments: expected a dict"),
    (lambda: S.Metadata(1, "abc"), r"Metadata.streams: expected a list of str, got str"),
    (lambda: S.Credit(1, 32768), r"Credit.credit: 32768 is out of range 0..32767"),
    (lambda: S.Subscribe(1, 1, "s", S.OFFSET_TYPE_FIRST, 5), r"Subscribe.offset: 5 given with offset type 1"),
    (lambda: S.Subscribe(1, 1, "s", 0), r"Subscribe.offset_type: 0 is not an offset type"),
    (lambda: S.Subscribe(1, 1, "s", 6), r"Subscribe.offset_type: 6 is not an offset type"),
    (lambda: S.Subscribe(1, 1, "s", S.OFFSET_TYPE_OFFSET, -1), r"Subscribe.offset: -1 is out of range"),
    (lambda: S.Subscribe(1, 1, "s", S.OFFSET_TYPE_TIMESTAMP, 2**63), r"out of the int64 range"),
    (lambda: S.Publish(1, [b"x"]), r"Publish.messages\[0\]: expected \(publishing_id, message\)"),
    (lambda: S.Publish(1, [(1, "x")]), r"Publish.messages\[0\]: expected bytes, got str"),
    (lambda: S.Publish(1, [(1, b"x")], ["a", "b"]), r"2 values for 1 messages"),
    (lambda: S.Publish(1, [(1, S.SubEntry(0, 0, 0, b""))], ["a"]), r"a sub-entry cannot carry a filter value"),
    (lambda: S.ConsumerUpdate(1, 1, 1), r"ConsumerUpdate.active: expected bool"),
    (lambda: S.SubEntry(8, 0, 0, b""), r"SubEntry.compression: 8 is out of range 0..7"),
    (lambda: S.SaslAuthenticateResponse(1, 10, b"x" * 65536), r"the limit is 65535"),
    (lambda: S.StreamStatsResponse(1, 1, {"a": 2**63}), r"out of the int64 range"),
    (lambda: S.Open(1, "\ud800"), r"cannot be encoded as UTF-8"),
])
def test_bad_values_are_refused_when_the_command_is_made(make, message):
    with pytest.raises(CodecError, match=message):
        make()


def test_equality_and_repr():
    a, b = S.Subscribe(1, 1, "s", S.OFFSET_TYPE_NEXT), S.Subscribe(1, 1, "s", S.OFFSET_TYPE_NEXT)
    assert a == b and not a != b and a != S.Subscribe(2, 1, "s", S.OFFSET_TYPE_NEXT)
    assert S.DeclarePublisherResponse(1, 1) != S.DeletePublisherResponse(1, 1)
    assert S.Tune(1, 2) != S.TuneResponse(1, 2)
    assert repr(a) == "Subscribe(correlation_id=1, subscription_id=1, stream='s', offset_type=3, offset=0, credit=1, properties={})"
    assert repr(S.Deliver(1, b"abc")) == "Deliver(subscription_id=1, committed_offset=None, chunk=<3 bytes>)"
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(AttributeError):
        a.stream = "t"


# --------------------------------------------------------------------------- publish fast paths


def test_encode_publish_is_publish():
    messages = [b"a", bytearray(b"bc"), memoryview(b"def"), b""]
    expected = S.Publish(7, [(10, b"a"), (11, b"bc"), (12, b"def"), (13, b"")]).encode()
    assert S.encode_publish(7, 10, messages) == expected
    assert S.encode_publish(7, [10, 11, 12, 13], messages) == expected
    assert S.encode_publish(7, (10, 11, 12, 13), tuple(messages)) == expected
    assert S.encode_publish(7, [5, 3, 2**64 - 1, 0], messages) == S.Publish(
        7, [(5, b"a"), (3, b"bc"), (2**64 - 1, b"def"), (0, b"")]).encode()
    assert S.encode_publish(7, 0, []) == frame(0x0002, 1, u8(7) + u32(0))
    assert S.encode_publish(1, 1, [b"x", b"y"], version=2, filter_values=["f", None]) == \
        S.Publish(1, [(1, b"x"), (2, b"y")], ["f", None]).encode()
    assert S.encode_publish(1, 1, [b"x"], version=2) == S.Publish(1, [(1, b"x")], [None]).encode()


@pytest.mark.parametrize("args,message", [
    ((1, 2**64 - 1, [b"a", b"b"]), "overflow a uint64"),
    ((1, [1], [b"a", b"b"]), "publishing_ids: 1 ids for 2 messages"),
    ((1, [1, -1], [b"a", b"b"]), r"publishing_ids\[1\]: -1 is out of range"),
    ((1, 1, [b"a", "b"]), r"messages: expected bytes, got str"),
    ((256, 1, [b"a"]), r"publisher_id: 256 is out of range"),
    ((1, 1, [b"a"], 3), r"version: 3 is not 1 or 2"),
    ((1, 1, [b"a"], 1, ["f"]), r"only a version 2 publish"),
    ((1, 1, [b"a"], 2, ["f", "g"]), r"filter_values: 2 values for 1 messages"),
])
def test_encode_publish_refuses(args, message):
    with pytest.raises(StreamFrameError, match=message):
        S.encode_publish(*args)


def test_encode_publish_values_writes_one_data_section_per_body():
    bodies = [b"", b"x" * 255, b"y" * 256, bytearray(b"z" * 70000)]
    got = S.encode_publish_values(2, 100, bodies)
    expected = S.Publish(2, [(100 + i, R.data_section(bytes(b))) for i, b in enumerate(bodies)]).encode()
    assert got == expected
    assert R.data_section(b"x" * 255)[:5] == b"\x00\x53\x75\xa0\xff"
    assert R.data_section(b"y" * 256)[:8] == b"\x00\x53\x75\xb0\x00\x00\x01\x00"
    assert S.encode_publish_values(2, 100, bodies[:1], filter_values=["k"]) == \
        S.Publish(2, [(100, R.data_section(b""))], ["k"]).encode()
    with pytest.raises(StreamFrameError, match=r"bodies\[1\]: expected bytes, got str"):
        S.encode_publish_values(2, 100, [b"", "text"])
    assert [S.encode_message(bytes(b)) for b in bodies] == [R.data_section(bytes(b)) for b in bodies]


def test_encode_publish_values_with_properties_is_encode_message():
    properties = {"content_type": "application/json", "message_id": 7}
    application_properties = {"source": "test", "n": 5}
    bodies = [b"{}", b"[1]" * 100]
    got = S.encode_publish_values(1, 5, bodies, properties=properties, application_properties=application_properties)
    messages = [S.encode_message(b, properties=properties, application_properties=application_properties) for b in bodies]
    assert got == S.encode_publish(1, 5, messages)
    decoded = S.decode_message(S.decode_frame(got, sender="client").messages[1][1])
    assert (decoded.body, decoded.properties.message_id, decoded.application_properties) == (bodies[1], 7, application_properties)
    with pytest.raises(CodecError):
        S.encode_publish_values(1, 5, bodies, application_properties={"bad": object()})


@pytest.mark.parametrize("compression", [0, 1, "gzip", "none", 4, "zstd"])
def test_encode_publish_subentry(compression):
    import zstandard

    messages = [R.data_section(b"m%d" % i * 10) for i in range(50)]
    data = S.encode_publish_subentry(4, 77, messages, compression)
    publish = S.decode_frame(data, sender="client")
    ((pid, entry),) = publish.messages
    assert (publish.publisher_id, pid) == (4, 77)
    raw = b"".join(u32(len(m)) + m for m in messages)
    code = S.compression_code(compression)
    assert (entry.compression, entry.record_count, entry.uncompressed_size) == (code, 50, len(raw))
    unpacked = {0: lambda d: d, 1: lambda d: zlib.decompress(d, 31), 4: zstandard.ZstdDecompressor().decompress}[code]
    assert unpacked(entry.data) == raw
    if code:
        assert len(entry.data) < len(raw)
    assert data[4 + 4 + 1 + 4 + 8] == 0x80 | code << 4


def test_encode_subentry_refuses():
    with pytest.raises(StreamFrameError, match="snappy is not supported"):
        S.encode_subentry([b"a"], "snappy")
    with pytest.raises(StreamFrameError, match="unknown name 'brotli'"):
        S.encode_subentry([b"a"], "brotli")
    with pytest.raises(StreamFrameError, match="65536 records do not fit"):
        S.encode_subentry([b""] * 65536)


# --------------------------------------------------------------------------- hypothesis

names = st.text(max_size=20)
u8s, u16s, u32s, u64s = (st.integers(0, 2**n - 1) for n in (8, 16, 32, 64))
maps = st.dictionaries(names, names, max_size=4)
offset_specs = st.one_of(
    st.tuples(st.sampled_from([1, 2, 3]), st.just(0)),
    st.tuples(st.just(4), u64s),
    st.tuples(st.just(5), st.integers(-(2**63), 2**63 - 1)),
)


@st.composite
def commands(draw):
    kind = draw(st.integers(0, 12))
    if kind == 0:
        ids = draw(st.lists(u64s, max_size=10))
        return S.PublishConfirm(draw(u8s), ids)
    if kind == 1:
        spec = draw(offset_specs)
        return S.Subscribe(draw(u32s), draw(u8s), draw(names), spec[0], spec[1], draw(u16s), draw(maps))
    if kind == 2:
        return S.Deliver(draw(u8s), draw(st.binary(max_size=300)), draw(st.none() | u64s))
    if kind == 3:
        messages = draw(st.lists(st.tuples(u64s, st.binary(max_size=40)), max_size=6))
        filters = draw(st.none() | st.lists(st.none() | names, min_size=len(messages), max_size=len(messages)))
        return S.Publish(draw(u8s), messages, filters)
    if kind == 4:
        return S.MetadataResponse(draw(u32s), draw(st.lists(st.tuples(u16s, names, u32s), max_size=3)),
                                  draw(st.lists(st.tuples(names, u16s, u16s, st.lists(u16s, max_size=3)), max_size=3)))
    if kind == 5:
        return S.PeerPropertiesResponse(draw(u32s), draw(u16s), draw(maps))
    if kind == 6:
        return S.StreamStatsResponse(draw(u32s), draw(u16s), draw(st.dictionaries(names, st.integers(-(2**63), 2**63 - 1))))
    if kind == 7:
        return S.CreateSuperStream(draw(u32s), draw(names), draw(st.lists(names, max_size=3)),
                                   draw(st.lists(names, max_size=3)), draw(maps))
    if kind == 8:
        return S.PublishError(draw(u8s), draw(st.lists(st.tuples(u64s, u16s), max_size=4)))
    if kind == 9:
        return S.SaslAuthenticate(draw(u32s), draw(names), draw(st.none() | st.binary(max_size=30)))
    if kind == 10:
        return S.ExchangeCommandVersionsResponse(draw(u32s), draw(u16s), draw(st.lists(st.tuples(u16s, u16s, u16s), max_size=4)))
    if kind == 11:
        spec = draw(offset_specs | st.just((0, 0)))
        return S.ConsumerUpdateResponse(draw(u32s), draw(u16s), *spec)
    return S.Close(draw(u32s), draw(u16s), draw(names))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands(), min_size=1, max_size=6), st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_round_trips_in_any_pieces(cmds, sizes):
    data = b"".join(c.encode() for c in cmds)
    for c in cmds:
        assert S.decode_frame(c.encode(), sender="any") == c
    parser = S.StreamParser(sender="any")
    got, pos, i = [], 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        got += parser.feed(data[pos : pos + n])
        pos, i = pos + n, i + 1
    assert got == cmds and parser.buffered == 0


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 30))
def test_random_bytes_give_commands_or_a_stream_frame_error(data, piece):
    parser = S.StreamParser(max_frame_size=1 << 16, sender="any")
    try:
        for pos in range(0, len(data), piece):
            for item in parser.feed(data[pos : pos + piece]):
                assert isinstance(item, S.StreamCommand)
                assert S.decode_frame(item.encode(), sender="any") == item
    except StreamFrameError as exc:
        assert exc.offset is None or 0 <= exc.offset <= len(data)
