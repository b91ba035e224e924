"""Shared fixtures for the broker integration tests (a real RabbitMQ at AMQP_URL).

- ``amqp_url``: env AMQP_URL or amqp://guest:guest@127.0.0.1:5672/, after a session-wide
  check that something listens there (tests/run starts the broker through
  tests/ensure_rabbitmq.sh; when it is down the tests fail, they are never skipped).
- ``names``: unique queue/exchange names (uuid), deleted from the broker after the test.
- ``transport`` / ``run``: every scenario is written once as ``async def scenario(api)``
  and runs on both transports.  For asyncio, ``api`` hands out the real
  ``amqwire.client.aio`` objects; for the blocking client it hands out thin proxies whose
  methods run the blocking call in a daemon thread and are awaited, so the scenario text
  is identical (``await ch.queue_declare(...)``, ``await msg.ack()``, ``await fut``).
- ``TCPProxy``: a local forwarding proxy that can go silent (freeze) or drop every
  connection (kill), for heartbeat and connection-loss tests.
- ``rabbitmqctl``: runs rabbitmqctl against the local node (skips, visibly, when the
  broker is not local or rabbitmqctl cannot be run).
- ``broker_node``: ``broker_node(**options) -> BrokerNode``, a started PRIVATE RabbitMQ
  node (tests/broker_node.py) for fault tests that stop, restart, crash, alarm or
  force-close a broker: never do that to the shared one at AMQP_URL.  Killed and removed
  after the test, whatever its outcome; when the test failed, it is stopped cleanly
  first, its logs are copied under pytest's basetemp and their tail is printed.
- ``spark``: one local SparkSession (local[2,3]: 2 threads, 3 attempts per task) for the
  whole session, started lazily by the first test that asks for it, stopped at the end.

The client is imported lazily so the codec tests in this folder never depend on it.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import pytest

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
TRANSPORTS = ("blocking", "aio")


# --------------------------------------------------------------------------- URLs


def fill_queue(ch, queue: str, n: int, body: bytes = b"x" * 100) -> None:
    """Publish ``n`` messages to ``queue`` in one batch (blocking channel ``ch``) and wait
    until the broker holds them all."""
    with ch.batch():
        for _ in range(n):
            ch.basic_publish("", queue, body)
    deadline = time.monotonic() + 30
    while ch.queue_declare(queue, passive=True).message_count < n:
        assert time.monotonic() < deadline, "the queue did not fill"
        time.sleep(0.05)


def url_host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = 5671 if parts.scheme == "amqps" else 5672
    return parts.hostname or "127.0.0.1", parts.port or default


def url_credentials(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return unquote(parts.username or "guest"), unquote(parts.password or "guest")


def with_query(url: str, **query) -> str:
    """``url`` with ``query`` merged into its query string."""
    parts = urlsplit(url)
    merged = dict(parse_qsl(parts.query))
    merged.update({k: str(v) for k, v in query.items()})
    return urlunsplit(parts._replace(query=urlencode(merged)))


def with_netloc(url: str, host: str, port: int, password: str | None = None) -> str:
    parts = urlsplit(url)
    user, pw = parts.username or "guest", parts.password or "guest"
    if password is not None:
        pw = password
    return urlunsplit(parts._replace(netloc=f"{user}:{pw}@{host}:{port}"))


def with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


def masked(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(":" + parts.password + "@", ":***@", 1)
    return url


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- broker


@pytest.fixture(scope="session")
def _broker_reachable():
    url = os.environ.get("AMQP_URL", DEFAULT_URL)
    host, port = url_host_port(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((host, port), timeout=3).close()
            return url
        except OSError as exc:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"RabbitMQ is not reachable at {masked(url)} ({host}:{port}: {exc}). "
                    "The broker tests need a real broker: start it with "
                    "`bash tests/ensure_rabbitmq.sh` (tests/run does that) or point AMQP_URL at one.",
                    pytrace=False,
                )
            time.sleep(0.5)


@pytest.fixture(scope="session")
def amqp_url(_broker_reachable) -> str:
    return _broker_reachable


@pytest.fixture(scope="session")
def server_tune(amqp_url):
    """The broker's own connection.tune proposal (channel_max, frame_max, heartbeat), read
    with a minimal handshake over a raw socket and the codec, independently of the client."""
    from amqwire.codec import PROTOCOL_HEADER, CommandParser, ConnectionStart, ConnectionStartOk, ConnectionTune

    user, password = url_credentials(amqp_url)
    host, port = url_host_port(amqp_url)
    parser = CommandParser()
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(PROTOCOL_HEADER)
        tune = None
        while tune is None:
            data = sock.recv(65536)
            assert data, "broker closed the socket during the probe handshake"
            for command in parser.feed(data):
                if isinstance(command.method, ConnectionStart):
                    response = b"\0" + user.encode() + b"\0" + password.encode()
                    sock.sendall(ConnectionStartOk({}, "PLAIN", response, "en_US").encode(0))
                elif isinstance(command.method, ConnectionTune):
                    tune = command.method
    return tune.channel_max, tune.frame_max, tune.heartbeat


# --------------------------------------------------------------------------- names


class Names:
    """Unique names; everything handed out is deleted from the broker afterwards."""

    def __init__(self):
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    @staticmethod
    def unique(kind: str) -> str:
        return f"amqwire-test-{kind}-{uuid.uuid4().hex[:12]}"

    def queue(self) -> str:
        name = self.unique("q")
        self.queues.append(name)
        return name

    def exchange(self) -> str:
        name = self.unique("x")
        self.exchanges.append(name)
        return name


def _delete_on_broker(url: str, queues: list[str], exchanges: list[str]) -> None:
    """Best-effort cleanup with pika (a test dependency), independent of the client."""
    if not (queues or exchanges):
        return
    try:
        import pika
    except ImportError:  # pragma: no cover
        return
    try:
        params = pika.URLParameters(url)
        params.socket_timeout = 5
        params.blocked_connection_timeout = 5
        conn = pika.BlockingConnection(params)
    except Exception:
        return
    try:
        ch = conn.channel()
        for kind, items in (("queue", queues), ("exchange", exchanges)):
            for name in items:
                try:
                    if not ch.is_open:
                        ch = conn.channel()
                    if kind == "queue":
                        ch.queue_delete(name)
                    else:
                        ch.exchange_delete(name)
                except Exception:
                    pass
    finally:
        try:
            conn.close()
        except Exception:
            pass


@pytest.fixture
def names(amqp_url):
    n = Names()
    yield n
    _delete_on_broker(amqp_url, n.queues, n.exchanges)


# --------------------------------------------------------------------------- rabbitmqctl


def _rabbitmqctl_path() -> str | None:
    return shutil.which("rabbitmqctl") or (
        "/usr/sbin/rabbitmqctl" if os.access("/usr/sbin/rabbitmqctl", os.X_OK) else None
    )


@pytest.fixture(scope="session")
def rabbitmqctl(amqp_url):
    """``rabbitmqctl(*args) -> stdout``.  Skips only when AMQP_URL points at another machine
    (rabbitmqctl can only drive a local node); tests/ensure_rabbitmq.sh installs it here."""
    host, _ = url_host_port(amqp_url)
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        pytest.skip(f"rabbitmqctl needs the broker on this machine; AMQP_URL points at {host}")
    path = _rabbitmqctl_path()
    if path is None:
        pytest.fail("rabbitmqctl not found (tests/ensure_rabbitmq.sh installs rabbitmq-server)")
    prefix = [path] if os.geteuid() == 0 else ["sudo", "-n", path]
    probe = subprocess.run(prefix + ["-q", "status"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.fail(f"rabbitmqctl does not work here: {probe.stderr.strip()[:300]}")

    def run(*args: str, timeout: float = 60) -> str:
        done = subprocess.run(prefix + list(args), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    return run


@pytest.fixture(scope="session")
def broker_clock(rabbitmqctl):
    """``broker_clock() -> float``: the shared broker's wall clock now, in seconds since the
    epoch.  A stream's chunk timestamps come from the broker's Erlang clock, which can lag
    the machine's for a long while: with no time warp (Erlang's default) a clock set forward
    after the node started is caught up at most 1% at a time.  Tests that read a stream from
    a timestamp take their boundaries from this clock, not from time.time()."""

    def now() -> float:
        # the node's lag behind the machine's clock, both read inside the node (the broker is
        # on this machine, so its os:system_time is Python's time.time()): no CLI start-up in it
        lag_ms = int(rabbitmqctl("eval", "erlang:system_time(millisecond) - os:system_time(millisecond).").strip())
        return time.time() + lag_ms / 1000

    return now


# --------------------------------------------------------------------------- private broker


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the item (``item.rep_call``...) for fixtures that act
    on the outcome (broker_node keeps the logs of a failed test)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


@pytest.fixture
def broker_node(request, tmp_path_factory):
    """``broker_node(plugins=(), config=None, start=True) -> BrokerNode``: a private
    RabbitMQ node of this test, started (``start=False``: not yet).  See
    tests/broker_node.py: ``url``/``port``/``name``, ``stop()``, ``kill()``, ``start()``,
    ``restart()``, ``restart_app()``, ``rabbitmqctl(*args)``, ``close_all_connections()``,
    ``set_memory_alarm()``/``clear_memory_alarm()``.  Fails (never skips) when RabbitMQ is
    not installed: tests/ensure_rabbitmq.sh installs it."""
    from broker_node import BrokerNode, BrokerNodeError

    nodes: list = []

    def make(*, plugins=(), config=None, start: bool = True, **options) -> "BrokerNode":
        try:
            node = BrokerNode(plugins=plugins, config=config, **options)
        except BrokerNodeError as exc:
            pytest.fail(str(exc), pytrace=False)
        nodes.append(node)
        if start:
            try:
                node.start()
            except BrokerNodeError as exc:
                pytest.fail(f"the private RabbitMQ node did not start: {exc}", pytrace=False)
        return node

    yield make

    failed = any(
        getattr(getattr(request.node, "rep_" + when, None), "failed", False) for when in ("setup", "call")
    )
    errors = []
    for node in reversed(nodes):
        keep = tmp_path_factory.mktemp("broker-node-logs") / node.name if failed else None
        try:
            # passed: SIGKILL (its data goes anyway); failed: a clean stop flushes its log
            node.cleanup(keep_logs=keep, graceful=failed)
        except Exception as exc:  # noqa: BLE001 - report after every node was cleaned up
            errors.append(f"{node.name}: {exc}")
        if keep is not None:  # complete now that the node stopped
            print(f"\n{node.name}: logs kept in {keep}\n{node.log_tail(30, log_dir=keep)}", file=sys.stderr)
    if errors:
        pytest.fail("private RabbitMQ node teardown: " + "; ".join(errors), pytrace=False)


# --------------------------------------------------------------------------- TCP proxy


class TCPProxy:
    """A local TCP forwarder to ``(host, port)``.

    ``freeze()`` makes every connection open at that moment silent in both directions
    (bytes are read and dropped, sockets stay open); connections accepted later forward
    normally.  ``hold()`` keeps every byte of the open connections (both ways) and
    ``release()`` sends them on, in order: a broker that answers late.  ``kill()`` closes
    every open connection abruptly.
    """

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.pairs: list[dict] = []
        self.accepted = 0
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True, name="tcpproxy-accept").start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            pair = {"socks": (client, upstream), "frozen": False, "held": None, "hold_lock": threading.Lock()}
            with self.lock:
                self.pairs.append(pair)
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True,
                                 name="tcpproxy-pump").start()

    @staticmethod
    def _pump(pair, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with pair["hold_lock"]:
                    if pair["held"] is not None:
                        pair["held"].append((dst, data))
                        continue
                if not pair["frozen"]:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in pair["socks"]:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def freeze(self):
        with self.lock:
            for pair in self.pairs:
                pair["frozen"] = True

    def hold(self):
        with self.lock:
            for pair in self.pairs:
                with pair["hold_lock"]:
                    if pair["held"] is None:
                        pair["held"] = []

    def release(self):
        with self.lock:
            pairs = list(self.pairs)
        for pair in pairs:
            with pair["hold_lock"]:
                held, pair["held"] = pair["held"] or [], None
                for dst, data in held:
                    try:
                        dst.sendall(data)
                    except OSError:
                        pass

    def kill(self):
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair["socks"]:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self):
        self.closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        self.kill()


@pytest.fixture
def tcp_proxy(amqp_url):
    """``tcp_proxy() -> (TCPProxy, url)``: a proxy to the broker and the AMQP URL through
    it; all closed after the test."""
    made: list[TCPProxy] = []
    host, port = url_host_port(amqp_url)

    def make():
        proxy = TCPProxy(host, port)
        made.append(proxy)
        return proxy, with_netloc(amqp_url, "127.0.0.1", proxy.port)

    yield make
    for proxy in made:
        proxy.close()


# --------------------------------------------------------------------------- bounded waits
#
# A test fails, it never hangs: every wait in a test has its own bound, well inside the
# test's pytest timeout, and says what it waited for when it gives up.


def timeout_of_test(node) -> float:
    """The pytest-timeout of the test ``node`` (its ``timeout`` mark, else ``--timeout``,
    else the ini's ``timeout``); 0 when there is none."""
    mark = node.get_closest_marker("timeout")
    if mark is not None and (mark.args or "timeout" in mark.kwargs):
        value = mark.args[0] if mark.args else mark.kwargs["timeout"]
    else:
        value = node.config.getoption("timeout", None)
        if value is None:
            value = node.config.getini("timeout")
    return float(value or 0)


class WaitTimedOut(AssertionError):
    """A test's own wait gave up (not the code under test's TimeoutError): the message
    names what never came."""


class Deadline:
    """One budget for several waits (threads to join, futures to settle): ``left()`` is
    what remains of it; ``fail(doing)`` raises an AssertionError naming what was waited for."""

    def __init__(self, seconds: float, what: str):
        self.seconds = seconds
        self.what = what
        self.end = time.monotonic() + seconds

    def left(self, at_least: float = 0.0) -> float:
        return max(at_least, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def fail(self, detail: str = "") -> WaitTimedOut:
        return WaitTimedOut(f"timed out after {self.seconds:g} s waiting for {self.what}"
                              + (f": {detail}" if detail else ""))

    def join(self, threads, detail: str = "") -> None:
        """Join ``threads`` within what is left; fail naming the ones still alive."""
        for t in threads:
            t.join(self.left())
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            raise self.fail(f"{detail + ' ' if detail else ''}thread(s) still running: {', '.join(alive)}")

    def result(self, future, detail: str = ""):
        """``future.result(...)`` (a concurrent or PublishFuture-like future) within what is
        left of the budget."""
        try:
            return future.result(self.left(0.001))
        except TimeoutError as exc:
            if not future.done():  # the wait gave up, not the future's own outcome (SendTimeout)
                raise self.fail(detail or f"{future!r} to settle") from exc
            raise


async def within(awaitable, seconds: float, what: str):
    """Await ``awaitable`` for at most ``seconds``; past that, cancel it and fail with
    WaitTimedOut (an AssertionError) naming ``what`` (chained to the cancellation: the traceback shows where
    it was stuck).  Unlike a bare ``asyncio.wait_for`` the message says what never came, and
    a TimeoutError raised by the awaited code itself passes through unchanged."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except BaseException:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.wait({task}, timeout=5)  # let it unwind (bounded: it may ignore the cancel)
    stuck = None
    if task.done():
        try:
            task.result()
        except BaseException as exc:  # noqa: BLE001 - only kept as the failure's cause
            stuck = exc
    raise WaitTimedOut(f"timed out after {seconds:g} s waiting for {what}") from stuck


# --------------------------------------------------------------------------- transports


def _resolve(fut: asyncio.Future, value=None, exc=None):
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


async def in_thread(fn, *args, **kwargs):
    """Run ``fn`` in a fresh daemon thread and await its result.  (Not asyncio.to_thread: a
    hung blocking call must not keep asyncio.run from returning after a test timed out.)"""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def target():
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            try:
                loop.call_soon_threadsafe(_resolve, fut, None, exc)
            except RuntimeError:
                pass
        else:
            try:
                loop.call_soon_threadsafe(_resolve, fut, value)
            except RuntimeError:
                pass

    threading.Thread(target=target, daemon=True, name="amqwire-test-call").start()
    return await fut


# Methods of the blocking objects that do not wait: called directly, not in a thread.
_SYNC_METHODS = {"done", "add_done_callback", "add_on_return_callback", "cancelled", "exception",
                 "set_default_consumer"}
_SYNC_METHODS |= {f"{verb}_{kind}_listener" for verb in ("add", "remove") for kind in (
    "close", "blocked", "unblocked", "recovery_started", "recovery_succeeded", "recovery_failed",
    "flow", "confirm", "consumer")}


class SyncProxy:
    """Makes a blocking client object look like its asyncio twin: its methods become
    coroutine functions running in a daemon thread; attributes pass through; client
    objects in results (channels, consumers, messages, futures) are proxied too; callables
    passed in (callbacks) get proxied arguments."""

    __slots__ = ("_obj", "_api", "_iter")

    def __init__(self, obj, api):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_api", api)
        object.__setattr__(self, "_iter", None)

    def __getattr__(self, name):
        value = getattr(self._obj, name)
        api = self._api
        if callable(value) and not isinstance(value, type) and not _is_client_object(value):
            if name in _SYNC_METHODS:
                def call_now(*args, **kwargs):
                    args, kwargs = api._wrap_callables(args, kwargs)
                    return api.wrap(value(*args, **kwargs))
                return call_now

            async def call(*args, **kwargs):
                args, kwargs = api._wrap_callables(args, kwargs)
                return api.wrap(await in_thread(value, *args, **kwargs))
            return call
        return api.wrap(value)

    def __setattr__(self, name, value):
        setattr(self._obj, name, value)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._iter is None:
            object.__setattr__(self, "_iter", iter(self._obj))
        sentinel = object()
        item = await in_thread(next, self._iter, sentinel)
        if item is sentinel:
            raise StopAsyncIteration
        return self._api.wrap(item)

    async def __aenter__(self):
        return self._api.wrap(await in_thread(self._obj.__enter__))

    async def __aexit__(self, *exc_info):
        return await in_thread(self._obj.__exit__, *exc_info)

    def __await__(self):
        # PublishFuture: awaiting it waits for its result in a thread
        return in_thread(self._obj.result).__await__()

    def __eq__(self, other):
        return self._obj == (other._obj if isinstance(other, SyncProxy) else other)

    def __hash__(self):
        return hash(self._obj)

    def __repr__(self):
        return f"SyncProxy({self._obj!r})"


def _is_client_object(value) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("amqwire.client") and not isinstance(value, BaseException)


class Api:
    """What a scenario gets: ``connect``, ``pump``, ``next``, names, errors, ..."""

    def __init__(self, transport: str, url: str, names: Names):
        import amqwire.client.errors as errors
        from amqwire.codec import BasicProperties

        self.name = transport
        self.url = url
        self.names = names
        self.errors = errors
        self.BasicProperties = BasicProperties
        self.username, self.password = url_credentials(url)
        self.host, self.port = url_host_port(url)
        self._connections: list = []
        self._proxies: list[TCPProxy] = []
        self._wrapped: dict[int, SyncProxy] = {}
        self._iterators: dict[int, tuple] = {}
        if transport == "aio":
            import amqwire.client.aio as module
        else:
            import amqwire.client.blocking as module
        self.module = module

    # -- wrapping (blocking only)
    def wrap(self, value):
        if self.name == "aio" or not _is_client_object(value):
            return value
        proxy = self._wrapped.get(id(value))
        if proxy is None or proxy._obj is not value:
            proxy = SyncProxy(value, self)
            self._wrapped[id(value)] = proxy
        return proxy

    def _wrap_callables(self, args, kwargs):
        def adapt(fn):
            if callable(fn) and not _is_client_object(fn) and not isinstance(fn, SyncProxy):
                return lambda *a: fn(*(self.wrap(x) for x in a))
            return fn
        return tuple(adapt(a) for a in args), {k: adapt(v) for k, v in kwargs.items()}

    # -- connections
    async def connect(self, url=None, **kwargs):
        target = self.url if url is None else url
        if self.name == "aio":
            conn = await self.module.connect(target, **kwargs)
        else:
            conn = self.wrap(await in_thread(self.module.connect, target, **kwargs))
        self._connections.append(conn)
        return conn

    def proxy(self) -> TCPProxy:
        p = TCPProxy(self.host, self.port)
        self._proxies.append(p)
        return p

    def proxy_url(self, proxy: TCPProxy, **query) -> str:
        url = with_netloc(self.url, "127.0.0.1", proxy.port)
        return with_query(url, **query) if query else url

    async def pump(self, conn, predicate, timeout: float = 5.0) -> bool:
        """Let the client deliver events (consumer/return callbacks, blocked state) until
        ``predicate()`` holds or ``timeout`` passes; returns ``predicate()``."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                break
            if self.name == "aio":
                await asyncio.sleep(0.01)
            else:
                await conn.process_events(timeout=0.05)
        return bool(predicate())

    async def next(self, consumer, timeout: float = 10.0):
        """The consumer's next message through its (async) iterator, with a timeout."""
        iterator = self._iterators.get(id(consumer))
        if iterator is None or iterator[0] is not consumer:
            iterator = self._iterators[id(consumer)] = (consumer, consumer.__aiter__())
        return await within(iterator[1].__anext__(), timeout, f"the next message of {consumer!r}")

    # -- URL helpers
    with_query = staticmethod(with_query)
    closed_port = staticmethod(closed_port)

    def url_with(self, *, host=None, port=None, password=None, path=None, url=None) -> str:
        """``url`` (default: AMQP_URL) with host/port/password/path replaced."""
        base = self.url if url is None else url
        h, p = url_host_port(base)
        out = with_netloc(base, host or h, port or p, password)
        return with_path(out, path) if path is not None else out

    async def sleep(self, seconds: float):
        await asyncio.sleep(seconds)

    async def wait(self, fut, timeout: float = 10.0):
        """Await a publish future (asyncio.Future or proxied PublishFuture) with a timeout."""
        if self.name == "aio":
            return await within(fut, timeout, "a publish's confirm")
        try:
            return await in_thread(fut._obj.result, timeout)
        except TimeoutError as exc:
            if fut._obj.done():  # the future's own outcome
                raise
            raise WaitTimedOut(f"timed out after {timeout:g} s waiting for a publish's confirm") from exc

    async def aclose(self):
        for conn in reversed(self._connections):
            try:
                await asyncio.wait_for(conn.close(), 5)
            except BaseException:  # noqa: BLE001 - cleanup after the scenario, best effort
                pass
        for p in self._proxies:
            p.close()


@pytest.fixture(params=TRANSPORTS)
def transport(request) -> str:
    return request.param


# What the scenario's own bound must leave of the test's pytest timeout: its clean-up (5 s a
# connection), fixtures' set-up and teardown, and the margin for the failure to be reported.
RUN_MARGIN = 0.25


@pytest.fixture
def run(request, transport, amqp_url, names):
    """``run(scenario, timeout=60)``: ``asyncio.run`` the scenario with an :class:`Api`
    for this test's transport, then close whatever it left open.  The scenario fails
    (naming itself) after ``timeout`` seconds, which must stay well inside the test's
    pytest timeout (at most 3/4 of it), so the failure shows instead of pytest's timeout."""
    limit = timeout_of_test(request.node)

    def runner(scenario, timeout: float = 60.0):
        if limit and timeout > limit * (1 - RUN_MARGIN):
            pytest.fail(f"run(timeout={timeout:g}) leaves no margin inside the test's pytest timeout of {limit:g} s: "
                        f"at most {limit * (1 - RUN_MARGIN):g}", pytrace=False)
        what = f"the scenario {getattr(scenario, '__qualname__', scenario)!s} ({transport}) to finish"

        async def main():
            api = Api(transport, amqp_url, names)
            try:
                await within(scenario(api), timeout, what)
            finally:
                await api.aclose()

        asyncio.run(main())

    return runner


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run, started on first use only (the tests that
    do not ask for it never start a JVM) and stopped at the end of the session.

    ``local[2,3]``: two worker threads, and up to 3 attempts per task, so a task that
    fails (a broker connection closed under it) is retried as on a cluster.  Workers run
    this interpreter (PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON default to sys.executable)."""
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("amqwire-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


# --------------------------------------------------------------------------- a private node for fault tests


@pytest.fixture(scope="module")
def _fault_node_module():
    from broker_node import BrokerNode

    node = BrokerNode()
    node.start()
    yield node
    node.cleanup(graceful=False)


@pytest.fixture
def fault_node(_fault_node_module):
    """The module's private node, running, without an alarm, without client connections."""
    node = _fault_node_module
    if not node.is_running:
        node.start()
    try:
        socket.create_connection(("127.0.0.1", node.port), timeout=2).close()
    except OSError:
        node.rabbitmqctl("start_app")
    yield node
    if node.is_running and node._saved_watermark is not None:  # a test failed with the alarm set
        try:
            node.clear_memory_alarm()
        except Exception:  # noqa: BLE001 - a broken node is restarted for the next test
            node.kill()


# --------------------------------------------------------------------------- a private node with the stream plugin


def start_stream_node(**options):
    """A started private node (tests/broker_node.py) with the rabbitmq_stream plugin, its
    stream listener on a free port of its own: ``node.stream_port``, ``node.stream_url``
    (``rabbitmq-stream://guest:guest@127.0.0.1:<port>/``).  Never the shared broker, which
    has no plugin enabled and must keep it so."""
    from broker_node import BrokerNode, _pick_ports

    (port,) = _pick_ports(1)
    config = {"stream.listeners.tcp.1": f"127.0.0.1:{port}"}
    config.update(options.pop("config", None) or {})
    node = BrokerNode(plugins=["rabbitmq_stream"], config=config, **options)
    node.stream_port = port
    node.stream_url = f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/"
    node.start()
    wait_stream_listener(node)
    return node


def wait_stream_listener(node, timeout: float = 30.0) -> None:
    """Until the node's stream listener accepts connections (it opens with the plugin,
    moments after the AMQP listener)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", node.stream_port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"the stream listener on port {node.stream_port} did not open "
                                     f"within {timeout} s") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def stream_node():
    """One private node with the stream plugin for a test module (started once: a node
    takes seconds to boot), running when each test starts; killed and removed after."""
    node = start_stream_node()
    yield node
    node.cleanup(graceful=False)


@pytest.fixture
def stream_url(stream_node) -> str:
    """The ``rabbitmq-stream://`` URL of the module's node, started again if a test stopped it."""
    if not stream_node.is_running:
        stream_node.start()
    wait_stream_listener(stream_node)
    return stream_node.stream_url
