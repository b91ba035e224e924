"""A slow broker in user space: a TCP forwarder that holds what the broker sends for
``delay`` seconds before passing it on (this kernel has no netem).

Each chunk read from the broker is stamped with ``arrival + delay`` and written to the
client, in order, once that time has come: every reply (handshake, confirms, deliveries)
arrives ``delay`` late, while what the client sends passes at once.  ``delay`` may be
changed at any time; it applies to what the broker sends from then on.

``jitter`` adds a uniform random ``-jitter..+jitter`` to each chunk's delay (a chunk is
never sent before the one read ahead of it: a TCP stream keeps its order), and
``both_ways=True`` delays what the client sends as well: a slow link rather than a slow
broker (tests/netns_cluster.py).
"""
from __future__ import annotations

import logging
import queue
import random
import socket
import threading
import time

log = logging.getLogger("tests.delay_proxy")

_END = object()


class DelayProxy:
    def __init__(self, host: str, port: int, delay: float = 0.0, jitter: float = 0.0, both_ways: bool = False) -> None:
        if jitter < 0 or jitter > delay:
            raise ValueError(f"jitter must be in 0..delay ({delay}), got {jitter}")
        self.target = (host, port)
        self.delay = delay
        self.jitter = jitter
        self.both_ways = both_ways
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="delay-proxy-accept").start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError as exc:
                log.warning("delay proxy: cannot reach %s:%d: %s", *self.target, exc)
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            held: queue.Queue = queue.Queue()
            jobs = [(self._read_late, (upstream, held)), (self._write_late, (held, client, upstream))]
            if self.both_ways:
                sent: queue.Queue = queue.Queue()
                jobs += [(self._read_late, (client, sent)), (self._write_late, (sent, upstream, client))]
            else:
                jobs.append((self._pump, (client, upstream)))
            for target, args in jobs:
                threading.Thread(target=target, args=args, daemon=True, name="delay-proxy-pump").start()

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Client to broker: at once."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(src, dst)

    def _read_late(self, upstream: socket.socket, held: queue.Queue) -> None:
        last_due = 0.0
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                late = self.delay + (random.uniform(-self.jitter, self.jitter) if self.jitter else 0.0)
                last_due = max(last_due, time.monotonic() + late)
                held.put((last_due, data))
        except OSError:
            pass
        finally:
            held.put(_END)

    def _write_late(self, held: queue.Queue, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                item = held.get()
                if item is _END:
                    break
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                client.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(client, upstream)

    def close(self) -> None:
        self.closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        with self._lock:
            socks, self._sockets = self._sockets, []
        self._shut(*socks)
        for sock in socks:
            sock.close()
