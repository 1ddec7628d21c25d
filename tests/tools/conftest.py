"""Fixtures for the safe-tools tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

import pytest
from tool_servers import Server, respond, start_server


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


@pytest.fixture
def reply() -> Callable[..., None]:
    return respond
