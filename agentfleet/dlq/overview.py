"""The queue's stats as people triage them: the store's numbers plus what the circuits see.

The circuit breakers live in ``agentfleet.ratelimit``, a sibling this package does not import;
they come in as ``CircuitSource`` (``CircuitBreaker`` is one). ``agentfleet dlq stats``,
``Fleet().dlq.stats()`` and the digest all call ``queue_stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentfleet.config import DLQSettings
from agentfleet.dlq.filters import DLQFilter
from agentfleet.dlq.matching import downstream_matches
from agentfleet.dlq.stats import DLQStats, merge_vendor_issues
from agentfleet.dlq.store import DLQStore

__all__ = ["CircuitReading", "CircuitSource", "queue_stats"]


class CircuitReading(Protocol):
    """One downstream's circuit: its state and failures in the window (``CircuitStatus``)."""

    @property
    def downstream(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def failures(self) -> int: ...

    @property
    def failure_ratio(self) -> float: ...


class CircuitSource(Protocol):
    def statuses(self) -> Sequence[CircuitReading]: ...


def queue_stats(
    store: DLQStore, circuits: CircuitSource, settings: DLQSettings, flt: DLQFilter | None = None
) -> DLQStats:
    """The stats of the entries matching ``flt`` (all by default), with ``vendor_issues``: from
    recent dead letters and the circuit breakers (only ``flt.downstream``'s when it is set).
    """
    stats = store.stats(window_s=settings.vendor_issue_window_s, flt=flt)
    wanted = flt.downstream if flt is not None else None
    statuses = [
        s
        for s in circuits.statuses()
        if wanted is None or downstream_matches(wanted, s.downstream, store.vendor_hosts)
    ]
    failing = {
        s.downstream: s.failures for s in statuses if s.failure_ratio >= settings.circuit_failure_ratio
    }
    return merge_vendor_issues(
        stats,
        threshold=settings.vendor_issue_failures,
        failures=failing,
        circuits={s.downstream: s.state for s in statuses},
    )
