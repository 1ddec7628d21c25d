"""A local HTTP server, in a child process, that answers 200 and records when each request came.

Kept out of the benchmark's own process so that dispatching thousands of tasks there never
delays the clock readings. ``times()`` returns the arrival times (Unix seconds) so far.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512


def _serve(host: str, conn: Any) -> None:
    arrivals: list[float] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                arrivals.append(time.time())
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = _Server((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn.send(server.server_address[1])
    while True:
        try:
            request = conn.recv()
        except EOFError:
            break
        if request == "stop":
            break
        with lock:
            conn.send(list(arrivals))
    server.shutdown()


class ArrivalServer:
    """``with ArrivalServer("127.0.0.21") as server: ... server.url(); server.times()``."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = 0
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(host, child), daemon=True)
        self._child = child

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def times(self) -> list[float]:
        self._conn.send("times")
        return list(self._conn.recv())

    def __enter__(self) -> ArrivalServer:
        self._process.start()
        self._child.close()
        self.port = int(self._conn.recv())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self._process.join(5)
        if self._process.is_alive() and self._process.pid is not None:
            os.kill(self._process.pid, signal.SIGKILL)
            self._process.join(5)
