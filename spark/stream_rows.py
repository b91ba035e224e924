"""The rows of the "amqp" source: delivered stream messages to one Arrow record batch.

The schema is fixed (Spark's Kafka source has a fixed one too)::

    body binary, stream string, offset bigint, timestamp timestamp,
    exchange string, routing_key string, properties struct<13 basic properties>,
    headers map<string, string>

- ``timestamp`` is the message's ``timestamp`` property (UTC), null when the publisher set
  none.  RabbitMQ 3.10 sends no chunk timestamp over AMQP 0-9-1 (a stream delivery's only
  added header is ``x-stream-offset``: measured), so there is nothing to fall back on.
- ``properties`` holds the 13 basic properties but ``headers``, with the names and types of
  :data:`amqwire.spark.decode.PROPERTY_FIELDS`.
- ``headers`` are the publisher's headers (the broker's ``x-stream-offset`` is the
  ``offset`` column, not a header), each value rendered by
  :func:`amqwire.spark.decode.header_text`: a string as it is, void as null, anything else
  as JSON (numbers and booleans as JSON literals, bytes as a base64 JSON string, timestamps
  as an ISO 8601 JSON string, tables as objects, arrays as arrays).  Null when the message
  had no headers of its own.

:func:`build_batch` here is the plain-pyarrow statement of what a row is: the source's
``read()`` uses its Cython twin, :func:`amqwire.spark.stream_batch.build_batch` (about 14x
less CPU per row), and tests/test_stream_batch.py holds the two to the same output.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

from amqwire.spark.decode import PROPERTY_FIELDS, header_text

__all__ = ["STREAM_DDL", "STREAM_OFFSET_HEADER", "build_batch", "stream_schema"]

#: The header in which the broker says a delivery's offset; not part of the headers column.
STREAM_OFFSET_HEADER = "x-stream-offset"

#: The source's schema in Spark's DDL (what ``DataSource.schema()`` returns).
STREAM_DDL = (
    "body binary, stream string, offset bigint, timestamp timestamp, exchange string, "
    "routing_key string, properties struct<"
    + ", ".join(f"{name}: {'int' if kind == 'int32' else kind}" for name, kind in PROPERTY_FIELDS)
    + ">, headers map<string, string>"
)

_PROPERTY_NAMES = tuple(name for name, _ in PROPERTY_FIELDS)
_property_values = operator.attrgetter(*_PROPERTY_NAMES)


def _text(value: Any) -> Any:
    """header_text, with its two commonest cases (strings, ints) without a JSON encoder."""
    kind = type(value)
    if kind is str:
        return value
    if kind is int:
        return str(value)  # what json.dumps writes for an int
    return header_text(value)


def stream_schema() -> Any:
    """The pyarrow schema of :func:`build_batch`'s batches: what Spark makes of
    :data:`STREAM_DDL` (``to_arrow_schema(..., timezone="UTC")``), field for field."""
    import pyarrow as pa

    timestamp = pa.timestamp("us", tz="UTC")
    kinds = {"string": pa.string(), "int32": pa.int32(), "timestamp": timestamp}
    return pa.schema(
        [
            ("body", pa.binary()),
            ("stream", pa.string()),
            ("offset", pa.int64()),
            ("timestamp", timestamp),
            ("exchange", pa.string()),
            ("routing_key", pa.string()),
            ("properties", pa.struct([(name, kinds[kind]) for name, kind in PROPERTY_FIELDS])),
            ("headers", pa.map_(pa.string(), pa.string())),
        ]
    )


def build_batch(messages: Sequence[Any], stream: str) -> Any:
    """One record batch of :func:`stream_schema` from delivered messages of ``stream``
    (client ``Message`` objects: ``body``, ``exchange``, ``routing_key``, ``properties``,
    ``stream_offset``), one row per message, in their order."""
    import pyarrow as pa

    schema = stream_schema()
    count = len(messages)
    bodies: list[Any] = []
    offsets: list[Any] = []
    exchanges: list[str] = []
    routing_keys: list[str] = []
    properties: list[list[Any]] = [[] for _ in _PROPERTY_NAMES]
    headers: list[Any] = []
    for message in messages:
        bodies.append(bytes(message.body))
        offsets.append(message.stream_offset)
        exchanges.append(message.exchange)
        routing_keys.append(message.routing_key)
        props = message.properties
        for column, value in zip(properties, _property_values(props)):
            column.append(value)
        table = props.headers
        pairs = None
        if table:
            pairs = [(key, _text(value)) for key, value in table.items() if key != STREAM_OFFSET_HEADER]
        headers.append(pairs or None)
    property_type = schema.field("properties").type
    property_arrays = [
        pa.array(values, type=property_type.field(index).type) for index, values in enumerate(properties)
    ]
    stamps = property_arrays[_PROPERTY_NAMES.index("timestamp")]
    columns = [
        pa.array(bodies, type=pa.binary()),
        pa.array([stream] * count, type=pa.string()),
        pa.array(offsets, type=pa.int64()),
        stamps,
        pa.array(exchanges, type=pa.string()),
        pa.array(routing_keys, type=pa.string()),
        pa.StructArray.from_arrays(property_arrays, fields=list(property_type)),
        pa.array(headers, type=schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
