"""The errors a send fails with: SendFailed (retries spent or an error no retry cures),
SendTimeout (its deadline passed), BufferFullError (``buffer_full='raise'``).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from ..errors import AMQPError, OperationTimeout, PublishError, format_seconds
from .policy import Attempt


class SendFailed(PublishError):
    """A send that did not make it.  ``error``: the last error (also ``__cause__``);
    ``attempts``: every try, in order."""

    def __init__(self, error: BaseException, attempts: Sequence[Attempt], message_id: Optional[str] = None) -> None:
        self.error = error
        self.attempts = list(attempts)
        self.message_id = message_id
        super().__init__(error, self.attempts, message_id)

    def __str__(self) -> str:
        tries = len(self.attempts)
        return f"send of message {self.message_id} failed after {tries} attempt{'s' if tries != 1 else ''}: {self.error}"

    def __reduce__(self) -> Any:
        return (SendFailed, (self.error, self.attempts, self.message_id))


class SendTimeout(OperationTimeout):
    """The send's deadline passed; ``operation`` names the wait it was in (room in the
    producer's buffer, a connection to a broker, connection.blocked, room in the confirm
    window, the back-off before a retry, the broker's confirm).  ``attempts`` as in
    SendFailed; ``error``: the last attempt's error, if any."""

    def __init__(self, operation: str, timeout: Optional[float], attempts: Sequence[Attempt] = (),
                 message_id: Optional[str] = None) -> None:
        super().__init__(operation, timeout)
        self.attempts = list(attempts)
        self.message_id = message_id
        self.error: Optional[BaseException] = self.attempts[-1].error if self.attempts else None

    def __str__(self) -> str:
        text = f"send of message {self.message_id} timed out after {format_seconds(self.timeout)} s waiting for {self.operation}"
        if self.attempts:
            text += f" ({len(self.attempts)} failed attempt(s), the last: {self.error})"
        return text

    def __reduce__(self) -> Any:
        return (SendTimeout, (self.operation, self.timeout, self.attempts, self.message_id))


class BufferFullError(AMQPError):
    """``buffer_full='raise'`` and the producer's buffer (``buffer_memory``) cannot take the message."""

    def __init__(self, size: int, buffered: int, limit: int) -> None:
        self.size, self.buffered, self.limit = size, buffered, limit
        super().__init__(size, buffered, limit)

    def __str__(self) -> str:
        return (f"the producer's buffer is full: {self.buffered} of {self.limit} bytes (buffer_memory) "
                f"held, no room for {self.size} more")
