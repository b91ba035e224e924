"""The main job as a user runs it: ``python -m amqwire.spark.demo`` in its own process
(its own local Spark), against the real broker."""
import os
import subprocess
import sys

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


def test_demo_publishes_generated_rows_and_reports(amqp_url, names, tmp_path):
    queue = names.queue()
    done = run_demo("--rows", "5000", "--queue", queue, "--url", amqp_url, "--partitions", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "published 5,000 rows in" in done.stdout
    assert "rows/s" in done.stdout
    assert f"queue {queue!r} holds 5,000 messages" in done.stdout
    assert queue_count(amqp_url, queue) == 5000


def test_demo_publishes_a_parquet_file_after_purging(amqp_url, names, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amqwire.client import connect

    path = tmp_path / "orders.parquet"
    pq.write_table(pa.table({"order_id": list(range(300)), "sku": [f"s{i}" for i in range(300)]}), path)
    queue = names.queue()
    with connect(amqp_url) as conn, conn.channel() as ch:  # left over from an earlier run
        ch.queue_declare(queue)
        ch.basic_publish("", queue, b"stale")
    done = run_demo("--input", str(path), "--queue", queue, "--url", amqp_url, "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    assert queue_count(amqp_url, queue) == 300
    import json

    with connect(amqp_url) as conn, conn.channel() as ch:
        message = ch.basic_get(queue, no_ack=True)
    row = json.loads(message.body)
    assert set(row) == {"order_id", "sku"} and row["sku"] == f"s{row['order_id']}"


@pytest.mark.parametrize("args, expected", [
    (["--url", "http://localhost/"], "URL scheme must be amqp or amqps"),
    (["--rows", "-1"], "--rows must be >= 0"),
    (["--url", "amqp://guest:guest@127.0.0.1:1/"], "error: "),
])
def test_demo_refuses_bad_arguments_before_starting_spark(args, expected):
    done = run_demo(*args, timeout=60)
    assert done.returncode != 0
    assert expected in done.stderr
    assert "spark" not in done.stdout.lower()
