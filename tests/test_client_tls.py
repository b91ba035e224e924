"""amqps:// end to end: a TLS terminator in front of the real broker, with a CA and a server
certificate made for the test by openssl.  Verification is on by default: an unknown CA or
a wrong host name fails the connection; the CA from the URL (cafile) or an SSLContext makes
it work; verify=false turns checking off."""
import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import threading
from urllib.parse import quote

import pytest

from conftest import url_credentials, url_host_port

openssl = shutil.which("openssl")


def _run(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, and a server certificate for localhost / 127.0.0.1 signed by it."""
    if openssl is None:
        pytest.fail("openssl is needed to make test certificates (Debian package openssl)")
    d = tmp_path_factory.mktemp("pki")
    _run(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=amqwire test CA",
         "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    _run(openssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
         "-keyout", "server.key", "-out", "server.csr", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _run(openssl, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem", cwd=d)
    return d


class TLSTerminator:
    """Accepts TLS on a local port and forwards the plain bytes to the broker."""

    def __init__(self, pki, broker):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
        self.broker = broker
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw):
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()  # the client refused our certificate: that is the point of some tests
            return
        upstream = socket.create_connection(self.broker)
        lock = threading.Lock()

        def pump(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    if dst is client:
                        with lock:
                            dst.sendall(data)
                    else:
                        dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (client, upstream):
                    try:
                        s.close()
                    except OSError:
                        pass

        # One thread reads the TLS socket while the other writes it; the lock keeps
        # writers to one.
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)

    def close(self):
        self.closed = True
        self.listener.close()


@pytest.fixture
def tls_url(pki, amqp_url):
    terminator = TLSTerminator(pki, url_host_port(amqp_url))
    user, password = url_credentials(amqp_url)
    yield f"amqps://{quote(user, safe='')}:{quote(password, safe='')}@localhost:{terminator.port}/"
    terminator.close()


def test_blocking_tls_verifies_by_default(tls_url, pki):
    from amqwire.client import AMQPConnectionError, connect

    with pytest.raises(AMQPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        connect(tls_url, connection_timeout=5)

    with connect(f"{tls_url}?cafile={quote(str(pki / 'ca.pem'))}") as conn:
        assert conn.params.ssl
        with conn.channel() as ch:
            queue = ch.queue_declare("", exclusive=True).queue
            body = os.urandom(300_000)  # several TLS records, and the zero-copy path
            ch.confirm_select()
            ch.basic_publish("", queue, body)
            message = ch.basic_get(queue, no_ack=True)
            assert message is not None and message.body == body


def test_blocking_tls_checks_the_host_name(tls_url, pki):
    from amqwire.client import AMQPConnectionError, connect

    # The certificate names localhost and 127.0.0.1; expect another name:
    with pytest.raises(AMQPConnectionError, match="Hostname mismatch"):
        connect(f"{tls_url}?cafile={quote(str(pki / 'ca.pem'))}&server_hostname=rabbit.example",
                connection_timeout=5)


def test_blocking_tls_context_and_verify_off(tls_url, pki):
    from amqwire.client import connect

    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with connect(tls_url, ssl_context=context) as conn:
        assert conn.channel().queue_declare("", exclusive=True).queue
    with connect(f"{tls_url}?verify=false") as conn:
        assert conn.is_open


def test_aio_tls(tls_url, pki):
    from amqwire.client import AMQPConnectionError, aio

    async def scenario():
        with pytest.raises(AMQPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await aio.connect(tls_url, connection_timeout=5)
        async with aio.connect(f"{tls_url}?cafile={quote(str(pki / 'ca.pem'))}") as conn:
            async with conn.channel() as ch:
                queue = (await ch.queue_declare("", exclusive=True)).queue
                body = os.urandom(300_000)
                await ch.confirm_select()
                await ch.basic_publish("", queue, body)
                message = await ch.basic_get(queue, no_ack=True)
                assert message is not None and message.body == body

    asyncio.run(scenario())
