"""What a user gets from PyPI: the sdist builds on its own, the wheel carries only the product.

``tests/venv.sh`` builds ``dist/amqwire-*.tar.gz`` and then the wheel FROM that sdist (pip's
isolated build environment, nothing of the checkout around), and installs that wheel: so
the installed package this suite imports is itself the proof that the sdist builds.  These
tests check the two archives' contents and the metadata.
"""
import importlib.metadata
import re
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import amqwire.codec as codec

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "dist"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def _one(pattern):
    found = sorted(DIST.glob(pattern))
    if not found:
        pytest.skip(f"no {pattern} in dist/: build with bash tests/venv.sh test")
    assert len(found) == 1, found
    return found[0]


def _sdist_names():
    with tarfile.open(_one("amqwire-*.tar.gz")) as tar:
        return {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}


def _wheel_names():
    with zipfile.ZipFile(_one("amqwire-*.whl")) as whl:
        return set(whl.namelist())


def test_the_sdist_ships_every_source_a_build_needs():
    names = _sdist_names()
    needed = ["setup.py", "pyproject.toml", "LICENSE", "README.md", "MANIFEST.in",
              "codec/method_base.pxi", "codec/amqp-rabbitmq-0.9.1.json", "codec/codegen.py",
              "client/make_sync.py"]
    for folder in ("codec", "spark"):
        for pattern in ("*.pyx", "*.pxd", "*.pxi", "*.h", "*.pyi", "*.py", "py.typed"):
            needed += [str(p.relative_to(REPO)) for p in (REPO / folder).glob(pattern)]
    needed += [str(p.relative_to(REPO)) for p in (REPO / "client").rglob("*.py") if "__pycache__" not in p.parts]
    missing = sorted(set(needed) - names)
    assert not missing, f"the sdist lacks {missing}"
    # generated C and build products are not sources: a build from the sdist cythonizes afresh
    stray = sorted(n for n in names if re.search(r"\.(c|so|html|pyc)$", n))
    assert not stray, stray


def test_the_wheel_carries_the_product_and_not_the_tools():
    names = _wheel_names()
    for module in ("buffer", "table", "properties", "methods", "writer", "parser"):
        assert any(re.fullmatch(rf"amqwire/codec/{module}\..*\.so", n) for n in names), module
        assert f"amqwire/codec/{module}.pyi" in names
    for module in ("arrow_view", "encode", "stream_batch"):
        assert any(re.fullmatch(rf"amqwire/spark/{module}\..*\.so", n) for n in names), module
    # every Python module of the client, its subpackages' too, but the generator
    client = sorted(p.relative_to(REPO / "client").as_posix() for p in (REPO / "client").rglob("*.py")
                    if "__pycache__" not in p.parts and p.name != "make_sync.py")
    assert "producer/__init__.py" in client, client
    missing = sorted(f"amqwire/client/{name}" for name in client if f"amqwire/client/{name}" not in names)
    assert not missing, f"the wheel lacks {missing}"
    for marker in ("codec", "client", "spark"):
        assert f"amqwire/{marker}/py.typed" in names
    assert "amqwire/codec/buffer.pxd" in names and "amqwire/codec/_endian.h" in names  # cimport-able
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    not_shipped = sorted(n for n in names if re.search(r"\.(pyx|pxi|c|json)$", n)
                         or n.endswith(("/codegen.py", "/make_sync.py")))
    assert not not_shipped, not_shipped


def test_one_version_source():
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    from amqwire.client import protocol

    assert importlib.metadata.version("amqwire") == declared
    assert codec.__version__ == declared
    assert protocol.VERSION == declared
    # no second copy of the number in the sources
    for path in [*REPO.glob("codec/*.py"), *REPO.glob("client/**/*.py"), *REPO.glob("spark/*.py")]:
        assert not re.search(r"""(VERSION|__version__)\s*=\s*["']\d+\.\d+""", path.read_text()), path


def test_metadata_a_package_index_shows():
    meta = importlib.metadata.metadata("amqwire")
    classifiers = set(meta.get_all("Classifier"))
    for expected in ("Framework :: AsyncIO", "Typing :: Typed", "Operating System :: POSIX :: Linux",
                     "Programming Language :: Python :: 3.11"):
        assert expected in classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    assert meta["License-Expression"] == "MIT"
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "2026 amqwire developers" in license_text


def test_the_command_ships_in_both_archives_with_its_console_scripts():
    cli = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "cli").rglob("*.py") if "__pycache__" not in p.parts)
    assert "cli/toplevel/__main__.py" in cli and "cli/perf.py" in cli, cli
    missing = sorted(set(cli) - _sdist_names())
    assert not missing, f"the sdist lacks {missing}"
    names = _wheel_names()
    # cli/ is amqwire.cli; cli/toplevel/ holds the top-level package's only module, its
    # __main__ (python -m amqwire): no amqwire/__init__.py, the top level stays a namespace
    wanted = {f"amqwire/{name}" for name in cli if not name.startswith("cli/toplevel/")}
    wanted |= {"amqwire/__main__.py", "amqwire/cli/py.typed"}
    assert not sorted(wanted - names), sorted(wanted - names)
    assert "amqwire/__init__.py" not in names and not any("toplevel" in n for n in names)
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")
               if e.dist is not None and e.dist.name == "amqwire"}
    assert scripts == {"amqwire": "amqwire.cli.main:main", "amqwire-bridge": "amqwire.bridge.__main__:main"}
