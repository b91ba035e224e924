"""amqwire.spark over Spark Connect: a local Spark Connect server (the class that
pyspark's ``sbin/start-connect-server.sh`` starts, from the connect jar in the wheel; on
``local[2]``, its Python workers running this venv's python) and a client program
(tests/spark_jobs.py with ``--remote sc://...``) that registers the "amqp" data source and
writes through ``SparkSession.builder.remote(...)``: batch, a three-micro-batch stream, and
``to_amqp_frames``.  Each test reads its queue back and finds every row's distinct body
exactly once.  One server and one client run serve the tests."""
import os

import pytest

from spark_daemons import ConnectServer, assert_every_row_once, delete_queues, prepare, run_job

ROWS = 3000

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    server = ConnectServer(tmp_path_factory.mktemp("spark-connect"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def connect_job(connect_server, amqp_url, stream_node, tmp_path_factory):
    directory = tmp_path_factory.mktemp("connect-job")
    prefix, stream_dir = prepare(amqp_url, directory, ROWS)
    # a client only: no JVM, no PYSPARK_PYTHON of its own (the server picks its workers' python)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    done = run_job(["--remote", connect_server.url], amqp_url, prefix, ROWS, stream_dir, directory, env,
                   stream_url=stream_node.stream_url)
    try:
        yield done, prefix
    finally:
        delete_queues(amqp_url, prefix)


def test_connect_client_ran_without_a_jvm(connect_job):
    done, _ = connect_job
    assert "connect sc://127.0.0.1:" in done.stdout, done.stdout + done.stderr[-5000:]
    assert done.returncode == 0, done.stderr[-5000:]


@pytest.mark.parametrize("step", ["batch", "stream", "frames"])
def test_connect_publishes_every_row(connect_server, connect_job, amqp_url, step):
    done, prefix = connect_job
    assert f"done {step}" in done.stdout, (
        f"the client failed before finishing {step} (exit {done.returncode}):\n{done.stdout[-1500:]}\n"
        f"{done.stderr[-5000:]}\n--- server\n{connect_server.daemon.tail(3000)}")
    assert_every_row_once(amqp_url, prefix, step, ROWS)


def test_connect_reads_a_stream(connect_server, connect_job):
    """spark.read.format("amqp") through Spark Connect: every offset of the stream once."""
    done, _ = connect_job
    assert f"done read {ROWS}" in done.stdout, (
        f"the client failed before finishing the read (exit {done.returncode}):\n{done.stdout[-1500:]}\n"
        f"{done.stderr[-5000:]}\n--- server\n{connect_server.daemon.tail(3000)}")


def test_connect_writes_and_reads_over_the_stream_protocol(connect_server, connect_job):
    """The same write twice under one producerName, then a read, over the stream protocol
    through Spark Connect (a private node with the stream plugin): every row once."""
    done, _ = connect_job
    assert f"done stream-protocol {ROWS}" in done.stdout, (
        f"the client failed before the stream-protocol step (exit {done.returncode}):\n{done.stdout[-1500:]}\n"
        f"{done.stderr[-5000:]}\n--- server\n{connect_server.daemon.tail(3000)}")
