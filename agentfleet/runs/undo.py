"""What a run must undo: its succeeded work whose tasks declare a compensation, and how far
the undoing got.

Layout under the key prefix ``p`` (each expires with the run, ``ttl_s``):

- ``p:run:{id}:undo``        sorted set: an entry (the idempotency key of a succeeded item,
                             stage or graph step) -> when it succeeded (Redis server time)
- ``p:run:{id}:undo:data``   hash: entry -> what its compensation needs (JSON: task name,
                             input, result, the item's place in the run)
- ``p:run:{id}:undo:state``  hash: entry -> ``done``, or ``dead`` once its compensation was
                             dead-lettered; ``{entry}:tries`` -> failed tries so far
- ``p:run:{id}`` fields ``compensation`` (``requested``, then ``done``), ``compensated`` and
  ``compensations_failed``; a run whose compensation is requested stays in ``p:runs:active``
  until it is done, so the reconciler sends its compensation again if that message is lost.

Notes and outcomes are written with ``HSETNX``: a redelivered success notes once, a
compensation's outcome counts once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentfleet.runs.store import RUNS_LUA, RunStore

__all__ = ["UndoEntry", "UndoLog"]


@dataclass(frozen=True)
class UndoEntry:
    """One succeeded piece of work to compensate: its key and what was noted about it."""

    key: str
    data: dict[str, Any]


class UndoLog:
    """A run's compensation bookkeeping, on a run store's Redis and key prefix."""

    def __init__(self, runs: RunStore) -> None:
        self.runs = runs
        self.client: Any = runs.client
        self._scripts = RUNS_LUA.register(
            runs.client, "undo_add", "undo_request", "undo_settle", "undo_reopen", "undo_finish"
        )

    def note(self, run_id: str, key: str, data: dict[str, Any]) -> None:
        """Note succeeded work ``key`` of run ``run_id`` (the first note wins)."""
        self._scripts["undo_add"](
            keys=[self.runs.run_key(run_id, "undo"), self.runs.run_key(run_id, "undo:data")],
            args=[key, json.dumps(data), self.runs.ttl_s],
        )

    def request(self, run_id: str) -> bool:
        """Ask for the run's compensations; True when a compensation must run (this call asked
        first, and the run is still going or has something to undo)."""
        return bool(
            self._scripts["undo_request"](
                keys=[self.runs.run_key(run_id), self.runs.active_key(), self.runs.run_key(run_id, "undo")],
                args=[run_id],
            )
        )

    def newest_first(self, run_id: str) -> list[UndoEntry]:
        """Every noted entry, the most recent success first."""
        keys = self.client.zrevrange(self.runs.run_key(run_id, "undo"), 0, -1)
        if not keys:
            return []
        data = self.client.hmget(self.runs.run_key(run_id, "undo:data"), keys)
        return [UndoEntry(k, json.loads(d)) for k, d in zip(keys, data, strict=True) if d is not None]

    def settled(self, run_id: str) -> dict[str, str]:
        """Entry -> ``done`` or ``dead``, for the entries whose compensation ended."""
        raw = self.client.hgetall(self.runs.run_key(run_id, "undo:state"))
        return {k: v for k, v in raw.items() if not k.endswith(":tries")}

    def settle(self, run_id: str, key: str, *, done: bool) -> bool:
        """Record that entry ``key``'s compensation ended (``done``, else dead-lettered)."""
        return bool(
            self._scripts["undo_settle"](
                keys=[self.runs.run_key(run_id), self.runs.run_key(run_id, "undo:state")],
                args=[key, "done" if done else "dead", self.runs.ttl_s],
            )
        )

    def failed_try(self, run_id: str, key: str) -> int:
        """Count one failed try of entry ``key``'s compensation; the tries so far."""
        return int(self.client.hincrby(self.runs.run_key(run_id, "undo:state"), f"{key}:tries", 1))

    def reopen(self, run_id: str, key: str) -> bool:
        """Let entry ``key``'s dead-lettered compensation run again (its dead letter was
        requeued); the run is compensating again. False when it was not dead-lettered."""
        return bool(
            self._scripts["undo_reopen"](
                keys=[
                    self.runs.run_key(run_id),
                    self.runs.run_key(run_id, "undo:state"),
                    self.runs.active_key(),
                ],
                args=[key, run_id],
            )
        )

    def finish(self, run_id: str) -> None:
        """Every compensation ended: the run is ``done`` compensating and, unless its aggregate
        is still to come, no longer active."""
        self._scripts["undo_finish"](keys=[self.runs.run_key(run_id), self.runs.active_key()], args=[run_id])
