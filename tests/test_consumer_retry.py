"""Consumer retry (RocketMQ's reconsume and dead-letter queue), both transports, against the
shared broker: a failed delivery comes back after a growing delay with its attempts
counted, goes to the dead-letter queue after ``max_attempts`` with the reason, and is never
lost when the connection drops between its copy's confirm and its ack (the delivery that
comes back is recognised: acked, counted as a duplicate, no second copy)."""
from __future__ import annotations

import asyncio
import time

import pytest

from amqwire.client import AMQPConnectionError, BasicProperties, ConsumerRetry, aio, connect
from amqwire.client.retry import ATTEMPTS, LAST_ERROR, ORIGINAL_QUEUE, REASON, RetryPlan

LEVELS = (0.2, 0.4, 0.8)  # first_level=0: 0.2 s before attempt 2, 0.4 s before 3, ...


class Flaky(Exception):
    pass


def _publish(url: str, queue: str, n: int) -> None:
    with connect(url) as conn, conn.channel() as ch:
        ch.queue_declare(queue, durable=True)
        ch.confirm_select()
        for i in range(n):
            ch.basic_publish("", queue, b"%d" % i, BasicProperties(message_id=str(i), delivery_mode=2))


def _cleanup(url: str, queue: str) -> None:
    with connect(url) as conn, conn.channel() as ch:
        ch.queue_delete(queue)
        ch.queue_delete(f"{queue}.dlq")


def _handler(log: list):
    """Even ids succeed at once; 1 always fails; 3 fails twice, then succeeds."""
    def handle(message) -> None:
        mid = int(message.properties.message_id)
        attempts = (message.properties.headers or {}).get(ATTEMPTS, 0)
        log.append((mid, attempts))
        if mid == 1 or (mid == 3 and attempts < 2):
            raise Flaky(f"message {mid} failed on attempt {attempts + 1}")
    return handle


def _check(log: list, dlq: list, stats) -> None:
    handled = sorted(log)
    assert [x for x in handled if x[0] % 2 == 0] == [(0, 0), (2, 0), (4, 0)]  # once each
    assert [x for x in handled if x[0] == 3] == [(3, 0), (3, 1), (3, 2)]  # back twice, then done
    assert [x for x in handled if x[0] == 1] == [(1, 0), (1, 1), (1, 2)]  # three attempts, then the DLQ
    assert len(dlq) == 1
    headers = dlq[0].properties.headers
    assert dlq[0].body == b"1" and dlq[0].properties.message_id == "1"
    assert headers[ATTEMPTS] == 3 and headers[ORIGINAL_QUEUE].startswith("amqwire-test")
    assert "Flaky: message 1 failed on attempt 3" == headers[LAST_ERROR] and "max_attempts 3" in headers[REASON]
    assert (stats.retried, stats.dead_lettered, stats.duplicates) == (4, 1, 0)


@pytest.mark.timeout(60)
def test_failed_deliveries_come_back_later_then_go_to_the_dead_letter_queue_asyncio(amqp_url, names):
    queue = names.queue()
    _publish(amqp_url, queue, 5)
    log: list = []
    handle = _handler(log)

    async def main():
        async with aio.connect(amqp_url) as conn, conn.channel() as ch:
            await ch.basic_qos(10)
            async with await aio.ConsumerRetry.open(conn, queue, max_attempts=3, delay_levels=LEVELS,
                                                     first_level=0) as retry:
                async with ch.consume(queue) as consumer:
                    deadline = time.monotonic() + 30
                    async for message in consumer:
                        try:
                            handle(message)
                        except Flaky as exc:
                            await retry.failed(message, exc)
                        else:
                            await message.ack()
                        if len(log) == 9 or time.monotonic() > deadline:
                            break
                stats = retry.stats()
            dlq = []
            while (m := await ch.basic_get(f"{queue}.dlq", no_ack=True)) is not None:
                dlq.append(m)
            return stats, dlq

    try:
        stats, dlq = asyncio.run(asyncio.wait_for(main(), 45))
        _check(log, dlq, stats)
    finally:
        _cleanup(amqp_url, queue)


@pytest.mark.timeout(60)
def test_failed_deliveries_come_back_later_then_go_to_the_dead_letter_queue_blocking(amqp_url, names):
    queue = names.queue()
    _publish(amqp_url, queue, 5)
    log: list = []
    handle = _handler(log)
    try:
        with connect(amqp_url) as conn, conn.channel() as ch:
            ch.basic_qos(10)
            with ConsumerRetry.open(conn, queue, max_attempts=3, delay_levels=LEVELS, first_level=0) as retry:
                with ch.consume(queue) as consumer:
                    deadline = time.monotonic() + 30
                    while len(log) < 9 and time.monotonic() < deadline:
                        message = consumer.get(timeout=1)
                        if message is None:
                            continue
                        try:
                            handle(message)
                        except Flaky as exc:
                            assert retry.failed(message, exc) in ("retry", "dead-letter")
                        else:
                            message.ack()
                stats = retry.stats()
            dlq = []
            while (m := ch.basic_get(f"{queue}.dlq", no_ack=True)) is not None:
                dlq.append(m)
        _check(log, dlq, stats)
    finally:
        _cleanup(amqp_url, queue)


@pytest.mark.timeout(90)
def test_a_connection_lost_between_the_copys_confirm_and_the_ack_loses_nothing_and_makes_no_second_copy(
        amqp_url, names, tcp_proxy):
    """The copy for attempt 2 is confirmed, then the connection is cut before the ack: the
    delivery comes back (redelivered) after the recovery, fails again, and is only acked
    (a duplicate, counted); the one copy arrives after its delay and succeeds."""
    proxy, url = tcp_proxy()
    queue = names.queue()
    _publish(amqp_url, queue, 1)
    seen: list = []

    async def main():
        async with aio.connect(url) as conn, conn.channel() as ch:
            await ch.basic_qos(1)
            retry = await aio.ConsumerRetry.open(conn, queue, max_attempts=5, delay_levels=(1.0, 2.0), first_level=0)
            stored = retry.plan.done

            def stored_then_cut(message, plan):
                stored(message, plan)
                if not seen[1:]:
                    proxy.kill()  # after the confirm, before the ack
            retry.plan.done = stored_then_cut
            async with ch.consume(queue) as consumer:
                deadline = time.monotonic() + 60
                async for message in consumer:
                    attempts = (message.properties.headers or {}).get(ATTEMPTS, 0)
                    seen.append((attempts, message.redelivered))
                    if attempts == 0:  # the first attempt fails, however often it comes
                        try:
                            await retry.failed(message, Flaky("first attempt"))
                        except AMQPConnectionError:
                            pass  # the ack went with the connection: the delivery comes back
                    else:
                        await message.ack()
                        break
                    if time.monotonic() > deadline:
                        break
            stats = retry.stats()
            await retry.close()
            left = (await ch.queue_declare(queue, passive=True)).message_count
            return stats, left

    try:
        stats, left = asyncio.run(asyncio.wait_for(main(), 80))
    finally:
        _cleanup(amqp_url, queue)
    print(f"\nconnection cut between the copy's confirm and the ack: deliveries {seen}, retried {stats.retried}, "
          f"duplicates {stats.duplicates}, left in the queue {left}")
    assert seen[0] == (0, False) and seen[-1] == (1, False)
    assert (0, True) in seen  # it came back after the cut
    assert (stats.retried, stats.duplicates, left) == (1, 1, 0)  # one copy, the comeback recognised


def test_the_plan_counts_attempts_and_refuses_bad_options():
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPlan("q", max_attempts=0)
    with pytest.raises(ValueError, match="first_level"):
        RetryPlan("q", levels=(1, 2), first_level=2)
    with pytest.raises(ValueError, match="queue"):
        RetryPlan("")
    assert RetryPlan("orders").dead_letter_queue == "orders.dlq"

