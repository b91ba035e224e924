"""amqps:// end to end: a TLS terminator in front of the real broker, with a CA and a server
certificate made for the test by openssl.  Verification is on by default: an unknown CA or
a wrong host name fails the connection; the CA from the URL (cafile) or an SSLContext makes
it work; verify=false turns checking off."""
import asyncio
import logging
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
    return make_pki(tmp_path_factory.mktemp("pki"))


def make_pki(d):
    """In folder ``d``: ca.pem (a CA), server.pem and server.key (localhost, 127.0.0.1)."""
    if openssl is None:
        pytest.fail("openssl is needed to make test certificates (Debian package openssl)")
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


# --------------------------------------------------------------------------- honesty about TLS


def _unverified_warnings(caplog):
    return [r for r in caplog.records
            if r.name == "amqwire.client" and r.levelno == logging.WARNING and "impersonate" in r.getMessage()]


def test_verify_false_warns_once_per_connection_naming_the_host(tls_url, caplog):
    from amqwire.client import aio, connect

    caplog.set_level(logging.WARNING, logger="amqwire.client")
    with connect(f"{tls_url}?verify=false") as conn:
        conn.channel().queue_declare("", exclusive=True)
    warnings = _unverified_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "localhost" in warnings[0].getMessage() and "not verified" in warnings[0].getMessage()

    caplog.clear()

    async def scenario():
        async with aio.connect(f"{tls_url}?verify=false") as conn:
            await (await conn.channel()).queue_declare("", exclusive=True)

    asyncio.run(scenario())
    assert [r.getMessage() for r in _unverified_warnings(caplog)] == [warnings[0].getMessage()]


def test_an_unverifying_ssl_context_warns_and_a_verifying_one_does_not(tls_url, pki, caplog):
    from amqwire.client import aio, connect

    caplog.set_level(logging.WARNING, logger="amqwire.client")
    verifying = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with connect(tls_url, ssl_context=verifying):
        pass
    assert not _unverified_warnings(caplog)
    no_host_check = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    no_host_check.check_hostname = False
    with connect(tls_url, ssl_context=no_host_check):
        pass
    unverifying = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    unverifying.check_hostname = False
    unverifying.verify_mode = ssl.CERT_NONE

    async def scenario():
        async with aio.connect(tls_url, ssl_context=unverifying):
            pass

    asyncio.run(scenario())
    texts = [r.getMessage() for r in _unverified_warnings(caplog)]
    assert len(texts) == 2, texts
    assert "host name is not checked" in texts[0] and "localhost" in texts[0]
    assert "certificate is not verified" in texts[1] and "localhost" in texts[1]


def test_an_ssl_context_with_an_amqp_url_displays_as_tls(tls_url, pki):
    from amqwire.client import aio, connect

    plain_scheme = "amqp://" + tls_url.split("://", 1)[1]
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with connect(plain_scheme, ssl_context=context) as conn:
        assert conn.params.ssl
        assert str(conn.params).startswith("amqps://") and "amqps://" in repr(conn)

    async def scenario():
        async with aio.connect(plain_scheme, ssl_context=context) as conn:
            assert conn.params.ssl and str(conn.params).startswith("amqps://")

    asyncio.run(scenario())


@pytest.mark.parametrize("transport", ["blocking", "asyncio"])
def test_external_without_a_client_certificate_says_so(transport):
    from amqwire.client import aio, connect

    url = "amqps://127.0.0.1:1/?auth_mechanism=EXTERNAL"   # nothing is contacted
    async def open_async():
        await aio.connect(url)

    with pytest.raises(ValueError) as info:
        if transport == "blocking":
            connect(url)
        else:
            asyncio.run(open_async())
    text = str(info.value)
    assert "no client certificate was configured" in text, text
    assert "guest" not in text


def test_external_refused_by_the_broker_never_names_a_user():
    """A peer that offers EXTERNAL and closes the socket after start-ok: the error speaks of
    the certificate, not of the (unused) user name."""
    from amqwire.client import ConnectionParameters, connect
    from amqwire.client.errors import AuthenticationError
    from amqwire.codec import ConnectionStart

    start = ConnectionStart(0, 9, {"product": "fake"}, b"EXTERNAL PLAIN", b"en_US").encode(0)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.recv(8)
            conn.sendall(start)
            conn.recv(4096)   # start-ok

    threading.Thread(target=serve, daemon=True).start()
    # certfile set, plain TCP: the client cannot tell; the broker decides (and refuses)
    params = ConnectionParameters(host="127.0.0.1", port=listener.getsockname()[1], auth_mechanism="EXTERNAL",
                                  certfile="/not/read/over/plain/tcp.pem", connection_timeout=5)
    try:
        with pytest.raises(AuthenticationError) as info:
            connect(params)
    finally:
        listener.close()
    text = str(info.value)
    assert "client certificate" in text and "guest" not in text, text
