"""The pooled connection's idle check answers as redis-py's own does: nothing to read on an
idle connection, and a reply left unread or a peer that closed still show.

Against a real Redis, side by side with ``redis.Connection``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

import pytest
import redis
from kombu import Connection
from redis import utils as redis_utils

from agentfleet.transport.pools import QuickBlockingPool, QuickConnection, QuickPool
from agentfleet.transport.redis_channel import RedisTransport

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
    assert announced[QuickConnection.__name__] == announced["Connection"]
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


@pytest.mark.parametrize(
    ("quick", "stock"),
    [(QuickPool, redis.ConnectionPool), (QuickBlockingPool, redis.BlockingConnectionPool)],
    ids=["pool", "blocking-pool"],
)
def test_the_quick_pools_hand_out_connections_without_inspecting_arguments(
    redis_url: str, quick: type, stock: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    inspected: list[str] = []  # the functions whose call arguments were inspected
    real = redis_utils._get_filterable_args

    def spy(func: Any, *args: Any, **kwargs: Any) -> Any:
        inspected.append(func.__name__)
        return real(func, *args, **kwargs)

    monkeypatch.setattr(redis_utils, "_get_filterable_args", spy)
    for cls in (stock, quick):
        pool = cls.from_url(redis_url, max_connections=2)
        client = redis.Redis(connection_pool=pool)
        for _ in range(3):
            assert client.ping() and client.echo("same answers") == b"same answers"
        pool.disconnect()
        if cls is stock:
            assert inspected.count("get_connection") == 6, "redis-py's own pool inspects every call"
            inspected.clear()
    assert "get_connection" not in inspected


def test_the_broker_channel_takes_the_quick_pool(redis_url: str) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        assert type(conn.default_channel.pool) is QuickPool
        assert conn.default_channel.client.ping()
