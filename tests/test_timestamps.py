"""AMQP timestamps are unsigned 64-bit seconds since the epoch, in tables (``T``) and in the
``timestamp`` basic property; RabbitMQ, pika, pamqp and py-amqp read them unsigned.

What a datetime can hold and the wire can say meet at 1970-01-01T00:00:00Z ..
9999-12-31T23:59:59Z: anything outside is a typed error naming the field, when encoding
(a pre-1970 datetime would otherwise go out as a date far in the future) and when decoding
(a value past year 9999 would otherwise be read signed or overflow).
"""
from datetime import datetime, timedelta, timezone

import pytest

from amqwire.codec import AMQPSyntaxError, BasicProperties, decode_table, encode_table

UTC = timezone.utc
LAST = 253402300799  # 9999-12-31T23:59:59Z


def h(s: str) -> bytes:
    return bytes.fromhex(s)


def table_with_t(seconds: int) -> bytes:
    return h("0000000b 01 6b 54") + seconds.to_bytes(8, "big")


def props_with_t(seconds: int) -> bytes:
    return h("0040") + seconds.to_bytes(8, "big")


# (datetime, wire seconds)
VECTORS = [
    (datetime(1970, 1, 1, tzinfo=UTC), 0),
    (datetime(2021, 1, 1, tzinfo=UTC), 0x5FEE6600),
    (datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC), 2**31),  # past a signed 32-bit time_t
    (datetime(2106, 2, 7, 6, 28, 16, tzinfo=UTC), 2**32),  # past an unsigned 32-bit one
    (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), LAST),
]


@pytest.mark.parametrize("when, seconds", VECTORS)
def test_vectors_both_ways(when, seconds):
    assert encode_table({"k": when}) == table_with_t(seconds)
    assert decode_table(table_with_t(seconds)) == {"k": when}
    assert BasicProperties(timestamp=when).encode() == props_with_t(seconds)
    assert BasicProperties.decode(props_with_t(seconds)).timestamp == when


@pytest.mark.parametrize("seconds", [LAST + 1, 2**63 - 1, 2**63, 2**64 - 1])
def test_decoding_past_year_9999_names_the_field(seconds):
    # 2**64 - 1 (all ones) used to come back as 1969-12-31T23:59:59, read signed.
    with pytest.raises(AMQPSyntaxError) as info:
        decode_table(table_with_t(seconds))
    message = str(info.value)
    assert message.startswith("table['k']: timestamp: ") and f"{seconds} at offset 7" in message, message
    assert "after 9999-12-31T23:59:59Z" in message
    nested = h("00000012 01 6f 46") + table_with_t(seconds)
    with pytest.raises(AMQPSyntaxError, match=r"table\['o'\]\['k'\]: timestamp"):
        decode_table(nested)
    with pytest.raises(AMQPSyntaxError, match=f"basic properties timestamp: {seconds} at offset 2 is after"):
        BasicProperties.decode(props_with_t(seconds))


@pytest.mark.parametrize("when", [
    datetime(1969, 12, 31, 23, 59, 59),
    datetime(1, 1, 1),
    datetime(1970, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))),  # 23:30 the day before in UTC
])
def test_encoding_before_1970_names_the_field(when):
    with pytest.raises(AMQPSyntaxError) as info:
        encode_table({"a": {"when": when}})
    message = str(info.value)
    assert message.startswith("table['a']['when']: timestamp: ") and "is before 1970-01-01T00:00:00Z" in message
    with pytest.raises(AMQPSyntaxError, match="BasicProperties.timestamp: .* is before 1970-01-01T00:00:00Z"):
        BasicProperties(timestamp=when).encode()


def test_encoding_stays_exact_at_the_edges():
    assert encode_table({"k": datetime(1970, 1, 1)}) == table_with_t(0)  # naive means UTC
    late_zone = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))  # 10000-01-01 in UTC
    with pytest.raises(AMQPSyntaxError, match="after 9999-12-31T23:59:59 in UTC"):
        encode_table({"k": late_zone})


# --- the other readers and writers, same bytes ------------------------------------------

@pytest.mark.parametrize("when, seconds", VECTORS[:3])  # pamqp reads > 2**32 - 1 as milliseconds
def test_pamqp_agrees(when, seconds):
    import pamqp.decode
    import pamqp.encode

    ours = encode_table({"k": when})
    assert pamqp.encode.field_table({"k": when}) == ours
    assert pamqp.decode.field_table(ours)[1] == {"k": when}


@pytest.mark.parametrize("when, seconds", VECTORS)
def test_pika_agrees(when, seconds):
    import pika.data

    ours = encode_table({"k": when})
    assert pika.data.decode_table(ours, 0)[0] == {"k": when}
    out = []
    pika.data.encode_table(out, {"k": when})
    assert b"".join(out) == ours


def test_pika_reads_what_a_signed_writer_sent_as_a_far_future():
    # Why pre-1970 is refused: the negative seconds an old amqwire wrote for 1969-12-31
    # are, for pika, a date 584 billion years ahead (or an error).
    import pika.data

    with pytest.raises((OverflowError, ValueError, OSError)):
        pika.data.decode_table(table_with_t(2**64 - 86400), 0)
    with pytest.raises(AMQPSyntaxError):
        decode_table(table_with_t(2**64 - 86400))
