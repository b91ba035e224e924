import builtins
import datetime
from typing import Any, ClassVar

from amqwire.codec.errors import CodecError

_BytesLike = bytes | bytearray | memoryview

SECTION_CODES: dict[str, int]
HEADER_FIELDS: tuple[str, ...]
PROPERTIES_FIELDS: tuple[str, ...]
MESSAGE_FIELDS: tuple[str, ...]

class AMQP10DecodeError(CodecError): ...
class AMQP10EncodeError(CodecError): ...
class AMQP10UnsupportedValueError(AMQP10EncodeError, TypeError): ...

class Symbol(str): ...

class _FixedInt(int):
    MIN: ClassVar[int]
    MAX: ClassVar[int]
    def __new__(cls, value: int = ...) -> _FixedInt: ...

class UByte(_FixedInt): ...
class UShort(_FixedInt): ...
class UInt(_FixedInt): ...
class ULong(_FixedInt): ...
class Byte(_FixedInt): ...
class Short(_FixedInt): ...
class Int(_FixedInt): ...
class Long(_FixedInt): ...
class Timestamp(_FixedInt): ...

class Float(float):
    def __new__(cls, value: float = ...) -> Float: ...

class Char(str):
    def __new__(cls, value: str) -> Char: ...

class _Decimal:
    SIZE: ClassVar[int]
    raw: bytes
    def __init__(self, raw: _BytesLike) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Decimal32(_Decimal): ...
class Decimal64(_Decimal): ...
class Decimal128(_Decimal): ...

class Described:
    descriptor: Any
    value: Any
    def __init__(self, descriptor: Any, value: Any) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Array:
    items: list[Any]
    type: builtins.type | None
    descriptor: Any
    def __init__(self, items: Any, type: builtins.type | None = ..., descriptor: Any = ...) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class Data:
    parts: list[_BytesLike]
    def __init__(self, parts: Any) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class AmqpSequence:
    sequences: list[list[Any]]
    def __init__(self, sequences: Any) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class AmqpValue:
    value: Any
    def __init__(self, value: Any) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class Header:
    durable: bool | None
    priority: int | None
    ttl: int | None
    first_acquirer: bool | None
    delivery_count: int | None
    def __init__(
        self,
        *,
        durable: bool | None = ...,
        priority: int | None = ...,
        ttl: int | None = ...,
        first_acquirer: bool | None = ...,
        delivery_count: int | None = ...,
    ) -> None: ...
    def as_dict(self) -> dict[str, Any]: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class Properties:
    message_id: int | str | bytes | Any | None
    user_id: bytes | None
    to: str | None
    subject: str | None
    reply_to: str | None
    correlation_id: int | str | bytes | Any | None
    content_type: str | None
    content_encoding: str | None
    absolute_expiry_time: datetime.datetime | int | None
    creation_time: datetime.datetime | int | None
    group_id: str | None
    group_sequence: int | None
    reply_to_group_id: str | None
    def __init__(
        self,
        *,
        message_id: Any = ...,
        user_id: _BytesLike | str | None = ...,
        to: str | None = ...,
        subject: str | None = ...,
        reply_to: str | None = ...,
        correlation_id: Any = ...,
        content_type: str | None = ...,
        content_encoding: str | None = ...,
        absolute_expiry_time: datetime.datetime | int | None = ...,
        creation_time: datetime.datetime | int | None = ...,
        group_id: str | None = ...,
        group_sequence: int | None = ...,
        reply_to_group_id: str | None = ...,
    ) -> None: ...
    def as_dict(self) -> dict[str, Any]: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

_Body = _BytesLike | Data | AmqpSequence | AmqpValue | None

class Message:
    header: Header | None
    delivery_annotations: dict[Any, Any] | None
    message_annotations: dict[Any, Any] | None
    properties: Properties | None
    application_properties: dict[Any, Any] | None
    body: _Body
    footer: dict[Any, Any] | None
    def __init__(
        self,
        body: _Body = ...,
        *,
        header: Header | None = ...,
        delivery_annotations: dict[Any, Any] | None = ...,
        message_annotations: dict[Any, Any] | None = ...,
        properties: Properties | None = ...,
        application_properties: dict[Any, Any] | None = ...,
        footer: dict[Any, Any] | None = ...,
    ) -> None: ...
    def encode(self) -> bytes: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

def encode_message(
    body: _Body,
    *,
    properties: Properties | dict[str, Any] | None = ...,
    application_properties: dict[Any, Any] | None = ...,
    message_annotations: dict[Any, Any] | None = ...,
    header: Header | dict[str, Any] | None = ...,
    delivery_annotations: dict[Any, Any] | None = ...,
    footer: dict[Any, Any] | None = ...,
) -> bytes: ...
def decode_message(data: _BytesLike) -> Message: ...
def encode_value(value: Any) -> bytes: ...
def decode_value(data: _BytesLike) -> Any: ...
