"""HTTP plumbing for the mock server: a threaded HTTP/1.1 server that can be stopped cleanly.

One thread per connection, so slow (delayed) replies never queue behind each other.
``TrackedHTTPServer.close_connections`` shuts the open sockets, so keep-alive connections do
not keep their threads waiting for a next request after the server stops.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Exchange", "TrackedHTTPServer"]

log = logging.getLogger("agentfleet.mock_llm.server")


class Exchange:
    """One request and its response: what a route handler reads and writes."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler
        self.method = handler.command
        self.path = handler.path.split("?", 1)[0]
        self.headers = handler.headers
        self.status: int | None = None
        self.before_send: Callable[[int], None] | None = None

    def header(self, name: str) -> str | None:
        """A request header, or None."""
        return self.headers.get(name)

    @property
    def body_length(self) -> int:
        """The request's ``Content-Length`` in bytes (0 if absent or unreadable)."""
        try:
            return max(0, int(self.headers.get("Content-Length") or 0))
        except ValueError:
            return 0

    def read_body(self) -> bytes:
        """The request body."""
        return self._handler.rfile.read(self.body_length) if self.body_length else b""

    def discard_body(self) -> None:
        """Read the request body and throw it away, a chunk at a time.

        The body must be consumed before the response, or a client still sending it would
        see a broken connection instead of the answer.
        """
        left = self.body_length
        while left > 0:
            chunk = self._handler.rfile.read(min(left, 65536))
            if not chunk:
                break
            left -= len(chunk)

    def drop_connection(self) -> None:
        """Close the connection after this exchange (for a body left unread, or at shutdown)."""
        self._handler.close_connection = True

    def send_json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        """A JSON response with a ``Content-Length``, so the connection can be kept alive."""
        payload = json.dumps(body).encode()
        self._start(status, {**(headers or {}), "content-type": "application/json"})
        self._handler.send_header("content-length", str(len(payload)))
        self._handler.end_headers()
        self._handler.wfile.write(payload)

    def send_stream(
        self, status: int, chunks: Iterable[bytes], headers: Mapping[str, str] | None = None
    ) -> None:
        """A ``text/event-stream`` response; the connection closes when it ends."""
        self._start(
            status,
            {**(headers or {}), "content-type": "text/event-stream", "cache-control": "no-cache"},
        )
        # No length is known in advance: closing the connection marks the end of the body.
        self._handler.send_header("connection", "close")
        self._handler.end_headers()
        self._handler.close_connection = True
        for chunk in chunks:
            self._handler.wfile.write(chunk)
            self._handler.wfile.flush()

    def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self.status = status
        if self.before_send is not None:
            # Runs before the client can see the response, so whatever it records is visible
            # to the client as soon as the client has its answer.
            self.before_send(status)
        self._handler.send_response(status)
        for name, value in headers.items():
            self._handler.send_header(name, value)


Route = Callable[[Exchange], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentfleet-mock-llm"
    sys_version = ""
    # Idle keep-alive connections of a long-running server end after this many seconds.
    timeout = 120
    server: TrackedHTTPServer

    def setup(self) -> None:
        super().setup()
        # Headers and body leave in two writes; with Nagle's algorithm the second waits for
        # the client's delayed ACK, which adds ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _dispatch(self) -> None:
        exchange = Exchange(self)
        try:
            self.server.route(exchange)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            log.exception("mock server failed on %s %s", exchange.method, exchange.path)
            self.close_connection = True
            if exchange.status is None:
                exchange.send_json(
                    500,
                    {"type": "error", "error": {"type": "api_error", "message": "mock bug"}},
                )

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _dispatch

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class TrackedHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP/1.1 server that hands every request to ``route`` and tracks connections."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    # The default backlog of 5 drops connections when hundreds arrive at once.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], route: Route) -> None:
        self.route = route
        self._connections: dict[socket.socket, threading.Thread] = {}
        # Every connection thread ever started and maybe still running: one that has just
        # dropped its connection is still finishing, and ``stop`` must wait for it too.
        self._started_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="mock-llm-connection",
            daemon=True,
        )
        with self._lock:
            self._connections[request] = thread
            self._started_threads.add(thread)
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The base class prints the traceback; a library only logs.
        log.exception("mock server connection from %s failed", client_address)

    @property
    def open_connections(self) -> int:
        """Connections whose threads are still running."""
        with self._lock:
            return len(self._connections)

    def close_connections(self, timeout_s: float) -> None:
        """Shut every open connection and wait up to ``timeout_s`` seconds for its thread."""
        with self._lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            threads = list(self._started_threads)
        for thread in threads:
            thread.join(timeout_s)
