"""The two Redis handles agentfleet holds, typed apart so that one is never used for the other.

- ``BrokerRedis``: a client on the broker's Redis (``broker_url``), where kombu keeps its
  queues and the messages workers took but have not acknowledged (``unacked``,
  ``unacked_index``), and redbeat its lock. Always a single Redis (or a Sentinel master):
  kombu has no cluster transport.
- ``StateRedis``: a client on the Redis where agentfleet keeps its own state (runs, outcomes,
  claims, dead letters, limits, circuits, spend, the worker registry): ``state_url``, else
  the broker's Redis. It may be a Redis Cluster, where a transaction or a script must keep to
  one slot.

Both are ``redis.Redis`` to redis-py (a ``StateRedis`` on a cluster is a ``RedisCluster``), so
either can be handed to a library; but mypy refuses a ``StateRedis`` where a ``BrokerRedis``
is asked for, and the reverse, and refuses a plain ``redis.Redis`` for either. Both are made
in one place: ``agentfleet.redis_client.broker_client`` and ``state_client``. A test that builds
one by hand says which it means: ``StateRedis(redis.Redis(...))``.
"""

from __future__ import annotations

from typing import NewType

import redis

__all__ = ["BrokerRedis", "StateRedis"]

BrokerRedis = NewType("BrokerRedis", redis.Redis)
StateRedis = NewType("StateRedis", redis.Redis)
