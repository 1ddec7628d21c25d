"""The embedded Redis's ports: never one this process was given before."""

from __future__ import annotations

from typing import Any

import pytest

from agentfleet import embedded_redis
from agentfleet.embedded_redis import free_port


class _Socket:
    """A socket whose bind to port 0 is given the next port of ``ports``."""

    ports: list[int] = []

    def __init__(self, *args: Any) -> None:
        self.port = self.ports.pop(0)

    def __enter__(self) -> _Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        return None

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_port_given_before_in_this_process_is_not_given_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # kombu pools connections per process by URL: a new Redis on an old port would get the old
    # pool's dead connections.
    monkeypatch.setattr(embedded_redis, "_handed_out", set())
    monkeypatch.setattr(_Socket, "ports", [41001, 41001, 41001, 41002])
    monkeypatch.setattr(embedded_redis.socket, "socket", _Socket)
    assert free_port() == 41001
    assert free_port() == 41002
