from typing import Any, ClassVar, Iterable, Literal, Mapping, NamedTuple, Sequence

from amqwire.codec.errors import StreamFrameError as StreamFrameError

_Buffer = bytes | bytearray | memoryview
_Sender = Literal["server", "client", "any"]

KEY_DECLARE_PUBLISHER: int
KEY_PUBLISH: int
KEY_PUBLISH_CONFIRM: int
KEY_PUBLISH_ERROR: int
KEY_QUERY_PUBLISHER_SEQUENCE: int
KEY_DELETE_PUBLISHER: int
KEY_SUBSCRIBE: int
KEY_DELIVER: int
KEY_CREDIT: int
KEY_STORE_OFFSET: int
KEY_QUERY_OFFSET: int
KEY_UNSUBSCRIBE: int
KEY_CREATE: int
KEY_DELETE: int
KEY_METADATA: int
KEY_METADATA_UPDATE: int
KEY_PEER_PROPERTIES: int
KEY_SASL_HANDSHAKE: int
KEY_SASL_AUTHENTICATE: int
KEY_TUNE: int
KEY_OPEN: int
KEY_CLOSE: int
KEY_HEARTBEAT: int
KEY_ROUTE: int
KEY_PARTITIONS: int
KEY_CONSUMER_UPDATE: int
KEY_EXCHANGE_COMMAND_VERSIONS: int
KEY_STREAM_STATS: int
KEY_CREATE_SUPER_STREAM: int
KEY_DELETE_SUPER_STREAM: int
KEY_RESOLVE_OFFSET_SPEC: int
RESPONSE_FLAG: int
COMMAND_NAMES: dict[int, str]
COMMANDS_3_10: dict[int, frozenset[int]]
COMMANDS: dict[int, type[StreamCommand]]

RESPONSE_OK: int
RESPONSE_STREAM_DOES_NOT_EXIST: int
RESPONSE_SUBSCRIPTION_ID_ALREADY_EXISTS: int
RESPONSE_SUBSCRIPTION_ID_DOES_NOT_EXIST: int
RESPONSE_STREAM_ALREADY_EXISTS: int
RESPONSE_STREAM_NOT_AVAILABLE: int
RESPONSE_SASL_MECHANISM_NOT_SUPPORTED: int
RESPONSE_AUTHENTICATION_FAILURE: int
RESPONSE_SASL_ERROR: int
RESPONSE_SASL_CHALLENGE: int
RESPONSE_SASL_AUTHENTICATION_FAILURE_LOOPBACK: int
RESPONSE_VIRTUAL_HOST_ACCESS_FAILURE: int
RESPONSE_UNKNOWN_FRAME: int
RESPONSE_FRAME_TOO_LARGE: int
RESPONSE_INTERNAL_ERROR: int
RESPONSE_ACCESS_REFUSED: int
RESPONSE_PRECONDITION_FAILED: int
RESPONSE_PUBLISHER_DOES_NOT_EXIST: int
RESPONSE_NO_OFFSET: int
RESPONSE_SASL_CANNOT_CHANGE_MECHANISM: int
RESPONSE_SASL_CANNOT_CHANGE_USERNAME: int
RESPONSE_CODES: dict[int, str]

OFFSET_TYPE_NONE: int
OFFSET_TYPE_FIRST: int
OFFSET_TYPE_LAST: int
OFFSET_TYPE_NEXT: int
OFFSET_TYPE_OFFSET: int
OFFSET_TYPE_TIMESTAMP: int

COMPRESSION_NONE: int
COMPRESSION_GZIP: int
COMPRESSION_SNAPPY: int
COMPRESSION_LZ4: int
COMPRESSION_ZSTD: int
COMPRESSIONS: dict[int, str]

class Broker(NamedTuple):
    reference: int
    host: str
    port: int

class StreamMetadata(NamedTuple):
    stream: str
    response_code: int
    leader: int
    replicas: list[int]

class CommandVersion(NamedTuple):
    key: int
    min_version: int
    max_version: int

class StreamCommand:
    KEY: ClassVar[int]
    FIELDS: ClassVar[tuple[str, ...]]
    def encode(self) -> bytes: ...
    @property
    def version(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class SimpleResponse(StreamCommand):
    correlation_id: int
    response_code: int
    def __init__(self, correlation_id: int, response_code: int = ...) -> None: ...
    @property
    def ok(self) -> bool: ...

class StreamsResponse(SimpleResponse):
    streams: list[str]
    def __init__(self, correlation_id: int, response_code: int, streams: Iterable[str]) -> None: ...

class SubEntry:
    compression: int
    record_count: int
    uncompressed_size: int
    data: bytes
    def __init__(self, compression: int, record_count: int, uncompressed_size: int, data: _Buffer) -> None: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class Publish(StreamCommand):
    publisher_id: int
    messages: list[tuple[int, bytes | SubEntry]]
    filter_values: list[str | None] | None
    def __init__(
        self,
        publisher_id: int,
        messages: Iterable[tuple[int, _Buffer | SubEntry]],
        filter_values: Iterable[str | None] | None = ...,
    ) -> None: ...

class PublishConfirm(StreamCommand):
    publisher_id: int
    publishing_ids: list[int]
    def __init__(self, publisher_id: int, publishing_ids: Iterable[int]) -> None: ...

class PublishError(StreamCommand):
    publisher_id: int
    errors: list[tuple[int, int]]
    def __init__(self, publisher_id: int, errors: Iterable[tuple[int, int]]) -> None: ...

class Subscribe(StreamCommand):
    correlation_id: int
    subscription_id: int
    stream: str
    offset_type: int
    offset: int
    credit: int
    properties: dict[str, str]
    def __init__(
        self,
        correlation_id: int,
        subscription_id: int,
        stream: str,
        offset_type: int,
        offset: int = ...,
        credit: int = ...,
        properties: Mapping[str, str] | None = ...,
    ) -> None: ...

class Deliver(StreamCommand):
    subscription_id: int
    committed_offset: int | None
    chunk: bytes
    def __init__(self, subscription_id: int, chunk: _Buffer, committed_offset: int | None = ...) -> None: ...

class MetadataResponse(StreamCommand):
    correlation_id: int
    brokers: list[Broker]
    streams: list[StreamMetadata]
    def __init__(
        self,
        correlation_id: int,
        brokers: Iterable[tuple[int, str, int]],
        streams: Iterable[tuple[str, int, int, Iterable[int]]],
    ) -> None: ...

class Tune(StreamCommand):
    frame_max: int
    heartbeat: int
    def __init__(self, frame_max: int, heartbeat: int) -> None: ...

class TuneResponse(Tune): ...

class Heartbeat(StreamCommand): ...

class DeclarePublisher(StreamCommand):
    correlation_id: int
    publisher_id: int
    reference: str
    stream: str
    def __init__(self, correlation_id: int, publisher_id: int, reference: str, stream: str) -> None: ...

class DeclarePublisherResponse(SimpleResponse):
    ...

class QueryPublisherSequence(StreamCommand):
    correlation_id: int
    reference: str
    stream: str
    def __init__(self, correlation_id: int, reference: str, stream: str) -> None: ...

class QueryPublisherSequenceResponse(SimpleResponse):
    sequence: int
    def __init__(self, correlation_id: int, response_code: int, sequence: int) -> None: ...

class DeletePublisher(StreamCommand):
    correlation_id: int
    publisher_id: int
    def __init__(self, correlation_id: int, publisher_id: int) -> None: ...

class DeletePublisherResponse(SimpleResponse):
    ...

class SubscribeResponse(SimpleResponse):
    ...

class Credit(StreamCommand):
    subscription_id: int
    credit: int
    def __init__(self, subscription_id: int, credit: int) -> None: ...

class CreditResponse(StreamCommand):
    response_code: int
    subscription_id: int
    def __init__(self, response_code: int, subscription_id: int) -> None: ...

class StoreOffset(StreamCommand):
    reference: str
    stream: str
    offset: int
    def __init__(self, reference: str, stream: str, offset: int) -> None: ...

class QueryOffset(StreamCommand):
    correlation_id: int
    reference: str
    stream: str
    def __init__(self, correlation_id: int, reference: str, stream: str) -> None: ...

class QueryOffsetResponse(SimpleResponse):
    offset: int
    def __init__(self, correlation_id: int, response_code: int, offset: int) -> None: ...

class Unsubscribe(StreamCommand):
    correlation_id: int
    subscription_id: int
    def __init__(self, correlation_id: int, subscription_id: int) -> None: ...

class UnsubscribeResponse(SimpleResponse):
    ...

class Create(StreamCommand):
    correlation_id: int
    stream: str
    arguments: dict[str, str]
    def __init__(self, correlation_id: int, stream: str, arguments: Mapping[str, str] | None = ...) -> None: ...

class CreateResponse(SimpleResponse):
    ...

class Delete(StreamCommand):
    correlation_id: int
    stream: str
    def __init__(self, correlation_id: int, stream: str) -> None: ...

class DeleteResponse(SimpleResponse):
    ...

class Metadata(StreamCommand):
    correlation_id: int
    streams: list[str]
    def __init__(self, correlation_id: int, streams: Iterable[str]) -> None: ...

class MetadataUpdate(StreamCommand):
    response_code: int
    stream: str
    def __init__(self, response_code: int, stream: str) -> None: ...

class PeerProperties(StreamCommand):
    correlation_id: int
    properties: dict[str, str]
    def __init__(self, correlation_id: int, properties: Mapping[str, str] | None = ...) -> None: ...

class PeerPropertiesResponse(SimpleResponse):
    properties: dict[str, str]
    def __init__(self, correlation_id: int, response_code: int, properties: Mapping[str, str] | None = ...) -> None: ...

class SaslHandshake(StreamCommand):
    correlation_id: int
    def __init__(self, correlation_id: int) -> None: ...

class SaslHandshakeResponse(SimpleResponse):
    mechanisms: list[str]
    def __init__(self, correlation_id: int, response_code: int, mechanisms: Iterable[str]) -> None: ...

class SaslAuthenticate(StreamCommand):
    correlation_id: int
    mechanism: str
    data: bytes | None
    def __init__(self, correlation_id: int, mechanism: str, data: _Buffer | None) -> None: ...

class SaslAuthenticateResponse(SimpleResponse):
    challenge: bytes
    def __init__(self, correlation_id: int, response_code: int, challenge: _Buffer = ...) -> None: ...

class Open(StreamCommand):
    correlation_id: int
    virtual_host: str
    def __init__(self, correlation_id: int, virtual_host: str = ...) -> None: ...

class OpenResponse(SimpleResponse):
    properties: dict[str, str]
    def __init__(self, correlation_id: int, response_code: int, properties: Mapping[str, str] | None = ...) -> None: ...

class Close(StreamCommand):
    correlation_id: int
    code: int
    reason: str
    def __init__(self, correlation_id: int, code: int = ..., reason: str = ...) -> None: ...

class CloseResponse(SimpleResponse):
    ...

class Route(StreamCommand):
    correlation_id: int
    routing_key: str
    super_stream: str
    def __init__(self, correlation_id: int, routing_key: str, super_stream: str) -> None: ...

class RouteResponse(StreamsResponse):
    ...

class Partitions(StreamCommand):
    correlation_id: int
    super_stream: str
    def __init__(self, correlation_id: int, super_stream: str) -> None: ...

class PartitionsResponse(StreamsResponse):
    ...

class CreateSuperStream(StreamCommand):
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str]
    def __init__(
        self,
        correlation_id: int,
        name: str,
        partitions: Iterable[str],
        binding_keys: Iterable[str],
        arguments: Mapping[str, str] | None = ...,
    ) -> None: ...

class CreateSuperStreamResponse(SimpleResponse):
    ...

class DeleteSuperStream(StreamCommand):
    correlation_id: int
    name: str
    def __init__(self, correlation_id: int, name: str) -> None: ...

class DeleteSuperStreamResponse(SimpleResponse):
    ...

class ConsumerUpdate(StreamCommand):
    correlation_id: int
    subscription_id: int
    active: bool
    def __init__(self, correlation_id: int, subscription_id: int, active: bool) -> None: ...

class ConsumerUpdateResponse(SimpleResponse):
    offset_type: int
    offset: int
    def __init__(self, correlation_id: int, response_code: int, offset_type: int, offset: int = ...) -> None: ...

class ExchangeCommandVersions(StreamCommand):
    correlation_id: int
    commands: list[CommandVersion]
    def __init__(self, correlation_id: int, commands: Iterable[tuple[int, int, int]]) -> None: ...

class ExchangeCommandVersionsResponse(SimpleResponse):
    commands: list[CommandVersion]
    def __init__(self, correlation_id: int, response_code: int, commands: Iterable[tuple[int, int, int]]) -> None: ...

class StreamStats(StreamCommand):
    correlation_id: int
    stream: str
    def __init__(self, correlation_id: int, stream: str) -> None: ...

class StreamStatsResponse(SimpleResponse):
    stats: dict[str, int]
    def __init__(self, correlation_id: int, response_code: int, stats: Mapping[str, int] | None = ...) -> None: ...

class ResolveOffsetSpec(StreamCommand):
    correlation_id: int
    stream: str
    offset_type: int
    offset: int
    properties: dict[str, str]
    def __init__(
        self,
        correlation_id: int,
        stream: str,
        offset_type: int,
        offset: int = ...,
        properties: Mapping[str, str] | None = ...,
    ) -> None: ...

class ResolveOffsetSpecResponse(SimpleResponse):
    offset_type: int
    offset: int
    def __init__(self, correlation_id: int, response_code: int, offset_type: int, offset: int) -> None: ...

def decode_frame(data: _Buffer, *, sender: _Sender = ...) -> StreamCommand: ...

class StreamParser:
    max_frame_size: int
    def __init__(self, max_frame_size: int = ..., *, sender: _Sender = ...) -> None: ...
    @property
    def sender(self) -> _Sender: ...
    @property
    def buffered(self) -> int: ...
    def feed(self, data: _Buffer) -> list[StreamCommand]: ...

def encode_publish(
    publisher_id: int,
    publishing_ids: int | Sequence[int],
    messages: Sequence[_Buffer],
    version: int = ...,
    filter_values: Sequence[str | None] | None = ...,
) -> bytes: ...
def encode_publish_values(
    publisher_id: int,
    first_publishing_id: int,
    bodies: Sequence[_Buffer],
    *,
    properties: Any = ...,
    application_properties: Mapping[str, Any] | None = ...,
    filter_values: Sequence[str | None] | None = ...,
) -> bytes: ...
def compression_code(compression: int | str) -> int: ...
def encode_subentry(messages: Iterable[_Buffer], compression: int | str = ..., *, level: int | None = ...) -> SubEntry: ...
def encode_publish_subentry(
    publisher_id: int,
    publishing_id: int,
    messages: Iterable[_Buffer],
    compression: int | str = ...,
    *,
    level: int | None = ...,
) -> bytes: ...
