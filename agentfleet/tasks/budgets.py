"""Budgets that hold across attempts, runs, tenants and days, and the alerts they raise.

An item's own caps (``@fleet_task(budget_usd=, budget_tokens=, budget_turns=,
budget_wall_s=)``, else ``[budgets] task_*``) count everything its attempts spent: the
execution starts from what earlier attempts recorded (``ExecutionState.prior``) and reports
each model call's spending as it happens, so an attempt killed mid-way has counted its spend.

Above the item, three dollar caps: its run's (``Fleet.map(budget_usd=)``, else
``budgets.run_usd``), its tenant's per UTC day and the fleet's per UTC day. The fleet
transport asks ``gate()`` before every request: once a cap is reached every further call is
refused with ``BudgetExceeded`` (a run over its cap also stops its items that have not
started). A call already on its way when the cap is crossed still completes, so a cap is
overshot by at most one call per busy slot. Reaching ``budgets.alert_at`` of a cap, and the
cap itself, raise one alert each: a JSON log line (``"event": "budget_alert"``), a counter
(``agentfleet_budget_alerts_total`` on ``/metrics``) and, with ``budgets.webhook_url`` (else
``dlq.webhook_url``) set, a Slack-shaped POST sent by a maintenance worker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from agentfleet.config import Settings
from agentfleet.errors import BudgetExceeded
from agentfleet.models import TokenUsage
from agentfleet.outages import ride_out
from agentfleet.runs import Alert, Caps, Report, Spend, SpendLedger
from agentfleet.tasks.shared import run_store, spend_ledger
from agentfleet.tools.transport import CallInfo, FleetHooks

if TYPE_CHECKING:
    from agentfleet.tasks.execution_state import ExecutionState

__all__ = ["BUDGET_ALERT_TASK", "SpendReporter", "alert_record", "budget_hooks", "caps_for", "reporter_for"]

log = logging.getLogger("agentfleet.budgets")

BUDGET_ALERT_TASK = "agentfleet.maintenance.budget_alert"
T = TypeVar("T")


def caps_for(state: ExecutionState, settings: Settings) -> Caps:
    """The dollar caps above ``state``'s item: its run's, its tenant's, the fleet's."""
    budgets = settings.budgets
    return Caps(
        run_usd=state.run_budget_usd or budgets.run_usd,
        tenant_usd=budgets.tenant_cap(state.tenant),
        fleet_usd=budgets.fleet_daily_usd,
        alert_at=budgets.alert_at,
    )


def _item_capped(state: ExecutionState) -> bool:
    caps = (state.budget_usd, state.budget_tokens, state.budget_turns, state.budget_wall_s)
    return any(cap is not None for cap in caps)


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

    def __init__(
        self,
        ledger: SpendLedger,
        state: ExecutionState,
        caps: Caps,
        on_alert: Callable[[Alert], None],
        settings: Settings,
    ) -> None:
        self.ledger = ledger
        self.state = state
        self.caps = caps
        self.on_alert = on_alert
        self.settings = settings
        self._lock = threading.Lock()
        self._seq = 0
        self._reported_s = 0.0

    def patiently(self, call: Callable[[], T]) -> T:
        """``call()``, riding out a Redis outage of ``delivery.redis_retry_s`` (each script
        here is safe to run twice)."""
        return ride_out(call, budget_s=self.settings.delivery.redis_retry_s, url=self.settings.broker_url)

    def report(self, *, usd: float = 0.0, tokens: int = 0, turns: int = 0, elapsed_s: float = 0.0) -> None:
        """Count this much more spending; ``elapsed_s`` is the execution's seconds so far."""
        with self._lock:
            seconds = max(0.0, elapsed_s - self._reported_s)
            self._reported_s = max(self._reported_s, elapsed_s)
            self._seq += 1
            state = self.state
            report = Report(
                state.key,
                state.run_id,
                state.tenant,
                Spend(usd, tokens, turns, seconds),
                state.token,
                self._seq,
            )
            _, alerts = self.patiently(lambda: self.ledger.record(report, self.caps))
        for alert in alerts:
            self.on_alert(alert)

    def report_seconds(self, elapsed_s: float) -> None:
        """Count the seconds run since the last report (the execution ends)."""
        if elapsed_s > self._reported_s:
            self.report(elapsed_s=elapsed_s)


def reporter_for(state: ExecutionState, settings: Settings) -> SpendReporter | None:
    """``state``'s reporter, made now if a budget applies to it (None when none does)."""
    if state.reporter is None:
        caps = caps_for(state, settings)
        if caps.any or _item_capped(state):
            state.reporter = SpendReporter(
                spend_ledger(settings), state, caps, lambda alert: _raise_alert(alert, settings), settings
            )
    return state.reporter


def budget_hooks(state: ExecutionState, settings: Settings, hooks: FleetHooks) -> FleetHooks:
    """``hooks`` with every budget: the item's over its attempts, and its run's, tenant's and
    the fleet's caps asked before each request (see the module docstring)."""
    reporter = reporter_for(state, settings)
    if reporter is None:
        return hooks
    price = hooks.on_usage
    assert price is not None
    caps = reporter.caps

    def on_usage(info: CallInfo, usage: TokenUsage) -> None:
        before = state.cost_usd
        price(info, usage)
        reporter.report(usd=state.cost_usd - before, tokens=usage.total, turns=1, elapsed_s=state.elapsed_s())

    def gate() -> None:
        state.check_budget()
        if not caps.any:
            return
        run_spent, tenant_spent, fleet_spent = reporter.patiently(
            lambda: reporter.ledger.above(state.run_id, state.tenant)
        )
        if caps.run_usd is not None and run_spent >= caps.run_usd:
            # The whole run is over budget: items that have not started will not run.
            run_store(settings).fail_fast(state.run_id)
            where = "its budget_usd" if state.run_budget_usd else "budgets.run_usd"
            raise BudgetExceeded(
                f"the run spent ${run_spent:.4f} of its ${caps.run_usd:.4f} budget ({where})"
            )
        if caps.tenant_usd is not None and tenant_spent >= caps.tenant_usd:
            own = settings.budgets.tenants.get(state.tenant or "")
            where = (
                f"budgets.tenants.{state.tenant}.daily_usd"
                if own is not None and own.daily_usd is not None
                else "budgets.tenant_daily_usd"
            )
            raise BudgetExceeded(
                f"tenant {state.tenant} spent ${tenant_spent:.4f} of its ${caps.tenant_usd:.4f} "
                f"daily budget today ({where})"
            )
        if caps.fleet_usd is not None and fleet_spent >= caps.fleet_usd:
            raise BudgetExceeded(
                f"the fleet spent ${fleet_spent:.4f} of its ${caps.fleet_usd:.4f} daily budget today "
                "(budgets.fleet_daily_usd)"
            )

    return dataclasses.replace(hooks, gate=gate, on_usage=on_usage)
