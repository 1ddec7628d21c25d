"""Samples as Prometheus text exposition (format 0.0.4)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from agentfleet.service.collectors import Sample

__all__ = ["CONTENT_TYPE", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def render(samples: Iterable[Sample]) -> str:
    """One block per metric name (HELP, TYPE, then its samples), in first-seen order."""
    families: dict[str, list[Sample]] = {}
    for sample in samples:
        families.setdefault(sample.name, []).append(sample)
    lines: list[str] = []
    for name, members in families.items():
        first = members[0]
        if first.help:
            lines.append(f"# HELP {name} {_escape_help(first.help)}")
        lines.append(f"# TYPE {name} {first.kind}")
        for sample in members:
            labels = ",".join(f'{key}="{_escape_label(str(val))}"' for key, val in sample.labels.items())
            series = f"{name}{{{labels}}}" if labels else name
            lines.append(f"{series} {_number(sample.value)}")
    return "\n".join(lines) + "\n"
