"""Redis clients for agentfleet's own state: one per target per process, sized for a worker.

A target is a URL (``redis://``, ``rediss://``, ``unix://``), a list of Sentinels
(``sentinel://[:password@]host:port[/db];sentinel://host:port;...``) with the master's name,
or a Redis Cluster (``redis+cluster://[:password@]host:port;redis+cluster://host:port;...``,
``rediss+cluster://`` over TLS: any reachable node is enough, the others are found). Every
client:

- has room for ``max_connections`` connections and, when all are busy, waits up to
  ``pool_timeout_s`` seconds for one instead of failing (a gevent worker with 1,000 busy
  slots may ask for 1,000 at once);
- retries a command that met a dropped connection a few times with jittered backoff, but
  not one whose reply timed out: a silent link fails the call;
- gives up on a reply after ``socket_timeout_s`` and on connecting after
  ``connect_timeout_s``, so a link that drops packets silently (no reset, no refusal) fails a
  call within ``socket_timeout_s`` on an open connection, ``connect_timeout_s`` on a new one;
- checks connections idle for ``health_check_s``: TCP keepalive probes every
  ``health_check_s`` (two unanswered close the connection, so a dead idle one is found within
  three times that), and a PING before its next use;
- returns ``str`` replies.

The reply of a command that did reach the server may be what was lost: the run store's writes
count nothing twice when sent again (see ``agentfleet.outages``), which also rides out longer
outages.

agentfleet holds two kinds of client, typed apart (``agentfleet.redis_handles``) and made only
here: ``broker_client(settings)`` on the broker's Redis (kombu's queues and unacknowledged
messages) and ``state_client(settings)`` on the Redis of agentfleet's own state
(``state_url``, else the broker's). ``connect`` gives an untyped client, for probes.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from agentfleet.redis_handles import BrokerRedis, StateRedis
from agentfleet.transport.pools import QuickBlockingPool, QuickConnection

__all__ = [
    "RedisTarget",
    "broker_client",
    "cluster_nodes",
    "connect",
    "keepalive_options",
    "mask_url",
    "reset_connections",
    "sentinel_hosts",
    "state_client",
]

# Connection-level retries for one command; outages longer than this are the caller's.
_RETRIES = 3
_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 1.0


@dataclass(frozen=True)
class RedisTarget:
    """Where a client connects and how big its pool may grow.

    ``sentinel_master`` is required for ``sentinel://`` URLs; ``sentinel_password`` is the
    Sentinels' own password when they have one (the master's is in the URL).
    ``pool_timeout_s`` is how long a command waits for a free connection, in seconds;
    ``connect_timeout_s`` and ``socket_timeout_s`` bound connecting and each reply, in seconds
    (no command of agentfleet's blocks for more than a second), ``health_check_s`` is how long
    a connection may sit idle before it is checked, in seconds, and ``retries`` is how often a
    command that met a dropped connection is tried again (a probe that must answer fast uses
    short timeouts and none).
    """

    url: str
    sentinel_master: str | None = None
    sentinel_password: str | None = None
    max_connections: int = 1000
    pool_timeout_s: float = 20.0
    connect_timeout_s: float = 3.0
    socket_timeout_s: float = 5.0
    health_check_s: int = 5
    retries: int = _RETRIES

    @property
    def is_sentinel(self) -> bool:
        return self.url.startswith("sentinel://")

    @property
    def is_cluster(self) -> bool:
        return self.url.startswith(("redis+cluster://", "rediss+cluster://"))


_clients: dict[RedisTarget, redis.Redis] = {}
_lock = threading.Lock()


def sentinel_hosts(url: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each Sentinel in a ``sentinel://...;sentinel://...`` URL."""
    hosts = []
    for part in url.split(";"):
        parts = urlsplit(part.strip())
        if parts.scheme != "sentinel" or not parts.hostname:
            raise ValueError(f"not a Sentinel address: {mask_url(part)}")
        hosts.append((parts.hostname, parts.port or 26379))
    return hosts


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each node in a ``redis+cluster://...;redis+cluster://...`` URL."""
    nodes = []
    for part in url.split(";"):
        parts = urlsplit(part.strip())
        if parts.scheme not in ("redis+cluster", "rediss+cluster") or not parts.hostname:
            raise ValueError(f"not a Redis Cluster node: {mask_url(part)}")
        nodes.append((parts.hostname, parts.port or 6379))
    return nodes


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (every part of a ``;``-joined list).

    Everything between the user name and the last '@' of a part counts as its password, so a
    password with an unencoded '/' or '@' is masked whole too.
    """
    masked = []
    for part in url.split(";"):
        scheme, sep, rest = part.partition("://")
        userinfo, at, location = rest.rpartition("@")
        if not (sep and at) or ":" not in userinfo:
            masked.append(part)
            continue
        user = userinfo.split(":", 1)[0]
        masked.append(f"{scheme}://{user}:***@{location}")
    return ";".join(masked)


def keepalive_options(idle_s: int) -> dict[int, int]:
    """TCP keepalive options (``socket.TCP_KEEP*`` -> value) for redis-py's and kombu's
    ``socket_keepalive_options``: the first probe after ``idle_s`` idle seconds, then one every
    ``idle_s``; two unanswered close the connection. Options this platform lacks are left out."""
    wanted = {"TCP_KEEPIDLE": idle_s, "TCP_KEEPINTVL": idle_s, "TCP_KEEPCNT": 2}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def _common_kwargs(target: RedisTarget) -> dict[str, object]:
    return {
        "decode_responses": True,
        "health_check_interval": target.health_check_s,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive_options(target.health_check_s),
        "socket_connect_timeout": target.connect_timeout_s,
        # No command of ours blocks for more than a second: a silent peer is a dead one.
        "socket_timeout": target.socket_timeout_s,
        # A dropped connection is tried again; a timed-out reply is not (on a silent link each
        # try would wait as long again, and the command may have run).
        "retry": Retry(
            ExponentialWithJitterBackoff(base=_BACKOFF_BASE_S, cap=_BACKOFF_CAP_S),
            target.retries,
            supported_errors=(redis.ConnectionError,),
        ),
        "retry_on_error": [redis.ConnectionError],
    }


def _sentinel_client(target: RedisTarget) -> redis.Redis:
    if not target.sentinel_master:
        raise ValueError("a sentinel:// URL needs the master's name (sentinel_master)")
    first = urlsplit(target.url.split(";")[0])
    db = int(first.path.strip("/") or 0)
    wait_s = min(2.0, target.socket_timeout_s)
    sentinel_kwargs: dict[str, object] = {"socket_connect_timeout": wait_s, "socket_timeout": wait_s}
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    sentinel = Sentinel(sentinel_hosts(target.url), sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(
        target.sentinel_master,
        db=db,
        username=unquote(first.username) if first.username else None,
        password=unquote(first.password) if first.password else None,
        max_connections=target.max_connections,
        **_common_kwargs(target),
    )


def _cluster_client(target: RedisTarget) -> redis.Redis:
    first = urlsplit(target.url.split(";")[0])
    scheme = "rediss" if first.scheme.startswith("rediss") else "redis"
    options: dict[str, Any] = {
        # redis-py gives each node a pool of the class asked for only when it starts from a URL.
        "url": first._replace(scheme=scheme, path="").geturl(),
        "startup_nodes": [ClusterNode(h, p) for h, p in cluster_nodes(target.url)[1:]],
        "connection_pool_class": QuickBlockingPool,
        "max_connections": target.max_connections,
        "timeout": target.pool_timeout_s,
        **_common_kwargs(target),
    }
    # The cluster client is typed apart from redis.Redis but answers the same commands.
    return RedisCluster(**options)  # type: ignore[return-value]


def _url_client(target: RedisTarget) -> redis.Redis:
    # TLS and unix sockets keep the classes their schemes give them.
    quick = {"connection_class": QuickConnection} if target.url.startswith("redis://") else {}
    pool = QuickBlockingPool.from_url(
        target.url,
        max_connections=target.max_connections,
        timeout=target.pool_timeout_s,
        **quick,
        **_common_kwargs(target),
    )
    return redis.Redis(connection_pool=pool)


def connect(target: RedisTarget | str) -> redis.Redis:
    """The process's shared client for ``target`` (a ``RedisTarget`` or a plain URL)."""
    if isinstance(target, str):
        target = RedisTarget(target)
    with _lock:
        client = _clients.get(target)
        if client is None:
            if target.is_sentinel:
                client = _sentinel_client(target)
            elif target.is_cluster:
                client = _cluster_client(target)
            else:
                client = _url_client(target)
            _clients[target] = client
        return client


class Targets(Protocol):
    """Where the broker and the state live (``agentfleet.config.Settings`` is one)."""

    def broker_target(self) -> RedisTarget: ...

    def redis_target(self) -> RedisTarget: ...


def _probing(target: RedisTarget, probe_timeout_s: float | None) -> RedisTarget:
    if probe_timeout_s is None:
        return target
    wait_s = probe_timeout_s
    return dataclasses.replace(target, connect_timeout_s=wait_s, socket_timeout_s=wait_s, retries=0)


def broker_client(settings: Targets, *, probe_timeout_s: float | None = None) -> BrokerRedis:
    """The process's shared client on the broker's Redis: kombu's queues and unacknowledged
    messages. With ``probe_timeout_s`` (seconds), one of its own that gives up after that long
    to connect or to answer, without retries (for health probes)."""
    return BrokerRedis(connect(_probing(settings.broker_target(), probe_timeout_s)))


def state_client(settings: Targets, *, probe_timeout_s: float | None = None) -> StateRedis:
    """The process's shared client on agentfleet's own state (``state_url``, else the broker's
    Redis). ``probe_timeout_s`` as for ``broker_client``."""
    return StateRedis(connect(_probing(settings.redis_target(), probe_timeout_s)))


def reset_connections() -> None:
    """Drop every cached client (after a fork, or between tests against different servers)."""
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
