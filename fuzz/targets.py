"""The fuzz targets: one function per decoder, each taking any bytes and checking what the
codec promises about them.  Run by atheris (``fuzz/fuzz_one.py``, instrumented build) and,
uninstrumented, by ``tests/test_fuzz.py`` over the seed corpus and mutations of it.

What every target checks, for any input:

- the decoder returns results or raises a ``CodecError`` subclass, never another exception;
- (parsers) the input fed whole and fed in chunks gives the same items and the same error:
  a parser that reads past what it was given, or keeps state wrong across feeds, differs;
- what decodes re-encodes: the codec's own encoding of the decoded value decodes to the same
  value (a fixed point), and is byte for byte the input where the input is canonical (no
  reserved bits, no table, no header field: the encoder has no choice of types there).

A violation raises ``Finding``; crashes, hangs and memory growth are libFuzzer's to catch.
"""
from __future__ import annotations

import random
from typing import Any, Callable

import amqwire.codec as codec
from amqwire.codec import CodecError

__all__ = ["Finding", "TARGETS", "chunked"]


class Finding(AssertionError):
    """The codec broke one of its promises for this input."""


def _typed(fn: Callable[[], Any], size: int) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except CodecError as exc:
        _check_offset(exc, size)
        return None, exc
    except Exception as exc:  # noqa: BLE001 - any other exception is the finding
        raise Finding(f"{type(exc).__name__} (not a CodecError): {exc}") from exc


def _check_offset(exc: CodecError, size: int) -> None:
    """An error points into the input: an offset past its end means a read past its end."""
    offset = getattr(exc, "offset", None)
    if offset is not None and not 0 <= offset <= size:
        raise Finding(f"{type(exc).__name__} at offset {offset} of a {size}-byte input: {exc}") from exc


def chunked(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut at points drawn from ``seed``: single bytes, small and large pieces."""
    rnd = random.Random(seed)
    out, pos = [], 0
    while pos < len(data):
        n = rnd.choice((1, 1, 2, 3, 7, 8, 9, rnd.randint(1, 64), rnd.randint(1, 5000)))
        out.append(data[pos : pos + n])
        pos += n
    return out


def _config(data: bytes) -> tuple[int, bytes]:
    return (data[0], data[1:]) if data else (0, b"")


def _feed(parser: Any, chunks: list[bytes]) -> tuple[list, str | None]:
    """Everything the parser gave, and the error it ended with (type and text)."""
    items: list = []
    fed = 0
    for chunk in chunks:
        fed += len(chunk)
        try:
            items.extend(parser.feed(chunk))
        except CodecError as exc:
            _check_offset(exc, fed)
            items.extend(exc.parsed)
            try:  # a poisoned parser stays poisoned, with a typed error
                parser.feed(b"\x08\x00\x00\x00\x00\x00\x00\xce")
            except CodecError:
                pass
            else:
                raise Finding("the parser accepted input after raising") from None
            return items, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001
            raise Finding(f"{type(exc).__name__} (not a CodecError) from feed(): {exc}") from exc
    return items, None


def _check_method(method: Any) -> None:
    payload = method.encode_payload()
    again, error = _typed(lambda: codec.decode_method(payload), len(payload))
    if error is not None or again != method:
        raise Finding(f"{method!r} does not survive encode/decode: {error or again!r}")


def _parser_target(make: Callable[[int, bool], Any]) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        config, stream = _config(data)
        expect_header, frame_max = bool(config & 1), (4096, 131072)[config >> 1 & 1]
        whole_parser = make(frame_max, expect_header)
        whole = _feed(whole_parser, [stream])
        pieces_parser = make(frame_max, expect_header)
        pieces = _feed(pieces_parser, chunked(stream, config >> 2))
        if whole != pieces:
            raise Finding(f"fed whole: {whole!r}\nfed in chunks: {pieces!r}")
        if whole[1] is None and whole_parser.buffered != pieces_parser.buffered:
            raise Finding(f"buffered {whole_parser.buffered} whole, {pieces_parser.buffered} in chunks")
        for item in whole[0]:
            method = getattr(item, "method", None)
            if method is not None:
                _check_method(method)

    return target


frame_parser = _parser_target(lambda frame_max, expect: codec.FrameParser(frame_max, expect_protocol_header=expect))
command_parser = _parser_target(
    lambda frame_max, expect: codec.CommandParser(frame_max, max_body_size=1 << 20, expect_protocol_header=expect)
)


def decode_method(data: bytes) -> None:
    method, error = _typed(lambda: codec.decode_method(data), len(data))
    if error is not None:
        return
    _check_method(method)
    values = [getattr(method, name) for name in method.FIELDS]
    if any(isinstance(v, dict) for v in values):
        return  # a table's value types are the encoder's choice: the fixed point is the promise
    encoded = method.encode_payload()
    # Bits the encoder writes as 0 may be set in the input (ignored), which keeps the length.
    exact = not any(isinstance(v, bool) for v in values)
    if encoded != data if exact else len(encoded) != len(data):
        raise Finding(f"{method!r} re-encodes to {encoded.hex()}, decoded from {data.hex()}")


def decode_table(data: bytes) -> None:
    table, error = _typed(lambda: codec.decode_table(data), len(data))
    if error is not None:
        return
    encoded, error = _typed(lambda: codec.encode_table(table), 1 << 62)
    if error is not None:
        return  # a value the encoder cannot write (e.g. a decimal it cannot scale): fine
    again, error = _typed(lambda: codec.decode_table(encoded), len(encoded))
    if error is not None:
        raise Finding(f"encode_table's own output does not decode: {error}")
    if codec.encode_table(again) != encoded:  # bytes, so that NaN compares equal
        raise Finding(f"decode/encode is not a fixed point for {data.hex()}")


def content_header(data: bytes) -> None:
    props, error = _typed(lambda: codec.BasicProperties.decode(data), len(data))
    if error is not None:
        return
    encoded = props.encode()
    again, error = _typed(lambda: codec.BasicProperties.decode(encoded), len(encoded))
    if error is not None or again.encode() != encoded:
        raise Finding(f"{props!r} does not survive encode/decode: {error or again!r}")
    continued = len(data) >= 2 and data[1] & 1  # a second flag word follows: the encoder never writes one
    if props.headers is None and not continued and len(encoded) != len(data):  # other reserved bits keep the length
        raise Finding(f"{props!r} re-encodes to {encoded.hex()}, decoded from {data.hex()}")


def _stream_parser_target(data: bytes) -> None:
    from amqwire.codec import stream as S

    config, stream = _config(data)
    sender = ("server", "client", "any")[config % 3]
    max_frame_size = (0, 4096, 1 << 20)[config >> 2 & 3 if config >> 2 & 3 < 3 else 0]

    def make() -> Any:
        return S.StreamParser(max_frame_size, sender=sender)

    whole_parser = make()
    whole = _feed(whole_parser, [stream])
    pieces_parser = make()
    pieces = _feed(pieces_parser, chunked(stream, config >> 4))
    if whole != pieces:
        raise Finding(f"fed whole: {whole!r}\nfed in chunks: {pieces!r}")
    if whole[1] is None and whole_parser.buffered != pieces_parser.buffered:
        raise Finding(f"buffered {whole_parser.buffered} whole, {pieces_parser.buffered} in chunks")
    for item in whole[0]:
        _check_stream_command(item)


def _check_stream_command(command: Any) -> None:
    from amqwire.codec import stream as S

    encoded = command.encode()
    again, error = _typed(lambda: S.decode_frame(encoded, sender="any"), len(encoded))
    if error is not None or again != command:
        raise Finding(f"{command!r} does not survive encode/decode: {error or again!r}")


def stream_frame(data: bytes) -> None:
    """One whole frame: what decodes re-encodes to the same bytes, but for an empty
    optional map (Subscribe, OpenResponse, ResolveOffsetSpec) which is written without its
    count, and 3.10's Route/Partitions responses, which come back with the response bit."""
    from amqwire.codec import stream as S

    command, error = _typed(lambda: S.decode_frame(data), len(data))
    if error is not None:
        command, error = _typed(lambda: S.decode_frame(data, sender="any"), len(data))
    if error is not None:
        return
    _check_stream_command(command)
    encoded = command.encode()
    if encoded == data:
        return
    optional_map = isinstance(command, (S.Subscribe, S.OpenResponse, S.ResolveOffsetSpec)) and data.endswith(b"\0" * 4)
    legacy = isinstance(command, (S.RouteResponse, S.PartitionsResponse)) and data[4] & 0x80 == 0
    if not (optional_map and encoded == data[:-4] or legacy and encoded[5:] == data[5:]):
        raise Finding(f"{command!r} re-encodes to {encoded.hex()}, decoded from {data.hex()}")


def stream_chunk(data: bytes) -> None:
    from amqwire.codec import stream as S

    chunk, error = _typed(lambda: S.decode_chunk(data), len(data))
    if error is not None:
        chunk, error = _typed(lambda: S.decode_chunk(data, check_crc=False), len(data))
        if error is not None:
            return
    records, error = _typed(chunk.offsets_and_messages, len(data))
    if error is not None:
        return
    if [offset for offset, _ in records] != list(range(chunk.first_offset, chunk.first_offset + len(records))):
        raise Finding(f"offsets not consecutive from {chunk.first_offset}: {[o for o, _ in records]}")
    if chunk.chunk_type == 0 and len(records) != chunk.num_records:
        raise Finding(f"{len(records)} records from a chunk announcing {chunk.num_records}")
    skip = data[-1] % (len(records) + 1) if data else 0
    first, _, tail = S.chunk_messages(data, chunk.first_offset + skip, decode=False, check_crc=False)
    if tail != [record for _, record in records[skip:]] or (tail and first != chunk.first_offset + skip):
        raise Finding(f"chunk_messages from +{skip} gives {first}, {len(tail)} records; offsets_and_messages disagrees")


def spark_chunks(data: bytes) -> None:
    """The Spark stream source's chunk builder (amqwire.spark.stream_chunks): rows, or a
    ChunkError / RecordError, never another exception; the rows are the chunk's records
    from a start inside it, in order, one each, and a valid Arrow batch."""
    from amqwire.codec import stream as S
    from amqwire.spark.errors import RecordError
    from amqwire.spark.stream_chunks import ChunkBatchBuilder

    try:
        chunk = S.decode_chunk(data, check_crc=False)
        records = chunk.offsets_and_messages() if chunk.chunk_type == 0 else []
    except CodecError:
        chunk, records = None, None
    skip = data[-1] % 3 if data else 0
    end = 2**63 - 1  # offsets are int64 in Spark: the builder reads none at or past it
    start = min(chunk.first_offset + skip, end) if chunk is not None else 0
    builder = ChunkBatchBuilder("fuzz", start, end, check_crc=False)
    try:
        builder.add_chunk(data)
    except CodecError:
        if records is not None:
            raise Finding("the builder refuses a chunk the codec reads") from None
        return
    except RecordError as exc:
        if not 0 <= exc.position <= len(data):
            raise Finding(f"RecordError at byte {exc.position} of a {len(data)}-byte chunk") from None
        return
    except Exception as exc:
        raise Finding(f"the builder raised {type(exc).__name__}: {exc}") from exc
    if records is None:
        raise Finding("the builder reads a chunk the codec refuses")
    batch = builder.take()
    offsets = [] if batch is None else batch.column("offset").to_pylist()
    expected = [offset for offset, _ in records[skip:] if offset < end]
    if offsets != expected:
        raise Finding(f"rows at offsets {offsets[:10]}, records at {expected[:10]}")
    if batch is not None:
        try:
            batch.validate(full=True)
        except Exception as exc:
            raise Finding(f"the builder's batch is not valid Arrow: {exc}") from exc


def spark_decoder(data: bytes) -> None:
    from amqwire.spark.decode import decode_one

    row, error = _typed(lambda: decode_one(data), len(data))
    if error is not None:
        return
    if not isinstance(row, dict) or not isinstance(row["body"], bytes):
        raise Finding(f"decode_one returned {row!r}")


def _amqp10_fixed_point(decode: Callable[[bytes], Any], encode: Callable[[Any], bytes], data: bytes) -> None:
    """What decodes encodes, and that encoding decodes and encodes to itself (it is the
    input itself where the input was written the way the encoder writes)."""
    value, error = _typed(lambda: decode(data), len(data))
    if error is not None:
        return
    try:
        encoded = encode(value)
    except CodecError as exc:
        raise Finding(f"{value!r:.300} decodes but does not encode: {exc}") from exc
    again, error = _typed(lambda: decode(encoded), len(encoded))
    if error is not None:
        raise Finding(f"the encoding of {value!r:.300} does not decode: {error}")
    if encode(again) != encoded:   # bytes, so that NaN compares equal
        raise Finding(f"decode/encode is not a fixed point for {data.hex()}")


def amqp10_message(data: bytes) -> None:
    from amqwire.codec.stream.amqp10 import decode_message

    _amqp10_fixed_point(decode_message, lambda message: message.encode(), data)


def amqp10_value(data: bytes) -> None:
    from amqwire.codec.stream.amqp10 import decode_value, encode_value

    _amqp10_fixed_point(decode_value, encode_value, data)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "frame_parser": frame_parser,
    "command_parser": command_parser,
    "decode_method": decode_method,
    "decode_table": decode_table,
    "content_header": content_header,
    "spark_decoder": spark_decoder,
    "amqp10_message": amqp10_message,
    "amqp10_value": amqp10_value,
    "stream_parser": _stream_parser_target,
    "stream_frame": stream_frame,
    "stream_chunk": stream_chunk,
    "spark_chunks": spark_chunks,
}
