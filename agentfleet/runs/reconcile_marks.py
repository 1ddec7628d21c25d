"""What the reconciler reads from the run store and marks in it.

One part of ``RunStore`` (``runs/store.py``): the active runs, the inputs kept for items with
no outcome yet, and the ``suspect`` hash of a run (``tasks/reconciler.py`` uses them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentfleet.outages import repeatable
from agentfleet.runs.store_base import StoreBase

__all__ = ["ReconcileMarks"]


class ReconcileMarks(StoreBase):
    """The active set, kept inputs and suspects, as the reconciler reads and marks them."""

    @repeatable
    def active_runs(self) -> list[str]:
        """Runs that are running or waiting for their aggregate."""
        return sorted(self._redis.smembers(self.keys.active))

    @repeatable
    def item_inputs(self, run_id: str, indices: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The stage-0 inputs still kept for ``indices`` (an item's is dropped at its outcome)."""
        if not indices:
            return {}
        raw = self._redis.hmget(self.run_key(run_id, "inputs"), [str(i) for i in indices])
        return {i: json.loads(r) for i, r in zip(indices, raw, strict=True) if r is not None}

    @repeatable
    def suspects(self, run_id: str) -> dict[str, float]:
        """Items (by index) or run-level messages (by name) found with no outcome, claim or
        message, and since when (epoch seconds)."""
        return {str(k): float(v) for k, v in self._redis.hgetall(self.run_key(run_id, "suspect")).items()}

    @repeatable
    def mark_suspects(self, run_id: str, first_seen: Mapping[str, float], cleared: Iterable[str]) -> None:
        """Note newly suspect items (first sighting kept) and forget ones seen alive again."""
        key = self.run_key(run_id, "suspect")
        gone = [str(i) for i in cleared]
        pipe = self._redis.pipeline(transaction=False)
        if gone:
            pipe.hdel(key, *gone)
        for idx, at in first_seen.items():
            pipe.hsetnx(key, str(idx), repr(at))
        pipe.expire(key, self.ttl_s)
        pipe.execute()
