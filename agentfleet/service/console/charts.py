"""Charts drawn on the server: stacked bars and lines over evenly spaced times, as inline SVG.

A ``Chart`` holds its SVG and what the page writes around it (title, unit, the scale's top,
time labels, legend, a one-line summary that is also the picture's accessible name). Series
share one list of bin start times; a value of None is a gap (a line breaks there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import markupsafe

from agentfleet.service.console.svg import Tick, attr, box, clock, joined, nice_max, number, svg_open, ticks

__all__ = ["Chart", "Series", "bar_chart", "line_chart"]

_WIDTH = 600.0
_HEIGHT = 120.0


@dataclass(frozen=True)
class Series:
    """One stack of bars or one line: its legend name, its CSS class, a value per bin."""

    name: str
    css: str
    values: Sequence[float | None]


@dataclass(frozen=True)
class Chart:
    """A drawn chart. ``top`` is the value at the top of the scale; ``summary`` says in
    words what it shows (the SVG's accessible name)."""

    title: str
    unit: str
    svg: markupsafe.Markup
    top: str
    ticks: list[Tick]
    legend: list[tuple[str, str]]
    summary: str


def _peak(times: Sequence[float], totals: Sequence[float], unit: str, span: float) -> str:
    if not totals or max(totals) <= 0:
        return "nothing yet"
    i = max(range(len(totals)), key=lambda k: totals[k])
    return f"peak {number(totals[i], unit)} at {clock(times[i], span)}, latest {number(totals[-1], unit)}"


def bar_chart(
    title: str, unit: str, times: Sequence[float], step_s: float, stacks: Sequence[Series]
) -> Chart:
    """Bars per bin (starting at ``times``, ``step_s`` seconds wide), each a stack of
    ``stacks`` in order from the bottom."""
    bins = len(times)
    totals = [sum(s.values[i] or 0.0 for s in stacks) for i in range(bins)]
    top = nice_max(max(totals, default=0.0))
    width = _WIDTH / max(1, bins)
    gap = min(1.0, width * 0.15)
    below = [0.0] * bins
    paths = []
    for series in stacks:
        d = []
        for i in range(bins):
            value = series.values[i] or 0.0
            if value <= 0:
                continue
            h = _HEIGHT * value / top
            d.append(box(i * width + gap, _HEIGHT - _HEIGHT * below[i] / top - h, width - 2 * gap, h))
            below[i] += value
        if d:
            paths.append(f'<path class="{series.css}" d="{"".join(d)}"/>')
    end = (times[-1] + step_s) if times else 0.0
    span = end - (times[0] if times else 0.0)
    summary = f"{title}: {_peak(times, totals, unit, span)}"
    return _chart(title, unit, top, times, end, stacks, summary, paths)


def _line(css: str, y: float) -> str:
    return (
        f'<line class="{css}" x1="0" x2="{attr(_WIDTH)}" y1="{attr(y)}" y2="{attr(y)}" '
        'vector-effect="non-scaling-stroke"/>'
    )


def _grid() -> str:
    return "".join(_line("grid", _HEIGHT * k / 4) for k in range(4)) + _line("axis", _HEIGHT)


def _line_points(values: Sequence[float | None], top: float, width: float) -> list[list[str]]:
    runs: list[list[str]] = []
    current: list[str] = []
    for i, value in enumerate(values):
        if value is None:
            if current:
                runs.append(current)
            current = []
            continue
        current.append(f"{attr(i * width + width / 2)},{attr(_HEIGHT - _HEIGHT * value / top)}")
    if current:
        runs.append(current)
    return runs


def line_chart(
    title: str, unit: str, times: Sequence[float], step_s: float, lines: Sequence[Series]
) -> Chart:
    """One line per series through the middle of each bin; a lone point is a short dash."""
    bins = len(times)
    values = [v for s in lines for v in s.values if v is not None]
    top = nice_max(max(values, default=0.0))
    width = _WIDTH / max(1, bins)
    shapes = []
    for series in lines:
        for run in _line_points(series.values, top, width):
            if len(run) == 1:
                x, y = run[0].split(",")
                run = [f"{attr(float(x) - width / 3)},{y}", f"{attr(float(x) + width / 3)},{y}"]
            shapes.append(
                f'<polyline class="{series.css}" points="{" ".join(run)}" fill="none" '
                'vector-effect="non-scaling-stroke"/>'
            )
    end = (times[-1] + step_s) if times else 0.0
    latest = []
    for series in lines:
        known = [v for v in series.values if v is not None]
        latest.append(f"{series.name} {number(known[-1], unit) if known else '-'}")
    summary = f"{title}: " + (", ".join(latest) if values else "nothing yet")
    return _chart(title, unit, top, times, end, lines, summary, shapes)


def _chart(
    title: str,
    unit: str,
    top: float,
    times: Sequence[float],
    end: float,
    series: Sequence[Series],
    summary: str,
    shapes: Sequence[str],
) -> Chart:
    """The chart of ``shapes`` (SVG elements) drawn over the grid, up to ``top`` at the scale's
    top, its times ending at ``end`` (epoch seconds)."""
    svg = joined([svg_open(_WIDTH, _HEIGHT, summary, "chart-svg"), _grid(), *shapes, "</svg>"])
    return Chart(
        title=title,
        unit=unit,
        svg=svg,
        top=number(top, unit),
        ticks=ticks(times[0], end) if times else [],
        legend=[(s.name, s.css) for s in series],
        summary=summary,
    )
