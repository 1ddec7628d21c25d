"""Turning a run's hash into a ``RunSummary``, and the fleet-wide completion figures."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentfleet.models import RunSummary

__all__ = ["CompletionStats", "summary_from_record"]


@dataclass(frozen=True)
class CompletionStats:
    """Fleet-wide progress: items counted in the last ``window_s`` seconds, the epoch seconds of
    the last one (None if none ever), and the cumulative counters of ``p:stats``.

    Times come from the clocks of the workers that recorded the items.
    """

    window_s: int
    completed_in_window: int
    last_done_at: float | None
    totals: dict[str, float]


def _num(record: dict[str, str], field: str, kind: type = int) -> Any:
    raw = record.get(field)
    if raw in (None, ""):
        return kind(0)
    return kind(float(raw)) if kind is int else kind(raw)


def summary_from_record(
    run_id: str, record: dict[str, str], *, timed_out_ids: Sequence[str] = (), now: float | None = None
) -> RunSummary:
    """A ``RunSummary`` from a run hash. ``wall_clock_s`` stops at ``ended_at`` if set."""
    total = _num(record, "tasks_total")
    succeeded = _num(record, "succeeded")
    created = _num(record, "created_at", float)
    ended_raw = record.get("ended_at")
    ended = float(ended_raw) if ended_raw else None
    end = ended if ended is not None else (time.time() if now is None else now)
    return RunSummary(
        run_id=run_id,
        name=record.get("name", ""),
        tasks_total=total,
        succeeded=succeeded,
        failed=_num(record, "failed"),
        dead_lettered=_num(record, "dead_lettered"),
        cancelled=_num(record, "cancelled"),
        redelivered=_num(record, "redelivered"),
        recovered=_num(record, "recovered"),
        retries=_num(record, "retries"),
        deferrals=_num(record, "deferrals"),
        timed_out=len(timed_out_ids),
        timed_out_ids=list(timed_out_ids),
        wall_clock_s=round(max(0.0, end - created), 3) if created else 0.0,
        # Whole microseconds since the counter became an integer; seconds before.
        worker_seconds=round(_num(record, "worker_us") / 1e6 + _num(record, "worker_seconds", float), 3),
        cost_usd=round(_num(record, "cost_usd", float), 6),
        success_rate=round(succeeded / total, 4) if total else 1.0,
        status=record.get("status", "unknown"),
        created_at=created,
        ended_at=ended,
        tenant=record.get("tenant") or None,
        compensation=record.get("compensation", ""),
        compensated=_num(record, "compensated"),
        compensations_failed=_num(record, "compensations_failed"),
        steps=_steps(record),
        **_aggregate(record),
    )


def _aggregate(record: dict[str, str]) -> dict[str, Any]:
    """The ``aggregate`` and ``aggregate_error`` fields of a run's summary."""
    if not record.get("aggregate"):
        return {}
    raw = record.get("aggregate_result")
    if not raw:
        return {"aggregate": "waiting"}
    stored = json.loads(raw)
    if stored.get("ok"):
        return {"aggregate": "succeeded"}
    return {"aggregate": "failed", "aggregate_error": str(stored.get("error") or "")}


def _steps(record: dict[str, str]) -> dict[str, dict[str, int]]:
    """A graph run's items per step and status (``step:{name}:{status}`` counters), every
    step listed in graph order, from zero."""
    names = [step[0] for step in json.loads(record["graph"])] if record.get("graph") else []
    found = {name: {"succeeded": 0, "failed": 0, "skipped": 0} for name in names}
    for field, value in record.items():
        if field.startswith("step:"):
            name, _, status = field[5:].rpartition(":")
            found.setdefault(name, {})[status] = int(value)
    return found
