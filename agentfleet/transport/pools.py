"""A cheaper "anything left unread?" check for pooled Redis connections.

redis-py checks every connection it takes from a pool for unread data (a reply left behind,
or a peer that closed) with ``select.poll`` and a zero timeout. Under gevent ``select.poll``
is gevent's, which builds a watcher and passes through the event loop on every call: about a
tenth of a gevent worker's CPU per item with 2,500 items in flight (profiled). A zero-timeout
poll never blocks, so the process's own, unpatched ``poll`` answers the same question for a
fraction of the cost. Whenever the socket is readable, the parser holds data or the socket is
TLS, redis-py's own check decides as before.

Each new ``redis.Connection`` also asks ``importlib.metadata`` for redis-py's version (about
0.3 ms: it parses the package's metadata file) to send it with ``CLIENT SETINFO``; a gevent
worker whose thousands of slots start at once opens hundreds of connections in its first
second. ``QuickConnection`` reads that version once per process and sends the same
``CLIENT SETINFO`` as before.

``QuickConnection`` is ``redis.Connection`` with both; ``redis_client`` pools and the broker
transport (``redis_channel``) use it for plain TCP connections.

Every command also takes its connection from the pool through ``get_connection``, which
redis-py wraps in a decorator that collects the call's arguments into a dict to warn about
deprecated ones: about a sixth of the client CPU of an ``EVALSHA`` (profiled). ``QuickPool``
and ``QuickBlockingPool`` are redis-py's pools calling the wrapped function itself; agentfleet
never passes the deprecated arguments.

Each of these leans on redis-py's private names (``internals``: features ``quick_pools`` and
``driver_info``); where a redis-py release no longer has them, the names here are redis-py's own
classes.
"""

from __future__ import annotations

import functools
import select
import sys
from collections.abc import Callable
from typing import Any

import redis

from agentfleet.transport.internals import enabled

__all__ = ["QuickBlockingPool", "QuickConnection", "QuickPool"]

_DRIVER_ARGS = ("driver_info", "lib_name", "lib_version")


@functools.cache
def _real_poll() -> Callable[[], Any]:
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return monkey.get_original("select", "poll")
    return select.poll


@functools.cache
def _lib_version() -> str | None:
    from redis.driver_info import DriverInfo

    version: Any = DriverInfo().lib_version
    return version


def _driver_info() -> Any:
    """What redis-py sends with ``CLIENT SETINFO`` by default, its version read once per process.

    A new object each time: redis-py lets its owner add upstream drivers to it in place.
    """
    from redis.driver_info import DriverInfo

    return DriverInfo(lib_version=_lib_version())


class _QuickConnection(redis.Connection):
    """``redis.Connection`` whose idle check polls with the unpatched ``poll``, and that reads
    redis-py's version once per process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if enabled("driver_info") and not any(name in kwargs for name in _DRIVER_ARGS):
            kwargs["driver_info"] = _driver_info()
        super().__init__(*args, **kwargs)

    def can_read(self, timeout: float = 0) -> bool:
        sock = self._sock
        reader: Any = getattr(self._parser, "_reader", None)
        quick = timeout == 0 and sock is not None and reader is not None and not hasattr(sock, "pending")
        if quick and not reader.has_data():
            poller = _real_poll()()
            poller.register(sock, select.POLLIN)
            if not poller.poll(0):
                return False
        return super().can_read(timeout)


def _undecorated(method: Any) -> Any:
    # functools.wraps keeps the function it wraps; a redis-py without the decorator has none.
    return getattr(method, "__wrapped__", method)


class _QuickPool(redis.ConnectionPool):
    """``redis.ConnectionPool`` whose ``get_connection`` skips the deprecation check."""

    get_connection = _undecorated(redis.ConnectionPool.get_connection)


class _QuickBlockingPool(redis.BlockingConnectionPool):
    """``redis.BlockingConnectionPool`` whose ``get_connection`` skips the deprecation check."""

    get_connection = _undecorated(redis.BlockingConnectionPool.get_connection)


_QUICK = enabled("quick_pools")
#: The connection class for plain TCP connections (redis-py's own when the quick one is off).
QuickConnection: type[redis.Connection] = _QuickConnection if _QUICK else redis.Connection
#: The pool classes (redis-py's own when the quick ones are off).
QuickPool: type[redis.ConnectionPool] = _QuickPool if _QUICK else redis.ConnectionPool
QuickBlockingPool: type[redis.BlockingConnectionPool] = (
    _QuickBlockingPool if _QUICK else redis.BlockingConnectionPool
)
