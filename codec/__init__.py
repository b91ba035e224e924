"""amqwire.codec: the AMQP 0-9-1 wire codec (RabbitMQ dialect), compiled with Cython.

Frames out: :func:`encode_publish`, :func:`encode_publish_iov`, :class:`FrameWriter`,
``Method.encode()``.  Bytes in: :class:`FrameParser`, :class:`CommandParser`,
:func:`decode_method`.  Field tables: :func:`encode_table`, :func:`decode_table`.
"""
from amqwire.codec.errors import (
    AMQPSyntaxError,
    CodecError,
    FrameError,
    ProtocolHeaderError,
    UnexpectedFrame,
    UnsupportedValueError,
)
from amqwire.codec import methods as _methods
from amqwire.codec.methods import *  # noqa: F401,F403  (the 66 method classes)
from amqwire.codec.methods import METHODS, Method, decode_method
from amqwire.codec.parser import (
    BodyFrame,
    Command,
    CommandParser,
    Delivery,
    FrameParser,
    HeaderFrame,
    Heartbeat,
    MethodFrame,
    ProtocolHeader,
)
from amqwire.codec.properties import PROPERTY_NAMES, BasicProperties
from amqwire.codec.table import decode_array, decode_table, encode_array, encode_table
from amqwire.codec.writer import (
    DEFAULT_FRAME_MAX,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    FrameWriter,
    encode_publish,
    encode_publish_iov,
)

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_MIN_SIZE = 4096
MAX_NESTING = 64

__version__ = "0.1.0"

__all__ = [
    "AMQPSyntaxError", "CodecError", "FrameError", "ProtocolHeaderError", "UnexpectedFrame",
    "UnsupportedValueError",
    "BasicProperties", "PROPERTY_NAMES",
    "encode_table", "decode_table", "encode_array", "decode_array",
    "FrameWriter", "encode_publish", "encode_publish_iov",
    "FrameParser", "CommandParser", "Command", "Delivery", "MethodFrame", "HeaderFrame", "BodyFrame",
    "Heartbeat", "ProtocolHeader",
    "DEFAULT_FRAME_MAX", "HEARTBEAT_FRAME", "PROTOCOL_HEADER", "FRAME_METHOD", "FRAME_HEADER",
    "FRAME_BODY", "FRAME_HEARTBEAT", "FRAME_END", "FRAME_MIN_SIZE", "MAX_NESTING",
]
__all__ += _methods.__all__
