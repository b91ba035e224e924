"""Spark column functions, in the spirit of ``to_avro``/``from_avro``:
:func:`to_amqp_frames` turns rows into ready-to-send publish frames and
:func:`from_amqp_frames` reads them back.

Both are Arrow UDFs: Spark hands over whole Arrow batches and the encoder reads their
buffers in Cython, one encoder per task.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple, Union, cast

from amqwire.spark.decode import DECODED_DDL, decode_batch
from amqwire.spark.encode import DEFAULT_FRAME_MAX, PublishEncoder
from amqwire.spark.workers import workers_run_this_python

__all__ = ["to_amqp_frames", "from_amqp_frames"]

ColumnOrName = Any  # pyspark.sql.Column or a column name


def _column(value: ColumnOrName) -> Any:
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        return F.col(value)
    raise TypeError(f"expected a Column or a column name, got {type(value).__name__}")


def to_amqp_frames(
    body: ColumnOrName,
    routing_key: Union[ColumnOrName, str, None] = None,
    exchange: Union[ColumnOrName, str, None] = None,
    headers: Optional[ColumnOrName] = None,
    properties: Optional[ColumnOrName] = None,
    *,
    frame_max: int = DEFAULT_FRAME_MAX,
    body_format: str = "raw",
    mandatory: bool = False,
    channel: int = 1,
) -> Any:
    """A binary column: each row's basic.publish, content header and body frames.

    ``body``: a binary or string column (``body_format="raw"``), or a struct/map column
    serialized as ``"json"`` or as an AMQP field ``"table"``; a null body is an empty body.
    ``routing_key`` and ``exchange``: a :class:`~pyspark.sql.Column`, or a plain ``str``
    taken as a literal for every row (not as a column name); the exchange defaults to the
    default exchange ``""``.  A null routing key or exchange fails the task, naming the row.
    ``headers``: a ``map<string, ...>`` column.  ``properties``: a struct column whose
    fields are basic property names (``content_type``, ``delivery_mode``, ``timestamp``...).
    Bodies are split into frames of at most ``frame_max`` bytes; ``channel`` is the channel
    number written into the frames.
    """
    from pyspark.sql import Column

    if routing_key is None:
        raise TypeError("to_amqp_frames needs a routing_key: a Column, or a str literal")
    columns = [_column(body)]
    names = ["body"]
    literals = {}
    for name, value in (("routing_key", routing_key), ("exchange", exchange)):
        if isinstance(value, Column):
            columns.append(value)
            names.append(name)
        elif isinstance(value, str):
            literals[name] = value
        elif value is not None:
            raise TypeError(f"{name} must be a Column or a str literal, got {type(value).__name__}")
    for name, value in (("headers", headers), ("properties", properties)):
        if value is not None:
            columns.append(_column(value))
            names.append(name)
    settings: dict[str, Any] = dict(
        channel=channel,
        frame_max=frame_max,
        mandatory=mandatory,
        body_format=body_format,
        exchange=literals.get("exchange"),
        routing_key=literals.get("routing_key"),
    )
    PublishEncoder(**settings)  # bad settings fail here, on the driver, not in a task

    def encode_batches(batches: Iterator[Tuple[Any, ...]]) -> Iterator[Any]:
        encoder = PublishEncoder(**settings)
        for arrays in batches:
            if not isinstance(arrays, tuple):
                arrays = (arrays,)
            yield encoder.encode(**dict(zip(names, arrays)))

    _iterator_hints(encode_batches, len(columns))
    _local_workers()
    return _arrow_udf(encode_batches, "binary")(*columns).alias("frames")


def from_amqp_frames(frames: ColumnOrName) -> Any:
    """A struct column of exchange, routing_key, mandatory, properties (13 fields: the
    basic properties but headers), headers (``map<string, string>``: string values as
    they are, others as JSON text) and body, decoded from :func:`to_amqp_frames` output."""

    def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
        for array in batches:
            yield decode_batch(array)

    _iterator_hints(decode_batches, 1)
    _local_workers()
    return _arrow_udf(decode_batches, DECODED_DDL)(_column(frames)).alias("publish")


def _arrow_udf(fn: Any, return_type: str) -> Any:
    # The UDF's flavour comes from the annotations _iterator_hints sets at run time, which
    # pyspark's typed overloads of arrow_udf cannot see.
    from pyspark.sql import functions as F

    return cast(Any, F).arrow_udf(fn, return_type)


def _local_workers() -> None:
    """The UDF is bound to the Python its workers run when it is created: on a local
    master, this interpreter (see :mod:`amqwire.spark.workers`)."""
    from pyspark.sql import SparkSession

    workers_run_this_python(SparkSession.getActiveSession())


def _iterator_hints(fn: Any, arity: int) -> None:
    """Spark picks the Arrow UDF flavour from type hints: iterator of arrays (or of tuples
    of arrays) to iterator of arrays, so that one encoder serves a whole task."""
    import pyarrow as pa

    item = pa.Array if arity == 1 else cast(Any, Tuple)[(pa.Array,) * arity]
    fn.__annotations__ = {"batches": cast(Any, Iterator)[item], "return": Iterator[pa.Array]}
