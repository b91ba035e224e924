"""Spark's own daemons on this machine, for tests/test_spark_cluster.py and
tests/test_spark_connect.py: a standalone master with workers, and a Spark Connect server.
Each runs from the scripts and jars that ship with the pyspark wheel, on free ports, with
its logs and work dirs under the given directory, in its own process group so that
stopping it also stops what it started (executors, Python workers)."""
from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Optional


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_log4j(directory: Path) -> Path:
    path = directory / "log4j2.properties"
    path.write_text("rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
                    "appender.console.type = Console\nappender.console.name = console\n"
                    "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                    "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n")
    return path


def daemon_env(directory: Path) -> dict:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=spark_home(),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        SPARK_LOG_DIR=str(directory),
        SPARK_PID_DIR=str(directory),
        PYSPARK_PYTHON=sys.executable,  # the executors run this venv's python: amqwire is in it
        SPARK_DAEMON_JAVA_OPTS=f"-Dlog4j2.configurationFile={quiet_log4j(directory)}",
    )
    return env


class Daemon:
    """One JVM started with a Spark script, its output in ``<directory>/<name>.log``."""

    def __init__(self, name: str, args: list, directory: Path, env: dict) -> None:
        self.name = name
        self.log = directory / f"{name}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            cwd=directory, start_new_session=True)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")

    def tail(self, size: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            except ProcessLookupError:
                pass


def wait_for(what: str, ready, daemons: list, timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for daemon in daemons:
            daemon.check_alive()
        if ready():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout:.0f} s:\n"
                               + "\n".join(f"--- {d.name}\n{d.tail(1500)}" for d in daemons))
        time.sleep(0.5)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Standalone:
    """A standalone master and ``workers`` workers (1 core, 512 MB each)."""

    def __init__(self, directory: Path, workers: int = 2) -> None:
        self.directory = directory
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.daemons: list = []
        self.workers = workers

    def start(self, wait: bool = True) -> "Standalone":
        """Starts the master and the workers; with ``wait``, returns once every worker has
        registered (without, a driver started meanwhile waits for them itself, and the
        JVMs start side by side)."""
        env = daemon_env(self.directory)
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        self.daemons.append(Daemon("master", [
            spark_class, "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port)],
            self.directory, env))
        wait_for("the master", lambda: listening(self.port), self.daemons)
        for i in range(self.workers):
            work = self.directory / f"worker{i}"
            work.mkdir()
            self.daemons.append(Daemon(f"worker{i}", [
                spark_class, "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
                "--cores", "1", "--memory", "512m", "--work-dir", str(work), self.url],
                self.directory, env))
        if wait:
            self.wait_for_workers()
        return self

    def wait_for_workers(self) -> None:
        wait_for(f"{self.workers} workers", lambda: self.alive_workers() == self.workers, self.daemons)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as reply:
                state = json.load(reply)
        except (OSError, ValueError):
            return 0
        return int(state.get("aliveworkers", 0))

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


class ConnectServer:
    """``start-connect-server.sh``'s class, in the foreground, on ``local[2]``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.daemon = None

    def start(self) -> "ConnectServer":
        env = daemon_env(self.directory)
        del env["SPARK_DAEMON_MEMORY"]  # it is this server's driver: --driver-memory sizes it
        log4j = quiet_log4j(self.directory)
        self.daemon = Daemon("connect", [
            os.path.join(spark_home(), "bin", "spark-submit"),
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "Spark Connect server", "--master", "local[2]",
            "--driver-memory", "768m",
            "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile={log4j}",
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2",
            "--conf", "spark.task.maxFailures=1",
            "spark-internal"],
            self.directory, env)
        wait_for("the Spark Connect server", lambda: listening(self.port), [self.daemon])
        return self

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()


# --------------------------------------------------------------------------- the job and its checks

JOB = Path(__file__).resolve().parent / "spark_jobs.py"
KINDS = ("batch", "stream", "frames")
SOURCE = "read"  # a stream queue, filled by prepare(), that the job reads with spark.read.format("amqp")


def prepare(amqp_url: str, directory: Path, rows: int) -> tuple:
    """Three fresh queues, a stream of ``rows`` messages (``read-<i>`` at offset i) and three
    Parquet files for the streaming step: (prefix, stream_dir)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amqwire.client import connect

    prefix = f"amqwire-test-{uuid.uuid4().hex[:10]}"
    with connect(amqp_url) as conn, conn.channel() as ch:
        for kind in KINDS:
            ch.queue_declare(f"{prefix}.{kind}")
        ch.queue_declare(f"{prefix}.{SOURCE}", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_select()
        for i in range(rows):
            ch.publish_async("", f"{prefix}.{SOURCE}", f"{SOURCE}-{i}".encode())
        ch.wait_for_confirms(timeout=60)
    stream_dir = directory / "stream-in"
    stream_dir.mkdir()
    third = rows // 3
    for part, start in enumerate(range(0, rows, third)):
        ids = list(range(start, min(start + third, rows)))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), stream_dir / f"part-{part}.parquet")
    return prefix, stream_dir


def run_job(where: list, amqp_url: str, prefix: str, rows: int, stream_dir: Path, directory: Path,
            env: dict, timeout: float = 300, stream_url: Optional[str] = None) -> subprocess.CompletedProcess:
    extra = ["--stream-url", stream_url] if stream_url else []
    return subprocess.run(
        [sys.executable, str(JOB), *where, "--amqp-url", amqp_url, "--queue-prefix", prefix,
         "--rows", str(rows), "--stream-dir", str(stream_dir), "--checkpoint", str(directory / "checkpoint"), *extra],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=directory)


def bodies(amqp_url: str, queue: str, expect: int, timeout: float = 60.0) -> collections.Counter:
    """Every message body in ``queue``, consumed; waits for ``expect`` of them, then one
    second more so that extra ones show up too."""
    from amqwire.client import connect

    got: collections.Counter = collections.Counter()
    deadline = time.monotonic() + timeout
    with connect(amqp_url) as conn, conn.channel() as ch:
        ch.basic_qos(prefetch_count=1000)
        consumer = ch.consume(queue, no_ack=True)
        while True:
            short = sum(got.values()) < expect
            if short and time.monotonic() > deadline:
                break
            message = consumer.get(timeout=5.0 if short else 1.0)
            if message is None:
                if short:
                    continue
                break
            got[bytes(message.body)] += 1
        consumer.cancel()
    return got


def delete_queues(amqp_url: str, prefix: str) -> None:
    from amqwire.client import connect

    with connect(amqp_url) as conn, conn.channel() as ch:
        for kind in (*KINDS, SOURCE):
            ch.queue_delete(f"{prefix}.{kind}")


def assert_every_row_once(amqp_url: str, prefix: str, kind: str, rows: int) -> None:
    got = bodies(amqp_url, f"{prefix}.{kind}", rows)
    want = collections.Counter(f"{kind}-{i}".encode() for i in range(rows))
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"{kind}: {sum(got.values())} messages for {rows} rows; missing {len(missing)} "
        f"(e.g. {sorted(missing)[:5]}), unexpected or duplicated {len(extra)} (e.g. {sorted(extra)[:5]})")
