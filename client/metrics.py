"""Client metrics: a collector interface, an in-memory collector, a Prometheus exporter.

``connect(..., metrics=collector)`` reports what the connection does to ``collector``;
without it (the default) nothing is counted and the hot paths pay one attribute check.
Calls are batched where the client batches anyway: publishes are reported per socket
write (``published(n)`` with the bytes of the write), deliveries per socket read, confirms
per ack frame; so a collector sees few calls even at high rates.

The collector is called from the connection's threads (blocking: the I/O thread and the
threads that publish or ack; asyncio: the loop), concurrently when several connections
share it: a collector must be thread-safe.  Both collectors here are.

Gauges (the Java client's connections, channels and consumers) come from pairs of calls:
``connection_opened``/``connection_closed`` (a socket that finished its handshake, until it
closes or is lost: a recovery closes and opens it again), ``channel_opened``/
``channel_closed`` (likewise, through a recovery) and ``consumer_opened``/
``consumer_closed`` (from consume-ok to the consumer's end; a recovery's re-subscription
is the same consumer).  Failed publishes are counted by why: ``publish_nacked``,
``publish_returned`` and ``publish_unconfirmed`` (in flight when its channel or connection
was lost or closed).
"""
from __future__ import annotations

import bisect
import threading
from typing import Any, Optional, Sequence

__all__ = ["MetricsCollector", "InMemoryMetrics", "PrometheusMetrics", "LATENCY_BUCKETS"]

#: Upper bounds (seconds) of the publish-to-confirm latency histogram's buckets.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


class MetricsCollector:
    """The interface: every method does nothing; override what you count.  Counts are
    message counts unless named bytes."""

    def connection_opened(self) -> None:
        """A connection finished its handshake (also each reconnection of a recovery)."""

    def connection_closed(self) -> None:
        """An opened connection closed or lost its socket (a recovery may open it again)."""

    def connection_recovered(self) -> None:
        """A recovery restored a connection (channels, topology and consumers)."""

    def channel_opened(self) -> None:
        """A channel opened (also reopened by a recovery)."""

    def channel_closed(self) -> None:
        """An open channel closed, or went down with its connection."""

    def consumer_opened(self) -> None:
        """A consumer's basic.consume-ok arrived."""

    def consumer_closed(self) -> None:
        """A consumer (counted by consumer_opened) ended: cancelled, or its channel or connection gone."""

    def bytes_sent(self, count: int) -> None:
        """Bytes handed to the socket."""

    def bytes_received(self, count: int) -> None:
        """Bytes read from the socket."""

    def published(self, count: int) -> None:
        """Publishes written to the socket."""

    def publish_confirmed(self, count: int) -> None:
        """Publishes the broker acked (confirm mode)."""

    def publish_nacked(self, count: int) -> None:
        """Publishes the broker nacked."""

    def publish_returned(self, count: int) -> None:
        """Mandatory publishes the broker returned (basic.return)."""

    def publish_unconfirmed(self, count: int) -> None:
        """Confirm-mode publishes whose channel or connection was lost or closed before the
        broker's verdict came (their futures fail with PublishUnconfirmed)."""

    def delivered(self, count: int) -> None:
        """Messages received: consumer deliveries and basic.get results."""

    def acked(self, count: int) -> None:
        """Deliveries acknowledged (a ``multiple`` ack counts every delivery it covers)."""

    def rejected(self, count: int) -> None:
        """Deliveries nacked or rejected (``multiple`` counts every delivery it covers)."""

    def confirm_latencies(self, seconds: Sequence[float]) -> None:
        """Publish-to-confirm latencies (from the socket write that carried the publish to
        the read that brought the broker's ack or nack), one per publish."""

    def confirm_times(self, now: float, sent: Sequence[tuple[float, int]]) -> None:
        """``(written_at, count)`` pairs (``time.monotonic()``, oldest first): ``count``
        publishes written at ``written_at`` were confirmed (or nacked) at ``now``.  The
        default hands the latencies to ``confirm_latencies``; a collector may bucket each
        pair at once instead (the in-memory one does)."""
        if sent:
            self.confirm_latencies([now - stamp for stamp, count in sent for _ in range(count)])

    # What the client calls: one call per socket write and one per socket read, so that
    # the cost of counting does not grow with the messages a read or write carries.  The
    # defaults spread them over the methods above; a collector may take its lock once.

    def socket_write(self, nbytes: int, published: int) -> None:
        """One write: ``nbytes`` bytes carrying ``published`` publishes."""
        self.bytes_sent(nbytes)
        if published:
            self.published(published)

    def socket_read(self, nbytes: int, delivered: int, confirmed: int, nacked: int, returned: int,
                    now: float, sent: Sequence[tuple[float, int]]) -> None:
        """One read: ``nbytes`` bytes, the deliveries, confirms, nacks and returns in them,
        and ``confirm_times(now, sent)`` for their latencies."""
        self.bytes_received(nbytes)
        if delivered:
            self.delivered(delivered)
        if confirmed:
            self.publish_confirmed(confirmed)
        if nacked:
            self.publish_nacked(nacked)
        if returned:
            self.publish_returned(returned)
        if sent:
            self.confirm_times(now, sent)


class _Histogram:
    __slots__ = ("bounds", "counts", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.count = 0
        self.sum = 0.0

    def observe(self, values: Sequence[float]) -> None:
        counts = self.counts
        bounds = self.bounds
        for value in values:
            counts[bisect.bisect_left(bounds, value)] += 1
        self.count += len(values)
        self.sum += sum(values)

    def observe_runs(self, now: float, sent: Sequence[tuple[float, int]]) -> None:
        """Observe ``now - t``, ``count`` times, for every (t, count) of ``sent``."""
        counts = self.counts
        bounds = self.bounds
        total = 0
        seconds = 0.0
        for stamp, count in sent:
            latency = now - stamp
            counts[bisect.bisect_left(bounds, latency)] += count
            total += count
            seconds += latency * count
        self.count += total
        self.sum += seconds

    def quantile(self, q: float) -> Optional[float]:
        """The upper bound of the bucket holding the q-quantile (None: no data, or above
        the last bound)."""
        if not self.count:
            return None
        rank = q * self.count
        seen = 0
        for bound, count in zip(self.bounds, self.counts):
            seen += count
            if seen >= rank:
                return bound
        return None


class InMemoryMetrics(MetricsCollector):
    """Counts in memory, for tests, logs or your own export: read the attributes
    (``published``... are methods, the counts are ``published_count``...), or
    ``snapshot()`` for all of them as a dict.  The gauges: ``connections_open``,
    ``channels_open``, ``consumers_open``."""

    _COUNTERS = (
        "connections_opened", "connections_recovered", "bytes_sent_total", "bytes_received_total",
        "published_count", "confirmed_count", "nacked_count", "returned_count", "unconfirmed_count",
        "delivered_count", "acked_count", "rejected_count",
    )
    _GAUGES = ("connections_open", "channels_open", "consumers_open")

    def __init__(self, latency_buckets: Sequence[float] = LATENCY_BUCKETS) -> None:
        self._lock = threading.Lock()
        self.connections_opened = 0
        self.connections_recovered = 0
        self.bytes_sent_total = 0
        self.bytes_received_total = 0
        self.published_count = 0
        self.confirmed_count = 0
        self.nacked_count = 0
        self.returned_count = 0
        self.unconfirmed_count = 0
        self.delivered_count = 0
        self.acked_count = 0
        self.rejected_count = 0
        self.connections_open = 0
        self.channels_open = 0
        self.consumers_open = 0
        self.confirm_latency = _Histogram(latency_buckets)

    def connection_opened(self) -> None:
        with self._lock:
            self.connections_opened += 1
            self.connections_open += 1

    def connection_closed(self) -> None:
        with self._lock:
            self.connections_open -= 1

    def connection_recovered(self) -> None:
        with self._lock:
            self.connections_recovered += 1

    def channel_opened(self) -> None:
        with self._lock:
            self.channels_open += 1

    def channel_closed(self) -> None:
        with self._lock:
            self.channels_open -= 1

    def consumer_opened(self) -> None:
        with self._lock:
            self.consumers_open += 1

    def consumer_closed(self) -> None:
        with self._lock:
            self.consumers_open -= 1

    def bytes_sent(self, count: int) -> None:
        with self._lock:
            self.bytes_sent_total += count

    def bytes_received(self, count: int) -> None:
        with self._lock:
            self.bytes_received_total += count

    def published(self, count: int) -> None:
        with self._lock:
            self.published_count += count

    def publish_confirmed(self, count: int) -> None:
        with self._lock:
            self.confirmed_count += count

    def publish_nacked(self, count: int) -> None:
        with self._lock:
            self.nacked_count += count

    def publish_returned(self, count: int) -> None:
        with self._lock:
            self.returned_count += count

    def publish_unconfirmed(self, count: int) -> None:
        with self._lock:
            self.unconfirmed_count += count

    def delivered(self, count: int) -> None:
        with self._lock:
            self.delivered_count += count

    def acked(self, count: int) -> None:
        with self._lock:
            self.acked_count += count

    def rejected(self, count: int) -> None:
        with self._lock:
            self.rejected_count += count

    def confirm_latencies(self, seconds: Sequence[float]) -> None:
        with self._lock:
            self.confirm_latency.observe(seconds)

    def confirm_times(self, now: float, sent: Sequence[tuple[float, int]]) -> None:
        with self._lock:
            self.confirm_latency.observe_runs(now, sent)

    def socket_write(self, nbytes: int, published: int) -> None:
        with self._lock:
            self.bytes_sent_total += nbytes
            self.published_count += published

    def socket_read(self, nbytes: int, delivered: int, confirmed: int, nacked: int, returned: int,
                    now: float, sent: Sequence[tuple[float, int]]) -> None:
        with self._lock:
            self.bytes_received_total += nbytes
            if delivered:
                self.delivered_count += delivered
            if sent or confirmed or nacked or returned:
                self.confirmed_count += confirmed
                self.nacked_count += nacked
                self.returned_count += returned
                self.confirm_latency.observe_runs(now, sent)

    def snapshot(self) -> dict[str, Any]:
        """Every count, and the latency histogram as ``confirm_latency_count``/``_sum``/
        ``_buckets`` ({upper bound: cumulative count}, the last bound ``inf``)."""
        with self._lock:
            result: dict[str, Any] = {name: getattr(self, name) for name in self._COUNTERS + self._GAUGES}
            histogram = self.confirm_latency
            cumulative = 0
            buckets = {}
            for bound, count in zip(histogram.bounds + (float("inf"),), histogram.counts):
                cumulative += count
                buckets[bound] = cumulative
            result["confirm_latency_count"] = histogram.count
            result["confirm_latency_sum"] = histogram.sum
            result["confirm_latency_buckets"] = buckets
        return result


class PrometheusMetrics(MetricsCollector):
    """Exports to Prometheus through ``prometheus_client`` (``pip install 'amqwire[prometheus]'``).

    Counters ``<prefix>_published_total`` ..., ``<prefix>_bytes_sent_total`` ..., failed
    publishes ``<prefix>_nacked_total``, ``<prefix>_returned_total`` and
    ``<prefix>_unconfirmed_total``; gauges ``<prefix>_connections``, ``<prefix>_channels``
    and ``<prefix>_consumers`` (open now); the histogram
    ``<prefix>_confirm_latency_seconds``, in ``registry`` (default: the global
    one); serve them with ``prometheus_client.start_http_server`` as usual.  ``labels``
    are constant labels of every metric (e.g. ``{"app": "billing"}``); one instance per
    label set and registry.
    """

    def __init__(
        self,
        prefix: str = "amqwire",
        registry: Any = None,
        labels: Optional[dict[str, str]] = None,
        latency_buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
            raise ImportError("PrometheusMetrics needs prometheus_client: pip install 'amqwire[prometheus]'") from exc
        if registry is None:
            registry = prom.REGISTRY
        names = tuple(labels or {})
        values = tuple((labels or {}).values())

        def counter(name: str, doc: str) -> Any:
            metric = prom.Counter(f"{prefix}_{name}", doc, names, registry=registry)
            return metric.labels(*values) if names else metric

        def gauge(name: str, doc: str) -> Any:
            metric = prom.Gauge(f"{prefix}_{name}", doc, names, registry=registry)
            return metric.labels(*values) if names else metric

        self._opened = counter("connections_opened", "AMQP connections opened (reconnections included)")
        self._connections = gauge("connections", "AMQP connections open")
        self._channels = gauge("channels", "AMQP channels open")
        self._consumers = gauge("consumers", "AMQP consumers subscribed")
        self._recovered = counter("connections_recovered", "AMQP connections restored by a recovery")
        self._bytes_sent = counter("bytes_sent", "Bytes written to AMQP sockets")
        self._bytes_received = counter("bytes_received", "Bytes read from AMQP sockets")
        self._published = counter("published", "Messages published")
        self._confirmed = counter("confirmed", "Publishes acked by the broker")
        self._nacked = counter("nacked", "Publishes nacked by the broker")
        self._returned = counter("returned", "Mandatory publishes returned by the broker")
        self._unconfirmed = counter("unconfirmed", "Confirm-mode publishes lost with their channel or connection")
        self._delivered = counter("delivered", "Messages received by consumers and basic.get")
        self._acked = counter("acked", "Deliveries acknowledged")
        self._rejected = counter("rejected", "Deliveries nacked or rejected")
        histogram = prom.Histogram(
            f"{prefix}_confirm_latency_seconds", "Publish-to-confirm latency", names, registry=registry,
            buckets=tuple(latency_buckets) + (float("inf"),),
        )
        self._latency = histogram.labels(*values) if names else histogram

    def connection_opened(self) -> None:
        self._opened.inc()
        self._connections.inc()

    def connection_closed(self) -> None:
        self._connections.dec()

    def connection_recovered(self) -> None:
        self._recovered.inc()

    def channel_opened(self) -> None:
        self._channels.inc()

    def channel_closed(self) -> None:
        self._channels.dec()

    def consumer_opened(self) -> None:
        self._consumers.inc()

    def consumer_closed(self) -> None:
        self._consumers.dec()

    def bytes_sent(self, count: int) -> None:
        self._bytes_sent.inc(count)

    def bytes_received(self, count: int) -> None:
        self._bytes_received.inc(count)

    def published(self, count: int) -> None:
        self._published.inc(count)

    def publish_confirmed(self, count: int) -> None:
        self._confirmed.inc(count)

    def publish_nacked(self, count: int) -> None:
        self._nacked.inc(count)

    def publish_returned(self, count: int) -> None:
        self._returned.inc(count)

    def publish_unconfirmed(self, count: int) -> None:
        self._unconfirmed.inc(count)

    def delivered(self, count: int) -> None:
        self._delivered.inc(count)

    def acked(self, count: int) -> None:
        self._acked.inc(count)

    def rejected(self, count: int) -> None:
        self._rejected.inc(count)

    def confirm_latencies(self, seconds: Sequence[float]) -> None:
        observe = self._latency.observe
        for value in seconds:
            observe(value)
