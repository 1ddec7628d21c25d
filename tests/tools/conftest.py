"""Fixtures for the safe-tools tests: tiny in-process HTTP servers that count what reaches them."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

Route = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Server:
    """A running server: ``hits`` lists every request that reached it."""

    host: str
    port: int
    hits: list[Seen] = field(default_factory=list)
    routes: dict[str, Route] = field(default_factory=dict)

    @property
    def authority(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://{self.authority}{path}"


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            server.hits.append(Seen(self.command, self.path, dict(self.headers.items())))
            route = server.routes.get(self.path.split("?", 1)[0])
            if route is not None:
                route(self)
                return
            body = b"canary"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = _any

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


def start_server(host: str, port: int = 0) -> tuple[Server, ThreadingHTTPServer]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Bound(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            # Clients hanging up mid-response is what several tests are about.
            return

    info = Server(host=host, port=port)
    httpd = Bound((host, port), _handler(info))
    info.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return info, httpd


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Start a server on the given loopback address; skipped where it cannot be bound."""
    running: list[ThreadingHTTPServer] = []

    def start(host: str, port: int = 0) -> Server:
        try:
            info, httpd = start_server(host, port)
        except OSError as exc:
            pytest.skip(f"cannot bind {host}: {exc}")
        running.append(httpd)
        return info

    yield start
    for httpd in running:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="session")
def _canary_servers() -> Iterator[dict[str, Server]]:
    running: list[ThreadingHTTPServer] = []
    found: dict[str, Server] = {}
    for name, host in (("v4", "127.0.0.1"), ("v6", "::1")):
        try:
            info, httpd = start_server(host)
        except OSError:
            continue
        running.append(httpd)
        found[name] = info
    yield found
    for httpd in running:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def canaries(_canary_servers: dict[str, Server]) -> dict[str, Server]:
    """Servers no refused request may ever reach: on 127.0.0.1 and, if it exists, on ::1."""
    assert "v4" in _canary_servers, "cannot bind 127.0.0.1"
    for server in _canary_servers.values():
        server.hits.clear()
        server.routes.clear()
    return _canary_servers


@pytest.fixture
def canary(canaries: dict[str, Server]) -> Server:
    """The canary on 127.0.0.1."""
    return canaries["v4"]


def respond(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> None:
    """Send a complete response from a route."""
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


@pytest.fixture
def reply() -> Callable[..., None]:
    return respond
