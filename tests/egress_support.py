"""Local destinations for the egress proxy's tests and bench: an echo server over HTTP and over
HTTPS (its own test CA), and a loopback forwarder to a proxy's Unix socket (the bridge's own
forwarding code, run in this process)."""

from __future__ import annotations

import base64
import datetime
import gzip
import http.server
import ipaddress
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agentfleet.sandbox.egress.bridge_main import forward

SECRET = "sk-egress-test-7f3a9c2e51d84b06"
"""The credential value the tests inject (from the environment variable ``EGRESS_TEST_TOKEN``)."""


# Bodies of text like a real one (a uniform run of one byte is a worst case for substring search).
_BLOCK = os.urandom(32 * 1024).hex().encode()


class EchoHandler(http.server.BaseHTTPRequestHandler):
    """``/echo``: the request's headers as JSON (and its Authorization in base64, ``b64``);
    ``/bytes?n=N``: N bytes of hex text; ``/gzip``: the Authorization header, gzip-encoded; ``/split``: the
    Authorization header in two chunks cut through its middle; POST ``/echo``: the body's length
    and headers."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms delayed-ACK stall
    seen: list[tuple[str, str]]  # (path, Authorization) of each request, in order

    def _send(self, body: bytes, *, encoding: str | None = None) -> None:
        self.send_response(200)
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Seen-Authorization", self.headers.get("Authorization", ""))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        auth = self.headers.get("Authorization", "").encode()
        if self.path.startswith("/bytes"):
            size = int(self.path.split("n=", 1)[1])
            self._send((_BLOCK * (size // len(_BLOCK) + 1))[:size])
        elif self.path == "/gzip":
            self._send(gzip.compress(b"seen: " + auth), encoding="gzip")
        elif self.path == "/split":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = len(auth) // 2
            for part in (b"seen: " + auth[:half], auth[half:] + b" end"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            encoded = base64.b64encode(auth).decode()
            self._send(
                json.dumps({"path": self.path, "headers": dict(self.headers), "b64": encoded}).encode()
            )

    def do_POST(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self._send(json.dumps({"length": len(body), "headers": dict(self.headers)}).encode())

    def log_message(self, *_: object) -> None:
        return


class Echo:
    """A running echo server: its ``port`` and what it ``seen`` (path, Authorization)."""

    def __init__(self, port: int, seen: list[tuple[str, str]]) -> None:
        self.port = port
        self.seen = seen


@contextmanager
def echo_server(context: ssl.SSLContext | None = None) -> Iterator[Echo]:
    """An echo server on 127.0.0.1 (TLS with ``context``)."""
    seen: list[tuple[str, str]] = []
    handler = type("Handler", (EchoHandler,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Echo(server.server_address[1], seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_tls(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 and the PEM of the CA that signed it (the destination's
    own CA, which the proxy's upstream side must trust)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "egress test destination CA")])
    start, end = _now() - datetime.timedelta(hours=1), _now() + datetime.timedelta(days=1)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain = directory / "server.pem"
    chain.write_bytes(pem + cert.public_bytes(serialization.Encoding.PEM))
    ca_path = directory / "destination-ca.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    return context, ca_path


test_tls.__test__ = False  # type: ignore[attr-defined]


@contextmanager
def loopback_forwarder(socket_path: Path) -> Iterator[int]:
    """The bridge's forwarding, in this process: 127.0.0.1:<port> to ``socket_path``; yields the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    thread = threading.Thread(target=forward, args=(listener, str(socket_path)), daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
