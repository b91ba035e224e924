"""``amqwire perf`` with a ``rabbitmq-stream://`` URL (cli/perf_stream.py), run as a user runs it, in
a subprocess, against this module's private node with the stream plugin (never the shared
broker, which has none).  Every subprocess has a timeout; streams are uniquely named."""
import datetime
import json
import uuid

import pytest

from test_cli import RATE_LINE, amqwire, ok

pytestmark = pytest.mark.timeout(120)


def name(prefix="perf"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def stream_exists(url, stream):
    from amqwire.client import stream as s

    with s.connect(url) as conn:
        return conn.stream_exists(stream)


def test_a_count_on_one_new_stream_every_consumer_reads_every_message_and_the_stream_goes(stream_url, tmp_path):
    report = tmp_path / "perf.json"
    out = ok(amqwire("perf", "-x", "2", "-y", "2", "-C", "2000", "-s", "100", "-bs", "50", "-c", "500",
                     "--json", str(report), url=stream_url, timeout=90)).decode()
    assert "sending rate avg:" in out and "receiving rate avg:" in out and "consumer latency" in out, out
    result = json.loads(report.read_text())
    summary, settings = result["summary"], result["settings"]
    assert summary["stopped"] == "all messages received", summary
    # two producers of 2,000 into one stream; each of the two consumers reads all 4,000
    assert (summary["sent"], summary["confirmed"], summary["nacked"], summary["received"]) == (4000, 4000, 0, 8000)
    assert 0 <= summary["latency_us"]["min"] <= summary["latency_us"]["99th"]
    assert settings["protocol"] == "stream" and settings["batch_size"] == 50 and settings["confirm"] == 500
    assert settings["size"] == 100 and settings["offset"] == "next" and len(settings["streams"]) == 1
    for sample in result["samples"]:
        assert {"time", "sent", "confirmed", "nacked", "received", "latency_us"} <= set(sample)
    # a stream the run named itself is deleted at the end
    assert not stream_exists(stream_url, settings["streams"][0])


def test_named_streams_are_kept_then_read_from_the_first_offset_and_deleted(stream_url, tmp_path):
    base = name()
    report = tmp_path / "first.json"
    ok(amqwire("perf", "-st", base, "-sc", "2", "-x", "2", "-y", "2", "-C", "500", "--json", str(report),
               url=stream_url, timeout=90))
    summary = json.loads(report.read_text())["summary"]
    # producer 1 and consumer 1 on <base>-1, producer 2 and consumer 2 on <base>-2
    assert (summary["sent"], summary["confirmed"], summary["received"]) == (1000, 1000, 1000), summary
    assert stream_exists(stream_url, f"{base}-1") and stream_exists(stream_url, f"{base}-2")

    again = tmp_path / "again.json"
    out = ok(amqwire("perf", "--streams", f"{base}-1,{base}-2", "--producers", "0", "--consumers", "2",
                     "--offset", "first", "--time", "2", "--delete-streams", "--json", str(again),
                     url=stream_url, timeout=60)).decode()
    summary = json.loads(again.read_text())["summary"]
    assert summary["stopped"] == "time limit reached" and summary["received"] == 1000 and summary["sent"] == 0, out
    assert not stream_exists(stream_url, f"{base}-1") and not stream_exists(stream_url, f"{base}-2")


def test_a_timed_run_at_a_rate_prints_a_line_each_second(stream_url):
    out = ok(amqwire("perf", "-z", "3", "-r", "300", url=stream_url, timeout=60)).decode()
    lines = [line for line in out.splitlines() if line.startswith(RATE_LINE)]
    assert 2 <= len(lines) <= 4, out
    assert "confirmed:" in lines[0] and "received:" in lines[0] and "consumer latency" in lines[-1], out
    assert "test stopped (time limit reached)" in out
    sent = int(out.split("sent ")[1].split(",")[0])
    assert 0 < sent <= 1000, out  # paced at 300 msg/s for 3 s: never more than about 900


def test_sub_entries_compressed_with_gzip_arrive_whole(stream_url, tmp_path):
    report = tmp_path / "perf.json"
    ok(amqwire("perf", "-x", "1", "-y", "1", "-C", "1000", "-s", "200", "-ses", "10", "-co", "gzip", "-bs", "20",
               "--json", str(report), url=stream_url, timeout=60))
    result = json.loads(report.read_text())
    summary = result["summary"]
    assert (summary["sent"], summary["confirmed"], summary["received"]) == (1000, 1000, 1000), summary
    assert summary["latency_us"], summary  # every body came back with its stamp, decompressed
    assert (result["settings"]["sub_entry_size"], result["settings"]["compression"]) == (10, "gzip")


def test_store_every_stores_the_consumers_offset_under_its_name(stream_url):
    from amqwire.client import stream as s

    stream = name()
    ok(amqwire("perf", "-st", stream, "-x", "1", "-y", "1", "-C", "1000", "-se", "100", "-cn", "%s-reader",
               "--delete-streams", url=stream_url, timeout=60))
    assert not stream_exists(stream_url, stream)
    stream = name()
    ok(amqwire("perf", "-st", stream, "-x", "1", "-y", "1", "-C", "1000", "-se", "100", "-cn", "%s-reader",
               url=stream_url, timeout=60))
    with s.connect(stream_url) as conn:
        try:
            # the offset of the 1,000th message: offsets are not message counts, the broker's
            # tracking entries (the stored offsets themselves) take offsets of their own
            with conn.consumer(stream, offset="first") as consumer:
                last = [consumer.get(10) for _ in range(1000)][-1]
            assert last is not None and conn.query_offset(stream, f"{stream}-reader") == last.offset >= 999
        finally:
            conn.delete_stream(stream)


@pytest.mark.parametrize("args, message", [
    (["-u", "q"], b"-u/--queue (use --streams): AMQP 0-9-1 flags, not for a rabbitmq-stream:// URL"),
    (["-q", "10", "-a"], b"-q/--qos, -a/--autoack: AMQP 0-9-1 flags"),
    (["-co", "gzip"], b"--compression compresses sub-entries: give --sub-entry-size above 1 too"),
    (["-ses", "10", "-co", "lz4"], b"--compression lz4: amqwire's codec writes gzip and zstd sub-entries only"),
    (["-o", "yesterday"], b"--offset: expected first, last, next, an offset or an ISO 8601 time, not 'yesterday'"),
    (["-bs", "70000"], b"--batch-size: at most 65535"),
    (["-pn", "%d-%d-%d"], b"a name pattern takes the stream (%s) and the number (%d)"),
])
def test_bad_stream_flags_are_one_line_exit_2_before_connecting(args, message):
    # port 1: nothing listens there, so an error that reached the connection would say so
    result = amqwire("perf", *args, url="rabbitmq-stream://guest:guest@127.0.0.1:1/")
    assert result.returncode == 2 and message in result.stderr and result.stderr.count(b"\n") == 1, result.stderr


def test_stream_flags_need_a_stream_url_and_other_commands_refuse_one():
    result = amqwire("perf", "-st", "s", "-ds", url="amqp://guest:guest@127.0.0.1:1/")
    assert result.returncode == 2 and result.stderr == (
        b"amqwire: error: --streams, --delete-streams: stream protocol flags, for a rabbitmq-stream:// URL\n")
    result = amqwire("get", "q", url="rabbitmq-stream://guest:secret-pw@127.0.0.1:1/")
    assert result.returncode == 2 and result.stderr == (
        b"amqwire: error: get speaks AMQP 0-9-1 (an amqp:// URL): only perf takes a rabbitmq-stream:// URL\n")
    bad = amqwire("perf", url="rabbitmq-stream://guest:secret-pw@127.0.0.1:99999/")
    assert bad.returncode == 2 and b"bad URL" in bad.stderr and b"secret-pw" not in bad.stderr


def test_unreachable_is_one_line_exit_1_without_the_password():
    result = amqwire("perf", "-z", "1", "--connect-timeout", "2", url="rabbitmq-stream://guest:secret-pw@127.0.0.1:1/")
    assert result.returncode == 1 and result.stderr.count(b"\n") == 1 and b"secret-pw" not in result.stderr


def test_the_value_parsers():
    from amqwire.cli import perf_stream as p
    from amqwire.cli.settings import UsageError

    assert p.byte_capacity("20gb", "-mlb") == 20_000_000_000 and p.byte_capacity("500MB", "-x") == 500_000_000
    assert p.byte_capacity("1234", "-x") == 1234 and p.byte_capacity("0", "-x") == 0
    assert p.max_age("PT10M30S") == "630s" and p.max_age("P5DT8H") == f"{(5 * 24 + 8) * 3600}s"
    assert p.max_age("7D") == "7D" and p.max_age("12h") == "12h"
    assert p.offset(None) == "next" and p.offset("first") == "first" and p.offset("42") == 42
    assert p.offset("2026-11-28T07:45:54Z") == datetime.datetime(2026, 11, 28, 7, 45, 54, tzinfo=datetime.timezone.utc)
    assert p.offset("2026-11-28T07:45:54").tzinfo == datetime.timezone.utc
    for bad in (lambda: p.byte_capacity("lots", "-mlb"), lambda: p.max_age("PT"), lambda: p.max_age("0D"),
                lambda: p.offset("-1")):
        with pytest.raises(UsageError):
            bad()
