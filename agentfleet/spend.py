"""The spend ledger: US dollars spent on LLM calls, by run and downstream, and by day.

Each priced reply adds its cost here as soon as it arrives, so the ledger counts what
attempts that later failed or were retried spent too (a run's ``cost_usd`` counts only
finished items). A downstream is named as the limiter names it: ``anthropic:<model>`` for a
Messages API call.

Layout under the key prefix ``p`` (names from ``agentfleet.keys``; the braces are Redis
Cluster hash tags: a run's keys live in its run's slot, and a day's beside the budgets' per-day
keys, ``runs/budgets.py``):

- ``p:spend:run:{<id>}``             hash: downstream -> US dollars the run's calls to it
                                     cost; expires ``result_ttl_s`` seconds after its last change
- ``p:spend:day:{p:spend:<date>}``   hash: downstream -> US dollars spent on that UTC day
                                     (``2026-01-31``); expires ``budgets.ledger_days`` days after
- ``p:spend:budget:{<id>}``          string: a budget in US dollars given to that one run when
                                     it was started (over ``budgets.run_usd``); expires with the run

Amounts move only by ``HINCRBYFLOAT``: any number of workers record at once without a
read-modify-write.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agentfleet.config import Settings
from agentfleet.keys import SpendKeys
from agentfleet.outages import repeatable
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis

__all__ = ["DaySpend", "SpendLedger", "utc_day"]

_DAY_S = 86400


def utc_day(at: float) -> str:
    """The UTC date of Unix time ``at``, as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class DaySpend:
    """One UTC day's spend: the total and each downstream's part, in US dollars."""

    day: str
    total_usd: float
    by_downstream: dict[str, float] = field(default_factory=dict)


def _amounts(raw: dict[str, str]) -> dict[str, float]:
    found = {name: round(float(value), 6) for name, value in raw.items()}
    return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


class SpendLedger:
    """Spend in Redis. Safe to share between threads."""

    def __init__(
        self, client: StateRedis, *, prefix: str = "af", run_ttl_s: int = 7 * _DAY_S, keep_days: int = 35
    ) -> None:
        # redis-py's reply types are unions of every RESP shape; this ledger knows each reply.
        self.client: Any = client
        self.keys = SpendKeys(prefix)
        self.run_ttl_s = run_ttl_s
        self.keep_days = keep_days

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> SpendLedger:
        return cls(
            client or state_client(settings),
            prefix=settings.key_prefix,
            run_ttl_s=settings.result_ttl_s,
            keep_days=settings.budgets.ledger_days,
        )

    def run_key(self, run_id: str) -> str:
        return self.keys.run(run_id)

    def day_key(self, day: str) -> str:
        return self.keys.day(day)

    def budget_key(self, run_id: str) -> str:
        return self.keys.budget(run_id)

    @repeatable
    def set_budget(self, run_id: str, usd: float) -> None:
        """Give run ``run_id`` a budget of its own, in US dollars."""
        self.client.set(self.budget_key(run_id), repr(float(usd)), ex=self.run_ttl_s)

    def standing(self, run_id: str) -> tuple[float, float | None]:
        """What run ``run_id`` has spent so far and its own budget (None: it has none), in US
        dollars, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hvals(self.run_key(run_id))
        pipe.get(self.budget_key(run_id))
        spent, budget = pipe.execute()
        return sum(float(v) for v in spent), (float(budget) if budget is not None else None)

    def record(self, run_id: str, downstream: str, usd: float, *, at: float | None = None) -> None:
        """Add ``usd`` US dollars spent by run ``run_id`` on ``downstream`` at Unix time ``at``."""
        if usd <= 0:
            return
        day = utc_day(time.time() if at is None else at)
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrbyfloat(self.run_key(run_id), downstream, usd)
        pipe.expire(self.run_key(run_id), self.run_ttl_s)
        pipe.hincrbyfloat(self.day_key(day), downstream, usd)
        pipe.expire(self.day_key(day), (self.keep_days + 1) * _DAY_S)
        pipe.execute()

    def by_run(self, run_id: str) -> dict[str, float]:
        """What run ``run_id`` spent per downstream, largest first (US dollars)."""
        return _amounts(self.client.hgetall(self.run_key(run_id)))

    def runs(self, run_ids: list[str]) -> dict[str, dict[str, float]]:
        """``by_run`` of each of ``run_ids``, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hgetall(self.run_key(run_id))
        return {run_id: _amounts(raw) for run_id, raw in zip(run_ids, pipe.execute(), strict=True)}

    def run_budgets(self, run_ids: list[str]) -> dict[str, float]:
        """The runs among ``run_ids`` that have a budget of their own, and that budget (USD)."""
        if not run_ids:
            return {}
        raw = self.client.mget([self.budget_key(run_id) for run_id in run_ids])
        return {run_id: float(value) for run_id, value in zip(run_ids, raw, strict=True) if value is not None}

    def days(self, count: int = 14, *, now: float | None = None) -> list[DaySpend]:
        """The last ``count`` UTC days, today first, each with its total and breakdown."""
        today = datetime.fromtimestamp(time.time() if now is None else now, UTC)
        names = [(today - timedelta(days=i)).strftime("%Y-%m-%d") for i in range(max(1, count))]
        pipe = self.client.pipeline(transaction=False)
        for day in names:
            pipe.hgetall(self.day_key(day))
        found = []
        for day, raw in zip(names, pipe.execute(), strict=True):
            amounts = _amounts(raw)
            found.append(DaySpend(day=day, total_usd=round(sum(amounts.values()), 6), by_downstream=amounts))
        return found

    @staticmethod
    def by_downstream(days: list[DaySpend]) -> dict[str, float]:
        """The downstreams' totals over ``days``, largest first (US dollars)."""
        totals: dict[str, float] = {}
        for day in days:
            for name, usd in day.by_downstream.items():
                totals[name] = totals.get(name, 0.0) + usd
        return _amounts({name: repr(usd) for name, usd in totals.items()})
