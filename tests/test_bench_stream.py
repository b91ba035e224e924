"""bench/stream_protocol_bench.py without a broker: its rows, the bare publisher's frames, the
verdicts it prints.  (CI's smoke run, .ci/run, runs it end to end on a private node.)

bench/ is not installed: it lives beside the tests, so the script is loaded by path, with the
repository root on sys.path for its ``bench.charts`` and ``bench.rows``.
"""
import importlib.util
import sys
from pathlib import Path

import pytest

from amqwire.codec.stream import frames as F
from amqwire.codec.stream.amqp10 import decode_message

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
_spec = importlib.util.spec_from_file_location("stream_protocol_bench", REPO / "bench" / "stream_protocol_bench.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # its dataclasses look their module up
_spec.loader.exec_module(bench)
sys.path.pop(0)


def rows_with(rates):
    """The bench's rows, with runs of the given rates: {key: [rate, ...]}, or {key: "n/a: ..."}."""
    rows = bench.build_rows()
    for row in rows:
        value = rates.get(row.key)
        if isinstance(value, str):
            row.na = value
        elif value:
            row.runs = [{"rate": r, "seconds": 1.0, "client_us": 1.0, "broker_us": 2.0} for r in value]
    return rows


def test_row_keys_are_unique_and_every_row_has_a_worker_function():
    keys = [row.key for row in bench.build_rows()]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(bench.ROW_FUNCTIONS)
    assert {row.case for row in bench.build_rows()} == {"read", "publish"}


def test_only_selects_as_the_other_benches_do():
    chosen = [row.key for row in bench.select_rows(bench.build_rows(), "=publish: amqwire blocking,rbfly")]
    assert chosen == ["read: rbfly", "publish: amqwire blocking", "publish: rbfly"]


def test_the_bare_publisher_frames_carry_every_message_once_with_consecutive_ids():
    frames = bench.bare_publish_frames(7, 250)
    commands = F.StreamParser(0, sender="client").feed(frames)
    assert [type(c) for c in commands] == [F.Publish] * 3
    assert [len(c.messages) for c in commands] == [100, 100, 50]
    ids = [pid for c in commands for pid, _ in c.messages]
    assert ids == list(range(250)) and {c.publisher_id for c in commands} == {7}
    assert all(decode_message(data).body == bench.BODY for c in commands for _, data in c.messages)
    assert len(bench.BODY) == 100


def test_a_missing_anchor_is_one_na_line(monkeypatch):
    rows = bench.build_rows()
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None if name == "rbfly" else object())
    bench.mark_missing(rows)
    assert {row.key: row.na for row in rows if row.na} == {"read: rbfly": "n/a: rbfly is not installed",
                                                           "publish: rbfly": "n/a: rbfly is not installed"}


def verdicts(rates):
    return {target: (status, detail) for status, target, detail in bench.target_lines(rows_with(rates))}


def test_targets_met_missed_and_a_median_that_disagrees():
    got = verdicts({
        "read: bare stream reader (limit)": [100.0, 90.0, 80.0],
        "read: amqwire blocking": [85.0, 70.0, 60.0],   # 85% best, 78% median
        "read: amqwire asyncio": [70.0, 70.0, 70.0],
        "read: rstream": [50.0, 50.0, 50.0],
        "read: rbfly": "n/a: rbfly is not installed",
        "read: bare reader + codec decoding": [100.0, 80.0, 70.0],
    })
    status, detail = got["read: amqwire blocking reads at >= 80% of the bare stream reader"]
    assert status == "met" and detail.startswith("85% best") and "the median would say MISSED" in detail
    assert got["read: amqwire asyncio reads at >= 80% of the bare stream reader"][0] == "MISSED"
    assert got["read: amqwire blocking ahead of rstream"] == ("met", "1.70x best (85 / 50), 1.40x median")
    assert got["read: amqwire asyncio ahead of rbfly"] == ("n/a", "n/a: rbfly is not installed")
    assert got["read: amqwire blocking against the bare reader decoding with the codec"] == (
        "info", "85% best (85 / 100), 88% median")
    # the publish case measured nothing: its targets are not measured, never met
    assert got["publish: amqwire blocking publishes at >= 80% of the bare publisher"][0] == "n/a"


def test_behind_an_anchor_is_missed():
    got = verdicts({"publish: bare publisher (limit)": [100.0], "publish: amqwire asyncio": [40.0],
                    "publish: rbfly": [41.0]})
    assert got["publish: amqwire asyncio ahead of rbfly"][0] == "MISSED"
    assert got["publish: amqwire asyncio publishes at >= 80% of the bare publisher"][0] == "MISSED"


@pytest.mark.parametrize("bad", ["--count=0", "--repeats=-1", "--batch=0"])
def test_bad_numbers_are_usage_errors(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main([bad])
    assert exit_.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
