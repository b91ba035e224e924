"""The basic.acks of one read on one channel are folded into one Confirmed event (one
settle step): every future still settles exactly once, with its own verdict, and a confirm
listener is still told of every ack and nack frame, each before its own futures settle.

The broker's answers are held back by a proxy, and one read with a chosen mix of frames is
fed to the real connection, as if the broker had sent it."""
from __future__ import annotations

import asyncio

import pytest

from amqwire.codec import BasicAck, BasicNack

# (ack, delivery tag, multiple), in the order of the read: in-order and out-of-order singles,
# multiples, a nack in the middle (it ends a fold), a multiple covering a gap.
FRAMES = [
    (True, 3, True), (True, 4, False), (True, 6, False), (True, 5, False), (True, 9, True),
    (False, 10, False), (True, 12, True), (True, 14, False), (True, 13, False),
]
PUBLISHES = 14
NACKED = {10}
# the seqnos each frame settles
SETTLES = [[1, 2, 3], [4], [6], [5], [7, 8, 9], [10], [11, 12], [14], [13]]


@pytest.mark.parametrize("with_listener", [False, True], ids=["no-listener", "listener"])
def test_acks_of_one_read_settle_every_future_once(run, with_listener):
    async def scenario(api):
        proxy = api.proxy()
        conn = await api.connect(api.proxy_url(proxy))
        ch = await conn.channel()
        await ch.confirm_select()
        raw_channel = ch._obj if api.name == "blocking" else ch
        proxy.hold()  # the publishes never reach the broker: only the read below settles them
        futures = [await ch.publish_async("", "nowhere", b"m%d" % i) for i in range(PUBLISHES)]
        raw = [f._obj if api.name == "blocking" else f for f in futures]
        settled = [0] * PUBLISHES
        for index, future in enumerate(raw):
            future.add_done_callback(lambda _f, index=index: settled.__setitem__(index, settled[index] + 1))
        told = []
        if with_listener:
            def on_confirm(event):
                # what was settled when this frame was told: the frames before it, not its own
                told.append((event.ack, event.delivery_tag, event.multiple, [f.done() for f in raw]))
            ch.add_confirm_listener(on_confirm)
        data = b"".join(
            (BasicAck(tag, multiple) if ack else BasicNack(tag, multiple, False)).encode(raw_channel.channel_id)
            for ack, tag, multiple in FRAMES
        )
        (conn._obj if api.name == "blocking" else conn)._data_received(data)
        if api.name == "aio":
            for _ in range(3):  # done callbacks run in the loop
                await asyncio.sleep(0)
        assert settled == [1] * PUBLISHES
        with pytest.raises(api.errors.PublishNacked) as failed:
            await ch.wait_for_confirms()
        assert [error.delivery_tag for error in failed.value.failures] == sorted(NACKED)
        for seqno, future in enumerate(raw, 1):
            error = future.exception()
            if seqno in NACKED:
                assert isinstance(error, api.errors.PublishNacked) and error.delivery_tag == seqno
            else:
                assert error is None, (seqno, error)
        assert raw_channel._unsettled == 0
        if with_listener:
            assert [(ack, tag, multiple) for ack, tag, multiple, _ in told] == FRAMES
            done_before: set = set()
            for (_, _, _, snapshot), seqnos in zip(told, SETTLES):
                assert {seqno for seqno, done in enumerate(snapshot, 1) if done} == done_before
                done_before.update(seqnos)
        proxy.kill()

    run(scenario)
