"""Budgets that hold across attempts, runs, tenants and days, and the alerts they raise.

Every priced model call is counted as soon as its reply arrives (``agentfleet.runs.budgets``):
in the spend ledger (by run and by day, per downstream), for the item over all its attempts,
and for its tenant today. An attempt killed mid-way has counted what it spent.

An item's own caps (``@fleet_task(budget_usd=, budget_tokens=, budget_turns=,
budget_wall_s=)``, else ``[budgets] task_*``) count everything its attempts spent: the
execution starts from what earlier attempts recorded (``ExecutionState.prior``).

Above the item, three dollar caps: its run's (its own budget, given at dispatch with
``Fleet.map(budget_usd=)``, else ``budgets.run_usd``), its tenant's per UTC day and the
fleet's per UTC day. The fleet transport asks ``gate()`` before every request: once a cap is
reached every further call is refused with ``BudgetExceeded`` (a run over its cap also stops
its items that have not started). A call already on its way when the cap is crossed still
completes, so a cap is overshot by at most one call per busy slot. Reaching
``budgets.alert_at`` of a cap, and the cap itself, raise one alert each: a JSON log line
(``"event": "budget_alert"``), a counter (``agentfleet_budget_alerts_total`` on
``/metrics``) and, with ``budgets.webhook_url`` (else ``dlq.webhook_url``) set, a
Slack-shaped POST sent by a maintenance worker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from typing import TYPE_CHECKING

from agentfleet.config import Settings
from agentfleet.errors import BudgetExceeded
from agentfleet.models import TokenUsage
from agentfleet.outages import Patience
from agentfleet.runs import Alert, BudgetLedger, Caps, Report, Spend, Standing
from agentfleet.tasks.runtime import runtime
from agentfleet.tools.transport import CallInfo, FleetHooks

if TYPE_CHECKING:
    from agentfleet.tasks.execution_state import ExecutionState

__all__ = ["BUDGET_ALERT_TASK", "SpendReporter", "alert_record", "budget_hooks", "caps_for", "reporter_for"]

log = logging.getLogger("agentfleet.budgets")

BUDGET_ALERT_TASK = "agentfleet.maintenance.budget_alert"


def caps_for(state: ExecutionState, settings: Settings) -> Caps:
    """The dollar caps above ``state``'s item: its run's (unless the run has one of its own),
    its tenant's, the fleet's."""
    budgets = settings.budgets
    return Caps(
        run_usd=budgets.run_usd,
        tenant_usd=budgets.tenant_cap(state.tenant),
        fleet_usd=budgets.fleet_daily_usd,
        alert_at=budgets.alert_at,
    )


def alert_record(alert: Alert) -> dict[str, object]:
    """An alert as its log line and webhook see it."""
    share = alert.spent_usd / alert.cap_usd if alert.cap_usd else 0.0
    return {
        "event": "budget_alert",
        "scope": alert.scope,
        "name": alert.name,
        "level": alert.level,
        "spent_usd": round(alert.spent_usd, 6),
        "cap_usd": alert.cap_usd,
        "share": round(share, 4),
    }


def _raise_alert(alert: Alert, settings: Settings) -> None:
    """Log the alert, and have a maintenance worker POST it when a webhook is set."""
    record = alert_record(alert)
    (log.error if alert.level == "hard" else log.warning)(json.dumps(record))
    url = settings.budgets.webhook_url or settings.dlq.webhook_url
    if not url:
        return
    try:
        from agentfleet.celery_app import app

        app.send_task(BUDGET_ALERT_TASK, kwargs={"alert": record}, queue=settings.queues.maintenance)
    except Exception:  # an alert is advice: never fail the item for it
        log.warning("could not send the budget alert to the webhook", exc_info=True)


class SpendReporter:
    """Reports one execution's spending to the ledger, in order, and raises the alerts it
    crosses. Shared by the execution's parallel tool calls."""

    def __init__(self, ledger: BudgetLedger, state: ExecutionState, settings: Settings) -> None:
        self.ledger = ledger
        self.state = state
        self.settings = settings
        self.caps = caps_for(state, settings)
        self._lock = threading.Lock()
        self._seq = 0
        self._reported_s = 0.0

    @property
    def patience(self) -> Patience:
        """Calls ride out a Redis outage of ``delivery.redis_retry_s``."""
        return Patience(self.settings.delivery.redis_retry_s, self.settings.broker_url)

    def report(self, spend: Spend, *, downstream: str = "", elapsed_s: float = 0.0) -> None:
        """Count ``spend`` (its seconds are taken from ``elapsed_s``, the execution's seconds so
        far) on ``downstream``."""
        with self._lock:
            seconds = max(0.0, elapsed_s - self._reported_s)
            self._reported_s = max(self._reported_s, elapsed_s)
            self._seq += 1
            state = self.state
            spend = dataclasses.replace(spend, seconds=seconds)
            report = Report(state.key, state.run_id, state.tenant, spend, state.token, self._seq, downstream)
            _, alerts = self.patience.call(self.ledger.charge, report, self.caps)
        for alert in alerts:
            _raise_alert(alert, self.settings)

    def report_seconds(self, elapsed_s: float) -> None:
        """Count the seconds run since the last report (the execution ends), when the item has
        a wall-clock budget to count them against."""
        if self.state.budget_wall_s is not None and elapsed_s > self._reported_s:
            self.report(Spend(), elapsed_s=elapsed_s)

    def standing(self) -> Standing:
        return self.patience.call(self.ledger.standing, self.state.run_id, self.state.tenant)


def reporter_for(state: ExecutionState, settings: Settings) -> SpendReporter:
    """``state``'s reporter, made on first use."""
    if state.reporter is None:
        state.reporter = SpendReporter(runtime(settings).budgets, state, settings)
    return state.reporter


def _check(standing: Standing, state: ExecutionState, caps: Caps, settings: Settings) -> None:
    """Raise ``BudgetExceeded`` once the run, the tenant today or the fleet today is at its cap."""
    run_cap = standing.run_budget_usd if standing.run_budget_usd is not None else caps.run_usd
    if run_cap is not None and standing.run_usd >= run_cap:
        # The whole run is over budget: items that have not started will not run.
        runtime(settings).runs.fail_fast(state.run_id)
        where = "given when it started" if standing.run_budget_usd is not None else "budgets.run_usd"
        raise BudgetExceeded(f"the run spent ${standing.run_usd:.4f} of its ${run_cap:.4f} budget ({where})")
    if caps.tenant_usd is not None and standing.tenant_usd >= caps.tenant_usd:
        own = settings.budgets.tenants.get(state.tenant or "")
        where = (
            f"budgets.tenants.{state.tenant}.daily_usd"
            if own is not None and own.daily_usd is not None
            else "budgets.tenant_daily_usd"
        )
        raise BudgetExceeded(
            f"tenant {state.tenant} spent ${standing.tenant_usd:.4f} of its ${caps.tenant_usd:.4f} "
            f"daily budget today ({where})"
        )
    if caps.fleet_usd is not None and standing.fleet_usd >= caps.fleet_usd:
        raise BudgetExceeded(
            f"the fleet spent ${standing.fleet_usd:.4f} of its ${caps.fleet_usd:.4f} daily budget today "
            "(budgets.fleet_daily_usd)"
        )


def budget_hooks(state: ExecutionState, settings: Settings, hooks: FleetHooks) -> FleetHooks:
    """``hooks`` with the spend ledger and every budget: the item's over its attempts, and its
    run's, tenant's and the fleet's caps asked before each request (see the module docstring)."""
    reporter = reporter_for(state, settings)
    price = hooks.on_usage
    assert price is not None

    def on_usage(info: CallInfo, usage: TokenUsage) -> float:
        before = state.cost_usd
        price(info, usage)
        spent = Spend(usd=state.cost_usd - before, tokens=usage.total, turns=1)
        reporter.report(spent, downstream=info.downstream, elapsed_s=state.elapsed_s())
        return spent.usd

    def gate() -> None:
        state.gate()
        _check(reporter.standing(), state, reporter.caps, settings)

    return dataclasses.replace(hooks, gate=gate, on_usage=on_usage)
