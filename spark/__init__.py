"""amqwire.spark: DataFrame rows to AMQP publish frames at Arrow speed, and an "amqp"
data source that publishes a DataFrame (batch and streaming) with publisher confirms and
reads RabbitMQ streams (``spark.read`` / ``spark.readStream``: docs/spark-read.md).

Column functions: :func:`to_amqp_frames`, :func:`from_amqp_frames`.  Data source:
:func:`register`, then ``df.write.format("amqp").mode("append")...save()``.  Without
Spark: :class:`PublishEncoder` / :func:`encode_batch` / :func:`decode_batch` on pyarrow
arrays.  Needs ``pip install amqwire[spark]``.
"""
from typing import TYPE_CHECKING, Any

from amqwire.spark.decode import decode_batch
from amqwire.spark.encode import DEFAULT_FRAME_MAX, PROPERTY_NAMES, PublishEncoder, encode_batch
from amqwire.spark.errors import (
    ArrowTypeError,
    DataLoss,
    RowEncodeError,
    SinkError,
    SourceError,
    SourceOptionError,
    StreamUnavailable,
)

if TYPE_CHECKING:  # imported on first use at run time (they import pyspark): see __getattr__
    from amqwire.spark.datasource import AMQPCommitMessage, AMQPDataSource, register
    from amqwire.spark.functions import from_amqp_frames, to_amqp_frames

__all__ = [
    "ArrowTypeError",
    "AMQPCommitMessage",
    "AMQPDataSource",
    "DataLoss",
    "DEFAULT_FRAME_MAX",
    "PROPERTY_NAMES",
    "PublishEncoder",
    "RowEncodeError",
    "SinkError",
    "SourceError",
    "SourceOptionError",
    "StreamUnavailable",
    "decode_batch",
    "encode_batch",
    "from_amqp_frames",
    "register",
    "to_amqp_frames",
]

_LAZY = {
    "to_amqp_frames": "amqwire.spark.functions",
    "from_amqp_frames": "amqwire.spark.functions",
    "register": "amqwire.spark.datasource",
    "AMQPDataSource": "amqwire.spark.datasource",
    "AMQPCommitMessage": "amqwire.spark.datasource",
}


def __getattr__(name: str) -> Any:
    # The Spark-facing parts import pyspark; the Arrow encoder works without it.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'amqwire.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
