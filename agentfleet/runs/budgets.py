"""Budget accounting: spending over an item's attempts, and by run, tenant and day, with the
alerts budgets raise.

Each priced model call is one ``charge.lua`` call that counts it everywhere at once (on a
Redis Cluster, where these keys live in three slots, three scripts: the item's part first,
then the run's and the day's when it counted the report):

- ``p:mem:{<tag>}...`` fields ``$usd``, ``$tokens``, ``$turns``, ``$s`` and ``$seq:<token>``:
  the item's spending over every attempt (see ``runs/memory.py``, whose expiry it shares);
- the spend ledger's run and day hashes (``agentfleet.spend``: spend by downstream, per run and
  per UTC day), and the run's own budget there;
- ``<day key>:tenants`` hash: tenant -> US dollars spent that UTC day;
- ``<day key>:alerts`` hash: ``fleet:<level>`` and ``tenant:<name>:<level>`` -> 1, set once
  when that budget alerted that day (both beside the ledger's day hash, in its hash tag);
- ``p:run:{<id>}`` fields ``alert:soft`` / ``alert:hard``: set once when the run's budget
  alerted;
- ``p:stats`` fields ``budget_alerts:<scope>:<level>``: alerts raised since the first run
  (added up by ``runs/tally.py``).

The day hashes expire ``day_ttl_s`` after their last write (the ledger's ``ledger_days``). A
report carries its delivery's token and its number, so a report sent twice (a retried call
after a dropped connection) counts once, and alert flags are set with ``HSETNX``, so exactly
one worker raises each alert.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from agentfleet.keys import RunKeys, SpendKeys
from agentfleet.lua import ScriptSet
from agentfleet.outages import repeatable
from agentfleet.redis_handles import StateRedis
from agentfleet.runs.tally import StatsTally

__all__ = [
    "SPEND_LUA",
    "Alert",
    "BudgetLedger",
    "Caps",
    "Report",
    "Spend",
    "Standing",
    "utc_date",
]

SPEND_LUA = ScriptSet("agentfleet.runs", "scripts/spend", libraries=("parts",))


def utc_date(at: float | None = None) -> str:
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
    """The dollar caps above one item: its run's (when the run has no budget of its own), its
    tenant's per day, the fleet's per day (None: no cap), and the share at which each alerts."""

    run_usd: float | None = None
    tenant_usd: float | None = None
    fleet_usd: float | None = None
    alert_at: float = 0.8


@dataclass(frozen=True)
class Report:
    """One spending report of a delivery: whose (``key``, ``run_id``, ``tenant``), what
    (``spend``, on ``downstream``; ``""`` when no call was priced), and its place among the
    delivery's reports (``token``, ``seq`` from 1)."""

    key: str
    run_id: str
    tenant: str | None
    spend: Spend
    token: str
    seq: int
    downstream: str = ""


@dataclass(frozen=True)
class Alert:
    """A budget crossed its alert share (``soft``) or its cap (``hard``): ``scope`` is ``run``,
    ``tenant`` or ``fleet``; ``name`` the run id or tenant (``""`` for the fleet)."""

    scope: str
    name: str
    level: str
    spent_usd: float
    cap_usd: float


@dataclass(frozen=True)
class Standing:
    """US dollars spent so far: by the run (and its own budget, None when it has none), by its
    tenant today and by the fleet today."""

    run_usd: float
    run_budget_usd: float | None
    tenant_usd: float
    fleet_usd: float


class BudgetLedger:
    """Budget accounting in Redis, beside the spend ledger's keys. Safe to share between threads."""

    def __init__(
        self,
        client: StateRedis,
        *,
        prefix: str = "af",
        ttl_s: int = 7 * 86400,
        day_ttl_s: int = 36 * 86400,
    ) -> None:
        self.client: Any = client
        self.keys = SpendKeys(prefix)
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.day_ttl_s = day_ttl_s
        self.clustered = isinstance(client, redis.RedisCluster)
        self._runs = RunKeys(prefix)
        self._scripts = SPEND_LUA.register(client, "charge", "charge_item", "charge_run", "charge_day")
        self.tally = StatsTally(client, self._runs.stats, self._runs.done_bucket)

    def tenants_key(self, day: str | None = None) -> str:
        return self.keys.tenants(day or utc_date())

    def alerts_key(self, day: str | None = None) -> str:
        return self.keys.alerts(day or utc_date())

    def _mem(self, key: str) -> str:
        return self._runs.item("mem", key)

    @repeatable
    def item(self, key: str) -> Spend:
        """What item ``key`` spent over all its attempts so far."""
        usd, tokens, turns, secs = self.client.hmget(self._mem(key), ["$usd", "$tokens", "$turns", "$s"])
        return Spend(float(usd or 0), int(tokens or 0), int(turns or 0), float(secs or 0))

    @repeatable
    def charge(self, report: Report, caps: Caps) -> tuple[Spend, list[Alert]]:
        """Count ``report``; the item's totals after it, and the alerts it raised (each once).
        A report is counted once by its delivery token and number, however often it is sent."""
        spend, run_id, day = report.spend, report.run_id or "-", utc_date()
        item: list[Any] = [
            repr(spend.usd),
            spend.tokens,
            spend.turns,
            repr(spend.seconds),
            report.token,
            report.seq,
        ]
        share = repr(caps.alert_at)
        run_cap, tenant_cap, fleet_cap = (
            repr(c or 0.0) for c in (caps.run_usd, caps.tenant_usd, caps.fleet_usd)
        )
        run_keys = [self._runs.run(run_id), self.keys.run(run_id), self.keys.budget(run_id)]
        day_keys = [self.keys.day(day), self.tenants_key(day), self.alerts_key(day)]
        if not self.clustered:
            *totals, raw = self._scripts["charge"](
                keys=[self._mem(report.key), *run_keys, *day_keys],
                args=[
                    *item,
                    report.tenant or "",
                    report.downstream,
                    run_cap,
                    tenant_cap,
                    fleet_cap,
                    share,
                    self.ttl_s,
                    self.ttl_s,
                    self.day_ttl_s,
                ],
            )
        else:
            *totals, counted = self._scripts["charge_item"](
                keys=[self._mem(report.key)], args=[*item, self.ttl_s]
            )
            raw = []
            if int(counted):
                # A worker that dies here leaves the run's and the day's part of this one report
                # uncounted: the item's totals, which budgets stop on, are already right.
                usd, downstream = repr(spend.usd), report.downstream
                raw += self._scripts["charge_run"](
                    keys=run_keys, args=[usd, downstream, run_cap, share, self.ttl_s]
                )
                raw += self._scripts["charge_day"](
                    keys=day_keys,
                    args=[usd, downstream, report.tenant or "", tenant_cap, fleet_cap, share, self.day_ttl_s],
                )
        alerts = [
            Alert(str(scope), run_id if scope == "run" else str(name), str(level), float(spent), float(cap))
            for scope, name, level, spent, cap in raw
        ]
        for alert in alerts:
            self.tally.add_count(f"budget_alerts:{alert.scope}:{alert.level}")
        usd, tokens, turns, secs = totals
        return Spend(float(usd), int(tokens), int(turns), float(secs)), alerts

    @repeatable
    def standing(self, run_id: str, tenant: str | None) -> Standing:
        """What the run, its tenant today and the fleet today have spent, in one round trip."""
        day = utc_date()
        pipe = self.client.pipeline(transaction=False)
        pipe.hvals(self.keys.run(run_id))
        pipe.get(self.keys.budget(run_id))
        pipe.hvals(self.keys.day(day))
        pipe.hget(self.tenants_key(day), tenant or "")
        run_spent, budget, fleet, tenant_spent = pipe.execute()
        return Standing(
            run_usd=sum(float(v) for v in run_spent),
            run_budget_usd=float(budget) if budget is not None else None,
            tenant_usd=float(tenant_spent or 0) if tenant else 0.0,
            fleet_usd=sum(float(v) for v in fleet),
        )

    def tenants_today(self) -> dict[str, float]:
        """Each tenant's spending today (UTC), in US dollars."""
        return {name: float(v) for name, v in self.client.hgetall(self.tenants_key()).items()}
