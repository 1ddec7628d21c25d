"""A run's aggregate (its fan-in callback): when it started, its result, running it again.

One part of ``RunStore`` (``runs/store.py``): fields of the run's hash
(``aggregate_started_at``, ``aggregate_result``) and an ``aggregate`` event on its stream.
"""

from __future__ import annotations

import json
import time
from typing import Any

from agentfleet.outages import repeatable
from agentfleet.runs.store_base import StoreBase

__all__ = ["AggregateStore"]


class AggregateStore(StoreBase):
    """Store and read the aggregate's result; forget a failed one so it runs again."""

    @repeatable
    def mark_aggregate_started(self, run_id: str, at: float | None = None) -> None:
        """Note when the fan-in callback started (seconds since the epoch)."""
        self._redis.hset(
            self.run_key(run_id), "aggregate_started_at", repr(time.time() if at is None else at)
        )

    @repeatable
    def set_aggregate(self, run_id: str, *, ok: bool, value: Any = None, error: str = "") -> bool:
        """Store the aggregate's result (the first one stored wins); the run is then done. Sent
        again, it stores nothing more and adds a second ``aggregate`` event (readers take any
        as the signal to read the result)."""
        body = json.dumps({"ok": ok, "value": value, "error": error})
        pipe = self._redis.pipeline(transaction=True)
        pipe.hsetnx(self.run_key(run_id), "aggregate_result", body)
        pipe.xadd(self.run_key(run_id, "events"), {"kind": "aggregate"})
        stored, _ = pipe.execute()
        self.deactivate(run_id)
        return bool(stored)

    @repeatable
    def reopen_aggregate(self, run_id: str) -> None:
        """Forget a failed aggregate (its result and deliveries) so it runs again; the run is
        active again until it is stored."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hdel(self.run_key(run_id), "aggregate_result", "aggregate_attempts", "aggregate_started_at")
        pipe.sadd(self.keys.active, run_id)
        pipe.execute()

    @repeatable
    def get_aggregate(self, run_id: str) -> dict[str, Any] | None:
        raw = self._redis.hget(self.run_key(run_id), "aggregate_result")
        return json.loads(raw) if raw else None
