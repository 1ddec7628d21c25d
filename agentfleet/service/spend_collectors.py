"""Spend metrics, from the spend ledger and the run store.

- ``agentfleet_spend_today_usd{downstream}``: US dollars spent on each downstream since
  midnight UTC (a gauge that falls back to zero at midnight);
- ``agentfleet_run_budget_share{run,name}``: with ``budgets.run_usd`` set, the share of that
  budget each running run among the newest ``RECENT_RUNS`` has spent (1.0 is the whole
  budget: its items stop there).
"""

from __future__ import annotations

from agentfleet.service.samples import Sample, Sources
from agentfleet.spend import SpendLedger

__all__ = ["RECENT_RUNS", "collect_budget_share", "collect_spend"]

# Runs looked at for the budget share: a running run older than the newest 200 is rare.
RECENT_RUNS = 200


def collect_spend(sources: Sources) -> list[Sample]:
    """Today's spend per downstream (one zero sample before the first priced call)."""
    today = SpendLedger.from_settings(sources.settings, sources.store.client).days(1)[0]
    help_text = "US dollars spent on LLM calls since midnight UTC, by downstream (provider:model)."
    if not today.by_downstream:
        return [Sample("agentfleet_spend_today_usd", 0.0, {"downstream": "none"}, help=help_text)]
    return [
        Sample("agentfleet_spend_today_usd", usd, {"downstream": name}, help=help_text)
        for name, usd in today.by_downstream.items()
    ]


def collect_budget_share(sources: Sources) -> list[Sample]:
    """Each running run's spend as a share of ``budgets.run_usd`` (nothing when unset)."""
    budget = sources.settings.budgets.run_usd
    if budget is None:
        return []
    running = [s for s in sources.store.list_runs(RECENT_RUNS) if s.status == "running"]
    ledger = SpendLedger.from_settings(sources.settings, sources.store.client)
    spent = ledger.runs([s.run_id for s in running])
    return [
        Sample(
            "agentfleet_run_budget_share",
            round(sum(spent[s.run_id].values()) / budget, 6),
            {"run": s.run_id, "name": s.name},
            help="Share of budgets.run_usd a running run has spent (1 = the whole budget).",
        )
        for s in running
    ]
