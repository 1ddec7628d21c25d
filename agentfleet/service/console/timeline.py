"""A run's timeline as pictures: one lane per worker, its attempts along the run's time.

Up to ``ITEM_LIMIT`` attempts, each is a bar from its start to its end on its worker's lane,
coloured by what it came to (succeeded, failed, cancelled, retried, deferred, a stage passed
on), stacked in as many rows as the worker ran attempts at once, and linked to its item.
Beyond that (or when a lane would need more than ``ROW_LIMIT`` rows), each lane is cut into
``BINS`` bins showing how many attempts were running on average, split by what they came to,
with a strip above marking the bins with failures, retries and deferrals: readable for
10,000 items or more. Attempts recorded without a worker (a cancelled item) sit on a lane of
their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import markupsafe

from agentfleet.runs import Span, SpanLog
from agentfleet.service.console.series import Window
from agentfleet.service.console.svg import Shown, Tick, attr, box, escape, joined, svg_open, ticks

__all__ = ["BINS", "ITEM_LIMIT", "KINDS", "ROW_LIMIT", "Lane", "Timeline", "build_timeline"]

ITEM_LIMIT = 400
ROW_LIMIT = 32
BINS = 120
_WIDTH = 1000.0
_ROW = 10.0
_ROW_GAP = 2.0
_BIN_HEIGHT = 40.0
_MARKS = 9.0

# Each kind of entry: its CSS class and what it means, in the order bars stack from the bottom.
KINDS: dict[str, tuple[str, str]] = {
    "s": ("k-s", "succeeded"),
    "p": ("k-p", "stage passed on"),
    "c": ("k-c", "cancelled"),
    "d": ("k-d", "deferred"),
    "r": ("k-r", "retried"),
    "f": ("k-f", "failed"),
}
_MARKED = ("f", "r", "d")


@dataclass(frozen=True)
class Lane:
    """One worker's lane: its name ('' for attempts without a worker), a line about it, the
    picture."""

    worker: str
    note: str
    svg: markupsafe.Markup


@dataclass(frozen=True)
class Timeline:
    """The drawn timeline: ``mode`` is ``items`` (a bar per attempt) or ``bins``."""

    mode: str
    lanes: list[Lane]
    ticks: list[Tick]
    legend: list[tuple[str, str]]
    attempts: int
    bin_s: float


def _x(at_ms: float, window: Window) -> float:
    return (at_ms / 1000 - window.start) / (window.end - window.start) * _WIDTH


def _pack(spans: Sequence[Span]) -> list[int]:
    """A row for each span (by position) so that spans in one row never overlap."""
    ends: list[int] = []
    rows = [0] * len(spans)
    for position in sorted(range(len(spans)), key=lambda k: spans[k].start_ms):
        span = spans[position]
        row = next((r for r, end in enumerate(ends) if end <= span.start_ms), len(ends))
        if row == len(ends):
            ends.append(span.end_ms)
        else:
            ends[row] = span.end_ms
        rows[position] = row
    return rows


def _describe(span: Span, key: str, span_s: float) -> str:
    when = time.strftime("%H:%M:%S", time.gmtime(span.start_ms / 1000))
    took = f"{span.duration_s:.2f} s" if span.lane >= 0 else f"at {when}"
    name = f"item {span.index}" + (f" ({key})" if key else "")
    return f"{name}: {KINDS.get(span.kind, ('', span.kind))[1]}, {took}" + (
        f" from {when} UTC" if span.lane >= 0 else ""
    )


def _item_lane(
    spans: Sequence[Span], window: Window, keys: Mapping[int, str], link: Callable[[int], str], shown: Shown
) -> tuple[markupsafe.Markup, int]:
    rows = _pack(spans)
    height = (max(rows, default=0) + 1) * (_ROW + _ROW_GAP)
    label = f"{len(spans)} attempts in {max(rows, default=0) + 1} rows"
    parts = [svg_open(_WIDTH, height, label, "lane-svg", pixels=round(height), links=True)]
    span_s = window.end - window.start
    for span, row in zip(spans, rows, strict=True):
        x = _x(span.start_ms, window)
        w = max(3.0, _x(span.end_ms, window) - x)
        y = row * (_ROW + _ROW_GAP)
        title = escape(_describe(span, keys.get(span.index, ""), span_s), shown)
        css = KINDS[span.kind][0]
        parts.append(
            f'<a href="{markupsafe.escape(link(span.index))}"><rect class="{css}" x="{attr(x)}" '
            f'y="{attr(y)}" width="{attr(w)}" height="{attr(_ROW)}"><title>{title}</title></rect></a>'
        )
    parts.append("</svg>")
    return joined(parts), max(rows, default=0) + 1


def _busy(spans: Sequence[Span], window: Window) -> dict[str, list[float]]:
    """Per kind, the average number of attempts running in each bin (a difference array for
    the bins an attempt covers whole, its fractions at both ends)."""
    scale = BINS / (window.end - window.start)
    found: dict[str, list[float]] = {}
    for kind in KINDS:
        found[kind] = [0.0] * BINS
    steps = {kind: [0.0] * (BINS + 1) for kind in KINDS}
    for span in spans:
        if span.kind not in found:
            continue
        a = max(0.0, (span.start_ms / 1000 - window.start) * scale)
        b = min(float(BINS), (span.end_ms / 1000 - window.start) * scale)
        if b <= a:
            continue
        first, last = int(a), min(BINS - 1, int(b))
        if first == last:
            found[span.kind][first] += b - a
            continue
        found[span.kind][first] += first + 1 - a
        if last < BINS and b > last:
            found[span.kind][last] += b - last
        steps[span.kind][first + 1] += 1
        steps[span.kind][last] -= 1
    for kind, diff in steps.items():
        running = 0.0
        for i in range(BINS):
            running += diff[i]
            found[kind][i] += running
    return found


def _bin_lane(
    spans: Sequence[Span], busy: dict[str, list[float]], top: float, window: Window
) -> tuple[markupsafe.Markup, float]:
    """A lane of bins, ``top`` attempts running at once at its full height (the same for
    every lane, so lanes compare); also its own peak."""
    peak = max((sum(busy[k][i] for k in KINDS) for i in range(BINS)), default=0.0)
    marks = {kind: [0] * BINS for kind in _MARKED}
    scale = BINS / (window.end - window.start)
    for span in spans:
        if span.kind in marks:
            i = min(BINS - 1, max(0, int((span.end_ms / 1000 - window.start) * scale)))
            marks[span.kind][i] += 1
    width = _WIDTH / BINS
    height = _MARKS + _BIN_HEIGHT
    label = f"{len(spans)} attempts; at most {peak:.1f} running at once"
    parts = [svg_open(_WIDTH, height, label, "lane-svg", pixels=round(height))]
    below = [0.0] * BINS
    for kind, (css, _) in KINDS.items():
        d = []
        for i, value in enumerate(busy[kind]):
            if value <= 0:
                continue
            h = _BIN_HEIGHT * value / top
            y = height - _BIN_HEIGHT * below[i] / top - h
            below[i] += value
            d.append(box(i * width, y, width, h))
        if d:
            parts.append(f'<path class="{css}" d="{"".join(d)}"/>')
    for row, kind in enumerate(_MARKED):
        d = [box(i * width, row * 3, max(width, 2.0), 2.5) for i, n in enumerate(marks[kind]) if n]
        if d:
            parts.append(f'<path class="{KINDS[kind][0]}" d="{"".join(d)}"/>')
    parts.append("</svg>")
    return joined(parts), peak


def _note(spans: Sequence[Span], extra: str) -> str:
    counts = {kind: 0 for kind in KINDS}
    for span in spans:
        if span.kind in counts:
            counts[span.kind] += 1
    said = ", ".join(f"{n} {KINDS[k][1]}" for k, n in counts.items() if n)
    return f"{len(spans)} attempts ({said}); {extra}"


def build_timeline(
    log: SpanLog,
    window: Window,
    *,
    keys: Mapping[int, str],
    link: Callable[[int], str],
    shown: Shown,
) -> Timeline:
    """The timeline of ``log`` over ``window``. ``keys``: item keys by index (for the bars'
    titles, items mode only); ``link``: an item's page address; ``shown``: the redactor."""
    drawn = [s for s in log.spans if s.kind in KINDS]
    by_lane: dict[int, list[Span]] = {}
    for span in drawn:
        by_lane.setdefault(span.lane, []).append(span)
    order = sorted(by_lane, key=lambda lane: (lane < 0, log.worker(lane), lane))
    items = len(drawn) <= ITEM_LIMIT and all(
        max(_pack(spans), default=0) < ROW_LIMIT for spans in by_lane.values()
    )
    busy = {} if items else {lane: _busy(by_lane[lane], window) for lane in order}
    top = max((sum(b[k][i] for k in KINDS) for b in busy.values() for i in range(BINS)), default=0.0)
    lanes = []
    for lane in order:
        spans = by_lane[lane]
        if items:
            svg, rows = _item_lane(spans, window, keys, link, shown)
            note = _note(spans, f"at most {rows} at once")
        else:
            svg, peak = _bin_lane(spans, busy[lane], top or 1.0, window)
            note = _note(spans, f"at most {peak:.1f} running at once (averaged over a bin)")
        lanes.append(Lane(worker=log.worker(lane), note=note, svg=svg))
    return Timeline(
        mode="items" if items else "bins",
        lanes=lanes,
        ticks=ticks(window.start, window.end),
        legend=[(label, css) for css, label in KINDS.values()],
        attempts=len(drawn),
        bin_s=(window.end - window.start) / BINS,
    )
