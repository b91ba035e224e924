"""Publish frames back to columns: the inverse of the encoder, for inspection and tests.

Each value of a binary array must hold one whole publish (method, header and body frames),
as :func:`amqwire.spark.encode.encode_batch` writes it.  This side runs per row through
the codec's :class:`~amqwire.codec.CommandParser`; it is not the hot path.
"""
from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any, Optional

from amqwire.codec import BasicPublish, Command, CommandParser
from amqwire.codec.errors import CodecError, FrameError

from amqwire.spark.errors import ArrowTypeError

__all__ = ["PROPERTY_FIELDS", "decoded_type", "decode_batch", "DECODED_DDL"]

# The decoded properties struct: the 14 basic properties but headers (a column of its own).
PROPERTY_FIELDS = (
    ("content_type", "string"),
    ("content_encoding", "string"),
    ("delivery_mode", "int32"),
    ("priority", "int32"),
    ("correlation_id", "string"),
    ("reply_to", "string"),
    ("expiration", "string"),
    ("message_id", "string"),
    ("timestamp", "timestamp"),
    ("type", "string"),
    ("user_id", "string"),
    ("app_id", "string"),
    ("cluster_id", "string"),
)

# The same struct in Spark's DDL, for from_amqp_frames.
DECODED_DDL = (
    "exchange string, routing_key string, mandatory boolean, properties struct<"
    + ", ".join(
        f"{name}: {'int' if kind == 'int32' else kind}" for name, kind in PROPERTY_FIELDS
    )
    + ">, headers map<string, string>, body binary"
)


def decoded_type() -> Any:
    """The pyarrow struct type :func:`decode_batch` returns."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "int32": pa.int32(), "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.struct(
        [
            ("exchange", pa.string()),
            ("routing_key", pa.string()),
            ("mandatory", pa.bool_()),
            ("properties", pa.struct([(name, kinds[kind]) for name, kind in PROPERTY_FIELDS])),
            ("headers", pa.map_(pa.string(), pa.string())),
            ("body", pa.binary()),
        ]
    )


def header_text(value: Any) -> Optional[str]:
    """A decoded header value as text: strings as they are, anything else as JSON (bytes as
    base64, timestamps in ISO 8601, decimals as numbers), void as null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, decimal.Decimal):
        return float(value) if value != value.to_integral_value() else int(value)
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    return value


def decode_one(frames: bytes, row: int = 0) -> dict[str, Any]:
    """One publish (the frames of one row) as a dict shaped like :func:`decoded_type`."""
    # The row holds the whole publish: a header announcing a larger body is malformed, and
    # must not make the parser allocate what it announces (a 64 GiB body from a 60-byte row).
    parser = CommandParser(0, max_body_size=len(frames))
    try:
        commands = parser.feed(frames)
    except CodecError as exc:
        raise FrameError(f"row {row}: {exc}") from exc
    if len(commands) != 1 or parser.buffered or not isinstance(commands[0], Command):
        raise FrameError(
            f"row {row}: expected the frames of exactly one whole publish, found {len(commands)} "
            f"whole command(s){' and a partial frame' if parser.buffered else ''}"
        )
    command = commands[0]
    method = command.method
    if not isinstance(method, BasicPublish):
        raise FrameError(f"row {row}: expected basic.publish, found {method.NAME}")
    props = command.properties
    if props is None or command.body is None:  # the parser joins content to basic.publish
        raise FrameError(f"row {row}: basic.publish without its content header")
    headers = props.headers
    return {
        "exchange": method.exchange,
        "routing_key": method.routing_key,
        "mandatory": method.mandatory,
        "properties": {name: getattr(props, name) for name, _ in PROPERTY_FIELDS},
        "headers": None if headers is None else [(key, header_text(value)) for key, value in headers.items()],
        "body": bytes(command.body),
    }


def decode_batch(frames: Any) -> Any:
    """A binary array of per-row publish frames to a struct array of :func:`decoded_type`;
    null rows stay null."""
    import pyarrow as pa

    if isinstance(frames, pa.ChunkedArray):
        frames = frames.combine_chunks()
    if not isinstance(frames, pa.Array) or not (
        pa.types.is_binary(frames.type) or pa.types.is_large_binary(frames.type)
    ):
        raise ArrowTypeError(f"frames must be a binary Arrow array, not {getattr(frames, 'type', type(frames))}")
    rows = [None if value is None else decode_one(value, row) for row, value in enumerate(frames.to_pylist())]
    return pa.array(rows, type=decoded_type())
