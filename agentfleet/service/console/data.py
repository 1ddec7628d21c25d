"""What the console's pages show, read through the fleet's public APIs.

Every read the console makes goes through here: ``Fleet`` (runs, and ``Fleet.dlq`` for the
dead-letter queue), the run store, the limiter, the circuit breakers and the spend ledger.
Nothing here changes state except ``requeue``, ``purge`` and ``cancel``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfleet.config import FanoutSpec, ScheduleSpec, Settings
from agentfleet.dlq import DeadLetter, DLQFilter, DLQStats, dead_letter_id
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.dead_letters import RequeueResult
from agentfleet.ratelimit import FLEET, Limiter, LimitStatus
from agentfleet.ratelimit.circuit import CircuitBreaker, CircuitStatus
from agentfleet.spend import DaySpend, SpendLedger
from agentfleet.tracing import TRACE_ID_FIELD

__all__ = [
    "ConsoleData",
    "DLQView",
    "ItemRow",
    "LimitRow",
    "RunView",
    "ScheduleRow",
    "SpendView",
    "progress",
]

# Items listed on one page of a run.
ITEMS_PAGE = 100
# Dead letters listed at once, and entries a bulk action may touch in one request.
DLQ_PAGE = 100


def progress(summary: RunSummary) -> int:
    """Items with a final outcome (succeeded, failed or cancelled)."""
    return summary.succeeded + summary.failed + summary.cancelled


@dataclass(frozen=True)
class ItemRow:
    """One item of a run: its outcome when it has one, else the failed attempts so far."""

    index: int
    task_id: str
    key: str
    item_key: str
    outcome: TaskOutcome | None
    dead_letter: str | None = None
    attempt_errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class RunView:
    summary: RunSummary
    task: str
    kind: str
    items: list[ItemRow]
    stragglers: list[ItemRow]
    spend: dict[str, float]
    aggregate: dict[str, Any] | None
    has_aggregate: bool
    page: int
    pages: int
    show: str
    # The run's trace (hex; '' when it was dispatched without tracing) and its link, if any.
    trace_id: str = ""
    trace_link: str = ""


@dataclass(frozen=True)
class DLQView:
    stats: DLQStats
    entries: list[DeadLetter]
    filter: DLQFilter
    since: str
    truncated: bool


@dataclass(frozen=True)
class LimitRow:
    status: LimitStatus
    circuit: CircuitStatus | None


@dataclass(frozen=True)
class ScheduleRow:
    name: str
    task: str
    trigger: str
    inputs: str
    aggregate: str | None
    last_run: RunSummary | None
    scheduled: bool


@dataclass(frozen=True)
class SpendView:
    days: list[DaySpend]
    by_downstream: dict[str, float]
    runs: list[tuple[RunSummary, dict[str, float]]]
    run_budget_usd: float | None


class ConsoleData:
    """The console's window on one fleet (its settings, Redis and broker)."""

    def __init__(self, settings: Settings, fleet: Fleet) -> None:
        self.settings = settings
        self.fleet = fleet
        self.ledger = SpendLedger.from_settings(settings, fleet.store.client)

    # Runs ----------------------------------------------------------------------------------

    def runs(self, limit: int = 50) -> list[RunSummary]:
        return self.fleet.runs(limit)

    def fleet_totals(self) -> dict[str, Any]:
        stats = self.fleet.store.completion_stats(60)
        return {
            "completed_last_minute": stats.completed_in_window,
            "last_done_at": stats.last_done_at,
            "dlq_depth": self.fleet.dlq.store.depth(),
            "spent_today_usd": self.ledger.days(1)[0].total_usd,
            "open_circuits": [s.downstream for s in self._breaker().statuses() if s.state != "closed"],
        }

    def run(self, run_id: str, *, page: int = 1, show: str = "all") -> RunView | None:
        """A run with one page of its items (``show``: ``all``, ``failed`` or ``pending``)."""
        store = self.fleet.store
        record = store.get_run(run_id)
        if not record:
            return None
        summary = store.summary(run_id)
        items = store.items(run_id)
        outcomes = store.outcomes(run_id)
        stages = len(record.get("task", "").split(",")) if record.get("kind") == "pipeline" else 1
        rows = [self._row(index, item, outcomes.get(index), stages) for index, item in sorted(items.items())]
        if show == "failed":
            rows = [r for r in rows if r.outcome is not None and not r.outcome.ok]
        elif show == "pending":
            rows = [r for r in rows if r.outcome is None]
        pages = max(1, -(-len(rows) // ITEMS_PAGE))
        page = min(max(1, page), pages)
        shown = rows[(page - 1) * ITEMS_PAGE : page * ITEMS_PAGE]
        return RunView(
            summary=summary,
            task=record.get("task", ""),
            kind=record.get("kind", "map"),
            items=[self._with_attempts(r) if r.outcome is None else r for r in shown],
            stragglers=self._stragglers(summary, items, outcomes),
            spend=self.ledger.by_run(run_id),
            aggregate=store.get_aggregate(run_id),
            has_aggregate=bool(record.get("aggregate")),
            page=page,
            pages=pages,
            show=show,
            **self._trace(record),
        )

    def _trace(self, record: dict[str, str]) -> dict[str, str]:
        """The run's trace id and, with ``service.trace_url`` set, the link to it."""
        trace_id = record.get(TRACE_ID_FIELD, "")
        url = self.settings.service.trace_url
        return {"trace_id": trace_id, "trace_link": url.format(trace_id=trace_id) if url and trace_id else ""}

    def _row(
        self, index: int, item: tuple[str, str, str], outcome: TaskOutcome | None, stages: int
    ) -> ItemRow:
        task_id, key, item_key = item
        dead = None
        if outcome is not None and outcome.dead_lettered:
            # A pipeline item's dead letter is the failed stage's: look for each stage's id.
            ids = [dead_letter_id(key, stage) for stage in range(stages)]
            found = self.fleet.dlq.store.get_many(ids)
            dead = found[0].id if found else None
        return ItemRow(index, task_id, key, item_key, outcome, dead)

    def _with_attempts(self, row: ItemRow) -> ItemRow:
        errors = self.fleet.store.attempt_errors(row.key)
        return ItemRow(row.index, row.task_id, row.key, row.item_key, None, None, errors[-3:])

    def _stragglers(
        self, summary: RunSummary, items: dict[int, tuple[str, str, str]], outcomes: dict[int, TaskOutcome]
    ) -> list[ItemRow]:
        """The items still without an outcome once most of the run is done (at most ten)."""
        pending = [i for i in sorted(items) if i not in outcomes]
        if summary.status != "running" or not pending or len(pending) > max(1, summary.tasks_total // 10):
            return []
        rows = []
        for index in pending[:10]:
            task_id, key, item_key = items[index]
            errors = self.fleet.store.attempt_errors(key)
            rows.append(ItemRow(index, task_id, key, item_key, None, None, errors[-3:]))
        return rows

    def cancel(self, run_id: str) -> None:
        self.fleet.get_run(run_id).cancel()

    # Dead letters --------------------------------------------------------------------------

    def dlq_filter(self, params: dict[str, str]) -> tuple[DLQFilter, str]:
        """The filter a query or form asks for, and its ``since`` text. Raises ``ConfigError``."""
        since = params.get("since", "").strip()
        flt = DLQFilter.of(
            category=params.get("category") or None,
            downstream=params.get("downstream") or None,
            run_id=params.get("run") or None,
            fingerprint=params.get("fingerprint") or None,
            since=since or None,
        )
        return flt, since

    def dlq(self, flt: DLQFilter, since: str) -> DLQView:
        entries = self.fleet.dlq.store.find(flt, limit=DLQ_PAGE + 1)
        return DLQView(
            stats=self.fleet.dlq.stats(),
            entries=entries[:DLQ_PAGE],
            filter=flt,
            since=since,
            truncated=len(entries) > DLQ_PAGE,
        )

    def dead_letter(self, entry_id: str) -> DeadLetter | None:
        return self.fleet.dlq.store.get(entry_id)

    def selected(self, ids: Sequence[str], flt: DLQFilter) -> list[DeadLetter]:
        """The entries an action names: by id, else by filter (never the whole queue unasked)."""
        return self.fleet.dlq.select(list(ids), flt)

    def requeue(
        self, ids: Sequence[str], flt: DLQFilter, *, dry_run: bool
    ) -> tuple[list[RequeueResult], list[str]]:
        """Requeue (or, with ``dry_run``, preview) the entries named; also the ids already gone."""
        if not ids:
            return self.fleet.dlq.requeue((), flt, dry_run=dry_run), []
        present = [e.id for e in self.fleet.dlq.store.get_many(list(ids))]
        gone = sorted(set(ids) - set(present))
        return (self.fleet.dlq.requeue(present, dry_run=dry_run) if present else []), gone

    def purge(self, ids: Sequence[str]) -> list[str]:
        """Delete the entries named; returns those that were still there."""
        return self.fleet.dlq.store.remove(list(ids))

    # Limits, schedules, spend --------------------------------------------------------------

    def _breaker(self) -> CircuitBreaker:
        return CircuitBreaker.from_settings(self.settings, self.fleet.store.client)

    def limits(self) -> list[LimitRow]:
        limiter = Limiter.from_settings(self.settings, self.fleet.store.client)
        circuits = {s.downstream: s for s in self._breaker().statuses()}
        names = list(dict.fromkeys([*limiter.known_downstreams(), *circuits]))
        rows = [LimitRow(limiter.status(name), circuits.get(name)) for name in names]
        if limiter.max_parallelism is not None:
            rows.append(LimitRow(limiter.status(FLEET), None))
        return rows

    def schedules(self) -> list[ScheduleRow]:
        recent = self.fleet.runs(200)
        rows = []
        named: list[tuple[str, FanoutSpec, bool]] = [(n, s, True) for n, s in self.settings.schedules.items()]
        named += [(n, s, False) for n, s in self.settings.fanouts.items()]
        for name, spec, scheduled in sorted(named, key=lambda x: x[0]):
            trigger = "POST /runs"
            if isinstance(spec, ScheduleSpec):
                trigger = f"cron {spec.cron} (UTC)" if spec.cron else f"every {spec.interval_s:g} s"
            inputs = spec.inputs if isinstance(spec.inputs, str) else f"{len(spec.inputs)} inline"
            last = next((r for r in recent if r.name == name), None)
            rows.append(ScheduleRow(name, spec.task, trigger, inputs, spec.aggregate, last, scheduled))
        return rows

    def spend(self, days: int = 14) -> SpendView:
        found = self.ledger.days(days)
        runs = self.fleet.runs(50)
        live = self.ledger.runs([r.run_id for r in runs])
        return SpendView(
            days=found,
            by_downstream=SpendLedger.by_downstream(found),
            runs=[(r, live[r.run_id]) for r in runs],
            run_budget_usd=self.settings.budgets.run_usd,
        )
