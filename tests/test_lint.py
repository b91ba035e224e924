"""The lint and type gates, as tests so the README's test command runs them.

- ruff over the repository (rules in pyproject.toml), cython-lint over the .pyx/.pxd/.pxi;
- mypy --strict over the installed package (tests/test_typing.py: the client, the Python
  parts of spark and the codec's stubs);
- stubtest: the .pyi stubs against the compiled modules, with tests/stubtest-allowlist.txt
  for what Cython, pyspark and the enum module add at run time.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(args, cwd, env=None):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_ruff_is_clean():
    result = _run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."], REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cython_lint_is_clean():
    sources = sorted(str(p.relative_to(REPO)) for folder in ("codec", "codec/stream", "spark")
                     for pattern in ("*.pyx", "*.pxd", "*.pxi") for p in (REPO / folder).glob(pattern))
    assert len(sources) >= 14, sources
    linter = shutil.which("cython-lint", path=str(BIN)) or "cython-lint"
    # cython-lint runs pycodestyle by name: the venv's bin must be on PATH
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    result = _run([linter, "--max-line-length", "140", *sources], REPO, env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_stubs_match_the_compiled_modules(tmp_path):
    result = _run(
        [sys.executable, "-m", "mypy.stubtest", "--mypy-config-file", str(REPO / "pyproject.toml"),
         # PEP 800 @disjoint_base: every cdef class is one, but the marker needs a
         # typing_extensions newer than many users' type checkers know
         "--ignore-disjoint-bases",
         "--allowlist", str(REPO / "tests" / "stubtest-allowlist.txt"),
         "amqwire.codec", "amqwire.client", "amqwire.spark"],
        tmp_path,  # not the checkout: the installed package is what is checked
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_stubtest_catches_a_wrong_stub(tmp_path):
    # The gate can fail: a copy of the installed codec whose writer stub lies about a default.
    import amqwire.codec

    src = Path(amqwire.codec.__file__).parent
    fake = tmp_path / "site" / "amqwire" / "codec"
    shutil.copytree(src, fake)
    stub = fake / "writer.pyi"
    stub.write_text(stub.read_text().replace("def take(self) -> bytes: ...", "def take(self, n: int) -> bytes: ..."))
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    result = _run([sys.executable, "-m", "mypy.stubtest", "--ignore-disjoint-bases",
                   "--allowlist", str(REPO / "tests" / "stubtest-allowlist.txt"),
                   "--ignore-unused-allowlist", "amqwire.codec.writer"], tmp_path, env)
    assert result.returncode == 1 and "FrameWriter.take" in result.stdout, result.stdout + result.stderr
