"""The compiled anchors of the client benchmark: rabbitmq-c (C) and amqp091-go (Go) doing
the phases of ``client_bench`` (publish, confirmed publish in batches or pipelined in a
window, consume with multiple acks or one ack per delivery), built here from ``bench/anchors/{c,go}`` when the toolchains are present.

Each run is one child process: it connects, sets up (confirm.select, basic.qos) and then
times the phase itself, printing one line::

    AMQWIRE-ANCHOR phase=consume n=200000 done=200000 wall_s=3.51 cpu_s=1.72

``done`` is what the program counted: messages confirmed (each sequence number settled
exactly once) or consumed; a run whose ``done`` is not ``n`` fails.  ``cpu_s`` is the
child's getrusage(RUSAGE_SELF) over the phase, all its threads.

Builds go to a cache directory ($AMQWIRE_BENCH_CACHE, else $XDG_CACHE_HOME/amqwire/
bench-anchors, else ~/.cache/...), named by a hash of the source and the toolchain, so a
changed source is rebuilt and an unchanged one is not.  Both build offline with Debian's
packages: ``librabbitmq-dev`` (gcc, pkg-config), and ``golang-go`` with
``golang-github-rabbitmq-amqp091-go-dev`` in GOPATH mode (GO111MODULE=off,
GOPATH=/usr/share/gocode, GOPROXY=off).  A missing toolchain or library is a one-line reason
and the rows are skipped; ``tests/ensure_anchors.sh`` installs them.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, NamedTuple

SOURCES = Path(__file__).resolve().parent / "anchors"
DEBIAN_GOPATH = "/usr/share/gocode"
AMQP091_GO = "src/github.com/rabbitmq/amqp091-go"
RESULT_MARK = "AMQWIRE-ANCHOR"
PHASES = ("publish", "confirm", "confirm-window", "consume")


class AnchorFailed(RuntimeError):
    """A compiled anchor exited with an error or printed no result line."""


class Built(NamedTuple):
    binary: Path | None  # None: not available
    version: str  # the client library's version and the toolchain's, or why it is missing


def cache_dir() -> Path:
    explicit = os.environ.get("AMQWIRE_BENCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "amqwire" / "bench-anchors"


def _output(cmd: list[str], env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _debian_version(package: str) -> str:
    return _output(["dpkg-query", "-W", "-f=${Version}", package]) or "?"


def _build(name: str, source: Path, toolchain: str, command: Callable[[Path], list[str]],
           env: dict[str, str] | None = None) -> Path:
    """Compile ``source`` into the cache unless a binary of this source and toolchain is there."""
    digest = hashlib.sha256(source.read_bytes() + toolchain.encode()).hexdigest()[:16]
    target = cache_dir() / ("%s-%s" % (name, digest))
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=name + "-", dir=target.parent) as tmp:
        out = Path(tmp) / name
        proc = subprocess.run(command(out), capture_output=True, text=True, cwd=source.parent,
                              env=env, timeout=300)
        if proc.returncode != 0:
            first = (proc.stderr.strip() or proc.stdout.strip() or "exit %d" % proc.returncode)
            raise AnchorFailed("build failed: " + first.splitlines()[0])
        os.replace(out, target)  # atomic: a concurrent build of the same source is harmless
    return target


def build_rabbitmq_c() -> Built:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return Built(None, "no C compiler on PATH (apt-get install gcc)")
    library = _output(["pkg-config", "--modversion", "librabbitmq"])
    if not library and not os.path.exists("/usr/include/amqp.h"):
        return Built(None, "librabbitmq-dev is not installed (bash tests/ensure_anchors.sh)")
    library = library or _debian_version("librabbitmq-dev")
    flags = (_output(["pkg-config", "--cflags", "--libs", "librabbitmq"]) or "-lrabbitmq").split()
    compiler = _output([cc, "--version"]).splitlines()
    toolchain = "%s; %s; %s" % (library, compiler[0] if compiler else cc, " ".join(flags))
    source = SOURCES / "c" / "anchor.c"
    try:
        binary = _build("anchor-rabbitmq-c", source, toolchain,
                        lambda out: [cc, "-O2", "-o", str(out), str(source)] + flags)
    except (AnchorFailed, OSError, subprocess.TimeoutExpired) as exc:
        return Built(None, str(exc))
    return Built(binary, "rabbitmq-c %s (%s)" % (library, compiler[0] if compiler else cc))


def build_amqp091_go() -> Built:
    go = shutil.which("go") or next((p for p in ("/usr/lib/go/bin/go",) if os.path.exists(p)), None)
    if go is None:
        return Built(None, "no Go toolchain on PATH (bash tests/ensure_anchors.sh)")
    gopath = os.environ.get("AMQWIRE_GOPATH", DEBIAN_GOPATH)
    if not os.path.isdir(os.path.join(gopath, AMQP091_GO)):
        return Built(None, "amqp091-go is not in %s (golang-github-rabbitmq-amqp091-go-dev; bash "
                           "tests/ensure_anchors.sh)" % gopath)
    env = dict(os.environ, GO111MODULE="off", GOPATH=gopath, GOFLAGS="", GOPROXY="off",
               GOTOOLCHAIN="local", GOCACHE=str(cache_dir() / "go-build-cache"), CGO_ENABLED="0")
    go_version = _output([go, "version"], env=env) or "go ?"
    library = _debian_version("golang-github-rabbitmq-amqp091-go-dev")
    source = SOURCES / "go" / "anchor.go"
    dependency = b"".join(p.read_bytes() for p in sorted(Path(gopath, AMQP091_GO).glob("*.go")))
    toolchain = "%s; %s; %s" % (go_version, library, hashlib.sha256(dependency).hexdigest())
    try:
        binary = _build("anchor-amqp091-go", source, toolchain,
                        lambda out: [go, "build", "-o", str(out), source.name], env=env)
    except (AnchorFailed, OSError, subprocess.TimeoutExpired) as exc:
        return Built(None, str(exc))
    return Built(binary, "amqp091-go %s (%s)" % (library, go_version.replace("go version ", "")))


BUILDERS = {"rabbitmq-c": build_rabbitmq_c, "amqp091-go": build_amqp091_go}
_built: dict[str, Built] = {}


def built(lib: str) -> Built:
    """The binary of one anchor (built once per process), or why there is none."""
    if lib not in _built:
        _built[lib] = BUILDERS[lib]()
    return _built[lib]


def parse_result(line: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
    missing = {"phase", "n", "done", "wall_s", "cpu_s"} - set(fields)
    if missing:
        raise AnchorFailed("result line without %s: %r" % (", ".join(sorted(missing)), line))
    return fields


def run_phase(binary: Path, phase: str, *, host: str, port: int, username: str, password: str,
              vhost: str, queue: str, n: int, prefetch: int, ack_every: int, window: int,
              timeout: float) -> tuple[float, float, int]:
    """One child run: (wall seconds, child CPU seconds, what it counted as done)."""
    if phase not in PHASES:
        raise ValueError("phase must be one of %s, got %r" % (", ".join(PHASES), phase))
    cmd = [str(binary), phase, host, str(port), username, password, vhost, queue, str(n),
           str(prefetch), str(ack_every), str(window)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK + " ")]
    if proc.returncode != 0 or not lines:
        why = (proc.stderr.strip().splitlines() or ["no result line"])[-1]
        raise AnchorFailed("%s %s exited %d: %s" % (binary.name, phase, proc.returncode, why))
    fields = parse_result(lines[-1])
    return float(fields["wall_s"]), float(fields["cpu_s"]), int(fields["done"])
