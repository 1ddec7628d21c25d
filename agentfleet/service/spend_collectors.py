"""Spend metrics, from the spend ledger and the run store.

- ``agentfleet_spend_today_usd{downstream}``: US dollars spent on each downstream since
  midnight UTC (a gauge that falls back to zero at midnight);
- ``agentfleet_run_budget_share{run,name}``: the share of its budget (its own, else
  ``budgets.run_usd``) each running run among the newest ``RECENT_RUNS`` has spent (1.0 is
  the whole budget: its items stop there); runs without a budget have no sample;
- ``agentfleet_budget_spent_usd{scope,tenant}`` and ``agentfleet_budget_cap_usd``: the fleet's
  and each tenant's spending today against their daily caps, and
  ``agentfleet_budget_alerts_total{scope,level}``: the budget alerts raised so far.
"""

from __future__ import annotations

from agentfleet.runs import BudgetLedger
from agentfleet.service.samples import Sample, Sources
from agentfleet.spend import SpendLedger

__all__ = ["RECENT_RUNS", "collect_budget_share", "collect_daily_budgets", "collect_spend"]

_SPENT_HELP = "US dollars spent today (UTC), by the fleet or by one tenant."
_CAP_HELP = "A daily cap in US dollars (budgets.fleet_daily_usd, or a tenant's)."

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
    """Each running run's spend as a share of its budget: its own, else ``budgets.run_usd``."""
    default = sources.settings.budgets.run_usd
    running = [s for s in sources.store.list_runs(RECENT_RUNS) if s.status == "running"]
    ledger = SpendLedger.from_settings(sources.settings, sources.store.client)
    ids = [s.run_id for s in running]
    own = ledger.run_budgets(ids)
    budgets: dict[str, float] = {}
    for run_id in ids:
        budget = own.get(run_id, default)
        if budget:
            budgets[run_id] = budget
    spent = ledger.runs(list(budgets))
    return [
        Sample(
            "agentfleet_run_budget_share",
            round(sum(spent[s.run_id].values()) / budgets[s.run_id], 6),
            {"run": s.run_id, "name": s.name},
            help="Share of its budget a running run has spent (1 = the whole budget).",
        )
        for s in running
        if s.run_id in spent
    ]


def collect_daily_budgets(sources: Sources) -> list[Sample]:
    """Today's spending against the fleet's and each tenant's daily cap, and alerts raised."""
    budgets, store = sources.settings.budgets, sources.store
    ledger = SpendLedger.from_settings(sources.settings, store.client)
    fleet = ledger.days(1)[0].total_usd
    samples = [Sample("agentfleet_budget_spent_usd", fleet, {"scope": "fleet"}, help=_SPENT_HELP)]
    if budgets.fleet_daily_usd is not None:
        samples.append(
            Sample("agentfleet_budget_cap_usd", budgets.fleet_daily_usd, {"scope": "fleet"}, help=_CAP_HELP)
        )
    spent = BudgetLedger(store.client, prefix=store.prefix).tenants_today()
    for tenant in sorted(set(spent) | set(budgets.tenants)):
        labels = {"scope": "tenant", "tenant": tenant}
        samples.append(
            Sample("agentfleet_budget_spent_usd", spent.get(tenant, 0.0), labels, help=_SPENT_HELP)
        )
        cap = budgets.tenant_cap(tenant)
        if cap is not None:
            samples.append(Sample("agentfleet_budget_cap_usd", cap, labels, help=_CAP_HELP))
    totals = store.completion_stats(1).totals
    samples += [
        Sample(
            "agentfleet_budget_alerts_total",
            totals.get(f"budget_alerts:{scope}:{level}", 0.0),
            {"scope": scope, "level": level},
            kind="counter",
            help="Budget alerts raised: soft at budgets.alert_at of a cap, hard at the cap.",
        )
        for scope in ("run", "tenant", "fleet")
        for level in ("soft", "hard")
    ]
    return samples
