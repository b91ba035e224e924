"""bench/rows.py: which benchmark rows an --only pattern selects.

bench/rows.py imports nothing from the anchors (pika, aio-pika, ...), which the test run does not
install, so it is loaded by path: bench/ lives beside the tests and is not a package that is installed.
"""
import importlib.util
from collections import namedtuple
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bench_rows", Path(__file__).resolve().parent.parent / "bench" / "rows.py")
rows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rows)

Row = namedtuple("Row", "key")
KEYS = ["publish: raw socket (limit)", "publish: amqwire blocking", "consume: raw socket (limit)",
        "consume: amqwire blocking", "consume: amqwire blocking +metrics", "consume: amqwire asyncio",
        "consume: amqwire asyncio +metrics", "consume: pika"]


def keys(only):
    return [row.key for row in rows.select_rows([Row(k) for k in KEYS], only)]


def test_a_substring_selects_every_row_containing_it():
    assert keys("consume: amqwire blocking") == ["consume: amqwire blocking", "consume: amqwire blocking +metrics"]
    assert keys("raw") == ["publish: raw socket (limit)", "consume: raw socket (limit)"]


def test_an_equals_sign_selects_that_row_only_and_mixes_with_substrings():
    selected = keys("=consume: amqwire blocking, =Consume: amqwire asyncio,consume: raw")
    assert selected == ["consume: raw socket (limit)", "consume: amqwire blocking", "consume: amqwire asyncio"]


def test_no_pattern_selects_everything_and_an_unknown_exact_name_nothing():
    assert keys(None) == KEYS
    assert keys("") == KEYS
    assert keys("=consume: amqwire") == []


def test_another_name_attribute():
    Named = namedtuple("Named", "name")
    chosen = rows.select_rows([Named("encode: amqwire"), Named("encode: amqwire, to_json")], "=encode: amqwire",
                              name=lambda row: row.name)
    assert chosen == [Named("encode: amqwire")]
