"""A local HTTP server that answers as told: scripted replies per path, every arrival recorded.

::

    with ScriptedServer() as server:
        server.script("/vendor", Reply(429, headers={"retry-after": "2"}), Reply(200, {"ok": True}))
        url = server.url("/vendor")      # first request: 429, then 200 for ever after
        ...
        server.hits("/vendor")           # [Hit(at=..., method="GET", body=b"", headers={...}), ...]

Each request takes the next reply of its path's script; the last reply repeats. A path with no
script answers 404. ``at`` is ``time.time()`` when the request arrived.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, a body (a dict or list is sent as JSON) and headers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """One request that arrived: when (Unix time), its method, body and headers."""

    at: float
    method: str
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedServer:
    """A ``ThreadingHTTPServer`` on ``host`` (a free port) whose replies are scripted per path."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._served: dict[str, int] = {}
        self._hits: dict[str, list[Hit]] = {}
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
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
            self._served[path] = 0

    def hits(self, path: str) -> list[Hit]:
        with self._lock:
            return list(self._hits.get(path, []))

    def wait_for_hits(self, path: str, count: int, timeout_s: float = 30.0) -> list[Hit]:
        """The hits of ``path`` once there are at least ``count`` (or whatever came by the timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.hits(path)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.hits(path)

    def _answer(self, path: str, hit: Hit) -> Reply:
        with self._lock:
            self._hits.setdefault(path, []).append(hit)
            script = self._scripts.get(path)
            if not script:
                return Reply(404, {"error": f"no script for {path}"})
            n = self._served[path]
            self._served[path] = n + 1
            return script[min(n, len(script) - 1)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                hit = Hit(time.time(), self.command, body, {k.lower(): v for k, v in self.headers.items()})
                reply = server._answer(self.path.split("?")[0], hit)
                payload = reply.body if isinstance(reply.body, bytes | str) else json.dumps(reply.body)
                data = payload.encode() if isinstance(payload, str) else payload
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
