"""amqwire.spark on a real Spark standalone cluster: a master and two workers started on this
machine from the pyspark wheel's own scripts (``spark-class ...deploy.master.Master`` /
``...deploy.worker.Worker``; 1 core and 512 MB per worker, free ports, logs and work dirs
under tmp, stopped afterwards even on failure), and a driver program (tests/spark_jobs.py)
run in its own process with ``--master spark://...``, as a user's job is.

The job publishes through the "amqp" data source (batch and a three-micro-batch stream)
and through ``to_amqp_frames`` run on the executors; each test then reads its queue back
and finds every row's distinct body exactly once.  One cluster and one job run serve the
three tests (Spark's start-up dominates their time)."""
import os
import sys

import pytest

from spark_daemons import Standalone, assert_every_row_once, delete_queues, prepare, run_job

ROWS = 3000

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = Standalone(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    try:
        cluster.start(wait=False)  # the job's driver starts while the workers do
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster_job(standalone, amqp_url, stream_node, tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster-job")
    prefix, stream_dir = prepare(amqp_url, directory, ROWS)
    # the executors run on this machine: PYSPARK_PYTHON is this venv's python, as a cluster
    # whose nodes have amqwire installed would set it (docs/spark.md, "On a cluster")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = run_job(["--master", standalone.url], amqp_url, prefix, ROWS, stream_dir, directory, env,
                   stream_url=stream_node.stream_url)
    standalone.wait_for_workers()  # a worker that failed to start shows its log here
    try:
        yield done, prefix
    finally:
        delete_queues(amqp_url, prefix)


def job_step(done, standalone, step):
    assert f"done {step}" in done.stdout, (
        f"the driver failed before finishing {step} (exit {done.returncode}):\n{done.stdout[-1500:]}\n"
        f"{done.stderr[-5000:]}\n" + "\n".join(f"--- {d.name}\n{d.tail(1500)}" for d in standalone.daemons))


def test_cluster_has_two_workers_and_the_job_ran_there(standalone, cluster_job):
    done, _ = cluster_job
    assert standalone.alive_workers() == 2
    assert "spark 4" in done.stdout and standalone.url in done.stdout, done.stdout + done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-5000:]


@pytest.mark.parametrize("step", ["batch", "stream", "frames"])
def test_cluster_publishes_every_row(standalone, cluster_job, amqp_url, step):
    done, prefix = cluster_job
    job_step(done, standalone, step)
    assert_every_row_once(amqp_url, prefix, step, ROWS)


def test_cluster_reads_a_stream(standalone, cluster_job):
    """spark.read.format("amqp") on the workers: every offset of the stream once."""
    done, _ = cluster_job
    job_step(done, standalone, f"read {ROWS}")


def test_cluster_writes_and_reads_over_the_stream_protocol(standalone, cluster_job):
    """The same write twice under one producerName, then a read, over the stream protocol
    on the workers (a private node with the stream plugin): every row once."""
    done, _ = cluster_job
    job_step(done, standalone, f"stream-protocol {ROWS}")
