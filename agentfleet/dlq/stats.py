"""What the dead-letter queue holds, in numbers: depth, breakdowns, top fingerprints, vendor issues."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field

from agentfleet.dlq.fingerprint import normalise_message
from agentfleet.dlq.model import DeadLetter

__all__ = [
    "DLQStats",
    "FingerprintCount",
    "VendorIssue",
    "format_age",
    "merge_vendor_issues",
    "stats_of_entries",
]

NO_DOWNSTREAM = "-"


class FingerprintCount(BaseModel):
    """How many entries share a fingerprint, with the error type and normalised message it stands for."""

    fingerprint: str
    count: int
    error_type: str = ""
    message: str = ""


class VendorIssue(BaseModel):
    """A downstream failing often enough to look like the vendor's problem.

    ``failures`` are failed attempts against it in the last ``window_s`` seconds (all workers),
    ``dead_letters`` the entries dead-lettered for it in that window; ``circuit`` is its breaker's
    state (``closed``, ``open``, ``half_open``) when known.
    """

    downstream: str
    failures: int = 0
    dead_letters: int = 0
    window_s: float
    circuit: str | None = None


class DLQStats(BaseModel):
    """The queue now. ``oldest_age_s`` is in seconds (None when empty); times are Unix times.

    ``by_downstream`` counts entries by the downstream they were calling (``-`` for none);
    ``recent_by_downstream`` only those dead-lettered in the last ``window_s`` seconds.
    """

    depth: int
    by_category: dict[str, int] = Field(default_factory=dict)
    by_downstream: dict[str, int] = Field(default_factory=dict)
    top_fingerprints: list[FingerprintCount] = Field(default_factory=list)
    oldest_age_s: float | None = None
    window_s: float
    recent_by_downstream: dict[str, int] = Field(default_factory=dict)
    vendor_issues: list[VendorIssue] = Field(default_factory=list)
    generated_at: float = Field(default_factory=time.time)


def _by_count(counts: Counter[str]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def stats_of_entries(
    entries: Sequence[DeadLetter], *, window_s: float, top: int = 10, now: float | None = None
) -> DLQStats:
    """The stats of just ``entries`` (a filtered selection), counted from the entries themselves."""
    now = time.time() if now is None else now
    fingerprints = Counter(e.fingerprint for e in entries)
    samples = {e.fingerprint: e for e in entries}
    top_fps = sorted(fingerprints.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    oldest = min((e.dead_lettered_at for e in entries), default=None)
    recent = Counter(e.downstream for e in entries if e.downstream and e.dead_lettered_at >= now - window_s)
    return DLQStats(
        depth=len(entries),
        by_category=_by_count(Counter(e.category for e in entries)),
        by_downstream=_by_count(Counter(e.downstream or NO_DOWNSTREAM for e in entries)),
        top_fingerprints=[
            FingerprintCount(
                fingerprint=fp,
                count=count,
                error_type=samples[fp].error_type,
                message=normalise_message(samples[fp].error),
            )
            for fp, count in top_fps
        ],
        oldest_age_s=None if oldest is None else round(max(0.0, now - oldest), 3),
        window_s=window_s,
        recent_by_downstream=dict(recent),
        generated_at=now,
    )


def merge_vendor_issues(
    stats: DLQStats,
    *,
    threshold: int,
    failures: dict[str, int] | None = None,
    circuits: dict[str, str] | None = None,
) -> DLQStats:
    """``stats`` with ``vendor_issues`` set: downstreams with ``threshold`` or more dead letters
    in the window, or failed attempts in the window (``failures``), or an open circuit.
    """
    failures = failures or {}
    circuits = circuits or {}
    names = set(stats.recent_by_downstream) | set(failures) | set(circuits)
    issues = []
    for name in sorted(names):
        dead = stats.recent_by_downstream.get(name, 0)
        failed = failures.get(name, 0)
        state = circuits.get(name)
        if name != "-" and (dead >= threshold or failed >= threshold or state in ("open", "half_open")):
            issues.append(
                VendorIssue(
                    downstream=name,
                    failures=failed,
                    dead_letters=dead,
                    window_s=stats.window_s,
                    circuit=state,
                )
            )
    issues.sort(key=lambda i: (-(i.failures + i.dead_letters), i.downstream))
    return stats.model_copy(update={"vendor_issues": issues})


def format_age(seconds: float | None) -> str:
    """An age for people: ``"42s"``, ``"3.5m"``, ``"2.0h"``, ``"1.5d"`` (``"-"`` when unknown)."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
