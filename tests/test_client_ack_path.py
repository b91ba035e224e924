"""The compiled ack and flush (client/ack_path.pyx, client/write_path.pyx), against a real
broker: an ack runs no Python frame and is on the wire when it returns; a flush the kernel
takes in parts still writes every byte once; nack and reject of both transports answer
through the same path; the objects they read are plain slots of the client's classes."""
from __future__ import annotations

import asyncio
import socket
import sys
from types import MemberDescriptorType
from typing import Any

from amqwire.client import aio, connect
from amqwire.client.io_threads import ThreadIO
from conftest import fill_queue


def _counts(amqp_url: str, queue: str) -> tuple[int, int]:
    """(ready, consumers) of ``queue`` as the broker sees it from another connection."""
    with connect(amqp_url) as conn, conn.channel() as ch:
        ok = ch.queue_declare(queue, passive=True)
        return ok.message_count, ok.consumer_count


def test_an_ack_runs_no_python_frame_and_is_written_when_it_returns(amqp_url, names):
    # Before: Message.ack, Channel.basic_ack, _answer_delivery, the core's basic_ack,
    # flush_acks, flush, buffers_to_send, pending_output and _write: nine Python frames an
    # ack, ~60% of the instructions of consuming with an ack per delivery.
    queue = names.queue()
    n = 200
    frames: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and "amqwire" in frame.f_code.co_filename:
            frames.append(frame.f_code.co_name)

    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
        fill_queue(ch, queue, n)
        ch.basic_qos(n)
        got = 0
        queued_after_acks = []
        with ch.consume(queue) as consumer:
            for message in consumer:
                got += 1
                sys.setprofile(profile)
                try:
                    message.ack()
                finally:
                    sys.setprofile(None)
                queued_after_acks.append(conn._core.pending_output)
                if got == n:
                    break
            # every ack reached the broker: nothing is unacked, so nothing comes back
            # to the queue when the consumer goes
        assert got == n
        assert frames == [], frames[:12]
        assert set(queued_after_acks) == {0}  # written before ack() returned
    assert _counts(amqp_url, queue)[0] == 0


def test_an_ack_of_a_delivery_never_delivered_raises_and_writes_nothing(amqp_url, names):
    # The core's tag check, compiled: a tag past the channel's last delivery is the caller's
    # bug (InvalidStateError naming it), caught before a frame is queued; the channel and
    # the consumer go on.
    from amqwire.client.errors import InvalidStateError

    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
        fill_queue(ch, queue, 2)
        with ch.consume(queue) as consumer:
            first = next(iter(consumer))
            try:
                ch.basic_ack(first.delivery_tag + 10)
            except InvalidStateError as exc:
                assert f"delivery tag {first.delivery_tag + 10} was never delivered" in str(exc)
            else:
                raise AssertionError("acking a tag never delivered did not raise")
            assert conn._core.pending_output == 0
            first.ack()
            second = next(iter(consumer))
            second.ack()
        assert ch.is_open
    assert _counts(amqp_url, queue)[0] == 0


def test_a_flush_the_kernel_takes_in_parts_writes_every_byte_once(amqp_url, names, monkeypatch):
    # A send buffer of a few KB: every flush of a batch of publishes (one piece of
    # ~256 KB, the writer's own memory) is taken in parts.  The compiled flush sends what
    # the kernel takes and hands the rest to ThreadIO._write; the broker must get every
    # frame whole (a torn or doubled frame closes the connection) and confirm each publish.
    queue = names.queue()
    n = 120
    body = b"y" * 50_000  # below the zero-copy threshold: copied into the writer's memory
    handed_over: list[int] = []
    write = ThreadIO._write

    def spy(self: ThreadIO, sock: Any, pieces: list[Any]) -> None:
        handed_over.append(sum(len(piece) for piece in pieces))
        write(self, sock, pieces)

    monkeypatch.setattr(ThreadIO, "_write", spy)
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
        ch.confirm_select()
        conn._io._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        with ch.batch():
            for _ in range(n):
                ch.basic_publish("", queue, body)
        ch.wait_for_confirms(timeout=60)
        assert ch.queue_declare(queue, passive=True).message_count == n
        assert handed_over, "no flush was taken in parts"
        got = 0
        ch.basic_qos(10)
        with ch.consume(queue) as consumer:
            for message in consumer:
                assert message.body == body
                message.ack()
                got += 1
                if got == n:
                    break
    assert _counts(amqp_url, queue)[0] == 0


def test_asyncio_ack_nack_and_reject_answer_through_the_compiled_path(amqp_url, names):
    queue = names.queue()
    dead = names.queue()

    async def main() -> None:
        async with aio.connect(amqp_url) as conn:
            async with conn.channel() as ch:
                await ch.queue_declare(dead, auto_delete=False)
                await ch.queue_declare(queue, auto_delete=False, arguments={
                    "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead})
                for body in (b"ack", b"nack", b"reject", b"requeued"):
                    await ch.basic_publish("", queue, body)
                seen: list[bytes] = []
                async with ch.consume(queue) as consumer:
                    async for message in consumer:
                        seen.append(message.body)
                        if message.body == b"ack":
                            await message.ack()
                        elif message.body == b"nack":
                            await message.nack(requeue=False)
                        elif message.body == b"reject":
                            await message.reject(requeue=False)
                        elif message.redelivered:
                            await message.ack()
                            break
                        else:
                            await message.nack(requeue=True)
                assert seen == [b"ack", b"nack", b"reject", b"requeued", b"requeued"]
                for _ in range(100):
                    if (await ch.queue_declare(dead, passive=True)).message_count == 2:
                        break
                    await asyncio.sleep(0.05)
                assert (await ch.queue_declare(dead, passive=True)).message_count == 2
                assert (await ch.queue_declare(queue, passive=True)).message_count == 0
                await ch.queue_delete(queue)
                await ch.queue_delete(dead)

    asyncio.run(main())


def test_the_compiled_ack_and_flush_read_the_real_classes_at_their_offsets():
    """The ack and flush paths' slots name members that are plain slots of the client's
    classes: renaming one, or making it a property, would silently put a generic read
    (~125 instructions) back on every ack."""
    from amqwire.client.lifecycle import Lifecycle
    from amqwire.client.operations_async import AsyncChannel, AsyncConnection
    from amqwire.client.operations_sync import SyncChannel, SyncConnection
    from amqwire.client.protocol import ChannelState, ConnectionProtocol

    def plain_slot(kind: type, name: str) -> bool:
        return type(getattr(kind, name)) is MemberDescriptorType

    for kind, names in [
        (ConnectionProtocol, ["_channels", "_writer", "_iov", "flush_due", "bytes_sent"]),
        (ChannelState, ["state", "tag_base", "last_delivery_tag"]),
        (Lifecycle, ["answerable", "has_socket"]),
        (SyncChannel, ["_connection", "channel_id"]),
        (AsyncChannel, ["_connection", "channel_id"]),
        (SyncConnection, ["_lock", "_lifecycle", "_core", "_observer", "_io", "_flush_later"]),
        (AsyncConnection, ["_lock", "_lifecycle", "_core", "_observer", "_io"]),
        (ThreadIO, ["_connection", "_write_lock", "_sock", "_tls"]),
    ]:
        for name in names:
            assert plain_slot(kind, name), f"{kind.__qualname__}.{name} is no longer a plain slot"
