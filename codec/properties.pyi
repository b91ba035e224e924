import datetime
from typing import Any

PROPERTY_NAMES: tuple[str, ...]

class BasicProperties:
    content_type: str | None
    content_encoding: str | None
    headers: dict[str, Any] | None
    delivery_mode: int | None
    priority: int | None
    correlation_id: str | None
    reply_to: str | None
    expiration: str | None
    message_id: str | None
    timestamp: datetime.datetime | None
    type: str | None
    user_id: str | None
    app_id: str | None
    cluster_id: str | None
    @property
    def wire(self) -> bytes | None: ...
    def __init__(
        self,
        *,
        content_type: str | None = ...,
        content_encoding: str | None = ...,
        headers: dict[str, Any] | None = ...,
        delivery_mode: int | None = ...,
        priority: int | None = ...,
        correlation_id: str | None = ...,
        reply_to: str | None = ...,
        expiration: str | None = ...,
        message_id: str | None = ...,
        timestamp: datetime.datetime | None = ...,
        type: str | None = ...,
        user_id: str | None = ...,
        app_id: str | None = ...,
        cluster_id: str | None = ...,
    ) -> None: ...
    def as_dict(self) -> dict[str, Any]: ...
    def encode(self) -> bytes: ...
    @staticmethod
    def decode(data: bytes | bytearray | memoryview) -> BasicProperties: ...
    def __eq__(self, other: object, /) -> bool: ...
