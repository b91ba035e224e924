"""tests/ensure_rabbitmq.sh (run by tests/run and by spark/run, the main job) starts a
broker only on this machine's default port: for another port or host, or a name that does
not resolve, it says so in one line and exits 1, starting nothing."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "ensure_rabbitmq.sh"


def _ensure(url: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, AMQP_URL=url)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30)


def _broker_processes() -> int:
    found = subprocess.run(["pgrep", "-c", "-f", "rabbitmq-server -detached"], capture_output=True, text=True)
    return int(found.stdout.strip() or 0)


def test_a_local_port_that_is_not_the_default_is_refused_and_nothing_is_started():
    before = _broker_processes()
    result = _ensure("amqp://127.0.0.1:1/")
    assert result.returncode == 1
    assert "nothing listens on 127.0.0.1:1" in result.stderr and "only for the default port 5672" in result.stderr
    assert "starting" not in result.stdout
    assert _broker_processes() == before


def test_a_name_that_does_not_resolve_says_so_without_the_password():
    result = _ensure("amqp://guest:s3cret@no-such-host.invalid:5672/")
    assert result.returncode == 1
    assert "no-such-host.invalid does not resolve" in result.stderr
    assert "s3cret" not in result.stderr + result.stdout


def test_the_default_broker_is_found_where_it_listens():
    result = _ensure("amqp://guest:guest@127.0.0.1:5672/")
    assert result.returncode == 0, result.stderr
    assert "listening on 127.0.0.1:5672" in result.stdout
