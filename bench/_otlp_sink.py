"""An OTLP/HTTP endpoint on loopback that takes trace exports and counts them, for benches."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OTLPSink:
    """``with OTLPSink() as sink``: ``sink.endpoint`` for ``OTEL_EXPORTER_OTLP_ENDPOINT``;
    ``sink.exports`` and ``sink.bytes`` count what arrived (each answered 200, empty)."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                self.rfile.read(size)
                sink.exports += 1
                sink.bytes += size
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OTLPSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
