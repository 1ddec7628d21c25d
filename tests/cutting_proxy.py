"""A TCP proxy on loopback that loses a reply: the command reached Redis, its answer never came.

Clients connect to ``proxy.port``; every byte goes on to the Redis behind it and back. Once
``arm(pattern)`` is called, the next command whose bytes hold ``pattern`` is forwarded, the
reply Redis sends for it is read and thrown away, and the client's connection is cut, as a
link that drops at the worst moment would. ``cuts`` counts the replies lost so.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttingProxy:
    """Forwards loopback connections to ``upstream`` (host, port); see the module docstring."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.cuts = 0
        self._armed: list[bytes] = []
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def arm(self, pattern: bytes) -> None:
        """Lose the reply of the next command holding ``pattern`` (each call arms one cut)."""
        with self._lock:
            self._armed.append(pattern)

    def _disarm(self, data: bytes) -> bool:
        with self._lock:
            for pattern in self._armed:
                if pattern in data:
                    self._armed.remove(pattern)
                    return True
        return False

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def start(self) -> CuttingProxy:
        self._spawn(self._accept)
        return self

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        with self._lock:
            self._sockets.update((client, upstream))
        cut = threading.Event()
        self._spawn(self._replies, upstream, client, cut)
        try:
            while data := client.recv(65536):
                if self._disarm(data):
                    cut.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            self._close(client, upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if cut.is_set():
                    # The command ran: its reply goes nowhere, and the client's link drops.
                    with self._lock:
                        self.cuts += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            self._close(client, upstream)

    def _close(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def stop(self) -> None:
        self._close(self._listener)
        with self._lock:
            open_sockets = list(self._sockets)
        self._close(*open_sockets)
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> CuttingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
