"""Small pieces the console's pictures share: escaped SVG text, scales, axis labels.

Every picture is an inline ``<svg>`` drawn on the server: shapes carry classes that the
stylesheet colours (the page's Content-Security-Policy allows no inline style), and each
``<svg>`` stretches to its box (``preserveAspectRatio="none"``), so text never sits inside
it, where it would stretch too: titles, scales and legends are HTML around it. Any text from
outside (a worker's name, an item's key) reaches a picture only through ``escape``, after the
console's redactor (``Shown``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import markupsafe

__all__ = [
    "Shown",
    "Tick",
    "attr",
    "box",
    "clock",
    "escape",
    "joined",
    "nice_max",
    "number",
    "svg_open",
    "ticks",
]

# What makes outside text safe to show: the redactor, then control characters escaped.
Shown = Callable[[str], str]


def escape(text: str, shown: Shown) -> str:
    """``text`` redacted and escaped for an SVG attribute or element."""
    return str(markupsafe.escape(shown(text)))


def attr(value: float) -> str:
    """A coordinate, short: at most two decimals, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def box(x: float, y: float, width: float, height: float) -> str:
    """A rectangle as one subpath of a ``<path>`` (many boxes of one colour share a path)."""
    return f"M{attr(x)} {attr(y)}h{attr(width)}v{attr(height)}h-{attr(width)}z"


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``value`` (1 for
    nothing), so that a scale's top is a round number."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def number(value: float | None, unit: str = "") -> str:
    """A short figure for a scale or a caption: ``1.2k``, ``350``, ``0.25``, ``$0.0040``."""
    if value is None:
        return "-"
    if unit == "$":
        return f"${value:,.4f}" if value < 100 else f"${value:,.0f}"
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    if abs(value) >= 10 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.2g}"


def clock(at: float, span_s: float) -> str:
    """The UTC time of day of ``at`` (epoch seconds), with seconds when the picture covers
    less than ten minutes (``span_s``)."""
    return time.strftime("%H:%M:%S" if span_s < 600 else "%H:%M", time.gmtime(at))


@dataclass(frozen=True)
class Tick:
    """A label under a picture: its text, and whether it sits at the start, middle or end."""

    text: str
    where: str


def ticks(start: float, end: float) -> list[Tick]:
    """Time labels for a picture from ``start`` to ``end`` (epoch seconds): start, middle, end."""
    span = max(0.0, end - start)
    return [
        Tick(clock(start, span), "start"),
        Tick(clock(start + span / 2, span), "middle"),
        Tick(clock(end, span) + " UTC", "end"),
    ]


def svg_open(
    width: float, height: float, label: str, css: str, *, pixels: int | None = None, links: bool = False
) -> str:
    """The opening ``<svg>`` tag of a picture ``width`` by ``height`` units that stretches to
    its box, named ``label`` for screen readers; ``pixels`` fixes its height on the page. A
    picture of ``links`` is a group (an image's content is hidden from screen readers)."""
    tall = f' height="{pixels}"' if pixels is not None else ""
    role = "group" if links else "img"
    focus = "" if links else ' focusable="false"'
    return (
        f'<svg class="{css}" viewBox="0 0 {attr(width)} {attr(height)}" preserveAspectRatio="none"'
        f'{tall} role="{role}" aria-label="{markupsafe.escape(label)}"{focus}>'
    )


def joined(parts: Iterable[str]) -> markupsafe.Markup:
    """Pieces of SVG built here (every outside text already escaped) as one ``Markup``."""
    return markupsafe.Markup("".join(parts))
