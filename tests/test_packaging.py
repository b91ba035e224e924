"""What a user gets from PyPI: the sdist builds on its own, the wheel carries only the product.

``tests/venv.sh`` builds ``dist/amqwire-*.tar.gz`` and then the wheel FROM that sdist (pip's
isolated build environment, nothing of the checkout around), and installs that wheel: so
the installed package this suite imports is itself the proof that the sdist builds.  These
tests check the two archives' contents and the metadata.
"""
import importlib.metadata
import re
import shutil
import subprocess
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
    for folder in ("codec", "codec/stream", "spark"):
        for pattern in ("*.pyx", "*.pxd", "*.pxi", "*.h", "*.pyi", "*.py", "py.typed"):
            needed += [str(p.relative_to(REPO)) for p in (REPO / folder).glob(pattern)]
    needed += [str(p.relative_to(REPO)) for p in (REPO / "client").rglob("*.py") if "__pycache__" not in p.parts]
    missing = sorted(set(needed) - names)
    assert not missing, f"the sdist lacks {missing}"
    # generated C and build products are not sources: a build from the sdist cythonizes afresh
    # (the benchmark's compiled anchors are C and Go sources of their own, and ship)
    stray = sorted(n for n in names if re.search(r"\.(c|so|html|pyc)$", n) and not n.startswith("bench/anchors/"))
    assert not stray, stray
    assert {"bench/anchors/c/anchor.c", "bench/anchors/go/anchor.go"} <= names
    # the docs' pages come along (the README links them, tests/test_readme.py runs their
    # examples); benchmark results and charts do not
    pages = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))
    assert pages and not sorted(set(pages) - names), sorted(set(pages) - names)
    results = sorted(n for n in names if n.startswith(("bench/", "docs/")) and re.search(r"\.(png|svg|json)$", n))
    assert not results, results


def test_the_wheel_carries_the_product_and_not_the_tools():
    names = _wheel_names()
    for module in ("buffer", "table", "properties", "methods", "writer", "parser"):
        assert any(re.fullmatch(rf"amqwire/codec/{module}\..*\.so", n) for n in names), module
        assert f"amqwire/codec/{module}.pyi" in names
    for module in ("arrow_view", "arrow_columns", "encode", "stream_batch", "stream_chunks", "stream_encode"):
        assert any(re.fullmatch(rf"amqwire/spark/{module}\..*\.so", n) for n in names), module
    for module in ("amqp10",):
        assert any(re.fullmatch(rf"amqwire/codec/stream/{module}\..*\.so", n) for n in names), module
        assert f"amqwire/codec/stream/{module}.pyi" in names and f"amqwire/codec/stream/{module}.pxd" in names
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
    # the licence as PEP 639 says (what setuptools >= 77 builds without a deprecation
    # warning): an SPDX expression and the file; no License field, no licence classifier
    assert meta["License-Expression"] == "MIT" and meta.get("License") is None
    assert not [c for c in classifiers if c.startswith("License ::")], classifiers
    assert meta.get_all("License-File") == ["LICENSE"]
    license_text = (REPO / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "2026 amqwire developers" in license_text
    # the summary names every part a user can install this for
    summary = meta["Summary"]
    for part in ("codec", "client", "Producer", "bridge", "Spark source and sink", "amqwire command"):
        assert part in summary, (part, summary)
    assert "\n" not in summary and len(summary) < 200
    # no made-up project URLs: the project has no public home yet
    assert not meta.get_all("Project-URL") and not meta.get("Home-page")


def test_the_wheels_metadata_is_what_pip_shows():
    """The same checks on the METADATA file inside the built wheel (what an index would show)."""
    import email

    with zipfile.ZipFile(_one("amqwire-*.whl")) as whl:
        name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(whl.read(name))
    assert meta["Name"] == "amqwire" and meta["License-Expression"] == "MIT" and meta.get("License") is None
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")]
    assert "Producer" in meta["Summary"] and "bridge" in meta["Summary"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().lstrip().startswith("# amqwire")  # the README is the long description
    with zipfile.ZipFile(_one("amqwire-*.whl")) as whl:
        entry_points = whl.read(name.replace("METADATA", "entry_points.txt")).decode()
    assert "amqwire = amqwire.cli.main:main" in entry_points
    assert "amqwire-bridge = amqwire.bridge.__main__:main" in entry_points


def test_the_command_ships_in_both_archives_with_its_console_scripts():
    cli = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "cli").rglob("*.py") if "__pycache__" not in p.parts)
    assert "cli/toplevel/__main__.py" in cli and "cli/perf.py" in cli, cli
    missing = sorted(set(cli) - _sdist_names())
    assert not missing, f"the sdist lacks {missing}"
    names = _wheel_names()
    # cli/ is amqwire.cli; cli/toplevel/ holds the top-level package: its __init__.py (a
    # regular package, see test_a_checkout_named_amqwire_does_not_shadow_the_installed_package)
    # and its __main__ (python -m amqwire)
    wanted = {f"amqwire/{name}" for name in cli if not name.startswith("cli/toplevel/")}
    wanted |= {"amqwire/__init__.py", "amqwire/__main__.py", "amqwire/cli/py.typed"}
    assert not sorted(wanted - names), sorted(wanted - names)
    assert not any("toplevel" in n for n in names)
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")
               if e.dist is not None and e.dist.name == "amqwire"}
    assert scripts == {"amqwire": "amqwire.cli.main:main", "amqwire-bridge": "amqwire.bridge.__main__:main"}


def test_a_checkout_named_amqwire_does_not_shadow_the_installed_package(tmp_path):
    """A clone in a folder named ``amqwire``, used from its parent folder: the folder is on
    sys.path first (the current directory), and must not take the place of the installed,
    compiled package (it once did: ``No module named 'amqwire.codec.methods'``)."""
    import os
    import shutil
    import subprocess

    clone = tmp_path / "amqwire"
    if (REPO / ".git").exists():
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True,
                       capture_output=True, timeout=120)
    else:  # an unpacked sdist: copy it
        shutil.copytree(REPO, clone, ignore=shutil.ignore_patterns(".venv", "build", "dist", "__pycache__"))
    assert (clone / "codec" / "__init__.py").exists() and not (clone / "__init__.py").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    imported = subprocess.run(
        [sys.executable, "-c", "import amqwire, amqwire.codec.methods, amqwire.codec as c; print(c.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
    assert not imported.stdout.strip().startswith(str(clone)), imported.stdout
    helped = subprocess.run([sys.executable, "-m", "amqwire", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "publish" in helped.stdout, helped.stderr


def test_pip_show_names_the_licence():
    shown = subprocess.run([sys.executable, "-m", "pip", "show", "amqwire"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    # pip 25.1 and later print the expression; older pips read only the License field
    assert "License-Expression: MIT" in shown.stdout.splitlines(), shown.stdout


def test_the_build_warns_of_nothing_deprecated(tmp_path):
    """setuptools >= 77 deprecates the licence table (license = { text = "MIT" }) and licence
    classifiers, with a banner each time it reads pyproject.toml (six per build)."""
    built = subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    output = built.stdout + built.stderr
    assert built.returncode == 0, output[-3000:]
    assert not re.search(r"deprecat", output, re.I), output


@pytest.mark.timeout(600)
def test_the_set_up_is_quiet_and_names_its_log_when_it_fails(tmp_path):
    """tests/venv.sh (the first thing tests/run, bench/run and spark/run do) says nothing when
    the wheel is up to date, one line when it builds, and on a failure where its log is."""
    wheel = _one("amqwire-*.whl")
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".venv-fuzz", "dist", "build", "__pycache__", "*.so", "*.c", "*.html", ".hypothesis"))
    (checkout / "dist").mkdir()
    shutil.copy(wheel, checkout / "dist")  # copied last: newer than every source, so no build

    def set_up():
        return subprocess.run(["bash", "tests/venv.sh", "zstd"], cwd=checkout, capture_output=True, text=True, timeout=500)

    quiet = set_up()
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "" and quiet.stderr == "", (quiet.stdout, quiet.stderr)
    log = checkout / ".venv" / "setup.log"
    (checkout / "setup.py").write_text("raise SystemExit('this build is broken on purpose')\n")
    failed = set_up()
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert failed.stdout == f"building amqwire from this checkout: an sdist, then a compiled wheel from it " \
                            f"(a few minutes; log: {log})\n", failed.stdout
    assert failed.stderr.startswith(f"tests/venv.sh: building the sdist failed; its output is in {log}, which ends:\n")
    assert "this build is broken on purpose" in failed.stderr and "this build is broken on purpose" in log.read_text()
