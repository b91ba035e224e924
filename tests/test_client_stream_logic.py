"""The stream reader's decisions without a broker: which deliveries it hands out, skips or
ends at, when it says the start was truncated, and how it acks (amqwire.client.streams)."""
import datetime
import logging

import pytest

from amqwire.client import Message, StreamOptionError, StreamReplicaUnavailable, StreamTruncated
from amqwire.client.streams import (
    HAND_OUT, LAST, PAST_END, SKIP, TRUNCATED, ReplicaWait, StreamConsumerBase, check_options, offset_argument,
)


class FakeChannel:
    def __init__(self, consumers=("ctag",)):
        self.is_open = True
        self._consumers = dict.fromkeys(consumers)
        self.acks = []

    def _answer_delivery(self, method, tag, multiple):
        self.acks.append((method, tag, multiple))


class Reader(StreamConsumerBase):
    def __init__(self, start, end=None, prefetch=10, on_truncated="warn", channel=None):
        self.channel = channel or FakeChannel()
        self.queue = "s"
        self.consumer_tag = "ctag"
        self._init_stream(start, end, prefetch, on_truncated)


def delivery(tag, offset):
    return Message(1, tag, False, "", "s", None, b"", "ctag", stream_offset=offset)


def verdicts(reader, offsets):
    return [reader._admit(delivery(tag, offset)) for tag, offset in enumerate(offsets, 1)]


def test_an_offset_start_skips_the_chunk_before_it_and_ends_at_end():
    reader = Reader(5, end=8)
    assert verdicts(reader, [3, 4, 5, 6, 7, 8]) == [SKIP, SKIP, HAND_OUT, HAND_OUT, HAND_OUT, LAST]
    assert (reader.first_offset, reader.last_offset, reader.truncated) == (3, 8, False)


def test_past_the_end_ends_without_the_message():
    reader = Reader("first", end=2)
    assert verdicts(reader, [0, 1, 4]) == [HAND_OUT, HAND_OUT, PAST_END]
    assert reader.last_offset == 1


def test_a_start_removed_by_retention_is_logged_and_kept(caplog):
    reader = Reader(10, end=200)
    with caplog.at_level(logging.WARNING, logger="amqwire.client"):
        assert verdicts(reader, [100, 101]) == [HAND_OUT, HAND_OUT]
    assert reader.truncated and reader.first_offset == 100
    assert "start offset 10 was removed by retention; reading starts at 100" in caplog.text
    assert "(90 offsets lost)" in caplog.text


def test_a_start_removed_by_retention_raises_when_asked():
    reader = Reader(10, on_truncated="raise")
    assert verdicts(reader, [100]) == [TRUNCATED]
    error = reader._truncation()
    assert isinstance(error, StreamTruncated) and (error.requested, error.first_offset, error.lost) == (10, 100, 90)


@pytest.mark.parametrize("start", ["first", "last", "next", "1h", datetime.datetime(2024, 1, 1)])
def test_only_an_offset_start_can_be_found_truncated(start):
    reader = Reader(start)
    assert verdicts(reader, [500, 501]) == [HAND_OUT, HAND_OUT] and not reader.truncated


def test_credit_is_given_half_a_prefetch_at_a_time_with_one_ack_when_alone():
    reader = Reader("first", prefetch=10)
    verdicts(reader, range(12))
    assert reader.channel.acks == [("basic_ack", 5, True), ("basic_ack", 10, True)]
    reader._give_credit()
    assert reader.channel.acks[-1] == ("basic_ack", 12, True) and reader._unacked == []


def test_credit_is_given_tag_by_tag_beside_other_consumers():
    reader = Reader("first", prefetch=4, channel=FakeChannel(("ctag", "other")))
    verdicts(reader, range(2))
    assert reader.channel.acks == [("basic_ack", 1, False), ("basic_ack", 2, False)]


def test_no_acks_on_a_closed_channel():
    reader = Reader("first", prefetch=100)
    verdicts(reader, range(3))
    reader.channel.is_open = False
    reader._give_credit()
    assert reader.channel.acks == [] and reader._unacked == []


@pytest.mark.parametrize("offset,expected", [
    ("first", "first"), ("last", "last"), ("next", "next"), (0, 0), (2**63 - 1, 2**63 - 1),
    ("30m", "30m"), ("1h", "1h"), ("7D", "7D"), ("2Y", "2Y"), ("10s", "10s"),
    (datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)),
])
def test_offset_arguments(offset, expected):
    assert offset_argument(offset) == expected


@pytest.mark.parametrize("offset", ["", "FIRST", "1 h", "h", "1.5h", "-1h", 2**63, -1, 1.0, True, None, b"first"])
def test_bad_offsets(offset):
    with pytest.raises(StreamOptionError) as info:
        offset_argument(offset)
    assert info.value.option == "offset"


def test_options_are_checked_in_order():
    check_options("first", None, 1, "warn")
    check_options(3, 3, 65535, "raise")
    with pytest.raises(StreamOptionError, match="^end: end offset 2 is before the start offset 3$"):
        check_options(3, 2, 10, "warn")


def refused():
    return StreamReplicaUnavailable(406, "PRECONDITION_FAILED - queue 'queue 's' in vhost '/'' does not have a "
                                    "replica on the local node", 60, 20, by_broker=True, channel=2)


def test_a_missing_replica_is_asked_for_again_with_growing_pauses_then_given_up(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("amqwire.client.streams.time.monotonic", lambda: now[0])
    wait = ReplicaWait(deadline=None, limit=2.5)
    pauses = []
    with pytest.raises(StreamReplicaUnavailable) as info:
        while True:
            pauses.append(wait.next_delay(refused()))
            now[0] += pauses[-1] + 0.1  # each try takes 0.1 s
    assert pauses == pytest.approx([0.1, 0.2, 0.4, 0.8])  # doubling; a fifth try would start past the limit
    assert info.value.waited == pytest.approx(1.9)
    assert str(info.value).startswith("the node has no running replica of the stream: ")
    assert str(info.value).endswith("(still after 1.9 s)")


def test_a_missing_replica_is_not_waited_for_past_the_callers_deadline(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("amqwire.client.streams.time.monotonic", lambda: now[0])
    wait = ReplicaWait(deadline=100.25, limit=10.0)
    assert wait.next_delay(refused()) == 0.1
    now[0] = 100.2  # the next pause (0.2 s) would end past the deadline: no try with no time left
    with pytest.raises(StreamReplicaUnavailable) as info:
        wait.next_delay(refused())
    assert info.value.waited == pytest.approx(0.2)
