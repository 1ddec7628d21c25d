"""Reading a run's events, its timeline, its items' stored outcomes and failed attempts.

One part of ``RunStore`` (``runs/store.py``; keys described there): the ``events`` stream
(outcomes in completion order, then ``end``), the ``spans`` timeline (``runs/spans.py``), the
``out`` and ``errs`` keys of each item.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from agentfleet.models import TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.runs.spans import SpanLog, parse_spans
from agentfleet.runs.store_base import StoreBase

__all__ = ["RunEvents"]


class RunEvents(StoreBase):
    """Reads of a run's events and timeline and of its items' outcomes and attempt errors."""

    @repeatable
    def spans(self, run_id: str, *, after: SpanLog | None = None) -> SpanLog:
        """The run's timeline (``runs/spans.py``): empty for a run recorded before it was kept.
        Given ``after`` (an earlier read), only the entries written since are read."""
        start = after.entries if after is not None else 0
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(self.run_key(run_id, "spans"))
        pipe.lrange(self.run_key(run_id, "spans"), start, -1)
        pipe.hgetall(self.run_key(run_id, "lanes"))
        length, entries, lanes = pipe.execute()
        if int(length) < start:
            # The list is not the one read before (it expired): read it whole.
            return self.spans(run_id)
        return parse_spans(entries, lanes, after=after)

    @repeatable
    def attempt_errors_of(self, keys: Sequence[str]) -> list[list[dict[str, Any]]]:
        """``attempt_errors`` of each item key, in one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.lrange(self.keys.item("errs", key), 0, -1)
        return [[json.loads(x) for x in found] for found in pipe.execute()] if keys else []

    @repeatable
    def attempt_errors(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self._redis.lrange(self.keys.item("errs", key), 0, -1)]

    @repeatable
    def events_at(self, run_id: str, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The run's events with these stream ids (one ``XRANGE`` each, in one round trip)."""
        if not ids:
            return {}
        key = self.run_key(run_id, "events")
        pipe = self._redis.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(key, entry_id, entry_id)
        found: dict[str, dict[str, str]] = {}
        for reply in pipe.execute():
            for entry_id, fields in reply:
                found[entry_id] = fields
        return found

    @repeatable
    def events(
        self, run_id: str, last_id: str = "0-0", *, block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, dict[str, str]]]:
        """Events after ``last_id`` (``outcome`` or ``end``), waiting up to ``block_ms`` ms."""
        reply = self._redis.xread({self.run_key(run_id, "events"): last_id}, count=count, block=block_ms)
        if not reply:
            return []
        return [(entry_id, fields) for entry_id, fields in reply[0][1]]

    @repeatable
    def outcomes(self, run_id: str) -> dict[int, TaskOutcome]:
        """The latest outcome of each finished item, by index."""
        found: dict[int, TaskOutcome] = {}
        last = "0-0"
        while True:
            batch = self.events(run_id, last, count=2000)
            if not batch:
                return found
            for entry_id, fields in batch:
                last = entry_id
                if fields.get("kind") == "outcome":
                    found[int(fields["idx"])] = TaskOutcome.model_validate_json(fields["outcome"])

    @repeatable
    def stored_outcomes(self, keys: Iterable[str]) -> list[TaskOutcome | None]:
        keys = list(keys)
        if not keys:
            return []
        raw = self._mget([self.outcome_key(k) for k in keys])
        return [TaskOutcome.model_validate_json(r) if r else None for r in raw]
