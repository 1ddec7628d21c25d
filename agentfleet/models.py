"""The records that cross process boundaries: a task's outcome and a run's summary."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RunSummary", "TaskOutcome"]


class TaskOutcome(BaseModel):
    """What one item of a run came to. A failure is an outcome with ``ok=False``, never a raise.

    ``attempts`` counts executions of the task body (deferrals for rate limits do not count);
    ``duration_s`` is the seconds spent in those executions; ``cost_usd`` is in US dollars.
    """

    model_config = ConfigDict(extra="ignore")

    task_id: str
    run_id: str
    item_key: str
    ok: bool
    result: Any = None
    error_type: str | None = None
    error: str | None = None
    attempts: int = 0
    duration_s: float = 0.0
    cost_usd: float = 0.0
    index: int = 0
    idempotency_key: str = ""
    dead_lettered: bool = False
    category: str | None = None


class RunSummary(BaseModel):
    """A run's totals. ``wall_clock_s`` runs from dispatch to the last outcome (or to now).

    ``timed_out`` counts the items that had no outcome when ``Run.wait`` gave up; their task
    ids are in ``timed_out_ids``. ``recovered`` counts the messages the reconciler published
    again for items that had lost theirs (a worker or Redis died at the wrong moment).
    ``success_rate`` is ``succeeded / tasks_total`` (1.0 for an empty run).
    """

    run_id: str
    name: str
    tasks_total: int
    succeeded: int = 0
    failed: int = 0
    dead_lettered: int = 0
    timed_out: int = 0
    cancelled: int = 0
    redelivered: int = 0
    recovered: int = 0
    retries: int = 0
    deferrals: int = 0
    wall_clock_s: float = 0.0
    worker_seconds: float = 0.0
    cost_usd: float = 0.0
    success_rate: float = 1.0
    status: str = "running"
    created_at: float = 0.0
    ended_at: float | None = None
    timed_out_ids: list[str] = Field(default_factory=list)
