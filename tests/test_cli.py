"""The ``amqwire`` command against the shared broker, run as a user runs it: in a subprocess,
as ``python -m amqwire``, ``python -m amqwire.cli`` and the installed console script.

Every subprocess has a timeout; every queue is uniquely named and deleted afterwards."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TCPProxy, url_credentials, url_host_port

SCRIPT = Path(sys.executable).parent / "amqwire"
TIMEOUT = 30


def amqwire(*args, url=None, stdin=None, env=None, how="module", timeout=TIMEOUT):
    """Run the command; returns the CompletedProcess (stdout as bytes)."""
    prefixes = {"module": [sys.executable, "-m", "amqwire"], "cli": [sys.executable, "-m", "amqwire.cli"],
                "script": [str(SCRIPT)]}
    command = [*prefixes[how], *args]
    if url is not None:
        command += ["--url", url]
    environment = {k: v for k, v in os.environ.items() if k not in ("AMQP_URL", "AMQP_PASSWORD")}
    environment.update(env or {})
    return subprocess.run(command, input=stdin, capture_output=True, env=environment, timeout=timeout)


def ok(result):
    assert result.returncode == 0, (result.returncode, result.stderr.decode(errors="replace"))
    return result.stdout


def test_the_three_ways_to_run_it_show_every_subcommand():
    assert SCRIPT.exists(), "the wheel installs the amqwire console script"
    for how in ("module", "cli", "script"):
        usage = ok(amqwire("--help", how=how)).decode()
        for command in ("publish", "get", "consume", "declare-queue", "delete-queue", "purge", "perf", "bridge"):
            assert command in usage, (how, command)


def test_bridge_delegates_to_the_bridge_command():
    result = amqwire("bridge", "--help")
    assert b"--src-queue" in ok(result)
    result = amqwire("bridge")  # no queue to forward: the bridge's own one-line error, under the command's name
    assert result.returncode == 2 and result.stderr == b"amqwire bridge: error: give --src-queue (repeatable), --src-exchange or --config\n"
    result = amqwire("bridge", "--src-queue", "q")  # no source URL: the bridge's one line, its exit code
    assert result.returncode == 2 and result.stderr.startswith(b"amqwire bridge: error: no source URL")


def test_queue_commands(amqp_url, names):
    queue = names.queue()
    assert ok(amqwire("declare-queue", queue, "--durable", "-a", "x-max-length=1000", url=amqp_url)).decode() == f"{queue}\n"
    # passive: it exists; declared again with other arguments: the broker refuses, one line
    assert ok(amqwire("declare-queue", queue, "--passive", url=amqp_url)).decode() == f"{queue}\n"
    refused = amqwire("declare-queue", queue, url=amqp_url)
    assert refused.returncode == 1 and refused.stderr.count(b"\n") == 1 and b"PRECONDITION_FAILED" in refused.stderr
    for body in (b"a", b"b", b"c"):
        ok(amqwire("publish", "-r", queue, "-b", body.decode(), url=amqp_url))
    assert ok(amqwire("purge", queue, url=amqp_url)) == b"3\n"
    ok(amqwire("publish", "-r", queue, "-b", "d", url=amqp_url))
    assert ok(amqwire("delete-queue", queue, url=amqp_url)) == b"1\n"
    missing = amqwire("purge", queue, url=amqp_url)
    assert missing.returncode == 1 and b"NOT_FOUND" in missing.stderr and missing.stderr.count(b"\n") == 1


def test_quorum_queue_and_a_server_named_queue(amqp_url, names):
    queue = names.queue()
    assert ok(amqwire("declare-queue", queue, "--type", "quorum", url=amqp_url)).decode() == f"{queue}\n"
    named = ok(amqwire("declare-queue", "--auto-delete", url=amqp_url)).decode().strip()
    assert named.startswith("amq.gen-")


def test_publish_with_properties_and_headers_then_get_json(amqp_url, names):
    queue = names.queue()
    ok(amqwire("declare-queue", queue, url=amqp_url))
    ok(amqwire("publish", "-r", queue, "-b", "héllo", "--persistent", "--content-type", "text/plain",
               "--correlation-id", "c-1", "--message-id", "m-1", "--priority", "3", "--timestamp", "1700000000",
               "--app-id", "tests", "-H", "tenant=acme", "--header-json", "attempt=2", "--header-json", "ok=true",
               url=amqp_url, how="script"))
    lines = ok(amqwire("get", queue, "--json", url=amqp_url)).decode().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["body"] == "héllo" and record["routing_key"] == queue and record["exchange"] == ""
    assert record["headers"] == {"tenant": "acme", "attempt": 2, "ok": True}
    assert record["properties"] == {"content_type": "text/plain", "delivery_mode": 2, "priority": 3,
                                    "correlation_id": "c-1", "message_id": "m-1", "timestamp": 1700000000,
                                    "app_id": "tests"}
    assert ok(amqwire("get", queue, url=amqp_url)) == b""  # acked: gone


def test_bodies_from_stdin_and_a_file_binary_safe(amqp_url, names, tmp_path):
    queue = names.queue()
    ok(amqwire("declare-queue", queue, url=amqp_url))
    binary = bytes(range(256))
    path = tmp_path / "body.bin"
    path.write_bytes(binary)
    ok(amqwire("publish", "-r", queue, url=amqp_url, stdin=b"from stdin"))
    ok(amqwire("publish", "-r", queue, "--file", str(path), url=amqp_url))
    ok(amqwire("publish", "-r", queue, "-f", "-", url=amqp_url, stdin=b"dash\n"))
    # a peek leaves them there
    peeked = ok(amqwire("get", queue, "-n", "5", "--requeue", url=amqp_url))
    assert peeked == b"from stdin\n" + binary + b"\n" + b"dash\n"  # a newline ends each body, not added twice
    records = [json.loads(line) for line in ok(amqwire("get", queue, "-n", "5", "-j", url=amqp_url)).splitlines()]
    assert [r.get("body") for r in records] == ["from stdin", None, "dash\n"]
    assert all(r["redelivered"] for r in records)
    import base64

    assert base64.b64decode(records[1]["body_base64"]) == binary
    unreadable = amqwire("publish", "-r", queue, "--file", str(tmp_path / "missing"), url=amqp_url)
    assert unreadable.returncode == 2 and unreadable.stderr.count(b"\n") == 1


def test_consume_count_idle_timeout_and_no_ack(amqp_url, names):
    queue = names.queue()
    ok(amqwire("declare-queue", queue, url=amqp_url))
    for n in range(5):
        ok(amqwire("publish", "-r", queue, "-b", f"m{n}", url=amqp_url))
    assert ok(amqwire("consume", queue, "--count", "2", "--prefetch", "1", url=amqp_url)) == b"m0\nm1\n"
    records = ok(amqwire("consume", queue, "--idle-timeout", "1", "--json", "--no-ack", url=amqp_url, how="cli"))
    assert [json.loads(line)["body"] for line in records.splitlines()] == ["m2", "m3", "m4"]
    assert ok(amqwire("purge", queue, url=amqp_url)) == b"0\n"


@pytest.mark.parametrize("command", [["get"], ["get", "--requeue"], ["consume", "--idle-timeout", "1"], ["purge"],
                                     ["delete-queue"], ["declare-queue", "--passive"]])
def test_a_missing_queue_is_exit_1_for_every_subcommand(amqp_url, names, command):
    queue = names.queue()  # never declared
    result = amqwire(*command[:1], queue, *command[1:], url=amqp_url)
    assert result.returncode == 1, (command, result.returncode, result.stdout, result.stderr)
    assert result.stdout == b"" and result.stderr.count(b"\n") == 1 and b"404 NOT_FOUND" in result.stderr, result


def test_get_requeue_refuses_a_quorum_queue_unless_forced(amqp_url, names):
    quorum, classic = names.queue(), names.queue()
    ok(amqwire("declare-queue", quorum, "--type", "quorum", url=amqp_url))
    ok(amqwire("declare-queue", classic, url=amqp_url))
    for queue in (quorum, classic):
        for body in ("one", "two"):
            ok(amqwire("publish", "-r", queue, "-b", body, url=amqp_url))
    refused = amqwire("get", quorum, "-n", "2", "--requeue", url=amqp_url)
    assert refused.returncode == 2 and refused.stdout == b"", refused
    assert refused.stderr.count(b"\n") == 1 and b"no peek on quorum queue" in refused.stderr and b"--force" in refused.stderr
    # nothing was taken: the first delivery of each message is still to come
    first = json.loads(ok(amqwire("get", quorum, "--json", "--requeue", "--force", url=amqp_url)))
    assert first["body"] == "one" and first["redelivered"] is False, first
    # on a classic queue it is a peek, as documented
    assert ok(amqwire("get", classic, "-n", "2", "--requeue", url=amqp_url)) == b"one\ntwo\n"
    assert ok(amqwire("get", classic, "-n", "2", url=amqp_url)) == b"one\ntwo\n"


def test_publishing_a_message_no_queue_takes_warns_and_mandatory_fails(amqp_url, names):
    nowhere = names.queue()  # no such queue: the default exchange routes the key nowhere
    result = amqwire("publish", "-r", nowhere, "-b", "lost", url=amqp_url)
    assert result.returncode == 0 and result.stdout == b"", result
    assert result.stderr.startswith(b"amqwire: warning: no queue received the message: 312 NO_ROUTE"), result.stderr
    assert result.stderr.count(b"\n") == 1 and b"--mandatory" in result.stderr
    mandatory = amqwire("publish", "-r", nowhere, "-b", "lost", "--mandatory", url=amqp_url)
    assert mandatory.returncode == 1 and b"312 NO_ROUTE" in mandatory.stderr and mandatory.stderr.count(b"\n") == 1
    queue = names.queue()
    ok(amqwire("declare-queue", queue, url=amqp_url))
    routed = amqwire("publish", "-r", queue, "-b", "kept", url=amqp_url)
    assert routed.returncode == 0 and routed.stderr == b"", routed.stderr


def test_perf_takes_h_as_the_uri_and_shows_its_own_usage(amqp_url):
    out = ok(amqwire("perf", "-h", amqp_url, "-C", "20", "-x", "1", "-y", "1")).decode()
    assert "sending rate avg:" in out and "test stopped (all messages received)" in out, out
    helped = ok(amqwire("perf", "--help")).decode()
    assert helped.startswith("usage: amqwire perf") and "-h URI" in helped, helped
    for bad in (["perf", "--bogus"], ["perf", "-x", "many"]):
        result = amqwire(*bad, url=amqp_url)
        assert result.returncode == 2 and result.stderr.startswith(b"usage: amqwire perf "), (bad, result.stderr)
    other = amqwire("get", "q", "--bogus", url=amqp_url)
    assert other.returncode == 2 and other.stderr.startswith(b"usage: amqwire get "), other.stderr


@pytest.mark.timeout(90)
def test_perf_on_a_users_queue_takes_back_what_it_left(amqp_url, names):
    queue = names.queue()
    ok(amqwire("declare-queue", queue, url=amqp_url))
    # no consumers: every message the run published is left, and taken back at the end
    out = ok(amqwire("perf", "-u", queue, "-y", "0", "-C", "300", url=amqp_url, timeout=60)).decode()
    assert f"queue '{queue}': took back 300 messages this run published and did not consume; the queue holds 0" in out, out
    # --keep-messages leaves them, and says how many the queue holds
    out = ok(amqwire("perf", "-u", queue, "-y", "0", "-C", "300", "--keep-messages", url=amqp_url, timeout=60)).decode()
    assert f"queue '{queue}' kept its messages (--keep-messages): it holds 300" in out, out
    assert ok(amqwire("purge", queue, url=amqp_url)) == b"300\n"
    # the user's own message comes first: left in place, and so is everything behind it
    ok(amqwire("publish", "-r", queue, "-b", "mine", url=amqp_url))
    result = amqwire("perf", "-u", queue, "-y", "0", "-C", "300", url=amqp_url, timeout=60)
    out = ok(result).decode()
    assert "stopped at one it did not publish (left in its place); the queue holds 301" in out, out
    assert ok(amqwire("get", queue, url=amqp_url)) == b"mine\n"
    # consumers on a queue that holds messages: said up front (they take them too)
    result = amqwire("perf", "-u", queue, "-x", "0", "-z", "2", url=amqp_url, timeout=60)
    ok(result)
    assert result.stderr == f"amqwire perf: warning: queue '{queue}' holds 300 messages: the run's consumers take them too\n".encode()
    assert ok(amqwire("purge", queue, url=amqp_url)) == b"0\n"


def _one_line_without(result, secret):
    output = result.stdout + result.stderr
    assert secret.encode() not in output, output
    assert result.stderr.count(b"\n") == 1 and result.stderr.startswith(b"amqwire: error: "), result.stderr
    return result.stderr.decode()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_errors_one_line_exit_code_never_the_password(amqp_url, tmp_path):
    host, port = url_host_port(amqp_url)
    user, _ = url_credentials(amqp_url)
    secret = "s3cret-Pa55"
    # wrong password, from the URL, from $AMQP_URL, from a file, from $AMQP_PASSWORD
    wrong = f"amqp://{user}:{secret}@{host}:{port}/"
    for kwargs in ({"url": wrong}, {"env": {"AMQP_URL": wrong}}):
        result = amqwire("purge", "anything", **kwargs)
        assert result.returncode == 1
        _one_line_without(result, secret)
    password_file = tmp_path / "password"
    password_file.write_text(secret + "\n")
    result = amqwire("purge", "anything", "--password-file", str(password_file), url=f"amqp://{user}@{host}:{port}/")
    assert result.returncode == 1
    _one_line_without(result, secret)
    result = amqwire("get", "anything", env={"AMQP_URL": f"amqp://{user}@{host}:{port}/", "AMQP_PASSWORD": secret})
    assert result.returncode == 1
    _one_line_without(result, secret)
    # nothing listens there
    result = amqwire("get", "q", "--connect-timeout", "3", url=f"amqp://{user}:{secret}@127.0.0.1:{_free_port()}/")
    assert result.returncode == 1
    _one_line_without(result, secret)
    # a URL that cannot be parsed, with a password in it: a configuration error
    for bad in (f"amqp://{user}:{secret}@{host}:notaport/", f"http://{user}:{secret}@{host}/",
                f"amqp://{user}:{secret}@{host}/?heartbeat=x"):
        result = amqwire("get", "q", url=bad)
        assert result.returncode == 2, (bad, result.stderr)
        _one_line_without(result, secret)
    # argparse's own usage errors exit 2 as well
    assert amqwire("get").returncode == 2
    assert amqwire("perf", "-x", "0", "-y", "0", url=amqp_url).returncode == 2


def test_url_from_the_environment(amqp_url, names):
    queue = names.queue()
    ok(amqwire("declare-queue", queue, env={"AMQP_URL": amqp_url}))
    ok(amqwire("publish", "-r", queue, "-b", "x", env={"AMQP_URL": amqp_url}))
    assert ok(amqwire("get", queue, env={"AMQP_URL": amqp_url})) == b"x\n"


RATE_LINE = "time "


@pytest.mark.timeout(90)
def test_perf_with_a_count_confirms_and_json(amqp_url, tmp_path):
    report = tmp_path / "perf.json"
    out = ok(amqwire("perf", "-x", "2", "-y", "2", "-C", "2000", "-c", "100", "-q", "200", "-A", "10", "-s", "100",
                     "-f", "persistent", "--json", str(report), url=amqp_url, how="script", timeout=60)).decode()
    assert "sending rate avg:" in out and "receiving rate avg:" in out and "consumer latency" in out, out
    result = json.loads(report.read_text())
    summary = result["summary"]
    assert summary["stopped"] == "all messages received"
    assert summary["sent"] == 4000 and summary["received"] == 4000 and summary["confirmed"] == 4000, summary
    assert summary["nacked"] == 0 and summary["latency_us"]["min"] <= summary["latency_us"]["99th"]
    assert result["settings"]["producers"] == 2 and result["settings"]["confirm"] == 100
    for sample in result["samples"]:
        assert {"time", "sent", "confirmed", "nacked", "received", "latency_us"} <= set(sample)


@pytest.mark.timeout(60)
def test_perf_for_a_duration_prints_a_line_each_second(amqp_url, names):
    queue = names.queue()
    out = ok(amqwire("perf", "-z", "3", "-u", queue, "-r", "500", url=amqp_url, timeout=40)).decode()
    lines = [line for line in out.splitlines() if line.startswith(RATE_LINE)]
    assert 2 <= len(lines) <= 4, out
    assert "received:" in lines[0] and "consumer latency" in lines[-1] and "time limit reached" in out, out
    # -u names a queue that the run declares and keeps
    assert ok(amqwire("declare-queue", queue, "--passive", url=amqp_url)).decode() == f"{queue}\n"


@pytest.mark.timeout(30)
def test_perf_stops_on_sigint_with_a_summary(amqp_url):
    p = subprocess.Popen([sys.executable, "-m", "amqwire", "perf", "--url", amqp_url, "-r", "100"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        assert first.startswith(RATE_LINE), first
        p.send_signal(2)
        out, err = p.communicate(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    assert p.returncode == 0, err
    assert "test stopped (interrupted)" in out and "sending rate avg:" in out


@pytest.mark.timeout(60)
def test_perf_ends_when_the_broker_goes_silent(amqp_url):
    # Every connection frozen mid-run: no confirm, no close-ok ever comes.  The run still
    # ends: -z, then 10 s for confirms and 5 more to close, then its connections abandoned.
    host, port = url_host_port(amqp_url)
    user, password = url_credentials(amqp_url)
    proxy = TCPProxy(host, port)
    try:
        p = subprocess.Popen([sys.executable, "-m", "amqwire", "perf", "--url", f"amqp://{user}:{password}@127.0.0.1:{proxy.port}/",
                              "-z", "3", "-c", "100", "-r", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().startswith(RATE_LINE)
            proxy.freeze()
            out, err = p.communicate(timeout=40)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    finally:
        proxy.close()
    assert p.returncode == 0, err
    assert "test stopped (time limit reached)" in out and "abandoned" in err, (out, err)


def test_the_console_script_is_on_the_venv_path():
    assert shutil.which("amqwire", path=str(SCRIPT.parent)) == str(SCRIPT)


def test_redact_masks_the_password_field_only_on_one_line():
    from amqwire.cli.settings import redact

    assert redact("amqp://bob:pa%2Fss@host:5672/ failed\nfor good") == "amqp://bob:****@host:5672/ failed for good"
    # the password's text elsewhere is not a password field: the user name, vhost and queue stay
    assert redact("amqp://guest:guest@h/guest-vhost: queue 'guest.q' of guest") == \
        "amqp://guest:****@h/guest-vhost: queue 'guest.q' of guest"
    assert redact("amqp://u:p@ss/w?rd#@host:5672/ and amqps://v:x@h2/") == "amqp://u:****@host:5672/ and amqps://v:****@h2/"
    assert redact("channel closed") == "channel closed"


def test_the_user_name_shows_whatever_the_password(amqp_url):
    """guest:guest: the password's text is the user name's, which every error line shows as it is."""
    for password in ("guest", "gue"):
        result = amqwire("get", "q", "--connect-timeout", "3", url=f"amqp://guest:{password}@127.0.0.1:{_free_port()}/")
        assert result.returncode == 1 and result.stderr.count(b"\n") == 1, result.stderr
        assert b"could not connect: amqp://guest@127.0.0.1:" in result.stderr, result.stderr


def test_two_different_passwords_are_refused(amqp_url, names, tmp_path):
    host, port = url_host_port(amqp_url)
    user, password = url_credentials(amqp_url)
    other = "0ther-Pa55"
    in_url = f"amqp://{user}:{password}@{host}:{port}/"
    password_file = tmp_path / "password"
    password_file.write_text(other + "\n")
    for kwargs, words in (({"url": in_url, "env": {"AMQP_PASSWORD": other}}, b"(--url) and $AMQP_PASSWORD's"),
                          ({"env": {"AMQP_URL": in_url, "AMQP_PASSWORD": other}}, b"($AMQP_URL) and $AMQP_PASSWORD's"),
                          ({"url": in_url, "args": ("--password-file", str(password_file))}, b"(--url) and --password-file's")):
        result = amqwire("purge", "q", *kwargs.pop("args", ()), **kwargs)
        assert result.returncode == 2 and result.stdout == b"", result
        assert result.stderr.startswith(b"amqwire: error: two different passwords: the URL's ") and words in result.stderr
        assert result.stderr.count(b"\n") == 1 and other.encode() not in result.stderr
        assert password.encode() not in result.stderr.replace(user.encode(), b""), result.stderr
    # the same password twice, or one only (the default URL's guest is no password given): fine
    queue = names.queue()
    ok(amqwire("declare-queue", queue, url=in_url, env={"AMQP_PASSWORD": password}))
    ok(amqwire("purge", queue, url=f"amqp://{user}@{host}:{port}/", env={"AMQP_PASSWORD": password}))
    default = amqwire("purge", queue, "--connect-timeout", "5", env={"AMQP_PASSWORD": other})
    assert b"two different passwords" not in default.stderr, default.stderr


def test_main_in_process_leaves_the_loggers_it_quietened_as_they_were(capsys):
    """main() silences the client's retries for its one-line error; run in-process (a test,
    a program embedding it) it must not leave them silenced."""
    import logging

    from amqwire.cli.main import main

    names = ("amqwire.client", "amqwire.bridge")
    levels = {name: logging.getLogger(name).level for name in names}
    assert main(["purge", "--url", "amqp://guest:guest@127.0.0.1:1/", "--connect-timeout", "2", "q"]) == 1
    assert "amqwire: error:" in capsys.readouterr().err
    assert {name: logging.getLogger(name).level for name in names} == levels
