"""One root for every exception amqwire defines, one class per name, and a publish failed by
a channel close that is both PublishUnconfirmed and the close's class.

The classes are found by walking every module of the four packages (spark's import
pyspark, installed in the test venv), so a class added later cannot escape these tests.
"""
import importlib
import pkgutil
import subprocess
import sys

import pytest

import amqwire.bridge
import amqwire.client
import amqwire.client.errors as E
import amqwire.codec
import amqwire.spark
from amqwire.codec import AmqwireError

PACKAGES = (amqwire.codec, amqwire.client, amqwire.bridge, amqwire.spark)

# Private classes that never leave the module that defines them (the root is for what a
# caller can see): each with the reason.
INTERNAL = {
    # blocking.py's socket reader raises it on EOF and turns it into ConnectionLost itself
    "amqwire.client.io_threads._EndOfStream",
}


def _exception_classes():
    """Every exception class defined in a module of the four packages, by full name."""
    found = {}
    for package in PACKAGES:
        modules = [package.__name__] + [
            info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        ]
        for name in modules:
            module = importlib.import_module(name)
            for obj in vars(module).values():
                if (isinstance(obj, type) and issubclass(obj, BaseException)
                        and obj.__module__.startswith("amqwire.")):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


CLASSES = _exception_classes()


def test_the_walk_sees_all_four_packages():
    modules = {name.rsplit(".", 1)[0] for name in CLASSES}
    for expected in ("amqwire.codec.errors", "amqwire.client.errors", "amqwire.client.producer.errors",
                     "amqwire.bridge.errors", "amqwire.bridge.path", "amqwire.spark.errors"):
        assert expected in modules, sorted(modules)
    assert set(INTERNAL) <= set(CLASSES), "an INTERNAL entry names a class that is gone"


@pytest.mark.parametrize("name", sorted(set(CLASSES) - INTERNAL))
def test_every_exception_class_derives_from_the_root(name):
    assert issubclass(CLASSES[name], AmqwireError), f"{name} is not an AmqwireError"


def test_no_two_exception_classes_share_a_name():
    by_name = {}
    for cls in {id(c): c for c in CLASSES.values()}.values():  # re-exports are the same class
        by_name.setdefault(cls.__name__, []).append(f"{cls.__module__}.{cls.__qualname__}")
    shared = {name: where for name, where in by_name.items() if len(where) > 1}
    assert not shared, shared


def test_the_root_is_one_class_defined_in_the_codec():
    assert AmqwireError.__module__ == "amqwire.codec.errors"
    assert amqwire.client.AmqwireError is E.AmqwireError is amqwire.codec.errors.AmqwireError
    assert "AmqwireError" in amqwire.codec.__all__ and "AmqwireError" in amqwire.client.__all__
    assert "AmqwireError" in E.__all__


def test_the_codec_defines_the_root_without_importing_the_layers_above():
    code = ("import sys, amqwire.codec; "
            "print(sorted(m for m in sys.modules if m.startswith('amqwire.') and not m.startswith('amqwire.codec')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("cls, builtin", [
    (amqwire.codec.CodecError, ValueError),
    (amqwire.codec.FrameError, ValueError),
    (amqwire.codec.UnsupportedValueError, TypeError),
    (E.InvalidStateError, RuntimeError),
    (E.OperationTimeout, TimeoutError),
    (amqwire.client.SendTimeout, TimeoutError),
    (amqwire.bridge.path.PathError, ValueError),
    (amqwire.spark.ArrowTypeError, TypeError),
    (amqwire.spark.RowEncodeError, ValueError),
    (amqwire.spark.SinkError, RuntimeError),
])
def test_each_class_keeps_its_builtin(cls, builtin):
    assert issubclass(cls, AmqwireError) and issubclass(cls, builtin)


def test_the_bridges_access_refused_has_its_own_name():
    assert not hasattr(amqwire.bridge, "AccessRefused")
    assert "AccessRefused" not in amqwire.bridge.__all__
    refused = amqwire.bridge.BrokerAccessRefused
    assert issubclass(refused, amqwire.bridge.BridgeError) and refused.exit_code == 4
    assert not issubclass(refused, amqwire.client.AccessRefused)


# --------------------------------------------------------------------------- PublishUnconfirmed


CLOSES = [
    (E.AccessRefused, 403, "ACCESS_REFUSED - access to exchange 'x' refused"),
    (E.NotFound, 404, "NOT_FOUND - no exchange 'x' in vhost '/'"),
    (E.ResourceLocked, 405, "RESOURCE_LOCKED - cannot obtain exclusive access"),
    (E.PreconditionFailed, 406, "PRECONDITION_FAILED - unknown delivery tag 9"),
    (E.ChannelClosed, 311, "CONTENT_TOO_LARGE"),
]


@pytest.mark.parametrize("close_class, code, text", CLOSES)
def test_a_publish_failed_by_a_broker_close_is_also_the_close(close_class, code, text):
    close = E.channel_closed(code, text, 60, 40, by_broker=True, channel=3)
    assert type(close) is close_class
    exc = E.PublishUnconfirmed(7, close)
    assert isinstance(exc, E.PublishUnconfirmed) and isinstance(exc, close_class)
    assert isinstance(exc, E.PublishError) and isinstance(exc, E.ChannelClosed)
    assert type(exc).__name__ == "PublishUnconfirmed"
    # PublishUnconfirmed's attributes and message, the close's fields
    assert (exc.delivery_tag, exc.cause, exc.args) == (7, close, (7,))
    assert str(exc) == f"publish with delivery tag 7 was never confirmed: {close}"
    assert (exc.reply_code, exc.reply_text, exc.class_id, exc.method_id, exc.by_broker, exc.channel) == (
        code, text, 60, 40, True, 3)
    assert exc.method_name == "basic.publish"
    # one class per close class
    assert type(E.PublishUnconfirmed(8, E.channel_closed(code, "", 0, 0, by_broker=True, channel=1))) is type(exc)
    with pytest.raises(close_class):
        raise exc


@pytest.mark.parametrize("cause", [
    None,
    E.ConnectionLost("the socket closed"),
    E.ConnectionClosed(320, "CONNECTION_FORCED", by_broker=True),
    E.ChannelClosed(200, "bye", by_broker=False, channel=1),  # this client closed it
])
def test_other_causes_leave_a_plain_publish_unconfirmed(cause):
    exc = E.PublishUnconfirmed(2, cause)
    assert type(exc) is E.PublishUnconfirmed and not isinstance(exc, E.ChannelClosed)
    assert exc.cause is cause


def test_a_subclass_of_publish_unconfirmed_stays_itself():
    class Mine(E.PublishUnconfirmed):
        pass

    close = E.channel_closed(404, "NOT_FOUND", 60, 40, by_broker=True, channel=1)
    assert type(Mine(1, close)) is Mine
