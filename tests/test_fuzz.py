"""Bounded, seeded fuzz smoke for the parsers and decode_method: on any input they either
return results or raise a CodecError subclass, never another exception (and never crash).
Deterministic.  Beyond the types of what comes back: the fuzz targets of ``fuzz/targets.py``
(the same the coverage-guided campaign ``bash fuzz/run`` runs, instrumented) on their seed
corpus and mutations of it: fed whole and in chunks gives the same, what decodes re-encodes,
errors point inside the input; and every decoder on inputs that end at an unreadable page,
so that reading one byte too many crashes."""
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import amqwire.codec as codec
import amqwire.codec.stream.amqp10 as amqp10
from amqwire.codec import AMQPSyntaxError, CodecError

import amqp_reference as R

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
sys.path.insert(0, str(FUZZ))
import make_corpus  # noqa: E402
import targets as fuzz_targets  # noqa: E402

SEEDS = make_corpus.seeds()

FRAME_TYPES = (codec.MethodFrame, codec.HeaderFrame, codec.BodyFrame, codec.Heartbeat, codec.ProtocolHeader)
COMMAND_TYPES = (codec.Command, codec.Heartbeat, codec.ProtocolHeader)
MAX_REPORTED = 5


def _units(rnd):
    """Valid, self-contained pieces of a stream: method frames for every method,
    whole content sequences, heartbeats."""
    units = []
    for spec in R.METHOD_SPECS:
        if spec.content:
            continue
        for table in ({}, R.SMALL_TABLE):
            units.append(R.method_frame(spec, R.sample_values(spec, table), rnd.choice([0, 1, 2, 65535])))
    for spec in R.METHOD_SPECS:
        if not spec.content:
            continue
        for size in (0, 1, 100, 4088, 4089, 9000):
            props = R.properties(content_type="text/plain", headers={"k": "v"}, delivery_mode=2) if size % 2 else b"\x00\x00"
            body = bytes(rnd.getrandbits(8) for _ in range(size))
            units.append(R.content(rnd.choice([1, 2, 3]), spec, R.sample_values(spec), body, props, frame_max=4096))
    units.append(R.HEARTBEAT_FRAME)
    return units


UNITS = _units(random.Random(99))


def _mutate(rnd, data):
    data = bytearray(data)
    for _ in range(rnd.randint(1, 3)):
        op = rnd.randrange(6)
        if not data:
            data += bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 8)))
            continue
        pos = rnd.randrange(len(data))
        if op == 0:  # flip a byte
            data[pos] = rnd.getrandbits(8)
        elif op == 1:  # flip a bit
            data[pos] ^= 1 << rnd.randrange(8)
        elif op == 2:  # truncate
            del data[pos:]
        elif op == 3:  # insert random bytes
            data[pos:pos] = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 8)))
        elif op == 4:  # delete a range
            del data[pos : pos + rnd.randint(1, 16)]
        else:  # an extreme value in a size/length field
            data[pos : pos + 4] = rnd.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff", b"\x00\x00\x10\x00"])
    return bytes(data)


def _chunks(rnd, data):
    mode = rnd.randrange(3)
    if mode == 0 or not data:
        return [data]
    if mode == 1:
        cut = rnd.randrange(len(data) + 1)
        return [data[:cut], data[cut:]]
    out, pos = [], 0
    while pos < len(data):
        n = rnd.randint(1, 64)
        out.append(data[pos : pos + n])
        pos += n
    return out


def _run(make, allowed, chunks, failures, label):
    parser = make()
    try:
        for chunk in chunks:
            got = parser.feed(chunk)
            assert isinstance(got, list), type(got)
            for item in got:
                assert isinstance(item, allowed), type(item)
    except CodecError as exc:
        assert isinstance(exc.parsed, list)
        for item in exc.parsed:
            assert isinstance(item, allowed), type(item)
        try:  # poisoned: the next feed raises again, and only a CodecError
            parser.feed(b"\x08\x00\x00\x00\x00\x00\x00\xce")
        except CodecError:
            pass
        except Exception as exc2:  # noqa: BLE001
            failures.append((label, b"".join(chunks).hex(), f"after error: {exc2!r}"))
        else:
            failures.append((label, b"".join(chunks).hex(), "not poisoned after error"))
    except AssertionError as exc:
        failures.append((label, b"".join(chunks).hex(), f"bad result: {exc}"))
    except Exception as exc:  # noqa: BLE001
        failures.append((label, b"".join(chunks).hex(), repr(exc)))


def _parsers(rnd):
    expect = rnd.random() < 0.2
    frame_max = rnd.choice([4096, 131072])
    if rnd.random() < 0.5:
        return (lambda: codec.FrameParser(frame_max=frame_max, expect_protocol_header=expect)), FRAME_TYPES, expect
    return (
        lambda: codec.CommandParser(frame_max=frame_max, max_body_size=rnd.choice([100, 1 << 20]), expect_protocol_header=expect),
        COMMAND_TYPES,
        expect,
    )


def _report(failures):
    assert not failures, f"{len(failures)} failures, first: " + "\n".join(
        f"{label}: input {hexdata[:400]} -> {what}" for label, hexdata, what in failures[:MAX_REPORTED]
    )


def test_random_bytes():
    rnd = random.Random(1)
    failures = []
    for i in range(5000):
        make, allowed, expect = _parsers(rnd)
        n = rnd.choice([0, 1, 7, 8, 9, rnd.randint(0, 64), rnd.randint(0, 400)])
        data = bytes(rnd.getrandbits(8) for _ in range(n))
        if rnd.random() < 0.1:
            data = b"AMQP" + data
        _run(make, allowed, _chunks(rnd, data), failures, f"random#{i}")
    _report(failures)


def test_random_payloads_in_valid_frames():
    rnd = random.Random(2)
    failures = []
    for i in range(5000):
        make, allowed, expect = _parsers(rnd)
        frames = []
        for _ in range(rnd.randint(1, 4)):
            ftype = rnd.choice([1, 1, 1, 2, 2, 3, 8])
            payload = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60)))
            if ftype == 1 and rnd.random() < 0.8:  # a real method index, random arguments
                payload = struct.pack(">I", rnd.choice(R.METHOD_SPECS).index) + payload
            if ftype == 2 and rnd.random() < 0.8:
                payload = struct.pack(">HHQ", 60, 0, rnd.choice([0, 1, 5, 2**63])) + payload[:20]
            channel = 0 if ftype == 8 else rnd.choice([0, 1, 2])
            frames.append(R.frame(ftype, channel, payload))
        data = (R.PROTOCOL_HEADER if expect else b"") + b"".join(frames)
        _run(make, allowed, _chunks(rnd, data), failures, f"frames#{i}")
    _report(failures)


def test_mutated_valid_streams():
    rnd = random.Random(3)
    failures = []
    for i in range(6000):
        make, allowed, expect = _parsers(rnd)
        data = b"".join(rnd.choice(UNITS) for _ in range(rnd.randint(1, 6)))
        if expect:
            data = R.PROTOCOL_HEADER + data
        data = _mutate(rnd, data)
        _run(make, allowed, _chunks(rnd, data), failures, f"mutated#{i}")
    _report(failures)


def test_decode_method_random_payloads():
    rnd = random.Random(4)
    failures = []
    specs = R.METHOD_SPECS
    for i in range(5000):
        spec = rnd.choice(specs)
        r = rnd.random()
        if r < 0.3:
            payload = struct.pack(">I", spec.index) + bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 40)))
        elif r < 0.9:
            table = rnd.choice([{}, R.SMALL_TABLE])
            payload = _mutate(rnd, R.method_payload(spec, R.sample_values(spec, table)))
        else:
            payload = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 12)))
        try:
            m = codec.decode_method(payload)
        except AMQPSyntaxError:
            continue
        except Exception as exc:  # noqa: BLE001
            failures.append((f"decode#{i}", payload.hex(), repr(exc)))
            continue
        try:  # whatever decodes must encode again and decode to the same method
            assert isinstance(m, codec.Method)
            again = codec.decode_method(m.encode_payload())
            assert again == m
        except Exception as exc:  # noqa: BLE001
            failures.append((f"decode#{i}", payload.hex(), f"re-encode: {exc!r}"))
    _report(failures)


# --------------------------------------------------------------------------- the fuzz targets


@pytest.mark.parametrize("name", list(fuzz_targets.TARGETS))
def test_fuzz_target_on_its_seeds_and_mutations(name):
    """The CI smoke of the coverage-guided campaign (``bash fuzz/run``): each target's seeds,
    then 4000 mutations of them, without instrumentation."""
    target, seeds = fuzz_targets.TARGETS[name], SEEDS[name]
    assert len(seeds) >= 4
    rnd = random.Random(name)
    failures = []
    inputs = list(seeds) + [_mutate(rnd, rnd.choice(seeds)) for _ in range(4000)]
    for i, data in enumerate(inputs):
        try:
            target(data)
        except fuzz_targets.Finding as exc:
            failures.append((f"{name}#{i}", data.hex(), str(exc)))
    _report(failures)


def test_valid_inputs_reencode_to_the_same_bytes():
    """Every method, table and property set the reference encoder writes: decoded and encoded
    again by the codec, the same bytes."""
    inputs = [(codec.decode_method, lambda m: m.encode_payload(), p) for p in SEEDS["decode_method"]]
    inputs += [(codec.decode_table, codec.encode_table, t) for t in SEEDS["decode_table"]]
    inputs += [(codec.BasicProperties.decode, lambda p: p.encode(), h) for h in SEEDS["content_header"]]
    inputs += [(amqp10.decode_message, lambda m: m.encode(), m) for m in SEEDS["amqp10_message"]]
    inputs += [(amqp10.decode_value, amqp10.encode_value, v) for v in SEEDS["amqp10_value"]]
    differ = [data.hex() for decode, encode, data in inputs if encode(decode(data)) != data]
    assert not differ, differ[:3]


def test_chunked_feeding_is_checked():
    """The whole-versus-chunks check can fail: a parser that drops a byte when fed in pieces
    is reported."""

    class DropsAByteAtEachFeed:
        def __init__(self, frame_max, expect_protocol_header=False):
            self.inner = codec.FrameParser(frame_max, expect_protocol_header=expect_protocol_header)
            self.first = True

        @property
        def buffered(self):
            return self.inner.buffered

        def feed(self, data):
            data, self.first = (data if self.first else data[1:]), False
            return self.inner.feed(data)

    broken = fuzz_targets._parser_target(lambda frame_max, expect: DropsAByteAtEachFeed(frame_max, expect))
    seed = next(s for s in SEEDS["frame_parser"] if len(s) > 200)
    with pytest.raises(fuzz_targets.Finding, match="fed whole"):
        broken(seed)


GUARDED = textwrap.dedent(r"""
    import ctypes, faulthandler, mmap, sys
    sys.path.insert(0, sys.argv[1])
    import amqwire.codec as codec
    import amqwire.codec.stream.amqp10 as amqp10
    import amqwire.codec.stream as S
    import make_corpus
    from amqwire.codec import CodecError

    faulthandler.enable()
    PAGES = 64
    area = mmap.mmap(-1, (PAGES + 1) * mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(area))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    end = PAGES * mmap.PAGESIZE
    if libc.mprotect(address + end, mmap.PAGESIZE, 0) != 0:   # PROT_NONE: reading it is SIGSEGV
        raise OSError(ctypes.get_errno(), "mprotect")

    def at_the_end(data):
        area[end - len(data):end] = data
        return memoryview(area)[end - len(data):end]

    decoders = {
        "decode_method": codec.decode_method,
        "decode_table": codec.decode_table,
        "content_header": codec.BasicProperties.decode,
        "frame_parser": lambda view: codec.FrameParser(131072).feed(view[1:]),
        "command_parser": lambda view: codec.CommandParser(131072).feed(view[1:]),
        "amqp10_message": amqp10.decode_message,
        "amqp10_value": amqp10.decode_value,
        "stream_parser": lambda view: S.StreamParser(sender="any").feed(view[1:]),
        "stream_frame": lambda view: S.decode_frame(view, sender="any"),
        "stream_chunk": lambda view: S.decode_chunk(view).offsets_and_messages(),
    }
    count = 0
    for name, decode in decoders.items():
        for seed in make_corpus.seeds()[name]:
            for cut in range(len(seed) + 1):           # every truncation, the whole input too
                try:
                    decode(at_the_end(seed[:cut]))
                except CodecError:
                    pass
                count += 1
    print(count)
""")


def test_no_decoder_reads_past_the_end_of_its_input():
    """Every truncation of every seed, placed so that its last byte is the last readable byte
    before a PROT_NONE page: a read of even one byte too many is a segfault (in a child
    process, reported with its traceback).  A Python bytes object is followed by its NUL,
    which hides such a read from the other checks and from AddressSanitizer."""
    result = subprocess.run([sys.executable, "-c", GUARDED, str(FUZZ)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    assert int(result.stdout) > 20000


# --------------------------------------------------------------------------- found by fuzzing


def test_a_row_announcing_a_huge_body_is_a_frame_error_not_an_allocation():
    """The Spark decoder let the parser allocate the body a header announces (up to 1 TiB):
    a 60-byte row announcing 64 GiB raised MemoryError.  A row holds its whole publish, so
    a body larger than the row is malformed."""
    from amqwire.codec import FrameError
    from amqwire.spark.decode import decode_one

    row = bytearray(codec.encode_publish(0, "ex", "rk", b"", codec.BasicProperties()))
    header_at = row.index(b"\x02\x00\x00")                      # the content header frame
    struct.pack_into(">Q", row, header_at + 7 + 4, 1 << 36)      # its body size: 64 GiB
    with pytest.raises(FrameError, match="body of 68719476736 bytes"):
        decode_one(bytes(row))


def test_a_body_the_process_cannot_allocate_is_a_frame_error():
    parser = codec.CommandParser(max_body_size=1 << 62)
    frames = bytearray(codec.encode_publish(1, "ex", "rk", b"", codec.BasicProperties()))
    header_at = frames.index(b"\x02\x00\x01")
    struct.pack_into(">Q", frames, header_at + 7 + 4, 1 << 61)
    with pytest.raises(codec.FrameError, match="more than this process can allocate"):
        parser.feed(bytes(frames))


def test_a_stray_body_frame_gives_the_same_error_however_the_input_is_cut():
    """Found by the coverage-guided campaign: a body frame without a content header and with
    a bad frame end raised FrameError fed whole, UnexpectedFrame when its payload came in a
    later chunk (a streamed body frame is judged when it starts, before its frame end is
    in; a whole one is now judged in the same order)."""
    for channel, size in ((0, 40), (3, 5000)):
        stray = bytearray(R.frame(3, channel, bytes(size)))
        stray[-1] = 0
        stream = R.method_frame(R.BY_NAME["channel.open"], R.sample_values(R.BY_NAME["channel.open"]), 1) + bytes(stray)
        errors = set()
        for cut in (len(stream), len(stream) - size, len(stream) - 1, len(stream) - size // 2):
            parser = codec.CommandParser(131072)
            try:
                parser.feed(stream[:cut])
                parser.feed(stream[cut:])
            except codec.CodecError as exc:
                errors.add(f"{type(exc).__name__}: {exc}")
        assert len(errors) == 1 and "without a content header" in errors.pop()
