"""Listeners and metrics behind one observer: while nothing watches, a connection's
``_observer`` and a channel's ``_listeners`` are None, the one attribute its hot paths
(publish, ack, read, confirm) check."""
from __future__ import annotations

import pytest

from amqwire.client import InMemoryMetrics
from amqwire.client.observer import Listeners, Observer


def test_listeners_by_kind_in_order_and_a_clear_error_for_a_stranger():
    listeners = Listeners()
    first, second = (lambda e: None), (lambda e: None)
    listeners.add("close", first)
    listeners.add("close", second)
    listeners.add("flow", first)
    assert listeners.of("close") == (first, second) and listeners.of("confirm") == ()
    listeners.remove("close", first)
    with pytest.raises(ValueError, match="not a registered listener") as raised:
        listeners.remove("close", first)
    assert "close" in str(raised.value)
    listeners.remove("close", second)
    listeners.remove("flow", first)
    assert listeners.empty
    assert not Observer(InMemoryMetrics()).empty and Observer().empty


def test_nothing_watching_means_none_on_both_transports(run):
    async def scenario(api):
        def raw(obj):
            return getattr(obj, "_obj", obj)  # the blocking transport's test proxy

        conn_proxy = await api.connect()
        conn, ch = raw(conn_proxy), raw(await conn_proxy.channel())  # the proxy wraps callables afresh
        assert conn._observer is None and ch._listeners is None
        on_close, on_confirm = (lambda e: None), (lambda e: None)
        conn.add_close_listener(on_close)
        ch.add_confirm_listener(on_confirm)
        assert conn._observer is not None and ch._listeners is not None
        conn.remove_close_listener(on_close)
        ch.remove_confirm_listener(on_confirm)
        assert conn._observer is None and ch._listeners is None
        with pytest.raises(ValueError, match="not a registered listener"):
            conn.remove_close_listener(on_close)
        await conn_proxy.close()

        metrics = InMemoryMetrics()
        conn = await api.connect(metrics=metrics)
        assert raw(conn)._observer is not None and raw(conn)._observer.metrics is metrics
        await conn.close()

    run(scenario)
