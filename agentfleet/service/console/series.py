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
    return [
        bar_chart(
            "Items finished",
            "",
            times,
            step,
            [
                Series("succeeded", "k-s", [m.count("succeeded") for m in minutes]),
                Series("failed", "k-f", [m.count("failed") for m in minutes]),
                Series("cancelled", "k-c", [m.count("cancelled") for m in minutes]),
            ],
        ),
        line_chart(
            "Item time (s)",
            "",
            times,
            step,
            [
                Series("p50", "line-a", [m.item_time(0.5) for m in minutes]),
                Series("p95", "line-b", [m.item_time(0.95) for m in minutes]),
                Series("p99", "line-c", [m.item_time(0.99) for m in minutes]),
            ],
        ),
        line_chart(
            "Queues and busy slots",
            "",
            times,
            step,
            [
                Series("waiting in queues", "line-a", [m.queued for m in minutes]),
                Series("taken, not acknowledged", "line-b", [m.unacked for m in minutes]),
                Series("busy slots", "line-c", [m.busy for m in minutes]),
            ],
        ),
        bar_chart("Spend", "$", times, step, [Series("US dollars", "k-cost", [m.cost_usd for m in minutes])]),
        bar_chart(
            "Failures, retries and deferrals",
            "",
            times,
            step,
            [
                Series("failed", "k-f", [m.count("failed") for m in minutes]),
                Series("retried", "k-r", [m.count("retries") for m in minutes]),
                Series("deferred", "k-d", [m.count("deferrals") for m in minutes]),
            ],
        ),
    ]


def _quantile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted values, by nearest rank; None for none."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run_charts(summary: RunSummary, log: SpanLog, window: Window) -> list[Chart]:
    """A run's course: items finished, attempt time, items waiting, spend and trouble per bin."""
    bins, times = window.bins, window.times
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
    per = window.per()
    ordered = [sorted(d) for d in durations]
    return [
        bar_chart(
            f"Items finished {per}",
            "",
            times,
            window.step_s,
            [
                Series("succeeded", "k-s", counts["s"]),
                Series("failed", "k-f", counts["f"]),
                Series("cancelled", "k-c", counts["c"]),
            ],
        ),
        line_chart(
            "Attempt time (s)",
            "",
            times,
            window.step_s,
            [
                Series("p50", "line-a", [_quantile(d, 0.5) for d in ordered]),
                Series("p95", "line-b", [_quantile(d, 0.95) for d in ordered]),
                Series("longest", "line-c", [d[-1] if d else None for d in ordered]),
            ],
        ),
        line_chart(
            "Items without an outcome", "", times, window.step_s, [Series("waiting", "line-a", waiting)]
        ),
        bar_chart(f"Spend {per}", "$", times, window.step_s, [Series("US dollars", "k-cost", cost)]),
        bar_chart(
            f"Failures, retries and deferrals {per}",
            "",
            times,
            window.step_s,
            [
                Series("failed", "k-f", counts["f"]),
                Series("retried", "k-r", counts["r"]),
                Series("deferred", "k-d", counts["d"]),
            ],
        ),
    ]
