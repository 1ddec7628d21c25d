"""A TLS server on loopback that counts the handshakes it completes: the far end's own count of
how many connections clients opened."""

from __future__ import annotations

import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def make_cert(directory: Path, name: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate and key for ``name`` (``openssl``), valid one day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-keyout", str(key), "-out", str(cert),
            "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs do

    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.server.requests += 1  # type: ignore[attr-defined]

    def log_message(self, *args: Any) -> None:
        return None


class TLSCountingServer:
    """HTTPS on 127.0.0.1 (a free port) with ``cert``; ``handshakes`` and ``requests`` served."""

    def __init__(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.handshakes = 0
        self._lock = threading.Lock()

        def counted(sock: Any, name: str | None, ctx: Any) -> None:
            with self._lock:
                self.handshakes += 1

        # The SNI callback runs once per handshake, whatever the client resumes or not.
        context.sni_callback = counted  # type: ignore[assignment]
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.requests = 0  # type: ignore[attr-defined]
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def requests(self) -> int:
        return int(self._httpd.requests)  # type: ignore[attr-defined]

    def url(self, path: str = "/") -> str:
        return f"https://localhost:{self.port}{path}"

    def __enter__(self) -> TLSCountingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
