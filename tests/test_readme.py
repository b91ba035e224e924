"""The README's Python examples run as written against the installed package.

Examples that use Spark run as a user runs them: each in a fresh process started with this
venv's python, not activated (the venv's bin/ off the PATH, no VIRTUAL_ENV, no
PYSPARK_PYTHON), so each starts its own Spark, whose Python workers must find amqwire
without help from the test suite."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
SPARK = [i for i, block in enumerate(BLOCKS) if "pyspark" in block]


def test_readme_has_examples():
    assert BLOCKS and SPARK


def not_activated_env():
    venv_bin = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.realpath(p) != os.path.realpath(venv_bin))
    return env


@pytest.mark.parametrize("index", [i for i in range(len(BLOCKS)) if i not in SPARK])
def test_readme_example_runs(index):
    exec(compile(BLOCKS[index], f"README.md example {index + 1}", "exec"), {"__name__": "readme"})


@pytest.mark.timeout(240)
@pytest.mark.parametrize("index", SPARK)
def test_readme_spark_example_runs_in_a_fresh_process(index, tmp_path):
    script = tmp_path / f"readme_example_{index + 1}.py"
    script.write_text(BLOCKS[index])
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=not_activated_env(),
                          capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, f"README example {index + 1} failed:\n{done.stderr[-4000:]}"
