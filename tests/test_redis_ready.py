"""The pooled connection's idle check answers as redis-py's own does: nothing to read on an
idle connection, and a reply left unread or a peer that closed still show.

Against a real Redis, side by side with ``redis.Connection``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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
