"""Spending over attempts, runs, tenants and days, and the alerts budgets raise.

Layout under the key prefix ``p``:

- ``p:mem:{key}`` fields ``$usd``, ``$tokens``, ``$turns``, ``$s`` and ``$seq:{token}``: one
  item's spending over every attempt (see ``runs/memory.py``, whose expiry it shares)
- ``p:run:{id}`` fields ``spent_usd`` (what the run's items spent so far, finished or not) and
  ``alert:soft`` / ``alert:hard`` (set once, when the run's budget alerted)
- ``p:spend:{YYYY-MM-DD}`` hash, per UTC day: ``fleet`` and ``tenant:{name}`` (US dollars
  spent that day), and ``alert:fleet:{level}`` / ``alert:tenant:{name}:{level}`` (set once,
  when that budget alerted); expires ``DAY_TTL_S`` after its last write
- ``p:stats`` fields ``budget_alerts:{scope}:{level}``: alerts raised since the first run

Every change is ``spend.lua``, one call per report: a report carries its delivery's token and
its number, so a report sent twice (a retried call after a dropped connection) counts once,
and the alert flags are set with ``HSETNX`` so exactly one worker raises each alert.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from agentfleet.runs.store import RUNS_LUA

__all__ = ["DAY_TTL_S", "Alert", "Caps", "Report", "Spend", "SpendLedger", "utc_day"]

DAY_TTL_S = 3 * 86400


def utc_day(at: float | None = None) -> str:
    """The UTC date of ``at`` (epoch seconds; default now) as ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if at is None else at))


@dataclass(frozen=True)
class Spend:
    """What was spent: US dollars, tokens (input plus output), model calls, seconds executing."""

    usd: float = 0.0
    tokens: int = 0
    turns: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Caps:
    """The dollar caps above one item: its run's, its tenant's per day, the fleet's per day
    (None: no cap), and the share of a cap at which it alerts."""

    run_usd: float | None = None
    tenant_usd: float | None = None
    fleet_usd: float | None = None
    alert_at: float = 0.8

    @property
    def any(self) -> bool:
        return any(cap is not None for cap in (self.run_usd, self.tenant_usd, self.fleet_usd))


@dataclass(frozen=True)
class Report:
    """One spending report of a delivery: whose (``key``, ``run_id``, ``tenant``), what
    (``spend``), and its place in the delivery's reports (``token``, ``seq`` from 1)."""

    key: str
    run_id: str
    tenant: str | None
    spend: Spend
    token: str
    seq: int


@dataclass(frozen=True)
class Alert:
    """A budget crossed its alert share (``soft``) or its cap (``hard``): ``scope`` is ``run``,
    ``tenant`` or ``fleet``; ``name`` the run id or tenant (``""`` for the fleet)."""

    scope: str
    name: str
    level: str
    spent_usd: float
    cap_usd: float


class SpendLedger:
    """Spending in Redis, for budgets that hold across attempts, workers and days."""

    def __init__(self, client: redis.Redis, *, prefix: str = "af", ttl_s: int = 7 * 86400) -> None:
        self.client: Any = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self._spend = RUNS_LUA.register(client, "spend")["spend"]

    def day_key(self, day: str | None = None) -> str:
        return f"{self.prefix}:spend:{day or utc_day()}"

    def _mem(self, key: str) -> str:
        return f"{self.prefix}:mem:{key}"

    def _run(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def item(self, key: str) -> Spend:
        """What item ``key`` spent over all its attempts so far."""
        usd, tokens, turns, secs = self.client.hmget(self._mem(key), ["$usd", "$tokens", "$turns", "$s"])
        return Spend(float(usd or 0), int(tokens or 0), int(turns or 0), float(secs or 0))

    def record(self, report: Report, caps: Caps) -> tuple[Spend, list[Alert]]:
        """Count ``report``; the item's totals after it, and the alerts it raised (each once)."""
        spend = report.spend
        run_id = report.run_id
        usd, tokens, turns, secs, raw = self._spend(
            keys=[
                self._mem(report.key),
                self._run(run_id) if run_id else f"{self.prefix}:run:-",
                self.day_key(),
                f"{self.prefix}:stats",
            ],
            args=[
                repr(spend.usd),
                spend.tokens,
                spend.turns,
                repr(spend.seconds),
                report.token,
                report.seq,
                report.tenant or "",
                repr(caps.run_usd or 0.0),
                repr(caps.tenant_usd or 0.0),
                repr(caps.fleet_usd or 0.0),
                repr(caps.alert_at),
                self.ttl_s,
                DAY_TTL_S,
            ],
        )
        alerts = [
            Alert(
                scope=str(scope),
                name=run_id if scope == "run" else str(name),
                level=str(level),
                spent_usd=float(spent),
                cap_usd=float(cap),
            )
            for scope, name, level, spent, cap in raw
        ]
        return Spend(float(usd), int(tokens), int(turns), float(secs)), alerts

    def above(self, run_id: str, tenant: str | None) -> tuple[float, float, float]:
        """US dollars spent so far by the run, by its tenant today and by the fleet today."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self._run(run_id), "spent_usd")
        pipe.hmget(self.day_key(), ["fleet", f"tenant:{tenant or ''}"])
        run_spent, (fleet, tenant_spent) = pipe.execute()
        return float(run_spent or 0), float(tenant_spent or 0) if tenant else 0.0, float(fleet or 0)

    def today(self) -> dict[str, float]:
        """Today's spending: ``fleet`` and ``tenant:{name}`` -> US dollars."""
        raw = self.client.hgetall(self.day_key())
        return {k: float(v) for k, v in raw.items() if not k.startswith("alert:")}
