"""The embedded Redis's ports: never one this process was given before, and never one another
process holds (the server answering is always the one this object started)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import redis

from agentfleet import embedded_redis
from agentfleet.embedded_redis import EmbeddedRedis, free_port
from agentfleet.errors import ConfigError


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


def _listening(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_chosen_port_another_process_took_is_given_up_for_a_fresh_one() -> None:
    server = EmbeddedRedis()
    taken = server.port
    squatter = _listening(taken)  # as another process that bound it between choice and start
    try:
        with server:
            assert server.port != taken
            assert redis.Redis.from_url(server.url).info("server")["process_id"] == server.pid
    finally:
        squatter.close()


def test_a_server_of_another_process_answering_on_the_port_is_not_taken_for_ours() -> None:
    with EmbeddedRedis() as other:
        server = EmbeddedRedis()
        server.port = other.port  # the port it chose is the other's by now
        with server:
            assert server.port != other.port and server.pid != other.pid
            assert redis.Redis.from_url(server.url).info("server")["process_id"] == server.pid


def test_a_port_given_that_is_taken_is_one_clear_error() -> None:
    squatter = _listening(0)
    port = squatter.getsockname()[1]
    try:
        with pytest.raises(ConfigError, match=f"port {port} is taken"):
            EmbeddedRedis(port=port).start()
    finally:
        squatter.close()
