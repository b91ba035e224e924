"""Every exception class amqwire defines survives pickle with its attributes.

Spark ships a worker's exception to the driver by pickling it, and multiprocessing or
concurrent.futures users do the same; ``BaseException`` pickles as ``cls(*self.args)``, which
loses (or fails on) attributes the constructor takes by keyword or keeps outside ``args``.
The classes are found by walking the packages, so a new one cannot escape this test.
"""
import dataclasses
import importlib
import inspect
import pickle
import pkgutil

import pytest

import amqwire.bridge
import amqwire.client
import amqwire.client.errors as E
import amqwire.codec
import amqwire.spark
from amqwire.codec import BasicProperties


def _all_exception_classes():
    found = {}
    for package in (amqwire.codec, amqwire.client, amqwire.bridge, amqwire.spark):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if (isinstance(obj, type) and issubclass(obj, BaseException)
                        and obj.__module__.startswith("amqwire.")):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


CLASSES = _all_exception_classes()


def _returned_message():
    from amqwire.client.message import ReturnedMessage

    return ReturnedMessage(3, 312, "NO_ROUTE", "ex", "rk", BasicProperties(message_id="m-1"), b"body")


# A value for every constructor parameter name in use; a class with a new name fails below
# until it gets one here.
SAMPLES = {
    "message": "the message text",
    "offered": b"AMQP\x00\x00\x09\x01",
    "offset": 17,
    "reply_code": 406,
    "reply_text": "PRECONDITION_FAILED - unknown delivery tag 9",
    "class_id": 60,
    "method_id": 80,
    "by_broker": False,
    "channel": 5,
    "delivery_tag": 42,
    "failures": [41, 42],
    "cause": ConnectionResetError(104, "reset by peer"),
    "operation": "queue.declare",
    "timeout": 2.5,
    "earlier": True,
    "consumer_tag": "ctag-1",
    "reason": "low on memory",
    "row": 12,
    "field": "properties.timestamp",
    "problem": "timestamp -1 s is before 1970-01-01T00:00:00Z",
    "position": 7,
    "rows_confirmed": 9000,
    "error": ConnectionResetError(104, "reset by peer"),
    "attempts": "ATTEMPTS",  # built in _make: the Producer's Attempt records
    "size": 4096,
    "frame_max": 1048576,
    "buffered": 33_000_000,
    "limit": 33_554_432,
    "option": "offset",
    "queue": "orders",
    "requested": 0,
    "first_offset": 5000,
    "index": 3,
    "stream": "orders",
    # the stream-protocol client (amqwire.client.stream.errors)
    "code": 0x02,
    "request": "declare_publisher",
    "subject": "orders",
    "broker": "rabbitmq-stream://guest@localhost:5552",
    "publishing_id": 17,
}


def _make(cls):
    params = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name == "message" and cls.__name__ == "MessageReturned":
            value = _returned_message()
        elif name == "attempts":
            from amqwire.client.producer.policy import Attempt

            value = [Attempt("amqp://guest@a:5672/", ConnectionResetError(104, "reset"), 12.5),
                     Attempt("amqp://guest@b:5672/", RuntimeError("no confirm"), 13.0)]
        elif name in SAMPLES:
            value = SAMPLES[name]
        elif param.default is not param.empty:
            continue
        else:
            raise AssertionError(f"{cls.__qualname__}({name}=...): add a sample value for {name!r}")
        params[name] = (param, value)
    args = [v for p, v in params.values() if p.kind == p.POSITIONAL_ONLY]
    kwargs = {name: v for name, (p, v) in params.items() if p.kind != p.POSITIONAL_ONLY}
    return cls(*args, **kwargs)


def _comparable(value):
    if isinstance(value, BaseException):
        return (type(value), value.args)
    if hasattr(value, "__slots__"):
        return (type(value), tuple(_comparable(getattr(value, s)) for s in value.__slots__))
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if dataclasses.is_dataclass(value):
        return (type(value), tuple(_comparable(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return value


def _state(exc):
    attrs = {name: _comparable(value) for name, value in vars(exc).items()}
    for name in dir(type(exc)):  # annotated attributes set in __init__ but kept in slots/properties
        if name in ("reply_code", "reply_text", "offered", "row", "field", "problem") and hasattr(exc, name):
            attrs[name] = _comparable(getattr(exc, name))
    return attrs


def test_the_walk_finds_the_classes_of_all_four_packages():
    names = set(CLASSES)
    for expected in ("amqwire.codec.errors.ProtocolHeaderError", "amqwire.client.errors.MessageReturned",
                     "amqwire.client.errors.OperationTimeout", "amqwire.spark.errors.RowEncodeError",
                     "amqwire.spark.errors.SinkError", "amqwire.bridge.errors.BrokerAccessRefused",
                     "amqwire.bridge.path.PathError"):
        assert expected in names
    assert len(names) >= 36, sorted(names)  # 7 codec + 24 client + 6 bridge + 3 spark today


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_pickles_with_its_attributes(name):
    cls = CLASSES[name]
    exc = _make(cls)
    if isinstance(exc, amqwire.codec.CodecError):
        exc.parsed = [amqwire.codec.ProtocolHeader(0, 9, 1)]  # what a parser had read before the error
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(exc, protocol=protocol))
        assert type(back) is cls
        assert str(back) == str(exc)
        assert _state(back) == _state(exc), name
        assert back.args == exc.args or _comparable(list(back.args)) == _comparable(list(exc.args))


def test_protocol_header_error_keeps_what_the_peer_offered():
    exc = amqwire.codec.ProtocolHeaderError("the peer wants AMQP 1.0", b"AMQP\x03\x01\x00\x00")
    back = pickle.loads(pickle.dumps(exc))
    assert (back.offered, back.offset, back.reply_code) == (b"AMQP\x03\x01\x00\x00", 0, 501)


def test_a_row_error_keeps_its_codec_attributes():
    from amqwire.spark.errors import RowEncodeError

    exc = RowEncodeError(row=3, field="headers.when", problem="bad")
    exc.offset = 99
    back = pickle.loads(pickle.dumps(exc))
    assert (back.row, back.field, back.problem, back.offset, str(back)) == (3, "headers.when", "bad", 99,
                                                                           "row 3: headers.when: bad")


CLOSES = [
    (E.AccessRefused, 403, "ACCESS_REFUSED - access to exchange 'x' refused"),
    (E.NotFound, 404, "NOT_FOUND - no exchange 'x' in vhost '/'"),
    (E.ResourceLocked, 405, "RESOURCE_LOCKED - cannot obtain exclusive access"),
    (E.PreconditionFailed, 406, "PRECONDITION_FAILED - unknown delivery tag 9"),
    (E.ChannelClosed, 311, "CONTENT_TOO_LARGE"),
]


@pytest.mark.parametrize("close_class, code, text", CLOSES)
def test_a_publish_unconfirmed_that_is_also_its_channel_close_pickles(close_class, code, text):
    """Made at run time for a broker's channel close, its class cannot be pickled by
    reference: it is rebuilt through PublishUnconfirmed(tag, cause)."""
    close = E.channel_closed(code, text, 60, 40, by_broker=True, channel=3)
    exc = E.PublishUnconfirmed(7, close)
    exc.failures = [exc]  # as wait_for_confirms sets it
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(exc, protocol=protocol))
        assert type(back) is type(exc) and isinstance(back, close_class)
        assert str(back) == str(exc) and back.args == exc.args
        assert (back.delivery_tag, back.reply_code, back.reply_text, back.channel) == (7, code, text, 3)
        assert type(back.cause) is close_class and str(back.cause) == str(close)
        assert back.failures == [back]
    send_failed = amqwire.client.SendFailed(exc, [], "m-1")
    back = pickle.loads(pickle.dumps(send_failed))
    assert isinstance(back.error, close_class) and isinstance(back.error, E.PublishUnconfirmed)
