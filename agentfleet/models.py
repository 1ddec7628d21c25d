"""The records that cross process boundaries: a task's outcome and a run's summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentfleet.errors import DownstreamError

__all__ = ["RunSummary", "TaskOutcome", "TokenUsage"]


@dataclass(frozen=True)
class TokenUsage:
    """Token counts of one LLM reply (or a sum of replies), as every vendor adapter reads them.

    ``input_tokens`` are the input tokens neither written to nor read from a prompt cache;
    ``cache_creation_input_tokens`` were written to it and ``cache_read_input_tokens`` read
    from it; ``output_tokens`` were generated. All fields are token counts.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @classmethod
    def of(cls, usage: Any) -> TokenUsage:
        """Read counts from an SDK ``Usage``, a dict, or any object with those attributes.

        Missing or ``None`` counts are zero. A negative or non-integer count means a malformed
        reply: ``DownstreamError``.
        """
        if isinstance(usage, TokenUsage):
            return usage

        def read(name: str) -> int:
            value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
            if value is None:
                return 0
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DownstreamError(f"usage.{name} is not a token count: {value!r}")
            return value

        return cls(**{f.name: read(f.name) for f in fields(cls)})

    @property
    def total_input(self) -> int:
        """Every input token: uncached, written to the cache and read from it."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def total(self) -> int:
        """Every input and output token."""
        return self.total_input + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def latest(self, report: TokenUsage) -> TokenUsage:
        """This count after a later report on the same reply (a stream's next event).

        A stream's reports are running totals, so each count is the largest reported.
        """
        counts = {f.name: max(getattr(self, f.name), getattr(report, f.name)) for f in fields(self)}
        return TokenUsage(**counts)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class TaskOutcome(BaseModel):
    """What one item of a run came to. A failure is an outcome with ``ok=False``, never a raise.

    ``attempts`` counts executions of the task body (deferrals for rate limits do not count);
    ``duration_s`` is the seconds spent in those executions; ``cost_usd`` is in US dollars.
    ``steps`` is, for an item of a dependency graph, each step's status: ``succeeded``,
    ``failed`` or ``skipped`` (a step whose dependency did not succeed).
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
    steps: dict[str, str] = Field(default_factory=dict)


class RunSummary(BaseModel):
    """A run's totals. ``wall_clock_s`` runs from dispatch to the last outcome (or to now).

    ``timed_out`` counts the items that had no outcome when ``Run.wait`` gave up; their task
    ids are in ``timed_out_ids``. ``recovered`` counts the messages the reconciler published
    again for items that had lost theirs (a worker or Redis died at the wrong moment).
    ``success_rate`` is ``succeeded / tasks_total`` (1.0 for an empty run). ``tenant`` is the
    label its budgets are counted under. ``compensation`` is ``requested`` once the run was
    told to undo its succeeded items, then ``done``; ``compensated`` and
    ``compensations_failed`` count them. ``steps`` counts, for a dependency graph, each step's
    items by status (``succeeded``, ``failed``, ``skipped``). ``aggregate`` is, for a run with
    one, ``waiting`` until it is stored, then ``succeeded`` or ``failed`` (with
    ``aggregate_error`` saying why); empty for a run without. ``waiting_approval`` counts the
    items parked for a decision (``ctx.approval``, ``ctx.wait_for_event``) when the summary
    was taken through ``Run``; their task ids are in ``waiting_approval_ids``.
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
    waiting_approval: int = 0
    waiting_approval_ids: list[str] = Field(default_factory=list)
    tenant: str | None = None
    compensation: str = ""
    compensated: int = 0
    compensations_failed: int = 0
    steps: dict[str, dict[str, int]] = Field(default_factory=dict)
    aggregate: str = ""
    aggregate_error: str | None = None
