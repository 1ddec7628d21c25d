"""``/health``: one status from the collected samples.

- ``stale``: work is pending (waiting in a queue, or taken by a worker and not acknowledged)
  and no item has completed for ``service.stale_after_s`` seconds, counted from the later of
  the last completion and the moment this service first saw the work pending. The fleet is
  not making progress: workers are gone, hung, or every item waits on a long pause.
- ``degraded``: no worker has a live heartbeat, a circuit is open, a downstream is paused
  for every worker with more than ``limiter.pause_notice_s`` left (the reason names it and
  the time left), or a collector failed.
- ``ok``: otherwise.

``stale`` wins over ``degraded``. Fields a collector does not provide yet are ``null``.
"""

from __future__ import annotations

import threading
from typing import Any

from agentfleet.dlq.stats import format_age
from agentfleet.service.collectors import COMPLETION_WINDOW_S, Collected

__all__ = ["PendingClock", "assess", "pause_reason", "paused_for_long"]


class PendingClock:
    """Remembers since when work has been pending without a pause, as this service saw it."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._lock = threading.Lock()

    def observe(self, pending: int, now: float) -> float | None:
        """Record an observation; the epoch seconds since which work has been pending, or None."""
        with self._lock:
            if pending <= 0:
                self._since = None
            elif self._since is None:
                self._since = now
            return self._since


def paused_for_long(collected: Collected, notice_s: float) -> dict[str, float]:
    """Downstreams paused with more than ``notice_s`` seconds left, and the seconds left."""
    samples = collected.values("agentfleet_limiter_paused_seconds")
    paused = {s.labels["downstream"]: round(s.value, 1) for s in samples if s.value > notice_s}
    return dict(sorted(paused.items(), key=lambda item: -item[1]))


def pause_reason(downstream: str, left_s: float) -> str:
    """One line for a paused downstream, as ``/health`` and the CLI say it."""
    return f"{downstream} is paused for every worker for {format_age(left_s)} more (after a 429 or 529)"


def assess(
    collected: Collected, clock: PendingClock, *, stale_after_s: float, pause_notice_s: float = 5.0
) -> dict[str, Any]:
    """The ``/health`` document: status, the reasons for it, and the figures behind it."""
    now = collected.at
    queues = {s.labels["queue"]: int(s.value) for s in collected.values("agentfleet_queue_depth")}
    unacked = collected.one("agentfleet_unacked_messages")
    pending = sum(queues.values()) + int(unacked or 0)
    pending_since = clock.observe(pending, now)
    workers = collected.one("agentfleet_workers_active")
    last_done = collected.one("agentfleet_last_completion_timestamp_seconds")
    since_last = round(now - last_done, 3) if last_done is not None else None
    dlq = collected.values("agentfleet_dlq_depth")
    circuit_samples = collected.values("agentfleet_circuit_open")
    circuits = sorted(s.labels["downstream"] for s in circuit_samples if s.value)

    reasons: list[str] = []
    status = "ok"
    if pending_since is not None:
        progress_at = max(pending_since, last_done or 0.0)
        idle_s = now - progress_at
        if idle_s > stale_after_s:
            status = "stale"
            reasons.append(
                f"{pending} messages pending and no item completed for {idle_s:.0f} s "
                f"(service.stale_after_s is {stale_after_s:g})"
            )
    if workers is not None and workers == 0:
        reasons.append("no worker is running (none has a live heartbeat)")
    if circuits:
        reasons.append(f"open circuits: {', '.join(circuits)}")
    paused = paused_for_long(collected, pause_notice_s)
    reasons += [pause_reason(downstream, left_s) for downstream, left_s in paused.items()]
    for name, error in sorted(collected.errors.items()):
        reasons.append(f"{name} failed: {error}")
    if status == "ok" and reasons:
        status = "degraded"
    return {
        "status": status,
        "reasons": reasons,
        "checked_at": now,
        "workers_active": None if workers is None else int(workers),
        "queues": queues,
        "unacked_messages": None if unacked is None else int(unacked),
        "completed_last_minute": _int_or_none(collected.one("agentfleet_items_completed_last_minute")),
        "completion_window_s": COMPLETION_WINDOW_S,
        "seconds_since_last_completion": since_last,
        "dlq_depth": int(sum(s.value for s in dlq)) if dlq else None,
        "open_circuits": circuits if circuit_samples else None,
        "paused_downstreams": paused,
        "stale_after_s": stale_after_s,
    }


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)
