"""Everything a Redis holds, as text: the far end that secret-handling tests search."""

from __future__ import annotations

from collections.abc import Iterator

import redis


def _raw_string(client: redis.Redis, key: str) -> str:
    """A string's bytes as text, whatever they hold (a run's bitmap of counted items is binary)."""
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    raw = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))
    try:
        value = raw.get(key)
    finally:
        raw.close()
        raw.connection_pool.disconnect()
    return "" if value is None else value.decode("utf-8", "replace")


def key_contents(client: redis.Redis, key: str) -> str:
    """``key`` and its whole value (string, hash, list, set, sorted set or stream), as text."""
    readers = {
        "string": lambda k: _raw_string(client, k),
        "hash": client.hgetall,
        "list": lambda k: client.lrange(k, 0, -1),
        "set": client.smembers,
        "zset": lambda k: client.zrange(k, 0, -1),
        "stream": lambda k: client.xrange(k),
    }
    reader = readers.get(str(client.type(key)))
    return f"{key} {reader(key) if reader else ''}"


def all_contents(client: redis.Redis, match: str | None = None) -> Iterator[str]:
    """``key_contents`` of every key (matching ``match``, if given)."""
    for key in client.scan_iter(match=match, count=1000):
        yield key_contents(client, key)
