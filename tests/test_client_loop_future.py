"""client.loop_future: asyncio's confirm futures, made, handed out and settled in compiled
code; they are the loop's own futures (a loop that makes its own is asked), a batch token
settles once all its publishes are, and a callback goes through the connection's guard."""
from __future__ import annotations

import asyncio

import pytest

from amqwire.client.loop_future import BatchFuture, LoopConfirmFutures


class Recorder:
    """Stands for the connection: what its guard was asked to run."""

    def __init__(self):
        self.calls = []

    def _call_user(self, callback, future, where, channel):
        self.calls.append((callback, future, where, channel))


def test_tokens_are_the_loops_futures_and_settle_as_acked():
    async def scenario():
        loop = asyncio.get_running_loop()
        connection = Recorder()
        futures = LoopConfirmFutures("channel", connection, loop)
        one = futures.new_token(1, None)
        assert type(one) is asyncio.Future and one.get_loop() is loop
        assert futures.issued(one, 7) is one
        batch = futures.new_token(3, print)
        assert type(batch) is BatchFuture and futures.issued(batch, 8) is batch.future
        LoopConfirmFutures.acked([one, batch, batch])
        assert one.done() and one.result() is None
        assert not batch.future.done() and batch.pending == 1
        LoopConfirmFutures.acked([batch, one])  # the last of the batch; one is settled already
        assert batch.future.result() is None
        await asyncio.sleep(0)  # done callbacks run in the loop
        assert connection.calls == [(print, batch.future, "publish", "channel")]
        failed = futures.new_token(2, None)
        failed.set_exception(ValueError("nacked"))
        failed.set_result(None)  # a failure settles a batch at once, and for good
        assert isinstance(LoopConfirmFutures.token_error(failed), ValueError)
        assert LoopConfirmFutures.token_error(one) is None
        empty = futures.new_token(0, None)
        assert empty.future.done()  # a batch of none is settled when made

    asyncio.run(scenario())


class OwnFuture(asyncio.Future):
    pass


class OwnFutureLoop(asyncio.SelectorEventLoop):
    """A loop that makes its own futures: it must be asked for each."""

    def create_future(self):
        return OwnFuture(loop=self)


def test_a_loop_that_makes_its_own_futures_is_asked(amqp_url):
    from amqwire.client import aio

    async def scenario():
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                queue = (await ch.queue_declare("", exclusive=True)).queue
                await ch.confirm_select()
                done = []
                futures = [await ch.publish_async("", queue, b"%d" % i, callback=done.append) for i in range(5)]
                assert {type(f) for f in futures} == {OwnFuture}
                assert [await f for f in futures] == [None] * 5
                await asyncio.sleep(0)
                assert sorted(map(id, done)) == sorted(map(id, futures))  # each callback once, with its future

    loop = OwnFutureLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_publish_async_is_a_coroutine_that_does_nothing_unless_awaited(amqp_url):
    from amqwire.client import aio

    async def scenario():
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                queue = (await ch.queue_declare("", exclusive=True)).queue
                await ch.confirm_select()
                pending = ch.publish_async("", queue, b"never")
                assert asyncio.iscoroutine(pending)
                pending.close()  # never awaited: nothing is published
                future = await asyncio.ensure_future(ch.publish_async("", queue, b"once"))
                assert await future is None
                assert (await ch.queue_declare(queue, passive=True)).message_count == 1
                with pytest.raises(TypeError):
                    await ch.publish_async("", queue, b"x", None, True)  # mandatory is keyword-only

    asyncio.run(scenario())
