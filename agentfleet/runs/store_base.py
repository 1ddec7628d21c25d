"""What every part of the run store shares: its Redis handle, key names, scripts and tally.

``RunStore`` (``runs/store.py``) is assembled from parts that each hold one job and build on
``StoreBase``: reading a run's events and timeline (``runs/run_events.py``), item claims
(``runs/claim_store.py``), the aggregate's result (``runs/aggregate_store.py``) and what the
reconciler reads and marks (``runs/reconcile_marks.py``). The key layout is in the docstring of
``runs/store.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from agentfleet.keys import RunKeys
from agentfleet.lua import ScriptSet
from agentfleet.outages import repeatable
from agentfleet.redis_handles import StateRedis
from agentfleet.runs.delivery import DeliveryScripts
from agentfleet.runs.tally import StatsTally

__all__ = ["RUNS_LUA", "StoreBase"]

RUNS_LUA = ScriptSet("agentfleet.runs", "scripts")


class StoreBase:
    """The run store's handle, key names and scripts (no Redis command of its own but one)."""

    def __init__(self, client: StateRedis, *, prefix: str = "af", ttl_s: int = 7 * 86400) -> None:
        # The handle, for what shares this Redis; commands go through ``_redis``: redis-py's
        # reply types are unions of every RESP shape, and this store knows each reply.
        self.client = client
        self._redis: Any = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.keys = RunKeys(prefix)
        self.clustered = isinstance(client, redis.RedisCluster)
        self._scripts = RUNS_LUA.register(
            client, "reopen", "release", "renew", "count_event", "attempt_error", "done_indices", "uncount"
        )
        self._delivery = DeliveryScripts(client, self.keys, ttl_s=ttl_s, clustered=self.clustered)
        self.tally = StatsTally(client, self.keys.stats, self.keys.done_bucket, minute_key=self.keys.minute)

    @repeatable
    def run_key(self, run_id: str, part: str = "") -> str:
        return self.keys.run(run_id, part)

    @repeatable
    def outcome_key(self, key: str) -> str:
        return self.keys.item("out", key)

    @repeatable
    def claim_key(self, key: str) -> str:
        return self.keys.item("claim", key)

    @repeatable
    def active_key(self) -> str:
        return self.keys.active

    def _mget(self, keys: Sequence[str]) -> list[Any]:
        # A cluster answers one slot per command: its client splits the read by slot.
        return list(self._redis.mget_nonatomic(keys) if self.clustered else self._redis.mget(keys))

    @repeatable
    def deactivate(self, run_id: str) -> None:
        """The run needs no more reconciling (it ended, or its record expired)."""
        self._redis.srem(self.keys.active, run_id)
