"""CommandParser streams a body frame cut by the end of a chunk straight into its message:
a body is copied once, whatever the chunking, and errors still surface at the right offset."""
import random
import tracemalloc

import pytest

from amqwire.codec import (
    BasicDeliver,
    BasicProperties,
    CommandParser,
    FrameError,
    FrameWriter,
    UnexpectedFrame,
)

PROPS = BasicProperties(content_type="application/octet-stream", headers={"n": 1})


def deliver(writer, channel, tag, body):
    writer.content(channel, BasicDeliver("ctag", tag, False, "ex", "rk"), PROPS, body)


def chunks(data, size):
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("chunk", [1, 7, 8, 1000, 65536, 131071, 131072, 131073, 10**6])
def test_large_body_any_chunking(chunk):
    body = random.Random(chunk).randbytes(3 * 131064 + 123)
    writer = FrameWriter(frame_max=131072)
    deliver(writer, 1, 1, body)
    deliver(writer, 2, 2, b"small")
    parser = CommandParser(frame_max=131072)
    got = []
    for piece in chunks(writer.take(), chunk):
        got += parser.feed(piece)
    assert [c.channel for c in got] == [1, 2]
    assert got[0].body == body and got[1].body == b"small"
    assert parser.buffered == 0


def test_buffered_counts_a_streamed_frame():
    writer = FrameWriter(frame_max=131072)
    deliver(writer, 1, 1, b"x" * 10000)
    data = writer.take()
    parser = CommandParser()
    cut = len(data) - 500          # inside the body frame
    assert parser.feed(data[:cut]) == []
    body_frame_start = data.index(b"\x03\x00\x01")
    assert parser.buffered == cut - body_frame_start
    [command] = parser.feed(data[cut:])
    assert command.body == b"x" * 10000


def test_a_split_body_is_copied_once():
    # frame_max 1 MiB: without streaming, every body frame would also be held whole in
    # the parser's buffer before being copied into the body (a second MiB at the peak).
    size = 4 << 20
    writer = FrameWriter(frame_max=1 << 20)
    deliver(writer, 1, 1, bytes(size))
    data = writer.take()
    parser = CommandParser(frame_max=1 << 20)
    pieces = chunks(data, 65536)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        got = []
        for piece in pieces:
            got += parser.feed(piece)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(got) == 1 and len(got[0].body) == size
    assert peak < size + 256 * 1024, f"peak {peak} bytes for a {size}-byte body"


def test_bad_end_octet_after_a_streamed_body():
    writer = FrameWriter(frame_max=131072)
    deliver(writer, 1, 1, b"first")
    deliver(writer, 1, 2, b"y" * 5000)
    data = bytearray(writer.take())
    data[-1] = 0x00                       # the end octet of the last body frame
    parser = CommandParser()
    with pytest.raises(FrameError) as info:
        for piece in chunks(bytes(data), 1000):
            parser.feed(piece)
    assert info.value.offset == len(data) - 1
    assert f"offset {len(data) - 1}" in str(info.value)
    with pytest.raises(FrameError):
        parser.feed(b"")                  # poisoned


def test_body_longer_than_announced_is_refused_when_it_starts():
    writer = FrameWriter(frame_max=131072)
    deliver(writer, 1, 1, b"z" * 100)
    data = bytearray(writer.take())
    body_frame = data.index(b"\x03\x00\x01")
    data[body_frame + 3:body_frame + 7] = (5000).to_bytes(4, "big")   # claims 5000 bytes
    parser = CommandParser()
    with pytest.raises(UnexpectedFrame) as info:
        parser.feed(bytes(data[:body_frame + 50]))                     # incomplete frame
    assert "only 100 of the announced 100 remain" in str(info.value)


def test_streamed_body_then_other_channels_interleave():
    writer = FrameWriter(frame_max=4096)
    big = bytes(range(256)) * 64
    deliver(writer, 3, 1, big)
    first = writer.take()
    deliver(writer, 4, 1, b"other")
    second = writer.take()
    parser = CommandParser(frame_max=4096)
    out = parser.feed(first[:-2000])
    out += parser.feed(first[-2000:] + second)
    assert [(c.channel, c.body) for c in out] == [(3, big), (4, b"other")]
