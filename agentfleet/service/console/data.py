"""What the console's pages show, read through the fleet's public APIs.

Every read the console makes goes through here: ``Fleet`` (runs, and ``Fleet.dlq`` for the
dead-letter queue), the run store (a run's items and timeline: ``run_data``; the fleet's
last hour: ``runs.FleetHistory``), the worker registry, the limiter, the circuit breakers and
the spend ledger. Nothing here changes state except ``requeue``, ``purge`` and ``cancel``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentfleet.config import FanoutSpec, ScheduleSpec, Settings
from agentfleet.dlq import DeadLetter, DLQFilter, DLQStats
from agentfleet.models import RunSummary
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.dead_letters import RequeueResult
from agentfleet.ratelimit import FLEET, Limiter, LimitStatus
from agentfleet.ratelimit.circuit import CircuitBreaker, CircuitStatus
from agentfleet.registry import WorkerRecord, WorkerRegistry
from agentfleet.runs import FleetHistory
from agentfleet.service.console.charts import Chart
from agentfleet.service.console.run_data import (
    ItemRow,
    RunView,
    SpanCache,
    TimelineView,
    finished,
    read_run,
    read_timeline,
)
from agentfleet.service.console.series import fleet_charts
from agentfleet.service.console.svg import Shown
from agentfleet.service.console.timeline import ITEM_LIMIT
from agentfleet.spend import DaySpend, SpendLedger

__all__ = [
    "ConsoleData",
    "DLQView",
    "ItemRow",
    "LimitRow",
    "RunView",
    "ScheduleRow",
    "SpendView",
    "WorkersView",
    "progress",
]

# Dead letters listed at once, and entries a bulk action may touch in one request.
DLQ_PAGE = 100
# Minutes of the fleet's history its charts show.
FLEET_MINUTES = 60

progress = finished


@dataclass(frozen=True)
class WorkersView:
    """The live workers (by node name), the heartbeat interval and when they were read
    (epoch seconds)."""

    workers: list[WorkerRecord]
    heartbeat_s: float
    now: float

    @property
    def slots(self) -> int:
        return sum(w.slots or 0 for w in self.workers)

    @property
    def busy(self) -> int:
        return sum(w.busy or 0 for w in self.workers)

    def late(self, worker: WorkerRecord) -> bool:
        """True when the worker's last heartbeat is more than two intervals old."""
        return self.now - worker.beat_at > 2 * self.heartbeat_s


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
        self.spans = SpanCache()

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
        spend = self.ledger.by_run(run_id)
        return read_run(self.fleet, self.spans, spend, run_id, page=page, show=show, now=time.time())

    def timeline(self, run_id: str, *, link: Callable[[int], str], shown: Shown) -> TimelineView | None:
        """A run's timeline (``link``: an item's address; ``shown``: the redactor)."""
        return read_timeline(
            self.fleet, self.spans, run_id, now=time.time(), link=link, shown=shown, item_limit=ITEM_LIMIT
        )

    def fleet_charts(self) -> list[Chart]:
        """The fleet's last hour, minute by minute."""
        history = FleetHistory(self.fleet.store.client, prefix=self.settings.key_prefix)
        return fleet_charts(history.minutes(FLEET_MINUTES))

    def workers(self) -> WorkersView:
        registry = WorkerRegistry.from_settings(self.settings, self.fleet.store.client)
        return WorkersView(
            workers=registry.live(), heartbeat_s=self.settings.worker.heartbeat_s, now=time.time()
        )

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
