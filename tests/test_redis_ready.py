"""The pooled connection's idle check answers as redis-py's own does: nothing to read on an
idle connection, and a reply left unread or a peer that closed still show.

Against a real Redis, side by side with ``redis.Connection``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import metadata

import pytest
import redis

from agentfleet.redis_ready import QuickConnection

CLASSES = [redis.Connection, QuickConnection]


def _idle(connection: redis.Connection, url: str) -> None:
    connection.send_command("PING")
    connection.read_response()


def _reply_unread(connection: redis.Connection, url: str) -> None:
    connection.send_command("PING")
    assert connection.can_read(timeout=1.0)


def _closed_by_server(connection: redis.Connection, url: str) -> None:
    connection.send_command("CLIENT", "ID")
    client_id = connection.read_response()
    redis.Redis.from_url(url).client_kill_filter(_id=client_id)
    with pytest.raises(redis.ConnectionError):
        connection.can_read(timeout=1.0)


def _answer(connection: redis.Connection) -> object:
    try:
        return connection.can_read()
    except redis.ConnectionError:
        return redis.ConnectionError


@pytest.fixture
def connections(redis_url: str) -> Iterator[dict[type, redis.Connection]]:
    pools = {cls: redis.ConnectionPool.from_url(redis_url, connection_class=cls) for cls in CLASSES}
    yield {cls: pool.get_connection() for cls, pool in pools.items()}
    for pool in pools.values():
        pool.disconnect()


@pytest.mark.parametrize(
    ("state", "expected"),
    [(_idle, False), (_reply_unread, True), (_closed_by_server, redis.ConnectionError)],
    ids=["idle", "reply-unread", "closed-by-server"],
)
def test_the_idle_check_answers_as_redis_pys_own(
    connections: dict[type, redis.Connection],
    redis_url: str,
    state: Callable[[redis.Connection, str], None],
    expected: object,
) -> None:
    for connection in connections.values():
        state(connection, redis_url)
    assert {cls.__name__: _answer(c) for cls, c in connections.items()} == {
        cls.__name__: expected for cls in CLASSES
    }


def test_new_connections_announce_the_same_library_name_and_version_as_redis_pys_own(
    connections: dict[type, redis.Connection],
) -> None:
    # What CLIENT SETINFO sends on connect (Redis 7.2 and later keep it; the embedded 6.2
    # refuses the command, which redis-py ignores).
    announced = {
        cls.__name__: (c.driver_info.formatted_name, c.driver_info.lib_version)
        for cls, c in connections.items()
    }
    assert announced["QuickConnection"] == announced["Connection"]
    assert announced["Connection"][1] == metadata.version("redis")


def test_new_connections_read_redis_pys_version_once_per_process(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    QuickConnection(host="127.0.0.1")  # the process's first read, if not done yet
    reads: list[str] = []
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: reads.append(name) or real(name))
    for _ in range(5):
        QuickConnection(host="127.0.0.1")
    redis.Connection(host="127.0.0.1")
    assert reads == ["redis"]  # redis-py's own class reads it each time
