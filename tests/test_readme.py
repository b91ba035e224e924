"""The README's Python examples run as written against the installed package."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys, request):
    if "pyspark" in BLOCKS[index]:
        # The example's SparkSession.builder...getOrCreate() gets the suite's session
        # (local[2], UI off) instead of starting a second one with other settings.
        request.getfixturevalue("spark")
    exec(compile(BLOCKS[index], f"README.md example {index + 1}", "exec"), {"__name__": "readme"})
