"""Redis connections, one pool per URL per process."""

from __future__ import annotations

import threading

import redis

__all__ = ["connect", "reset_connections"]

_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def connect(url: str) -> redis.Redis:
    """A shared client for ``url`` that returns ``str`` and retries a dropped connection once."""
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = redis.Redis.from_url(
                url,
                decode_responses=True,
                health_check_interval=30,
                socket_keepalive=True,
                socket_connect_timeout=5,
            )
            _clients[url] = client
        return client


def reset_connections() -> None:
    """Drop every cached client (after a fork, or between tests against different servers)."""
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
