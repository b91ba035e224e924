"""One root for every exception amqwire defines, and one class per name.

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
    "amqwire.client.blocking._EndOfStream",
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
    for expected in ("amqwire.codec.errors", "amqwire.client.errors", "amqwire.client.producer_core",
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
