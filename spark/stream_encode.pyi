from typing import Any

__all__ = ["StreamPublishEncoder", "PROPERTY_NAMES"]

PROPERTY_NAMES: tuple[str, ...]

class StreamPublishEncoder:
    @property
    def frames(self) -> int: ...
    def __init__(
        self,
        *,
        publisher_id: int = ...,
        frame_max: int = ...,
        body_format: str = ...,
        exchange: str | None = ...,
        routing_key: str | None = ...,
    ) -> None: ...
    def encode(
        self,
        first_id: int,
        body: Any,
        headers: Any = ...,
        properties: Any = ...,
        exchange: Any = ...,
        routing_key: Any = ...,
        skip: int = ...,
    ) -> tuple[bytes, int]: ...
