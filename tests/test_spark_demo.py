"""The main job as a user runs it: ``python -m amqwire.spark.demo`` in its own process
(its own local Spark), against the real broker."""
import os
import re
import subprocess
import sys
import time

import pytest


def run_demo(*args, env=None, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "amqwire.spark.demo", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


def queue_count(url, queue):
    from amqwire.client import connect

    with connect(url) as conn, conn.channel() as ch:
        return ch.queue_declare(queue, passive=True).message_count


@pytest.mark.timeout(300)  # a whole Spark start-up and job in a subprocess (run_demo's 240 s)
def test_demo_publishes_generated_rows_keeps_what_was_there_and_reports(amqp_url, names, tmp_path):
    from amqwire.client import connect

    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:  # left over from an earlier run
        ch.queue_declare(queue)
        ch.basic_publish("", queue, b"earlier")
    done = run_demo("--rows", "5000", "--queue", queue, "--url", amqp_url, "--partitions", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"queue {queue!r} already holds 1 messages: kept (--purge empties it first)" in done.stdout
    assert "published 5,000 rows in" in done.stdout
    assert "rows/s" in done.stdout
    assert f"queue {queue!r} holds 5,001 messages; to remove them: rabbitmqctl purge_queue {queue}" in done.stdout
    assert queue_count(amqp_url, queue) == 5001
    # stderr is a pipe here: progress comes as whole lines, never redrawn, never 0 rows
    assert "\r" not in done.stderr
    assert not re.search(r"^\s+0 ", done.stderr, flags=re.M), done.stderr
    # Spark's start-up chatter is silenced (the JVM's own incubator-module notice aside)
    noise = [line for line in done.stderr.splitlines()
             if re.search(r"\bWARN\b|log4j|Setting default log level|setLogLevel", line)]
    assert not noise, done.stderr[-3000:]


@pytest.mark.timeout(300)  # a whole Spark start-up and job in a subprocess (run_demo's 240 s)
def test_demo_publishes_a_parquet_file_after_purging_on_request(amqp_url, names, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amqwire.client import connect

    path = tmp_path / "orders.parquet"
    pq.write_table(pa.table({"order_id": list(range(300)), "sku": [f"s{i}" for i in range(300)]}), path)
    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:  # left over from an earlier run
        ch.queue_declare(queue)
        ch.basic_publish("", queue, b"stale")
        ch.basic_publish("", queue, b"stale")
    done = run_demo("--input", str(path), "--queue", queue, "--url", amqp_url, "--quiet", "--purge")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"purged 2 messages from queue {queue!r} (--purge)" in done.stdout
    assert queue_count(amqp_url, queue) == 300
    import json

    with connect(amqp_url) as conn, conn.channel() as ch:
        message = ch.basic_get(queue, no_ack=True)
    row = json.loads(message.body)
    assert set(row) == {"order_id", "sku"} and row["sku"] == f"s{row['order_id']}"


def test_progress_lines_off_a_terminal(amqp_url, names, capsys):
    """Off a terminal, progress is a new line per interval, none before the first rows."""
    from amqwire.client import connect
    from amqwire.spark.demo import Progress

    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.queue_declare(queue)
        progress = Progress(amqp_url, queue, 10, 0, enabled=True, tty=False)
        progress.every = 0.05
        with progress:
            time.sleep(0.5)  # polls that find nothing draw nothing
            assert capsys.readouterr().err == ""
            for i in range(10):
                ch.basic_publish("", queue, b"%d" % i)
            err = ""
            deadline = time.monotonic() + 30
            while err.count("10 / 10 rows") < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
                err += capsys.readouterr().err
    err += capsys.readouterr().err
    assert err.count("10 / 10 rows") >= 2, err
    assert "\r" not in err and err.endswith("\n")
    assert all(line.startswith("  [#") for line in err.splitlines()), err


def test_demo_help_names_bash_spark_run():
    done = run_demo("--help", timeout=60)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: bash spark/run")
    for option in ("--rows", "--input", "--format", "--url", "--queue", "--keep", "--purge", "--durable",
                   "--master", "--partitions", "--confirm-window", "--quiet"):
        assert option in done.stdout


@pytest.mark.parametrize("args, expected", [
    (["--url", "http://localhost/"], "URL scheme must be amqp or amqps"),
    (["--rows", "-1"], "bash spark/run: error: --rows must be >= 0"),
    (["--input", "/nonexistent/orders.parquet"],
     "bash spark/run: error: --input /nonexistent/orders.parquet: no such file or directory"),
    (["--keep", "--purge"], "not allowed with argument"),
    (["--url", "amqp://guest:guest@127.0.0.1:1/"], "error: "),
])
def test_demo_refuses_bad_arguments_before_starting_spark(args, expected):
    done = run_demo(*args, timeout=60)
    assert done.returncode != 0
    assert expected in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line, no traceback
    assert "spark" not in done.stdout.lower()


@pytest.mark.timeout(600)  # two whole Spark start-ups and jobs in subprocesses
def test_demo_writes_a_stream_over_the_stream_protocol_once_per_producer_name(stream_node, stream_url):
    from amqwire.client import stream

    name = f"demo-{os.getpid()}-{time.time_ns()}"
    args = ("--rows", "3000", "--url", stream_url, "--queue", name, "--producer-name", "demo-run", "--quiet")
    done = run_demo(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(stream protocol)" in done.stdout and "published 3,000 rows in" in done.stdout, done.stdout
    assert "each stored once, by deduplication" in done.stdout
    again = run_demo(*args)  # the same producer name: nothing stored twice
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"stream {name!r} already holds 3,000 messages: kept" in again.stdout, again.stdout
    with stream.connect(stream_url) as conn:
        found = conn.stream_stats(name)
        assert (found.first_offset, found.last_offset) == (0, 2999)
        conn.delete_stream(name)
