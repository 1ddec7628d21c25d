"""What a run's pages show: its summary, one page of its items, its charts and its timeline.

A run's timeline (``runs/spans.py``) says which items have an outcome and what it was, so a
page of items reads only its own items and their outcome events, however large the run: a
run of 10,000 items costs one ``LRANGE`` of its timeline, one ``HMGET`` of a page of items
and one pipelined ``XRANGE`` per outcome shown (dead letters and failed attempts of the rows
shown are one pipeline each). The timelines of the last few runs read are kept in this
process (``SpanCache``), and a later read fetches only the entries written since. A run
recorded (even in part) by workers that kept no timeline has fewer timeline outcomes than
finished items: it is read the older way, every outcome from its event stream.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from agentfleet.approvals import Approval
from agentfleet.dlq import dead_letter_id
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.orchestration import Fleet
from agentfleet.runs import RunStore, Span, SpanLog, summary_from_record
from agentfleet.service.console.charts import Chart
from agentfleet.service.console.series import Window, run_charts, run_window
from agentfleet.service.console.svg import Shown
from agentfleet.service.console.timeline import KINDS, Timeline, build_timeline
from agentfleet.tracing import TRACE_ID_FIELD

__all__ = [
    "ITEMS_PAGE",
    "ItemRow",
    "RunView",
    "SpanCache",
    "TimelineView",
    "finished",
    "read_run",
    "read_timeline",
    "success_rate",
]

# Items listed on one page of a run.
ITEMS_PAGE = 100
# Items listed as the slowest and the most retried beside a timeline.
NOTABLE = 10
# Runs whose timelines this process keeps, the most recently read.
CACHED_RUNS = 8

T = TypeVar("T")


class SpanCache:
    """The timelines of the last ``CACHED_RUNS`` runs read, brought up to date on each read
    with the entries written since (a timeline only grows), and what was drawn from each
    (``derived``). Safe to share between threads."""

    def __init__(self) -> None:
        self._logs: OrderedDict[str, SpanLog] = OrderedDict()
        self._derived: dict[str, dict[str, tuple[Hashable, Any]]] = {}
        self._lock = threading.Lock()

    def read(self, store: RunStore, run_id: str) -> SpanLog:
        with self._lock:
            known = self._logs.get(run_id)
        log = store.spans(run_id, after=known)
        with self._lock:
            self._logs[run_id] = log
            self._logs.move_to_end(run_id)
            while len(self._logs) > CACHED_RUNS:
                gone, _ = self._logs.popitem(last=False)
                self._derived.pop(gone, None)
        return log

    def derived(self, run_id: str, name: str, basis: Hashable, compute: Callable[[], T]) -> T:
        """What ``compute`` draws from the run's timeline, computed again only when ``basis``
        (what it is drawn from: the entries read, the window...) differs from the last time:
        a finished run's charts and timeline are drawn once, however often they are shown."""
        with self._lock:
            kept = self._derived.get(run_id, {}).get(name)
        if kept is not None and kept[0] == basis:
            return cast(T, kept[1])
        value = compute()
        with self._lock:
            if run_id in self._logs:
                self._derived.setdefault(run_id, {})[name] = (basis, value)
        return value


def finished(summary: RunSummary) -> int:
    """Items with a final outcome (succeeded, failed or cancelled)."""
    return summary.succeeded + summary.failed + summary.cancelled


def success_rate(summary: RunSummary) -> float | None:
    """Succeeded items as a share of those that ran to an outcome (succeeded or failed; a
    cancelled item never ran); None before the first."""
    ran = summary.succeeded + summary.failed
    return summary.succeeded / ran if ran else None


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
    charts: list[Chart] = field(default_factory=list)
    timeline: bool = False
    # The run's trace (hex; '' when it was dispatched without tracing) and its link, if any.
    trace_id: str = ""
    trace_link: str = ""
    # The run's items waiting for a decision now, oldest first.
    waiting: list[Approval] = field(default_factory=list)


@dataclass(frozen=True)
class Attempt:
    """One attempt listed beside a timeline: its item (index and key), what it came to, its
    seconds and its worker ('' for none)."""

    index: int
    key: str
    came_to: str
    duration_s: float
    worker: str


@dataclass(frozen=True)
class TimelineView:
    summary: RunSummary
    timeline: Timeline | None
    slowest: list[Attempt]
    retried: list[tuple[int, int, str]]


def _pick(finals: dict[int, Span], total: int, show: str) -> list[int]:
    if show == "failed":
        return sorted(i for i, s in finals.items() if s.kind in "fc")
    if show == "pending":
        return [i for i in range(total) if i not in finals]
    return list(range(total))


class _Reader:
    """Reads one run for its pages through ``fleet``."""

    def __init__(self, fleet: Fleet, run_id: str, record: dict[str, str]) -> None:
        self.fleet = fleet
        self.store = fleet.store
        self.run_id = run_id
        self.record = record
        self.stages = len(record.get("task", "").split(",")) if record.get("kind") == "pipeline" else 1

    def rows(
        self, indices: Sequence[int], items: dict[int, tuple[str, str, str]], outcomes: dict[int, TaskOutcome]
    ) -> list[ItemRow]:
        """The rows of ``indices``: an outcome's dead letter (a pipeline item's is its failed
        stage's, so each stage's id is looked for), else the item's last failed attempts."""
        shown = [i for i in indices if i in items]
        dead = {i: outcomes[i] for i in shown if i in outcomes and outcomes[i].dead_lettered}
        wanted = {i: [dead_letter_id(items[i][1], s) for s in range(self.stages)] for i in dead}
        letters = self.fleet.dlq.store
        pipe = letters.client.pipeline(transaction=False)
        for ids in wanted.values():
            for entry_id in ids:
                pipe.exists(letters.entry_key(entry_id))
        flags = pipe.execute() if wanted else []
        present: dict[int, str | None] = {}
        for i, ids in wanted.items():
            mine, flags = flags[: len(ids)], flags[len(ids) :]
            present[i] = next((e for e, there in zip(ids, mine, strict=True) if there), None)
        waiting = [i for i in shown if i not in outcomes]
        errors = dict(zip(waiting, self.store.attempt_errors_of([items[i][1] for i in waiting]), strict=True))
        rows = []
        for i in shown:
            task_id, key, item_key = items[i]
            if i in outcomes:
                rows.append(ItemRow(i, task_id, key, item_key, outcomes[i], present.get(i)))
            else:
                rows.append(ItemRow(i, task_id, key, item_key, None, None, errors[i][-3:]))
        return rows

    def outcomes_of(self, finals: dict[int, Span], indices: list[int]) -> dict[int, TaskOutcome]:
        events = self.store.events_at(self.run_id, [finals[i].event for i in indices if i in finals])
        found = {}
        for i in indices:
            fields = events.get(finals[i].event) if i in finals else None
            if fields and fields.get("kind") == "outcome":
                found[i] = TaskOutcome.model_validate_json(fields["outcome"])
        return found

    def stragglers(self, summary: RunSummary, pending: list[int]) -> list[ItemRow]:
        """The items still without an outcome once most of the run is done (at most ten)."""
        if summary.status != "running" or not pending or len(pending) > max(1, summary.tasks_total // 10):
            return []
        return self.rows(pending[:10], self.store.items(self.run_id, pending[:10]), {})


def read_run(
    fleet: Fleet, spans: SpanCache, spend: dict[str, float], run_id: str, *, page: int, show: str, now: float
) -> RunView | None:
    """A run with one page of its items (``show``: ``all``, ``failed`` or ``pending``)."""
    store = fleet.store
    record = store.get_run(run_id)
    if not record:
        return None
    reader = _Reader(fleet, run_id, record)
    summary = summary_from_record(run_id, record, now=now)
    log = spans.read(store, run_id)
    kept = len(log.finals) == finished(summary)
    if kept:
        total = max(summary.tasks_total, max(log.finals, default=-1) + 1)
        chosen = _pick(log.finals, total, show)
        pending = [i for i in range(total) if i not in log.finals] if summary.status == "running" else []
    else:
        outcomes = store.outcomes(run_id)
        everything = store.items(run_id)
        finals = {i: Span(i, -1, 0, 0, "s" if o.ok else "f") for i, o in outcomes.items()}
        chosen = [i for i in _pick(finals, max(everything, default=-1) + 1, show) if i in everything]
        pending = [i for i in sorted(everything) if i not in outcomes]
    pages = max(1, -(-len(chosen) // ITEMS_PAGE))
    page = min(max(1, page), pages)
    shown = chosen[(page - 1) * ITEMS_PAGE : page * ITEMS_PAGE]
    items = store.items(run_id, shown)
    found = (
        reader.outcomes_of(log.finals, shown) if kept else {i: outcomes[i] for i in shown if i in outcomes}
    )
    return RunView(
        summary=summary,
        task=record.get("task", ""),
        kind=record.get("kind", "map"),
        items=reader.rows(shown, items, found),
        stragglers=reader.stragglers(summary, pending),
        spend=spend,
        aggregate=store.get_aggregate(run_id),
        has_aggregate=bool(record.get("aggregate")),
        page=page,
        pages=pages,
        show=show,
        charts=_charts(spans, run_id, summary, log, now) if log.spans else [],
        timeline=bool(log.spans),
        waiting=sorted(fleet.approvals(run_id), key=lambda a: a.created_at),
        **_trace(fleet, record),
    )


def _trace(fleet: Fleet, record: dict[str, str]) -> dict[str, str]:
    """The run's trace id and, with ``service.trace_url`` set, the link to it."""
    trace_id = record.get(TRACE_ID_FIELD, "")
    url = fleet.settings.service.trace_url
    return {"trace_id": trace_id, "trace_link": url.format(trace_id=trace_id) if url and trace_id else ""}


def _window(spans: SpanCache, run_id: str, summary: RunSummary, log: SpanLog, now: float) -> Window:
    if summary.ended_at is None:
        return run_window(summary, log, now)
    basis = (log.entries, summary.created_at, summary.ended_at)
    return spans.derived(run_id, "window", basis, lambda: run_window(summary, log, now))


def _charts(spans: SpanCache, run_id: str, summary: RunSummary, log: SpanLog, now: float) -> list[Chart]:
    window = _window(spans, run_id, summary, log, now)
    basis = (log.entries, window, summary.tasks_total)
    return spans.derived(run_id, "charts", basis, lambda: run_charts(summary, log, window))


def _slowest(log: SpanLog) -> list[Span]:
    return sorted((s for s in log.spans if s.lane >= 0), key=lambda s: -s.duration_s)[:NOTABLE]


def _most_retried(log: SpanLog) -> list[tuple[int, int]]:
    retries: dict[int, int] = {}
    for span in log.spans:
        if span.kind == "r":
            retries[span.index] = retries.get(span.index, 0) + 1
    return sorted(retries.items(), key=lambda kv: (-kv[1], kv[0]))[:NOTABLE]


def read_timeline(
    fleet: Fleet,
    spans: SpanCache,
    run_id: str,
    *,
    now: float,
    link: Callable[[int], str],
    shown: Shown,
    item_limit: int,
) -> TimelineView | None:
    """A run's timeline, its slowest attempts and its most retried items. What is drawn is
    kept in ``spans`` until the timeline or its window changes, so ``link`` and ``shown``
    must say the same at every call for a run (the console's own do)."""
    store = fleet.store
    record = store.get_run(run_id)
    if not record:
        return None
    summary = summary_from_record(run_id, record, now=now)
    log = spans.read(store, run_id)
    if not log.spans:
        return TimelineView(summary, None, [], [])
    window = _window(spans, run_id, summary, log, now)

    def draw() -> tuple[Timeline, list[Attempt], list[tuple[int, int, str]]]:
        slow, retried = _slowest(log), _most_retried(log)
        indices = {s.index for s in log.spans} if len(log.spans) <= item_limit else set()
        indices |= {s.index for s in slow} | {i for i, _ in retried}
        keys = {i: item[2] for i, item in store.items(run_id, sorted(indices)).items()}
        timeline = build_timeline(log, window, keys=keys, link=link, shown=shown)
        attempts = [
            Attempt(
                s.index,
                keys.get(s.index, ""),
                KINDS[s.kind][1] if s.kind in KINDS else s.kind,
                s.duration_s,
                log.worker(s.lane),
            )
            for s in slow
        ]
        return timeline, attempts, [(i, n, keys.get(i, "")) for i, n in retried]

    basis = (log.entries, window, tuple(sorted(log.lanes.items())), item_limit)
    timeline, attempts, retried = spans.derived(run_id, "timeline", basis, draw)
    return TimelineView(summary, timeline, attempts, retried)
