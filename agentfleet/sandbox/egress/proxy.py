"""``EgressProxy``: one sandbox's way to the network, served on a Unix socket in the worker.

The sandbox has loopback only. Its socket is bound into it and reached through the bridge
(``agentfleet.sandbox.egress.bridge``), which listens on ``127.0.0.1:<port>`` inside and is
offered to programs as ``HTTP_PROXY``/``HTTPS_PROXY``; the proxy resolves every name itself,
so nothing inside needs (or has) a resolver. What it lets through and what it does to each
request is ``agentfleet.sandbox.egress.session`` and ``.core``.

Each connection is served by a thread of its own; at most ``egress.max_connections`` are open
at once per sandbox (one more is answered 503 and closed), so a program that opens
connections without end, or holds them silent, costs the worker a bounded number of threads
and sockets. ``stop()`` closes the socket and every open connection and waits for their
threads; it is safe to call twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from pathlib import Path

from agentfleet.config import Settings
from agentfleet.sandbox.egress.ca import LeafCertificates, worker_ca
from agentfleet.sandbox.egress.core import EgressCore, EgressSpec, EgressWiring
from agentfleet.sandbox.egress.replies import Reply
from agentfleet.sandbox.egress.session import Session

__all__ = ["EgressProxy"]

log = logging.getLogger("agentfleet.egress")

_JOIN_S = 5.0


class EgressProxy:
    """The egress proxy of one sandbox (see the module docstring).

    ``spec`` gives the declared destinations (``network``) and the credential names
    (``credentials``); ``socket_path`` is where the Unix socket is made (its directory must
    exist); ``run_id`` and ``task_name`` name the sandbox's item in refusals and logs.
    ``wiring`` brings the worker's limiter, circuit breaker, audit log and connection pools
    (``agentfleet.tasks.egress.egress_wiring``); without it no cluster-wide limit or audit
    applies. ``ca_cert_path`` is the PEM certificate programs inside must trust.
    """

    def __init__(
        self,
        settings: Settings,
        spec: EgressSpec,
        socket_path: Path,
        *,
        run_id: str,
        task_name: str,
        wiring: EgressWiring | None = None,
    ) -> None:
        ca = worker_ca()
        self.ca_cert_path: Path = ca.cert_path
        self.socket_path = Path(socket_path)
        leaves = LeafCertificates(ca, capacity=settings.egress.leaf_cache)
        self._core = EgressCore(
            settings, spec, leaves, wiring or EgressWiring(), run_id=run_id, task_name=task_name
        )
        self._slots = threading.BoundedSemaphore(settings.egress.max_connections)
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._open: dict[socket.socket, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> EgressProxy:
        """Make the socket (mode 0600) and serve it from a thread; returns the proxy."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener.bind(str(self.socket_path))
        os.chmod(self.socket_path, 0o600)
        listener.listen(128)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, name="af-egress-accept", daemon=True)
        self._acceptor.start()
        return self

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop accepting, close every open connection, wait for their threads, remove the socket."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            listener, self._listener = self._listener, None
            open_now = dict(self._open)
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._acceptor is not None:
            self._acceptor.join(_JOIN_S)
        for thread in open_now.values():
            thread.join(_JOIN_S)
        self._core.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    @property
    def open_connections(self) -> int:
        """How many connections from the sandbox are being served now."""
        with self._lock:
            return len(self._open)

    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                self._turn_away(conn)
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), name="af-egress-conn", daemon=True)
            with self._lock:
                if self._stopped:
                    self._slots.release()
                    conn.close()
                    return
                self._open[conn] = thread
            thread.start()

    def _turn_away(self, conn: socket.socket) -> None:
        limit = self._core.limits.max_connections
        log.warning("egress: task %s holds %d connections, the most allowed", self._core.task_name, limit)
        reply = Reply(
            503, f"this sandbox already holds {limit} connections (egress.max_connections)", "failed"
        )
        head = f"HTTP/1.1 503 {reply.phrase().decode()}\r\n{_lines(reply.headers())}\r\n".encode()
        with contextlib.suppress(OSError):
            conn.setblocking(False)
            conn.send(head + reply.body())
        conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            Session(self._core, conn).serve()
        except Exception:
            log.exception("egress: a connection of task %s failed", self._core.task_name)
        finally:
            with self._lock:
                self._open.pop(conn, None)
            with contextlib.suppress(OSError):
                conn.close()
            self._slots.release()


def _lines(headers: list[tuple[str, str]]) -> str:
    return "".join(f"{name}: {value}\r\n" for name, value in headers)
