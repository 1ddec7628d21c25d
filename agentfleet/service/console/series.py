"""The numbers behind the console's charts: the fleet's last hour (from ``runs/history.py``'s
minutes) and a run's course (from its timeline, ``runs/spans.py``), as ``Chart`` objects.

A run's window runs from its start (or an hour before its end, for a longer run) to its end
(or now), cut into at most ``RUN_BINS`` bins of a round number of seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentfleet.models import RunSummary
from agentfleet.runs import Minute, SpanLog
from agentfleet.service.console.charts import Chart, Series, bar_chart, line_chart

__all__ = ["RUN_BINS", "Window", "fleet_charts", "run_charts", "run_window"]

RUN_BINS = 60
_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600)

# The charts both pages draw: each series' legend name and colour (its CSS class).

Values = Sequence[float | None]
_FINISHED = (("succeeded", "k-s"), ("failed", "k-f"), ("cancelled", "k-c"))
_TROUBLE = (("failed", "k-f"), ("retried", "k-r"), ("deferred", "k-d"))
_SPEND = (("US dollars", "k-cost"),)


@dataclass(frozen=True)
class Window:
    """A stretch of time cut into ``bins`` bins of ``step_s`` seconds from ``start`` (epoch s)."""

    start: float
    step_s: float
    bins: int

    @property
    def end(self) -> float:
        return self.start + self.step_s * self.bins

    @property
    def times(self) -> list[float]:
        return [self.start + i * self.step_s for i in range(self.bins)]

    def index(self, at: float) -> int | None:
        """The bin ``at`` falls in, or None outside the window."""
        i = math.floor((at - self.start) / self.step_s)
        return i if 0 <= i < self.bins else None

    def per(self) -> str:
        """The bin width in words: ``a second``, ``a minute``, ``per 5 s``."""
        return {1: "a second", 60: "a minute"}.get(int(self.step_s), f"per {self.step_s:g} s")


def run_window(summary: RunSummary, log: SpanLog, now: float) -> Window:
    """The window of a run's charts and timeline: its start (at most an hour before its end)
    to its end, or now while it runs."""
    last = max((s.end_ms for s in log.spans), default=0) / 1000
    end = max(summary.ended_at or now, last)
    first = min((s.start_ms for s in log.spans), default=int(end * 1000)) / 1000
    start = min(summary.created_at or first, first)
    start = max(start, end - 3600)
    span = max(1.0, end - start)
    step = next((s for s in _STEPS_S if span / s <= RUN_BINS), _STEPS_S[-1])
    first_bin = math.floor(start / step) * step
    return Window(start=first_bin, step_s=float(step), bins=max(1, math.ceil((end - first_bin) / step)))


def fleet_charts(minutes: Sequence[Minute]) -> list[Chart]:
    """The fleet's last hour: finished items, item time, queues, spend and trouble a minute."""
    times = [m.at for m in minutes]
    step = 60.0

    def counts(*kinds: str) -> list[Values]:
        return [[m.count(kind) for m in minutes] for kind in kinds]

    return [
        _bars("Items finished", "", times, step, _FINISHED, counts("succeeded", "failed", "cancelled")),
        _lines(
            "Item time (s)",
            times,
            step,
            ("p50", [m.item_time(0.5) for m in minutes]),
            ("p95", [m.item_time(0.95) for m in minutes]),
            ("p99", [m.item_time(0.99) for m in minutes]),
        ),
        _lines(
            "Queues and busy slots",
            times,
            step,
            ("waiting in queues", [m.queued for m in minutes]),
            ("taken, not acknowledged", [m.unacked for m in minutes]),
            ("busy slots", [m.busy for m in minutes]),
        ),
        _bars("Spend", "$", times, step, _SPEND, [[m.cost_usd for m in minutes]]),
        _bars(
            "Failures, retries and deferrals",
            "",
            times,
            step,
            _TROUBLE,
            counts("failed", "retries", "deferrals"),
        ),
    ]


def _quantile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted values, by nearest rank; None for none."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class _RunBins:
    """A run's timeline counted into a window's bins: spans by kind (``s`` succeeded, ``f``
    failed, ``c`` cancelled, ``r`` retried, ``d`` deferred), spend (US dollars), attempt times
    (seconds, sorted) and the items still without an outcome at each bin's end."""

    counts: dict[str, list[float]]
    cost: list[float]
    durations: list[list[float]]
    waiting: list[float | None]


def _run_bins(summary: RunSummary, log: SpanLog, window: Window) -> _RunBins:
    bins = window.bins
    counts = {kind: [0.0] * bins for kind in "sfcrd"}
    cost = [0.0] * bins
    durations: list[list[float]] = [[] for _ in range(bins)]
    ended = [0] * bins
    # Items that finished before the window (a run longer than an hour) are no longer waiting.
    done = 0
    for span in log.spans:
        i = window.index(span.end_ms / 1000)
        if i is None:
            if span.end_ms / 1000 < window.start:
                done += 1 if span.final else -1 if span.kind == "o" else 0
            continue
        if span.kind == "o":
            ended[i] -= 1
        if span.kind in counts:
            counts[span.kind][i] += 1
        if span.final:
            cost[i] += span.cost_usd
            ended[i] += 1
        if span.lane >= 0:
            durations[i].append(span.duration_s)
    waiting: list[float | None] = []
    for i in range(bins):
        done += ended[i]
        waiting.append(max(0, summary.tasks_total - done))
    return _RunBins(counts, cost, [sorted(d) for d in durations], waiting)


def run_charts(summary: RunSummary, log: SpanLog, window: Window) -> list[Chart]:
    """A run's course: items finished, attempt time, items waiting, spend and trouble per bin."""
    times, step, per = window.times, window.step_s, window.per()
    binned = _run_bins(summary, log, window)
    counts, ordered = binned.counts, binned.durations
    return [
        _bars(f"Items finished {per}", "", times, step, _FINISHED, [counts[k] for k in "sfc"]),
        _lines(
            "Attempt time (s)",
            times,
            step,
            ("p50", [_quantile(d, 0.5) for d in ordered]),
            ("p95", [_quantile(d, 0.95) for d in ordered]),
            ("longest", [d[-1] if d else None for d in ordered]),
        ),
        _lines("Items without an outcome", times, step, ("waiting", binned.waiting)),
        _bars(f"Spend {per}", "$", times, step, _SPEND, [binned.cost]),
        _bars(
            f"Failures, retries and deferrals {per}", "", times, step, _TROUBLE, [counts[k] for k in "frd"]
        ),
    ]


def _bars(
    title: str,
    unit: str,
    times: list[float],
    step: float,
    kinds: Sequence[tuple[str, str]],
    values: list[Values],
) -> Chart:
    stacks = [Series(name, css, v) for (name, css), v in zip(kinds, values, strict=True)]
    return bar_chart(title, unit, times, step, stacks)


def _lines(title: str, times: list[float], step: float, *named: tuple[str, Values]) -> Chart:
    """Lines coloured ``line-a``, ``line-b``, ``line-c`` in order."""
    lines = [Series(name, f"line-{'abc'[i]}", values) for i, (name, values) in enumerate(named)]
    return line_chart(title, "", times, step, lines)
