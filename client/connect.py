"""What both transports need to reach a broker: TLS contexts and sockets."""
from __future__ import annotations

import socket
import ssl
from typing import Optional

from .url import ConnectionParameters


def make_ssl_context(params: ConnectionParameters) -> ssl.SSLContext:
    """A client TLS context: certificate and hostname verification on unless verify=false."""
    context = ssl.create_default_context(cafile=params.cafile)
    if params.certfile:
        context.load_cert_chain(params.certfile, params.keyfile)
    if not params.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def unverified_tls(params: ConnectionParameters, ssl_context: Optional[ssl.SSLContext]) -> Optional[str]:
    """What a TLS connection does not check about the broker (None: it checks everything,
    or the connection is not TLS)."""
    if ssl_context is not None:
        if ssl_context.verify_mode == ssl.CERT_NONE:
            return "the broker's certificate is not verified"
        if not ssl_context.check_hostname:
            return "the broker's host name is not checked against its certificate"
        return None
    if params.ssl and not params.verify:
        return "the broker's certificate is not verified (verify=false)"
    return None


def server_hostname(params: ConnectionParameters) -> str:
    return params.server_hostname or params.host


def open_socket(params: ConnectionParameters, ssl_context: Optional[ssl.SSLContext]) -> socket.socket:
    """A connected TCP socket (wrapped in TLS for amqps://), with TCP_NODELAY."""
    sock = socket.create_connection((params.host, params.port), timeout=params.connection_timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if params.ssl or ssl_context is not None:
            context = ssl_context or make_ssl_context(params)
            sock = context.wrap_socket(sock, server_hostname=server_hostname(params))
    except BaseException:
        sock.close()
        raise
    return sock
