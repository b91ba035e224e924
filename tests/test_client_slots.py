"""client.slots: a __slots__ attribute read and written from C at its offset, with the
generic getattr/setattr for anything else; and the compiled publish's reads take the
fast way on the client's real classes."""
from __future__ import annotations

import gc
from types import MemberDescriptorType

import pytest

from amqwire.client.slots import Slot


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y


class Point3(Point):
    __slots__ = ("z",)


class WithDict:
    def __init__(self):
        self.x = 1


class WithProperty:
    __slots__ = ("_x",)

    def __init__(self):
        self._x = 5

    @property
    def x(self):
        return self._x * 2


def test_a_slot_is_read_and_written_at_its_offset():
    slot = Slot("x")
    p = Point(1, 2)
    assert slot.get(p) == 1 and slot.fast
    slot.set(p, "new")
    assert p.x == "new" and slot.get(p) == "new" and p.y == 2
    q = Point([], None)
    assert slot.get(q) is q.x


def test_the_old_value_is_released_and_the_new_one_kept():
    class Tracked:
        pass

    slot = Slot("x")
    old, new = Tracked(), Tracked()
    p = Point(old, 0)
    slot.set(p, new)
    import weakref

    gone = weakref.ref(old)
    del old
    gc.collect()
    assert gone() is None
    kept = weakref.ref(new)
    del new
    gc.collect()
    assert kept() is p.x


def test_an_empty_slot_raises_attribute_error_as_getattr_does():
    slot = Slot("x")
    p = Point.__new__(Point)
    with pytest.raises(AttributeError, match="x"):
        slot.get(p)
    slot.set(p, 3)
    assert p.x == 3


def test_other_types_take_the_generic_way():
    slot = Slot("x")
    assert slot.get(Point(1, 2)) == 1
    three = Point3(7, 8)
    three.z = 9
    assert slot.get(three) == 7  # a subclass: not the bound type, still right
    slot.set(three, 70)
    assert three.x == 70
    assert slot.get(WithDict()) == 1
    assert slot.get(WithProperty()) == 10
    with pytest.raises(AttributeError):
        slot.get(object())


def test_names_that_are_not_plain_slots_are_never_fast():
    on_dict, on_property = Slot("x"), Slot("x")
    assert on_dict.get(WithDict()) == 1 and not on_dict.fast
    w = WithProperty()
    assert on_property.get(w) == 10 and not on_property.fast
    with pytest.raises(AttributeError):
        on_property.set(w, 1)  # a property without a setter


def test_a_type_changed_after_binding_is_read_the_generic_way():
    class Box:
        __slots__ = ("v",)

        def __init__(self, v):
            self.v = v

    slot = Slot("v")
    b = Box(1)
    assert slot.get(b) == 1 and slot.fast
    member = Box.__dict__["v"]
    Box.v = property(lambda self: member.__get__(self) * 100)  # the type's version moves
    assert not slot.fast
    assert slot.get(b) == 100
    Box.v = member
    assert slot.get(b) == 1


def test_the_compiled_publish_reads_the_real_classes_at_their_offsets():
    """The publish path's slots (publish_path.pyx) name members that are plain slots of
    the client's classes: renaming one, or making it a property, would silently put a
    generic read (~125 instructions) back on every publish."""
    from amqwire.client.events import Confirmed
    from amqwire.client.lifecycle import Lifecycle
    from amqwire.client.operations_async import AsyncChannel, AsyncConnection
    from amqwire.client.operations_sync import SyncChannel, SyncConnection
    from amqwire.client.protocol import ChannelState, ConnectionProtocol

    def plain_slot(kind, name):
        return type(getattr(kind, name)) is MemberDescriptorType

    for kind, names in [
        (ConnectionProtocol, ["_channels", "_writer", "_iov", "flush_due", "publishes_acked", "publishes_nacked",
                              "publishes_returned"]),
        (ChannelState, ["state", "confirms", "id"]),
        (Confirmed, ["ack", "channel_id", "seqnos", "tokens", "returned", "delivery_tag", "multiple", "acks"]),
        (Lifecycle, ["usable"]),
        (SyncChannel, ["channel_id", "_flow_paused", "_listeners", "_lifecycle", "_publisher"]),
        (AsyncChannel, ["channel_id", "_flow_paused", "_listeners", "_lifecycle", "_publisher"]),
        (SyncConnection, ["_core", "_observer", "_to_stamp", "_flush_later", "_tracing", "_held"]),
        (AsyncConnection, ["_core", "_observer", "_to_stamp", "_flush_later", "_tracing", "_held"]),
    ]:
        for name in names:
            assert plain_slot(kind, name), f"{kind.__qualname__}.{name} is no longer a plain slot"


def test_a_channels_window_counts_are_its_publishers_c_fields(amqp_url, names):
    """The confirm window's counts live once, in the channel's ChannelPublisher (C fields
    the publish path reads and writes without making an int): the channel's names for them
    read and write those fields, and are not slots of their own."""
    from amqwire.client import connect
    from amqwire.client.operations_async import AsyncChannel
    from amqwire.client.operations_sync import SyncChannel

    fields = {"_confirm_window": "confirm_window", "_max_in_flight": "max_in_flight",
              "_unsettled": "unsettled", "_progress_below": "progress_below"}
    for kind in (SyncChannel, AsyncChannel):
        for name in fields:
            assert not isinstance(getattr(kind, name), MemberDescriptorType), f"{kind.__qualname__}.{name}"
    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(queue, auto_delete=True)
        ch.confirm_select(max_in_flight=3)
        publisher = ch._publisher
        assert (ch._confirm_window, publisher.confirm_window) == (3, 3)
        assert (ch._max_in_flight, publisher.max_in_flight) == (3, 3)
        with ch.batch():  # held in the writer: nothing can be acked yet
            futures = [ch.publish_async("", queue, b"x") for _ in range(2)]
            assert (ch._unsettled, publisher.unsettled) == (2, 2)
        ch.wait_for_confirms(timeout=10)
        assert all(f.result() is None for f in futures)
        assert (ch._unsettled, publisher.unsettled) == (0, 0)
        ch._max_in_flight = 1
        assert publisher.max_in_flight == 1
        ch.publish_async("", queue, b"y").result(timeout=10)
        assert ch._unsettled == 0
        with pytest.raises(TypeError):
            ch._unsettled = "3"  # type: ignore[assignment]
        assert ch._unsettled == 0
    from amqwire.client.publish_path import WindowCount

    with pytest.raises(ValueError, match="'unsettle'"):
        WindowCount("unsettle")
