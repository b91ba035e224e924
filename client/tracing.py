"""OpenTelemetry tracing of publishes and deliveries: everything amqwire knows of OpenTelemetry.

Off unless asked for (``connect(..., tracing=True)``, a TracerProvider, or a
:class:`Tracing`; the Producer and the bridge take the same option).  Off, a connection
holds ``_tracing = None``, the hot paths check that one attribute and go on, and no
``opentelemetry`` module is imported; only ``opentelemetry-api`` is needed at run time
(``pip install 'amqwire[otel]'``), imported when a Tracing is made.

Spans follow OpenTelemetry's messaging semantic conventions (span names ``send <exchange>``,
``process <queue>``, ``receive <queue>``; kinds PRODUCER and CONSUMER; ``messaging.*``
attributes, RabbitMQ's ``messaging.rabbitmq.destination.routing_key``).  A publish writes
the W3C ``traceparent`` (and ``tracestate``) into a copy of the message's headers: the
caller's BasicProperties object is never changed.  A delivery continues the trace from
those headers: its ``process`` or ``receive`` span is a child of the publisher's span
(a delivery without them: of whatever span is current).  docs/tracing.md says which span
covers what.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import time
from typing import Any, Callable, Iterator, Optional, Sequence

from amqwire.codec import BasicProperties

from .errors import AMQPError
from .message import with_headers

__all__ = ["Tracing", "TracingUnavailable", "TRACEPARENT", "TRACESTATE", "tracing_from_option"]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SYSTEM = "rabbitmq"

# True while a traced publish runs: the channel method it calls (basic_publish ->
# publish_async in confirm mode, or the call itself again with the traced headers) must
# not start a second span.  Per thread and per asyncio task, as contexts are.
_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("amqwire_tracing_sending", default=False)


class TracingUnavailable(AMQPError, ImportError):
    """Tracing was asked for and ``opentelemetry-api`` is not installed."""


class _HeaderGetter:
    """Reads the propagator's fields from AMQP headers (long strings may arrive as bytes)."""

    @staticmethod
    def get(carrier: Any, key: str) -> Optional[list[str]]:
        value = carrier.get(key)
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).decode("latin-1")
        return [str(value)]

    @staticmethod
    def keys(carrier: Any) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()





def _version() -> str:
    try:
        from importlib.metadata import version

        return version("amqwire")
    except Exception:  # noqa: BLE001 - a checkout run without installing: no version to give
        return "0"


class Tracing:
    """A tracer and a propagator: what connections, Producers and bridges trace with.

    ``tracer_provider``: OpenTelemetry's TracerProvider (None: the global one, as set by
    ``opentelemetry.trace.set_tracer_provider`` or the SDK's auto-configuration).
    ``propagator``: a TextMapPropagator (None: W3C trace context, ``traceparent`` and
    ``tracestate``; give ``opentelemetry.propagate.get_global_textmap()`` to add baggage
    or use another format).  One Tracing may serve many connections.
    """

    __slots__ = ("_tracer", "_propagator", "_w3c", "_trace", "_context", "_producer", "_consumer")

    def __init__(self, tracer_provider: Any = None, propagator: Any = None) -> None:
        try:
            from opentelemetry import context, trace
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as exc:
            raise TracingUnavailable(
                "tracing needs opentelemetry-api: pip install 'amqwire[otel]' (or opentelemetry-api)"
            ) from exc
        # Any: the API is an optional dependency, and headers are our own carrier
        self._trace: Any = trace
        self._context: Any = context
        self._tracer: Any = trace.get_tracer("amqwire", _version(), tracer_provider=tracer_provider)
        self._propagator: Any = propagator if propagator is not None else TraceContextTextMapPropagator()
        self._w3c = propagator is None
        self._producer: Any = trace.SpanKind.PRODUCER
        self._consumer: Any = trace.SpanKind.CONSUMER

    def __repr__(self) -> str:
        return f"<Tracing {self._tracer!r}>"

    # context in and out of headers -------------------------------------------------------

    def inject(self, span: Any, properties: Optional[BasicProperties]) -> Optional[BasicProperties]:
        """``properties`` with ``span``'s context in its headers (a copy; unchanged when the
        span carries no valid context, as with OpenTelemetry's no-op provider)."""
        if self._w3c:  # the default propagator's two headers, written here without building a Context
            span_context = span.get_span_context()
            if not span_context.is_valid:
                return properties
            carrier: dict[str, Any] = {TRACEPARENT: "00-%032x-%016x-%02x" % (
                span_context.trace_id, span_context.span_id, span_context.trace_flags)}
            if span_context.trace_state:
                carrier[TRACESTATE] = span_context.trace_state.to_header()
            return with_headers(properties, carrier)
        carrier = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        if not carrier:
            return properties
        return with_headers(properties, carrier)

    def extract(self, properties: Optional[BasicProperties]) -> Any:
        """The context a message's headers carry (None: they carry none; the current one
        is the parent then)."""
        headers = properties.headers if properties is not None else None
        if not headers or TRACEPARENT not in headers:
            return None
        return self._propagator.extract(headers, getter=_GETTER)

    def context_of(self, properties: Optional[BasicProperties]) -> Any:
        """The SpanContext a message's headers carry, or None."""
        extracted = self.extract(properties)
        if extracted is None:
            return None
        span_context = self._trace.get_current_span(extracted).get_span_context()
        return span_context if span_context.is_valid else None

    # attributes ------------------------------------------------------------------------

    @staticmethod
    def _server(attributes: dict[str, Any], connection: Any) -> None:
        """The broker: as the URL names it, and the address the socket reached."""
        if connection is None:
            return
        params = connection.params
        attributes["server.address"] = params.host
        attributes["server.port"] = params.port
        peer = connection._peer
        if peer:
            attributes["network.peer.address"] = peer[0]
            attributes["network.peer.port"] = peer[1]

    @staticmethod
    def _message(attributes: dict[str, Any], properties: Optional[BasicProperties], size: int) -> None:
        attributes["messaging.message.body.size"] = size
        if properties is not None:
            if properties.message_id is not None:
                attributes["messaging.message.id"] = properties.message_id
            if properties.correlation_id is not None:
                attributes["messaging.message.conversation_id"] = properties.correlation_id

    def _send_attributes(self, exchange: str, routing_key: str, body: Any, properties: Optional[BasicProperties],
                         connection: Any, operation: str = "send") -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": operation,
            "messaging.destination.name": exchange,
        }
        if routing_key:
            attributes["messaging.rabbitmq.destination.routing_key"] = routing_key
        self._message(attributes, properties, len(body))
        self._server(attributes, connection)
        return attributes

    @staticmethod
    def _send_name(exchange: str, routing_key: str) -> str:
        # The default exchange routes by queue name: the routing key is the destination.
        return f"send {exchange or routing_key or 'amq.default'}"

    def _delivery_attributes(self, message: Any, queue: str, operation: str, connection: Any) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": operation,
            "messaging.operation.name": "get" if operation == "receive" else "deliver",
            "messaging.destination.name": message.exchange,
            "messaging.destination.subscription.name": queue,
            "messaging.rabbitmq.message.delivery_tag": message.delivery_tag,
        }
        if message.routing_key:
            attributes["messaging.rabbitmq.destination.routing_key"] = message.routing_key
        if message.consumer_tag:
            attributes["messaging.consumer.group.name"] = message.consumer_tag
        self._message(attributes, message.properties, len(message.body))
        self._server(attributes, connection)
        return attributes

    # publishing ------------------------------------------------------------------------

    @staticmethod
    def outside_send() -> bool:
        """Whether no traced publish is running in this thread or task (see _SENDING)."""
        return not _SENDING.get()

    @contextlib.contextmanager
    def sending(self, channel: Any, exchange: str, routing_key: str, body: Any,
                properties: Optional[BasicProperties]) -> Iterator[Optional[BasicProperties]]:
        """A ``send`` span around a client publish (its exception recorded); yields the
        properties to publish, with the span's context.  Not made current: nothing inside a
        publish starts spans, and attaching a context costs as much as the rest."""
        attributes = self._send_attributes(exchange, routing_key, body, properties, channel._connection)
        attributes["messaging.rabbitmq.channel"] = channel.channel_id
        span = self._tracer.start_span(self._send_name(exchange, routing_key), kind=self._producer,
                                       attributes=attributes)
        traced = self.inject(span, properties)
        token = _SENDING.set(True)
        try:
            yield traced
        except BaseException as exc:
            self.end(span, exc)
            raise
        else:
            span.end()
        finally:
            _SENDING.reset(token)

    def start_producer_send(self, message: Any) -> Any:
        """A Producer's ``send`` span: from the call to the send's result (ended by
        ``end``); the message's properties get its context.  Not made current: the send
        goes on in the Producer's sender."""
        properties = message.properties
        attributes = self._send_attributes(message.exchange, message.routing_key, message.body, properties, None)
        span = self._tracer.start_span(self._send_name(message.exchange, message.routing_key), kind=self._producer,
                                       attributes=attributes)
        message.properties = self.inject(span, properties)
        return span

    def end(self, span: Any, error: Optional[BaseException] = None, attributes: Optional[dict[str, Any]] = None) -> None:
        """End a span that was not current, with its error (None: it succeeded)."""
        if attributes:
            span.set_attributes(attributes)
        if error is not None:
            span.record_exception(error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            span.set_attribute("error.type", type(error).__qualname__)
        span.end()

    # consuming -------------------------------------------------------------------------

    def start_delivery(self, message: Any, queue: str, operation: str, connection: Any,
                       start_time: Optional[int] = None) -> Any:
        """A ``process`` (push) or ``receive`` (basic.get) span for one delivery: a child of
        the context its headers carry, else of the current span."""
        return self._tracer.start_span(
            f"{operation} {queue or message.routing_key}", context=self.extract(message.properties),
            kind=self._consumer, attributes=self._delivery_attributes(message, queue, operation, connection),
            start_time=start_time,
        )

    @contextlib.contextmanager
    def processing(self, message: Any, queue: str, connection: Any) -> Iterator[Any]:
        """A ``process`` span around a consumer callback, current while it runs."""
        span = self.start_delivery(message, queue, "process", connection)
        with self._trace.use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            yield span

    def traced_callback(self, callback: Callable[[Any], Any], consumer: Any) -> Callable[[Any], Any]:
        """``callback`` run inside a ``process`` span per message (a coroutine function
        stays one: the span covers the coroutine)."""
        tracing = self

        def connection() -> Any:
            return consumer.channel._connection

        if inspect.iscoroutinefunction(callback):
            async def traced_coroutine(message: Any) -> Any:
                with tracing.processing(message, consumer.queue, connection()):
                    return await callback(message)

            return functools.update_wrapper(traced_coroutine, callback)

        def traced(message: Any) -> Any:
            with tracing.processing(message, consumer.queue, connection()):
                return callback(message)

        return functools.update_wrapper(traced, callback)

    def hand_out(self, consumer: Any, message: Any) -> None:
        """An iterator hands ``message`` out: its ``process`` span starts and is current
        until the consumer is asked for the next message (``handled``)."""
        span = self.start_delivery(message, consumer.queue, "process", consumer.channel._connection)
        current = self._trace.set_span_in_context(span)
        consumer._traced = (span, current, self._context.attach(current))

    def handled(self, consumer: Any) -> None:
        """The iterating code is done with the message handed out last: its span ends, and
        stops being current if it still is (a reader that moved on to another thread or
        task, or attached a context of its own since, keeps what it has)."""
        traced = consumer._traced
        if traced is None:
            return
        consumer._traced = None
        span, current, token = traced
        if self._context.get_current() is current:
            self._context.detach(token)
        span.end()

    def received(self, channel: Any, queue: str, message: Any, start_time: int) -> None:
        """basic.get's ``receive`` span, from the request to its answer (no span for an
        empty queue's get-empty: nothing was received)."""
        if message is None:
            return
        span = self.start_delivery(message, queue, "receive", channel._connection, start_time)
        span.end()

    # the bridge ------------------------------------------------------------------------

    def start_forwards(self, messages: Sequence[Any], queue: str, exchange: str, routing_key: Optional[str],
                       connection: Any) -> list[Any]:
        """One span per message a bridge forwards: ``send <destination>`` (PRODUCER), a
        child of the publisher's span its headers carry, which it passes on unchanged."""
        tracer = self._tracer
        spans = []
        for message in messages:
            key = message.routing_key if routing_key is None else routing_key
            attributes = self._send_attributes(exchange, key, message.body, message.properties, connection, "forward")
            attributes["messaging.source.name"] = queue
            spans.append(tracer.start_span(self._send_name(exchange, key), context=self.extract(message.properties),
                                           kind=self._producer, attributes=attributes))
        return spans

    def end_all(self, spans: Sequence[Any], error: Optional[BaseException] = None) -> None:
        for span in spans:
            self.end(span, error)

    @staticmethod
    def now() -> int:
        """A span start time (ns since the epoch), taken before we know the span is wanted."""
        return time.time_ns()


def tracing_from_option(option: Any) -> Optional[Tracing]:
    """The ``tracing=`` option: False/None (off), True (the global TracerProvider), a
    :class:`Tracing`, or a TracerProvider."""
    if option is None or option is False:
        return None
    if isinstance(option, Tracing):
        return option
    if option is True:
        return Tracing()
    if not hasattr(option, "get_tracer"):
        raise TypeError(f"tracing must be True, False, a Tracing or a TracerProvider, not {option!r}")
    return Tracing(tracer_provider=option)
