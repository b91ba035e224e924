"""The objects on the hot paths keep their attributes in slots.  CPython 3.11 keeps at most
30 instance attributes inline; past that an instance gets a dict and the method calls on it
are no longer specialized (measured: ~700 more instructions per publish).  A class added to
one of these chains without ``__slots__`` brings the dict back: this catches it."""
from __future__ import annotations

import asyncio

from amqwire.client import Producer, aio, connect


def _no_dict(*objects: object) -> None:
    for obj in objects:
        assert not hasattr(obj, "__dict__"), f"{type(obj).__qualname__} has a __dict__: a class of its chain lacks __slots__"


def test_blocking_connection_channel_core_and_producer_have_no_dict(amqp_url):
    with connect(amqp_url) as conn, conn.channel() as ch:
        _no_dict(conn, ch, conn._core)
    with Producer(amqp_url) as producer:
        _no_dict(producer)


def test_asyncio_connection_channel_core_and_producer_have_no_dict(amqp_url):
    async def main() -> None:
        async with aio.connect(amqp_url) as conn, conn.channel() as ch:
            _no_dict(conn, ch, conn._core)
        async with aio.Producer(amqp_url) as producer:
            _no_dict(producer)

    asyncio.run(main())
