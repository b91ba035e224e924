"""The channel operations both transports offer, written once.

Each operation builds its codec method and hands it to ``self._rpc(method, result)``
(synchronous requests: the transport waits for the reply, then returns ``result(reply)``) or
``self._send(method)`` (no reply).  The blocking transport returns values from those; the
asyncio transport returns coroutines.  So both have the same names, arguments and meaning.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from amqwire.codec import (
    BasicCancel,
    BasicQos,
    BasicRecover,
    ConfirmSelect,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    QueueBind,
    QueueDeclare,
    QueueDelete,
    QueuePurge,
    QueueUnbind,
    TxCommit,
    TxRollback,
    TxSelect,
)


def _message_count(reply: Any) -> int:
    return reply.message_count


def _ignore(reply: Any) -> None:
    return None


class ChannelOperations:
    """Mixin: exchange, queue, qos, recover and tx operations in AMQP's own names."""

    def _rpc(self, method: Any, result: Optional[Callable[[Any], Any]] = None) -> Any:
        raise NotImplementedError

    # exchanges ---------------------------------------------------------------------------

    def exchange_declare(
        self,
        exchange: str,
        exchange_type: str = "direct",
        *,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Optional[dict] = None,
    ) -> Any:
        """Declare an exchange (``passive``: only check that it exists; 404 if not)."""
        method = ExchangeDeclare(0, exchange, exchange_type, passive, durable, auto_delete, internal, False, arguments)
        return self._rpc(method, _ignore)

    def exchange_delete(self, exchange: str, *, if_unused: bool = False) -> Any:
        return self._rpc(ExchangeDelete(0, exchange, if_unused, False), _ignore)

    def exchange_bind(self, destination: str, source: str, routing_key: str = "", arguments: Optional[dict] = None) -> Any:
        """Route messages from exchange ``source`` to exchange ``destination`` (RabbitMQ extension)."""
        return self._rpc(ExchangeBind(0, destination, source, routing_key, False, arguments), _ignore)

    def exchange_unbind(
        self, destination: str, source: str, routing_key: str = "", arguments: Optional[dict] = None
    ) -> Any:
        return self._rpc(ExchangeUnbind(0, destination, source, routing_key, False, arguments), _ignore)

    # queues ------------------------------------------------------------------------------

    def queue_declare(
        self,
        queue: str = "",
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Optional[dict] = None,
    ) -> Any:
        """Declare a queue; returns QueueDeclareOk (``.queue``, ``.message_count``, ``.consumer_count``).

        An empty name asks the broker to name it.  ``passive``: only check it exists (404 if not).
        """
        return self._rpc(QueueDeclare(0, queue, passive, durable, exclusive, auto_delete, False, arguments))

    def queue_bind(self, queue: str, exchange: str, routing_key: str = "", arguments: Optional[dict] = None) -> Any:
        return self._rpc(QueueBind(0, queue, exchange, routing_key, False, arguments), _ignore)

    def queue_unbind(self, queue: str, exchange: str, routing_key: str = "", arguments: Optional[dict] = None) -> Any:
        return self._rpc(QueueUnbind(0, queue, exchange, routing_key, arguments), _ignore)

    def queue_purge(self, queue: str) -> Any:
        """Remove all ready messages; returns how many."""
        return self._rpc(QueuePurge(0, queue, False), _message_count)

    def queue_delete(self, queue: str, *, if_unused: bool = False, if_empty: bool = False) -> Any:
        """Delete a queue; returns how many messages it still held."""
        return self._rpc(QueueDelete(0, queue, if_unused, if_empty, False), _message_count)

    # basic -------------------------------------------------------------------------------

    def basic_qos(self, prefetch_count: int = 0, *, prefetch_size: int = 0, global_: bool = False) -> Any:
        """Unacknowledged deliveries allowed per consumer (``global_``: per channel)."""
        return self._rpc(BasicQos(prefetch_size, prefetch_count, global_), _ignore)

    def basic_recover(self, requeue: bool = True) -> Any:
        """Redeliver the unacknowledged messages of this channel."""
        return self._rpc(BasicRecover(requeue), _ignore)

    def _cancel_method(self, consumer_tag: str) -> BasicCancel:
        return BasicCancel(consumer_tag, False)

    # modes -------------------------------------------------------------------------------

    def _confirm_method(self) -> ConfirmSelect:
        return ConfirmSelect(False)

    def tx_select(self) -> Any:
        """Make the channel transactional: publishes and acks take effect at tx_commit."""
        return self._rpc(TxSelect(), _ignore)

    def tx_commit(self) -> Any:
        return self._rpc(TxCommit(), _ignore)

    def tx_rollback(self) -> Any:
        return self._rpc(TxRollback(), _ignore)
