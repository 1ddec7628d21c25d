"""A local HTTP server that answers as told: scripted replies per path, every arrival recorded.

::

    with ScriptedServer() as server:
        server.script("/vendor", Reply(429, headers={"retry-after": "2"}), Reply(200, {"ok": True}))
        url = server.url("/vendor")      # first request: 429, then 200 for ever after
        ...
        server.hits("/vendor")           # [Hit(at=..., method="GET", body=b"", headers={...}), ...]

Each request takes the next reply of its path's script; the last reply repeats. A path with no
script answers 404. ``respond(path, fn)`` answers with ``fn(hit)`` instead, for replies that
depend on what came before (a server that refuses above a rate). ``at`` is ``time.time()`` when
the request arrived; ``in_flight`` counts the server's requests open at that moment, this one
included. A reply's ``delay_s`` holds the request that many seconds before answering.

``host`` may be any loopback address (``127.0.0.2``...), so one test can stand up servers that
the fleet sees as distinct downstreams. ``ServerProcess`` runs one in a child process, for
tests whose timing must not depend on how busy the test process is.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many workers connect at once; the default listen backlog of 5 would drop some.
    request_queue_size = 512


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, a body (a dict or list is sent as JSON), headers, and
    ``delay_s`` seconds to hold the request first."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Hit:
    """One request that arrived: when (Unix time), its method, body and headers, and how many
    requests the server had open at that moment (this one included)."""

    at: float
    method: str
    body: bytes
    headers: dict[str, str]
    in_flight: int = 1

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Span:
    """A request's time at the server: from arrival to the moment it began to answer (Unix
    seconds), and the status it answered."""

    start: float
    end: float
    status: int


class ScriptedServer:
    """A ``ThreadingHTTPServer`` on ``host`` (a free port) whose replies are scripted per path."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._responders: dict[str, Callable[[Hit], Reply]] = {}
        self._served: dict[str, int] = {}
        self._hits: dict[str, list[Hit]] = {}
        self._spans: dict[str, list[Span]] = {}
        self._open = 0
        self._server = _Server((host, 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def script(self, path: str, *replies: Reply) -> None:
        """Answer ``path`` with ``replies`` in order from now on (the last one repeats)."""
        with self._lock:
            self._scripts[path] = list(replies) or [Reply()]
            self._responders.pop(path, None)
            self._served[path] = 0

    def respond(self, path: str, fn: Callable[[Hit], Reply]) -> None:
        """Answer ``path`` with ``fn(hit)``; ``fn`` runs under the server's lock, one at a time."""
        with self._lock:
            self._responders[path] = fn
            self._scripts.pop(path, None)

    def hits(self, path: str) -> list[Hit]:
        with self._lock:
            return list(self._hits.get(path, []))

    def spans(self, path: str) -> list[Span]:
        """The requests of ``path`` that have been answered, in the order they were."""
        with self._lock:
            return list(self._spans.get(path, []))

    def wait_for_hits(self, path: str, count: int, timeout_s: float = 30.0) -> list[Hit]:
        """The hits of ``path`` once there are at least ``count`` (or whatever came by the timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.hits(path)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.hits(path)

    def _arrive(self, path: str, method: str, body: bytes, headers: dict[str, str]) -> tuple[Hit, Reply]:
        with self._lock:
            self._open += 1
            hit = Hit(time.time(), method, body, headers, in_flight=self._open)
            self._hits.setdefault(path, []).append(hit)
            responder = self._responders.get(path)
            if responder is not None:
                return hit, responder(hit)
            script = self._scripts.get(path)
            if not script:
                return hit, Reply(404, {"error": f"no script for {path}"})
            n = self._served[path]
            self._served[path] = n + 1
            return hit, script[min(n, len(script) - 1)]

    def _answered(self, path: str, hit: Hit, status: int) -> None:
        # Counted as answered before the reply is written: a client can only react to a
        # reply (and, say, release a concurrency slot) after this point.
        with self._lock:
            self._open -= 1
            self._spans.setdefault(path, []).append(Span(hit.at, time.time(), status))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() != "chunked":
                    length = int(self.headers.get("content-length") or 0)
                    return self.rfile.read(length) if length else b""
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()

            def _serve(self) -> None:
                body = self._body()
                path = self.path.split("?")[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                hit, reply = server._arrive(path, self.command, body, headers)
                try:
                    if reply.delay_s > 0:
                        time.sleep(reply.delay_s)
                finally:
                    server._answered(path, hit, reply.status)
                payload = reply.body if isinstance(reply.body, bytes | str) else json.dumps(reply.body)
                data = payload.encode() if isinstance(payload, str) else payload
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The caller is gone (a worker killed mid-request); nobody reads the reply.
                    return

            do_GET = do_POST = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


class ServerProcess:
    """A ``ScriptedServer`` in a child process of its own.

    Arrival times are read by the server's threads; in this process they would wait for the
    GIL whenever the test is busy (publishing a thousand tasks holds it for seconds), and
    requests would seem to arrive in bunches. ``configure(server)`` runs in the child (it is
    inherited by fork, closures and all) to script its replies. Hits and spans are fetched
    on demand; on exit the child is stopped by its pid.
    """

    def __init__(self, host: str, configure: Callable[[ScriptedServer], None]) -> None:
        self.host = host
        self._configure = configure
        self._port = 0
        self._lock = threading.Lock()
        self._conn: Any = None
        self._process: Any = None

    @property
    def port(self) -> int:
        return self._port

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self._port}{path}"

    def _ask(self, *request: Any) -> Any:
        with self._lock:
            self._conn.send(request)
            return self._conn.recv()

    def hits(self, path: str) -> list[Hit]:
        return list(self._ask("hits", path))

    def spans(self, path: str) -> list[Span]:
        return list(self._ask("spans", path))

    def wait_for_hits(self, path: str, count: int, timeout_s: float = 30.0) -> list[Hit]:
        """The hits of ``path`` once there are at least ``count`` (or whatever came by the timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.hits(path)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.hits(path)

    def __enter__(self) -> ServerProcess:
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve_in_child, args=(self.host, self._configure, child), daemon=True
        )
        self._process.start()
        child.close()
        if not self._conn.poll(30):
            self._stop()
            raise RuntimeError(f"the scripted server on {self.host} did not start")
        self._port = int(self._conn.recv())
        return self

    def _stop(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(OSError, EOFError):
            self._conn.send(("stop",))
        self._process.join(5)
        if self._process.is_alive():
            os.kill(self._process.pid, signal.SIGKILL)
            self._process.join(5)
        self._conn.close()
        self._process = None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop()


def _serve_in_child(host: str, configure: Callable[[ScriptedServer], None], conn: Any) -> None:
    with ScriptedServer(host) as server:
        configure(server)
        conn.send(server.port)
        while True:
            try:
                request = conn.recv()
            except EOFError:
                return
            if request[0] == "stop":
                return
            conn.send(server.hits(request[1]) if request[0] == "hits" else server.spans(request[1]))
