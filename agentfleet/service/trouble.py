"""What is wrong with the fleet right now, in a few lines: the console's banner.

Read from the same collection as ``/health`` and ``/metrics`` (``collectors``), assessed as
``/health`` assesses it (``health.assess``), plus the budgets: the fleet's and each tenant's
spend today against their daily caps, and each running run's against its budget. Each
``Trouble`` is ``bad`` (work is stopped or failing: no worker, the fleet stale, a circuit
open, a budget spent) or ``warn`` (work is slowed or about to stop: a downstream paused, a
budget past its alert share, a collector failing), with the console page that says more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from agentfleet.config import Settings
from agentfleet.service.collectors import Collected, Collector
from agentfleet.service.health import PendingClock, assess, pause_reason
from agentfleet.service.samples import Sources, collect

__all__ = ["Trouble", "TroubleWatch", "troubles"]


@dataclass(frozen=True)
class Trouble:
    """One line of the banner: how bad (``bad`` or ``warn``), what, and where to look (a
    console path, '' for none)."""

    level: Literal["bad", "warn"]
    text: str
    href: str = ""


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:,.4f}"


def _budgets(collected: Collected, alert_at: float) -> list[Trouble]:
    caps = {
        (s.labels.get("scope", ""), s.labels.get("tenant", "")): s.value
        for s in collected.values("agentfleet_budget_cap_usd")
    }
    found = []
    for sample in collected.values("agentfleet_budget_spent_usd"):
        scope, tenant = sample.labels.get("scope", ""), sample.labels.get("tenant", "")
        cap = caps.get((scope, tenant))
        if not cap or sample.value < alert_at * cap:
            continue
        who = "The fleet" if scope == "fleet" else f"Tenant {tenant}"
        spent = f"{who} has spent {_usd(sample.value)} of its {_usd(cap)} daily budget"
        if sample.value >= cap:
            found.append(Trouble("bad", f"{spent}: its calls stop until midnight UTC", "/spend"))
        else:
            found.append(Trouble("warn", f"{spent} ({sample.value / cap:.0%})", "/spend"))
    for sample in collected.values("agentfleet_run_budget_share"):
        if sample.value < alert_at:
            continue
        run_id, name = sample.labels.get("run", ""), sample.labels.get("name", "")
        share = f"Run {name} has spent {sample.value:.0%} of its budget"
        if sample.value >= 1:
            found.append(Trouble("bad", f"{share}: its items stop there", f"/runs/{run_id}"))
        else:
            found.append(Trouble("warn", share, f"/runs/{run_id}"))
    return found


def troubles(health: dict[str, Any], collected: Collected, settings: Settings) -> list[Trouble]:
    """The banner's lines for a ``/health`` document and the collection behind it, worst first."""
    found: list[Trouble] = []
    if health["status"] == "stale":
        found.append(Trouble("bad", health["reasons"][0], "/workers"))
    if health.get("workers_active") == 0:
        found.append(Trouble("bad", "No worker is running: none has a live heartbeat.", "/workers"))
    for downstream in health.get("open_circuits") or ():
        found.append(
            Trouble("bad", f"The circuit of {downstream} is open: its calls fail at once.", "/limits")
        )
    for downstream, left_s in (health.get("paused_downstreams") or {}).items():
        found.append(Trouble("warn", pause_reason(downstream, left_s) + ".", "/limits"))
    found += _budgets(collected, settings.budgets.alert_at)
    for name, error in sorted(collected.errors.items()):
        found.append(Trouble("warn", f"Could not read {name}: {error}"))
    return sorted(found, key=lambda t: t.level != "bad")


class TroubleWatch:
    """Collects and assesses the fleet for the banner, as ``/health`` does, on ``sources``'
    clients (which give up after ``service.probe_timeout_s``)."""

    def __init__(
        self,
        settings: Settings,
        sources: Sources,
        collectors: Sequence[Collector],
        clock: PendingClock,
        *,
        ping: Callable[[], Any],
    ) -> None:
        self.settings = settings
        self.sources = sources
        self.collectors = tuple(collectors)
        self.clock = clock
        self.ping = ping

    def now(self) -> list[Trouble]:
        """The banner's lines; one line saying so when Redis does not answer."""
        try:
            self.ping()
            collected = collect(self.sources, self.collectors)
        except (redis.RedisError, OSError) as exc:
            return [Trouble("bad", f"Redis does not answer: {exc}")]
        health = assess(
            collected,
            self.clock,
            stale_after_s=self.settings.service.stale_after_s,
            pause_notice_s=self.settings.limiter.pause_notice_s,
        )
        return troubles(health, collected, self.settings)
