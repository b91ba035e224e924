"""bench/charts.py: the benchmark results drawn as SVG from the scripts' JSON, which stays out of the repository."""
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench import charts  # noqa: E402  (bench/ is not installed: it lives beside the tests)

sys.path.pop(0)

CODEC_DOC = {
    "timestamp": "2026-11-22T21:00:00", "loadavg_start": [0.9, 0.8, 0.7], "loadavg_end": [1.2, 0.9, 0.7],
    "cpus": 2, "repeats": 7, "versions": {"python": "3.11.7 (CPython)"},
    "results": [
        {"case": "a", "title": "(a) encode one publish", "row": "amqwire", "lib": "amqwire", "available": True,
         "ns_best": 146.0, "ns_median": 162.0},
        {"case": "a", "title": "(a) encode one publish", "row": "pika", "lib": "pika", "available": True,
         "ns_best": 7108.0, "ns_median": 7300.0},
        {"case": "a", "title": "(a) encode one publish", "row": "pamqp", "lib": "pamqp", "available": False,
         "ns_best": None, "ns_median": None},
        {"case": "c", "title": "(c) decode deliveries", "row": "amqwire", "lib": "amqwire", "available": True,
         "ns_best": 360.0, "ns_median": 401.0},
    ],
}
CLIENT_DOC = {
    "timestamp": "2026-11-22T21:00:00", "loadavg_start": [0.1, 0.1, 0.1], "cpus": 2, "count": 5000, "repeats": 1,
    "results": [
        {"case": "publish", "row": "raw socket", "lib": "raw", "best_msg_s": 47227.0, "median_msg_s": 47000.0},
        {"case": "publish", "row": "amqwire blocking", "lib": "amqwire", "best_msg_s": 40901.0,
         "median_msg_s": 40378.0},
        {"case": "publish", "row": "pika", "lib": "pika", "best_msg_s": None, "median_msg_s": None, "na": "absent"},
    ],
}
STREAM_DOC = {
    "timestamp": "2026-11-22T21:00:00", "loadavg_start": [0.1, 0.1, 0.1], "cpus": 2, "count": 20000, "repeats": 1,
    "results": [
        {"case": "read", "row": "bare stream reader (limit)", "lib": "bare", "best_msg_s": 410000.0,
         "median_msg_s": 400000.0},
        {"case": "read", "row": "amqwire blocking", "lib": "amqwire", "best_msg_s": 330000.0, "median_msg_s": 320000.0},
        {"case": "publish", "row": "rbfly", "lib": "rbfly", "best_msg_s": None, "median_msg_s": None,
         "na": "n/a: rbfly is not installed"},
        {"case": "publish", "row": "amqwire asyncio", "lib": "amqwire", "best_msg_s": 300000.0,
         "median_msg_s": 290000.0},
    ],
}


@pytest.mark.parametrize("kind, doc", [("codec", CODEC_DOC), ("client", CLIENT_DOC), ("stream", STREAM_DOC)])
def test_one_svg_is_written(tmp_path, kind, doc):
    paths = charts.chart(kind, doc, tmp_path / "sub" / kind)
    assert [p.name for p in paths] == [f"{kind}.svg"]
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == [f"{kind}.svg"]
    svg = paths[0].read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    # text is text (searchable, and far smaller than glyph outlines)
    assert "<text" in svg and "load average" in svg and "run finished 2026-11-22 21:00:00" in svg


def test_raw_results_go_to_the_cache_by_default_never_the_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    saved = charts.save_results("codec", CODEC_DOC)
    assert saved.parent == tmp_path / "cache" / "amqwire" / "bench" and saved.name.startswith("codec-")
    assert json.loads(saved.read_text())["results"] == CODEC_DOC["results"]
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert charts.results_dir() == tmp_path / "home" / ".cache" / "amqwire" / "bench"
    assert charts.results_dir(tmp_path / "mine") == tmp_path / "mine"
    assert charts.save_results("codec", CODEC_DOC, json_path=tmp_path / "exact.json") == tmp_path / "exact.json"


def test_a_bench_run_writes_what_its_options_ask_for(tmp_path, monkeypatch):
    import argparse

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ap = argparse.ArgumentParser()
    charts.add_output_options(ap)
    charts.write_outputs("client", CLIENT_DOC, ap.parse_args(["--chart", str(tmp_path / "charts" / "client")]))
    assert [p.name for p in (tmp_path / "charts").iterdir()] == ["client.svg"]
    assert len(list((tmp_path / "cache" / "amqwire" / "bench").glob("client-*.json"))) == 1
    charts.write_outputs("client", CLIENT_DOC, ap.parse_args(["--results", str(tmp_path / "raw")]))
    assert len(list((tmp_path / "raw").glob("client-*.json"))) == 1
    assert not (tmp_path / "raw" / "client.svg").exists()


def test_the_repository_keeps_svg_charts_only():
    assert not (REPO / "bench" / "charts").exists()
    shown = sorted(p.name for p in (REPO / "docs" / "charts").iterdir())
    assert all(name.endswith(".svg") for name in shown), shown
    assert {"client.svg", "codec.svg", "spark.svg"} <= set(shown), shown
    pages = {page.name: page.read_text() for page in (REPO / "docs").glob("*.md")}
    for name in ("client.svg", "codec.svg", "spark.svg"):
        assert f"](charts/{name})" in pages["benchmarks.md"], name
    for name in shown:  # every chart kept is one a page shows
        assert any(f"](charts/{name})" in text for text in pages.values()), name


def test_panels_keep_what_ran_and_drop_what_did_not():
    panels = charts.codec_panels(CODEC_DOC)
    assert [name for name, _ in panels] == ["(a) encode one publish", "(c) decode deliveries"]
    assert [(b.label, b.kind) for b in panels[0][1]] == [("amqwire", "amqwire"), ("pika", "other")]
    rates = charts.rate_panels(CLIENT_DOC, "case", "best_msg_s", "median_msg_s")
    assert [(b.label, b.kind, b.best) for b in rates[0][1]] == [
        ("raw socket", "limit", 47227.0), ("amqwire blocking", "amqwire", 40901.0)]


def test_the_command_line_renders_a_saved_run(tmp_path):
    saved = tmp_path / "codec.json"
    saved.write_text(json.dumps(CODEC_DOC))
    assert charts.main(["codec", str(saved), str(tmp_path / "out")]) == 0
    assert (tmp_path / "out.svg").exists() and not (tmp_path / "out.png").exists()
    with pytest.raises(ValueError):
        charts.chart("codec", dict(CODEC_DOC, results=[]), tmp_path / "none")


def test_compiled_clients_get_their_own_colour():
    assert charts._kind("rabbitmq-c", "rabbitmq-c (C)") == "compiled"
    assert charts._kind("amqp091-go", "amqp091-go (Go)") == "compiled"
    assert charts._kind("pika", "pika") == "other"
