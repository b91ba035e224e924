"""Bounded, seeded fuzz smoke for the parsers and decode_method: on any input they either
return results or raise a CodecError subclass, never another exception (and never crash).
About 20k cases; deterministic."""
import random
import struct

import amqwire.codec as codec
from amqwire.codec import AMQPSyntaxError, CodecError

import amqp_reference as R

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
