from typing import Any, Optional

PROPERTY_NAMES: tuple[str, ...]
DEFAULT_FRAME_MAX: int

class PublishEncoder:
    frame_max_setting: int
    def __init__(
        self,
        *,
        channel: int = ...,
        frame_max: int = ...,
        mandatory: bool = ...,
        body_format: str = ...,
        exchange: Optional[str] = ...,
        routing_key: Optional[str] = ...,
    ) -> None: ...
    def encode(
        self, body: Any, routing_key: Any = ..., exchange: Any = ..., headers: Any = ..., properties: Any = ...
    ) -> Any: ...
    def encode_frames(
        self, body: Any, routing_key: Any = ..., exchange: Any = ..., headers: Any = ..., properties: Any = ...
    ) -> bytes: ...

def encode_batch(
    body: Any,
    routing_key: Any = ...,
    exchange: Any = ...,
    headers: Any = ...,
    properties: Any = ...,
    *,
    channel: int = ...,
    frame_max: int = ...,
    mandatory: bool = ...,
    body_format: str = ...,
    default_exchange: Optional[str] = ...,
    default_routing_key: Optional[str] = ...,
) -> Any: ...
