"""A private RabbitMQ node for fault tests: tests that stop, restart, crash, alarm or
force-close a broker must never do that to the shared broker on 127.0.0.1:5672.

A :class:`BrokerNode` runs the installed RabbitMQ (tests/ensure_rabbitmq.sh installs it)
as the current user with everything of its own, in one temporary directory:

- node name ``amqwire-test-<random>@localhost``; AMQP port, Erlang distribution port and
  CLI distribution port range of its own (free ports outside the kernel's ephemeral range,
  so that outgoing connections cannot take them while the node is down);
- data (``RABBITMQ_MNESIA_BASE``/``RABBITMQ_MNESIA_DIR``), logs (``RABBITMQ_LOG_BASE``),
  config file (``RABBITMQ_CONFIG_FILE``, new style: guest may connect from loopback),
  enabled-plugins file (empty unless ``plugins=`` asks for some), pid file, env file
  (``RABBITMQ_CONF_ENV_FILE``, so /etc/rabbitmq/rabbitmq-env.conf is not read) and an
  Erlang cookie of its own (``HOME`` points into the directory).  A wrong cookie could not
  drive the shared node even if a command named it; every command names ``-n <node>``.

Only epmd is shared (the one the shared broker started; any node registers there).

    node = BrokerNode().start()       # returns once the node accepts AMQP connections
    conn = connect(node.url)
    node.restart()                    # same port, same data: clients can reconnect
    node.set_memory_alarm(); node.clear_memory_alarm()
    node.close_all_connections("test"); node.kill(); node.start()
    node.cleanup()                    # stop (or kill), then remove the directory

The beam process carries ``-amqwire_node <name> -amqwire_owner <pid> -amqwire_base <dir>``
on its command line: :func:`reap_orphans` (run once per process, before the first node
starts) kills nodes whose owning test process is gone (a test run killed with SIGKILL),
and removes their directories.
"""
from __future__ import annotations

import atexit
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Iterable, Mapping, Optional

__all__ = ["BrokerNode", "BrokerNodeError", "find_rabbitmq_scripts", "reap_orphans"]

SCRIPTS_ENV = "AMQWIRE_RABBITMQ_SCRIPTS"  # a directory with rabbitmq-server, rabbitmqctl, rabbitmq-env
_SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin", "/usr/lib/rabbitmq/sbin", "/usr/local/lib/rabbitmq/sbin")
_SBIN_PATH = "/usr/sbin:/usr/local/sbin"  # where Debian and others put rabbitmq-server
_DIR_PREFIX = "amqwire-broker-"
_MARK = "-amqwire_node"

# Environment variables of the caller that rabbitmq-env would read (it reads both
# RABBITMQ_<NAME> and plain <NAME>): none of them leaks into the node.
_DROPPED_ENV = {
    "NODENAME", "NODE_IP_ADDRESS", "NODE_PORT", "DIST_PORT", "USE_LONGNAME", "CONFIG_FILE",
    "ADVANCED_CONFIG_FILE", "CONF_ENV_FILE", "MNESIA_BASE", "MNESIA_DIR", "LOG_BASE", "LOGS",
    "PID_FILE", "ENABLED_PLUGINS_FILE", "PLUGINS_DIR", "PLUGINS_EXPAND_DIR", "SERVER_ERL_ARGS",
    "SERVER_ADDITIONAL_ERL_ARGS", "SERVER_START_ARGS", "SERVER_CODE_PATH", "CTL_ERL_ARGS",
    "CTL_DIST_PORT_MIN", "CTL_DIST_PORT_MAX", "BOOT_MODULE", "SCHEDULER_BIND_TYPE",
    "NOTIFY_SOCKET",
}

_lock = threading.Lock()
_reserved_ports: set[int] = set()
_live: set["BrokerNode"] = set()
_reaped = False


class BrokerNodeError(RuntimeError):
    """The private node could not be found, started, driven or stopped."""


class _NotStarted(Exception):
    """Why start() gives up; becomes a BrokerNodeError with the logs once the node stopped."""


# --------------------------------------------------------------------------- discovery


def find_rabbitmq_scripts() -> Path:
    """The directory holding RabbitMQ's own scripts (rabbitmq-server, rabbitmqctl,
    rabbitmq-env).  Not Debian's /usr/sbin wrappers: those switch to the rabbitmq user and
    write the shared broker's /var/log/rabbitmq/startup_log."""
    def ok(d: Path) -> bool:
        return (
            os.access(d / "rabbitmq-server", os.X_OK)
            and os.access(d / "rabbitmqctl", os.X_OK)
            and (d / "rabbitmq-env").is_file()
        )

    explicit = os.environ.get(SCRIPTS_ENV)
    if explicit:
        if ok(Path(explicit)):
            return Path(explicit)
        raise BrokerNodeError(
            f"{SCRIPTS_ENV}={explicit} does not hold RabbitMQ's rabbitmq-server, rabbitmqctl and rabbitmq-env"
        )
    candidates: list[Path] = []
    found = shutil.which("rabbitmq-server") or shutil.which("rabbitmq-server", path=_SBIN_PATH)
    if found:
        candidates.append(Path(os.path.realpath(found)).parent)
    candidates += [Path(d) for d in _SCRIPT_DIRS]
    for d in candidates:
        if ok(d):
            return d
    raise BrokerNodeError(
        "rabbitmq-server is not installed here (looked for RabbitMQ's scripts in "
        + ", ".join(str(d) for d in candidates)
        + f", or set {SCRIPTS_ENV}): the fault tests run a private RabbitMQ node; install it "
        "with `bash tests/ensure_rabbitmq.sh` (tests/run does that)"
    )


# --------------------------------------------------------------------------- ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    """Nothing listens on ``port`` (SO_REUSEADDR, as the node's own listeners: sockets
    of closed connections lingering in TIME_WAIT do not count)."""
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def _pick_ports(count: int, span: int = 1) -> list[int]:
    """``count`` free ports (each the start of ``span`` free consecutive ports), below the
    ephemeral range when there is room (else anywhere), remembered so that two nodes of
    this process never get the same ones."""
    lo_eph, hi_eph = _ephemeral_range()
    if lo_eph - 10000 > 2000:
        lo, hi = 10000, lo_eph - span
    else:
        lo, hi = max(hi_eph + 1, 1024), 65535 - span
    avoid = {4369, 5671, 5672, 15672, 25672, 61613, 1883, 5552, 15692} | set(range(35672, 35683))
    out: list[int] = []
    with _lock:
        for _ in range(5000):
            base = random.randint(lo, hi)
            block = range(base, base + span)
            if any(p in avoid or p in _reserved_ports for p in block):
                continue
            if all(_bindable(p) for p in block):
                _reserved_ports.update(block)
                out.append(base)
                if len(out) == count:
                    return out
    raise BrokerNodeError(f"no free ports found for a private RabbitMQ node in {lo}-{hi}")


# --------------------------------------------------------------------------- processes


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _marked_processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every process carrying the ``-amqwire_node`` mark."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if _MARK in argv:
            out.append((int(entry), argv))
    return out


def _arg(argv: list[str], flag: str) -> Optional[str]:
    try:
        return argv[argv.index(flag) + 1]
    except (ValueError, IndexError):
        return None


def _node_pids(name: str) -> list[int]:
    return [pid for pid, argv in _marked_processes() if _arg(argv, _MARK) == name and _pid_alive(pid)]


def reap_orphans() -> list[str]:
    """Kill private nodes left behind by a test process that no longer exists (killed
    with SIGKILL, so neither the fixture's teardown nor atexit ran) and remove their
    directories.  Nodes of live test processes are left alone.  Returns their names."""
    reaped = []
    for pid, argv in _marked_processes():
        owner, name, base = _arg(argv, "-amqwire_owner"), _arg(argv, _MARK), _arg(argv, "-amqwire_base")
        if not (owner and owner.isdigit()) or _pid_alive(int(owner)) or not _pid_alive(pid):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        reaped.append(name or str(pid))
        if base and Path(base).name.startswith(_DIR_PREFIX):
            deadline = time.monotonic() + 5
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            shutil.rmtree(base, ignore_errors=True)
    return reaped


def _epmd_names(host: str = "127.0.0.1") -> set[str]:
    """Names of the nodes registered with the epmd at ``host`` (NAMES_REQ); empty if none runs."""
    port = int(os.environ.get("ERL_EPMD_PORT") or 4369)
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(b"\x00\x01n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return set()
    return {line.split()[1] for line in data[4:].decode(errors="replace").splitlines() if line.startswith("name ")}


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * lines))
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"({path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


@atexit.register
def _kill_leftovers() -> None:  # pragma: no cover - safety net, the fixture cleans up
    for node in list(_live):
        try:
            node.kill()
        except Exception:
            pass
        shutil.rmtree(node.base_dir, ignore_errors=True)


# --------------------------------------------------------------------------- the node


class BrokerNode:
    """One private RabbitMQ node (see the module docstring).  Not started on creation:
    call :meth:`start` (or use it as a context manager: started on enter, cleaned up on
    exit)."""

    def __init__(
        self,
        *,
        plugins: Iterable[str] = (),
        config: Optional[Mapping[str, object]] = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        erl_args: str = "",
        netns: Optional[str] = None,
        host: str = "127.0.0.1",
        name: Optional[str] = None,
        cookie: Optional[str] = None,
    ):
        """``plugins``: plugins to enable (e.g. ``["rabbitmq_shovel"]``); ``config``:
        extra ``rabbitmq.conf`` settings (key -> value), added after the defaults;
        ``erl_args``: extra arguments of the Erlang VM (e.g. ``"+sbwt none"``).

        A node of a cluster in network namespaces (tests/netns_cluster.py) gives
        ``netns`` (the node and every rabbitmqctl run inside it, through ``ip netns
        exec``), ``host`` (its address there: AMQP listener, Erlang distribution, epmd),
        ``name`` (``rabbit@<host name>``) and the cluster's shared ``cookie``.  The
        namespace is the node's own, so it takes RabbitMQ's standard ports."""
        self.erl_args = erl_args
        self.netns = netns
        self.host = host
        global _reaped
        self.scripts = find_rabbitmq_scripts()
        if not _reaped:
            _reaped = True
            reap_orphans()
        self.plugins = tuple(plugins)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._name = name or f"amqwire-test-{uuid.uuid4().hex[:10]}@localhost"
        if netns is None:
            self._port, self._dist_port = _pick_ports(2)
            (self._ctl_port,) = _pick_ports(1, span=11)
        else:
            self._port, self._dist_port, self._ctl_port = 5672, 25672, 35672
        self.base_dir = Path(tempfile.mkdtemp(prefix=_DIR_PREFIX))
        self.log_dir = self.base_dir / "log"
        self.mnesia_base = self.base_dir / "mnesia"
        self.home = self.base_dir / "home"
        for d in (self.log_dir, self.mnesia_base, self.home):
            d.mkdir()
        self.config_file = self.base_dir / "rabbitmq.conf"
        self.plugins_file = self.base_dir / "enabled_plugins"
        self.pid_file = self.base_dir / f"{self._name}.pid"
        self.log_file = self.log_dir / f"{self._name}.log"
        self.console_file = self.log_dir / "console.out"  # the server script's stdout/stderr
        self._proc: Optional[subprocess.Popen] = None
        self._beam_pid: Optional[int] = None
        self._saved_watermark: Optional[str] = None
        self.timings: dict[str, list[float]] = {"start": [], "stop": [], "kill": []}
        self._write_files(config or {}, cookie or uuid.uuid4().hex.upper())
        self._env = self._make_env()

    # ------------------------------------------------------------------ set-up

    def _write_files(self, extra: Mapping[str, object], cookie_value: str) -> None:
        settings = {
            "listeners.tcp.1": f"{self.host}:{self._port}",
            "loopback_users.guest": "true",  # guest connects, from 127.0.0.1 only
            "log.console": "false",
            "log.file.level": "info",
            "disk_free_limit.absolute": "1MB",  # a nearly full /tmp must not block publishers
        }
        settings.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in extra.items()})
        self.config_file.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        self.plugins_file.write_text("[" + ",".join(self.plugins) + "].\n")
        (self.base_dir / "rabbitmq-env.conf").write_text("# private test node: everything is set in the environment\n")
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(cookie_value)
        cookie.chmod(0o400)

    def _make_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RABBITMQ_", "ERL_")) and k not in _DROPPED_ENV
        }
        env.update(
            HOME=str(self.home),
            RABBITMQ_CONF_ENV_FILE=str(self.base_dir / "rabbitmq-env.conf"),
            RABBITMQ_NODENAME=self._name,
            RABBITMQ_USE_LONGNAME="false",
            RABBITMQ_NODE_PORT=str(self._port),
            RABBITMQ_DIST_PORT=str(self._dist_port),
            RABBITMQ_CTL_DIST_PORT_MIN=str(self._ctl_port),
            RABBITMQ_CTL_DIST_PORT_MAX=str(self._ctl_port + 10),
            RABBITMQ_CONFIG_FILE=str(self.config_file),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.base_dir / "advanced.config"),  # absent
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.plugins_file),
            RABBITMQ_MNESIA_BASE=str(self.mnesia_base),
            RABBITMQ_MNESIA_DIR=str(self.mnesia_base / self._name),
            RABBITMQ_LOG_BASE=str(self.log_dir),
            RABBITMQ_PID_FILE=str(self.pid_file),
            ERL_EPMD_ADDRESS="127.0.0.1" if self.host == "127.0.0.1" else f"127.0.0.1,{self.host}",  # if none runs yet
            ERL_CRASH_DUMP=str(self.log_dir / "erl_crash.dump"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                "-kernel inet_dist_use_interface {" + self.host.replace(".", ",") + "} "
                f"{_MARK} {self._name} -amqwire_owner {os.getpid()} -amqwire_base {self.base_dir}"
                + (f" {self.erl_args}" if self.erl_args else "")
            ),
        )
        return env

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        return self._name

    @property
    def port(self) -> int:
        return self._port

    @property
    def dist_port(self) -> int:
        return self._dist_port

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self._port}/"

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def beam_pid(self) -> Optional[int]:
        return self._beam_pid

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"<BrokerNode {self._name} port={self._port} {state}>"

    def __enter__(self) -> "BrokerNode":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.cleanup()

    # ------------------------------------------------------------------ logs

    def log_tail(self, lines: int = 40, log_dir: Optional[Path] = None) -> str:
        """The last lines of the node's log and of the server script's console output
        (from ``log_dir``: a copy of the logs, e.g. the one :meth:`cleanup` kept).  The
        node writes its log with a delay: the last second may be missing while it runs;
        it is complete once the node stopped."""
        log_dir = self.log_dir if log_dir is None else Path(log_dir)
        parts = []
        for path in (log_dir / self.log_file.name, log_dir / self.console_file.name):
            if path.exists() and path.stat().st_size:
                parts.append(f"--- {path} (last {lines} lines)\n{_tail(path, lines)}")
        return "\n".join(parts) or f"(no log written in {log_dir})"

    def first_errors(self, limit: int = 12) -> list[str]:
        """The first ``[error]`` lines logged since the latest start (the cause of a
        failed boot comes first; the tail is mostly crash reports)."""
        found: list[str] = []
        for path in (self.console_file, self.log_file):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            # since the latest start: the script's marker / the node's boot banner
            text = text[max(0, text.rfind("=== start" if path == self.console_file else " Starting RabbitMQ ")):]
            found += [line for line in text.splitlines() if "[error]" in line and line not in found]
            if found:
                break
        return found[:limit]

    def _fail(self, what: str) -> BrokerNodeError:
        errors = self.first_errors()
        first = ("--- first errors\n" + "\n".join(errors) + "\n") if errors else ""
        return BrokerNodeError(f"{self._name} (AMQP port {self._port}): {what}\n{first}{self.log_tail()}")

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: Optional[float] = None) -> "BrokerNode":
        """Start the node and return once it accepts AMQP connections (its TCP listener is
        up and ``rabbitmqctl await_startup`` says the boot finished; that command runs
        while the node boots, as soon as the node is registered with epmd).  On failure
        the node is killed and BrokerNodeError carries the tail of its logs."""
        if self.is_running:
            return self
        t0 = time.monotonic()
        deadline = t0 + (self.start_timeout if timeout is None else timeout)
        # After a stop the ports are free at once (SO_REUSEADDR, as the node's own
        # listeners); give a socket of another process a moment before giving up.
        # (A node in a namespace of its own has its ports to itself.)
        while self.netns is None and not (_bindable(self._port) and _bindable(self._dist_port)):
            if time.monotonic() > min(deadline, t0 + 10):
                taken = [p for p in (self._port, self._dist_port) if not _bindable(p)]
                raise self._fail(f"port(s) {taken} are taken by another process; cannot start")
            time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        with open(self.console_file, "ab") as console:
            console.write(f"=== start {time.strftime('%H:%M:%S')}\n".encode())
            console.flush()
            self._proc = subprocess.Popen(
                self._in_netns([str(self.scripts / "rabbitmq-server")]),
                env=self._env,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killable as a whole
            )
        self._beam_pid = None
        with _lock:
            _live.add(self)
        short_name = self._name.split("@", 1)[0]
        ctl: Optional[subprocess.Popen] = None
        ctl_failures: list[str] = []
        started = listening = False
        try:
            while not (started and listening):
                if self._proc.poll() is not None:
                    raise _NotStarted(f"rabbitmq-server exited with status {self._proc.returncode} while starting")
                now = time.monotonic()
                if now > deadline:
                    raise _NotStarted(
                        f"not ready within {deadline - t0:.0f} s (AMQP port open: {listening}, "
                        f"await_startup done: {started}; rabbitmqctl errors: {ctl_failures[-1:]})"
                    )
                if not started and ctl is None and short_name in _epmd_names(self.host):
                    ctl = subprocess.Popen(
                        self._ctl_cmd("await_startup", "--timeout", str(max(5, int(deadline - now)))),
                        env=self._env, cwd=self.base_dir, stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    )
                if ctl is not None and ctl.poll() is not None:
                    out, err = ctl.communicate()
                    if ctl.returncode == 0:
                        started = True
                    else:
                        ctl_failures.append((err or out).strip()[-1500:])
                        if len(ctl_failures) >= 5:
                            raise _NotStarted(f"rabbitmqctl await_startup keeps failing: {ctl_failures[-1]}")
                    ctl = None
                if not listening:
                    try:
                        socket.create_connection((self.host, self._port), timeout=0.5).close()
                        listening = True
                    except OSError:
                        pass
                if not (started and listening):
                    time.sleep(0.05)
            self._beam_pid = self._read_beam_pid()
        except BaseException as exc:
            if ctl is not None:
                ctl.kill()
                ctl.communicate()
            # SIGTERM first: the node flushes its log (SIGKILL would lose its last second)
            self._terminate(grace=5)
            if isinstance(exc, _NotStarted):
                raise self._fail(str(exc)) from None
            raise
        self.timings["start"].append(time.monotonic() - t0)
        return self

    def _read_beam_pid(self) -> Optional[int]:
        pids = _node_pids(self._name)
        if pids:
            return pids[0]
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop the node cleanly and wait for its processes to end: SIGTERM to its beam
        process, which RabbitMQ handles as ``rabbitmqctl stop`` does (clients get
        connection.close 320 CONNECTION_FORCED), half a second faster.  Kills it when that
        takes longer than ``timeout``."""
        if self._proc is None:
            return
        timeout = self.stop_timeout if timeout is None else timeout
        t0 = time.monotonic()
        was_running = self._proc.poll() is None
        if was_running:
            try:
                if self._beam_pid and _pid_alive(self._beam_pid):
                    os.kill(self._beam_pid, signal.SIGTERM)
                else:
                    self._ctl("stop", timeout=timeout)
            except (OSError, BrokerNodeError, subprocess.TimeoutExpired):
                pass  # waited for below, killed if need be
            try:
                self._proc.wait(max(1.0, timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                self._force_kill()
                raise self._fail(f"did not stop within {timeout:.0f} s; killed it") from None
        self._reap()
        if was_running:
            self.timings["stop"].append(time.monotonic() - t0)

    def kill(self) -> None:
        """Crash the node: SIGKILL its beam process (no connection.close is sent: clients
        see the TCP connection drop), then collect what is left of its processes."""
        if self._proc is None:
            return
        t0 = time.monotonic()
        self._force_kill()
        self.timings["kill"].append(time.monotonic() - t0)

    def restart(self, timeout: Optional[float] = None) -> "BrokerNode":
        """:meth:`stop`, then :meth:`start` on the same ports with the same data."""
        self.stop()
        return self.start(timeout)

    def restart_app(self) -> "BrokerNode":
        """A faster restart (about 1.6 s instead of 5): ``rabbitmqctl stop_app`` then
        ``start_app``.  The Erlang VM keeps running, but for AMQP clients it looks the same
        as :meth:`restart`: connections get 320 CONNECTION_FORCED, the port refuses
        connections until the broker is back, data is kept."""
        t0 = time.monotonic()
        self._ctl("stop_app")
        self._ctl("start_app")  # returns once the app runs, listeners included
        socket.create_connection((self.host, self._port), timeout=5).close()
        self.timings.setdefault("restart_app", []).append(time.monotonic() - t0)
        return self

    def _terminate(self, grace: float) -> None:
        """SIGTERM (a clean stop), SIGKILL what is left after ``grace`` seconds."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            for pid in [self._beam_pid] if self._beam_pid else _node_pids(self._name):
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self._force_kill()

    def _force_kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if self._beam_pid and _pid_alive(self._beam_pid):
            try:
                os.kill(self._beam_pid, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the script, beam, erl_child_setup, ...
            except OSError:
                pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._reap()

    def _reap(self) -> None:
        """After the script exited: SIGKILL anything of this node still alive."""
        proc = self._proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while True:
            pids = _node_pids(self._name)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise BrokerNodeError(f"{self._name}: processes {pids} survive SIGKILL")
            time.sleep(0.05)
        self._proc = None
        self._beam_pid = None
        self._saved_watermark = None
        with _lock:
            _live.discard(self)

    def cleanup(self, keep_logs: Optional[Path] = None, graceful: bool = True) -> None:
        """Stop the node (kill it when a clean stop fails; ``graceful=False``: kill it
        right away, 1 s faster, its data is thrown away anyway), copy its logs to
        ``keep_logs`` if given, remove its directory and release its ports.  Safe to
        call twice."""
        error: Optional[BaseException] = None
        try:
            if graceful:
                self.stop()
            else:
                self.kill()
        except BaseException as exc:  # noqa: BLE001 - killed by stop(); still clean up below
            error = exc
            self._force_kill()
        if keep_logs is not None and self.log_dir.exists():
            shutil.copytree(self.log_dir, keep_logs, dirs_exist_ok=True)
        shutil.rmtree(self.base_dir, ignore_errors=True)
        with _lock:
            _reserved_ports.difference_update({self._port, self._dist_port, *range(self._ctl_port, self._ctl_port + 11)})
        if error is not None:
            raise error

    # ------------------------------------------------------------------ rabbitmqctl

    def _in_netns(self, argv: list[str]) -> list[str]:
        return argv if self.netns is None else ["ip", "netns", "exec", self.netns, *argv]

    def _ctl_cmd(self, *args: str) -> list[str]:
        return self._in_netns([str(self.scripts / "rabbitmqctl"), "-n", self._name, *args])

    def _ctl(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            self._ctl_cmd(*args), env=self._env, cwd=self.base_dir, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise BrokerNodeError(
                f"rabbitmqctl -n {self._name} {' '.join(args)} failed with status {done.returncode}: "
                f"{(done.stderr.strip() or done.stdout.strip())[-2000:]}"
            )
        return done.stdout

    def rabbitmqctl(self, *args: str, timeout: float = 60) -> str:
        """Run ``rabbitmqctl -n <this node> ARGS`` and return its stdout; raise
        BrokerNodeError with its stderr when it fails."""
        if "-n" in args or "--node" in args or any(a.startswith("--node=") for a in args):
            raise ValueError("BrokerNode.rabbitmqctl always targets its own node: do not pass -n/--node")
        return self._ctl(*args, timeout=timeout)

    def eval(self, expression: str, timeout: float = 60) -> str:
        """``rabbitmqctl eval EXPRESSION`` on this node; its result, stripped."""
        return self._ctl("eval", expression, timeout=timeout).strip()

    def close_all_connections(self, reason: str = "closed by the test") -> str:
        """Force-close every client connection (all vhosts): clients get connection.close
        320 CONNECTION_FORCED with ``reason`` in the reply text."""
        return self._ctl("close_all_connections", "--global", reason)

    def list_connections(self) -> list[str]:
        """The client-side ``host:port`` of each connection the node has."""
        out = self._ctl("-q", "list_connections", "--no-table-headers", "peer_host", "peer_port")
        return [":".join(line.split()) for line in out.splitlines() if line.strip()]

    # ------------------------------------------------------------------ alarms

    def alarms(self) -> str:
        """``rabbit_alarm:get_alarms()`` on this node, as Erlang text (``[]``: none)."""
        return self.eval("rabbit_alarm:get_alarms().")

    # One `rabbitmqctl eval` each (a CLI call costs ~0.4 s): change the watermark, then
    # wait in the node until the memory alarm is set / cleared; ``{ok|timeout, Old}``.
    _ALARM_EVAL = (
        "Old = vm_memory_monitor:get_vm_memory_high_watermark(), "
        "vm_memory_monitor:set_vm_memory_high_watermark({new}), "
        "Wait = fun W(0) -> timeout; W(N) -> "
        "case [A || {{{{resource_limit, memory, _}}, _}} = A <- rabbit_alarm:get_alarms()] of "
        "{pattern} -> ok; _ -> timer:sleep(50), W(N - 1) end end, "
        "{{Wait(200), Old}}."
    )

    def _set_watermark(self, new: str, alarm: bool) -> str:
        out = self.eval(self._ALARM_EVAL.format(new=new, pattern="[_ | _]" if alarm else "[]"))
        m = re.fullmatch(r"\{(ok|timeout),(.*)\}", out, re.S)
        if m is None or m.group(1) != "ok":
            raise self._fail(
                f"memory alarm still {'absent' if alarm else 'set'} 10 s after setting "
                f"vm_memory_high_watermark to {new}: {out}; alarms: {self.alarms()}"
            )
        return m.group(2).strip()

    def set_memory_alarm(self) -> None:
        """Raise the memory alarm (vm_memory_high_watermark 0, as ``rabbitmqctl
        set_vm_memory_high_watermark 0``) and return once it is set.  The node then
        blocks every connection that publishes: clients announcing the connection.blocked
        capability get connection.blocked after their next publish."""
        old = self._set_watermark("0.0", alarm=True)
        if self._saved_watermark is None:
            self._saved_watermark = old

    def clear_memory_alarm(self) -> None:
        """Put the watermark back (clients get connection.unblocked) and return once the
        alarm is gone."""
        saved = self._saved_watermark or "0.4"
        if not re.fullmatch(r"[0-9.eE+-]+|\{absolute,\s*\d+\}", saved):
            saved = "0.4"
        self._set_watermark(saved, alarm=False)
        self._saved_watermark = None
