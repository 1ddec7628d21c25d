"""Tiny in-process HTTP servers for the safe-tools tests: they count what reaches them."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

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

        do_GET = do_POST = do_HEAD = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _any

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


def open_redirect(handler: BaseHTTPRequestHandler) -> None:
    """A route that redirects (302) wherever its ``next`` query parameter says, decoded once.

    A header is Latin-1, so non-ASCII characters go out percent-encoded, as real servers send them.
    """
    target = parse_qs(urlsplit(handler.path).query).get("next", ["/"])[0]
    respond(handler, 302, headers={"Location": quote(target, safe=":/?#[]@!$&'()*+,;=%")})
