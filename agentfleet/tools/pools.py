"""The real connection pools under the guard: one per https host, shared by every guard of a
worker process.

A guard is made per task execution. If each made its own pools, every task would open its own
connections: a TCP and TLS handshake per task against a real API, and nothing kept alive
between tasks. ``TransportPools`` keeps them for the process instead; the guard still checks,
pins and fills in credentials on every request, and only the sockets are shared.

Pools are keyed by scheme, original host name and port for https (a TLS session is verified
for one name, so two names on one address must not share a connection) and share one pool for
plain http. At most ``max_pools`` are kept; the least recently used is closed first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_MAX_POOLS", "PoolKey", "TransportPools"]

DEFAULT_MAX_POOLS = 64

PoolKey = tuple[str, str, int]


class TransportPools:
    """Real transports made by ``factory()``, by ``PoolKey``; safe to share between threads."""

    def __init__(self, factory: Callable[[], Any], *, max_pools: int = DEFAULT_MAX_POOLS) -> None:
        self._factory = factory
        self._max_pools = max_pools
        self._pools: OrderedDict[PoolKey, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: PoolKey) -> Any:
        """The transport for ``key``, made the first time it is asked for."""
        evicted = None
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._factory()
                self._pools[key] = pool
                if len(self._pools) > self._max_pools:
                    _, evicted = self._pools.popitem(last=False)
            else:
                self._pools.move_to_end(key)
        if evicted is not None:
            evicted.close()
        return pool

    def __len__(self) -> int:
        with self._lock:
            return len(self._pools)

    def close(self) -> None:
        """Close every transport made so far."""
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()
