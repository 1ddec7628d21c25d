"""Budgets on real workers, against the mock Messages API over HTTP: an item's budget counts
every attempt; a run's and a tenant's daily budget alert once at their share (a log line, a
metric, a webhook POST) and stop every call at their cap, overshooting by at most one call in
flight per busy slot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import durable_test_tasks as dt
import pytest
from durable_support import FAR_HOST, durable_cluster, requests_for
from fault_support import wait_until
from http_scripted import Reply, ScriptedServer

from agentfleet import LocalCluster
from agentfleet.config import BudgetSettings, Settings, TenantBudget, get_settings
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet
from agentfleet.runs import RunStore
from agentfleet.service.collectors import collect_daily_budgets
from agentfleet.spend import SpendLedger

pytestmark = pytest.mark.slow

SLOTS = 4
TENANT_CAP_USD = 0.003
# LONG 150 answers about 150 output tokens: about $0.00075 a call at Haiku's $5 per million.
LONG = "LONG 150"


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer(latency=0.3) as server:
        yield server


@pytest.fixture(scope="module")
def far() -> Iterator[ScriptedServer]:
    with ScriptedServer(host=FAR_HOST) as server:
        server.script("/alerts", Reply(200, {"ok": True}))
        yield server


@pytest.fixture(scope="module")
def bcluster(redis_url: str, mock: MockMessagesServer, far: ScriptedServer) -> Iterator[LocalCluster]:
    with durable_cluster(
        redis_url,
        mock,
        far,
        concurrency=SLOTS,
        AGENTFLEET_BUDGETS__ALERT_AT="0.5",
        AGENTFLEET_BUDGETS__WEBHOOK_URL=far.url("/alerts"),
        AGENTFLEET_BUDGETS__TENANTS=json.dumps({"acme": {"daily_usd": TENANT_CAP_USD}}),
    ) as running:
        yield running


@pytest.fixture
def fleet(bcluster: LocalCluster) -> Fleet:
    return bcluster.fleet()


def _alerts(far: ScriptedServer, who: str) -> list[str]:
    return [hit.json()["text"] for hit in far.hits("/alerts") if who in hit.json()["text"]]


@dataclass
class _Sources:
    settings: Settings
    store: RunStore

    def ping_workers(self, timeout_s: float) -> list[str]:
        return []


def test_an_items_budget_counts_every_attempt(fleet: Fleet, mock: MockMessagesServer) -> None:
    marker = "turns-over-attempts"
    run = fleet.map(dt.ask_then_fail, [{"prompt": f"{marker}\nSAY ok"}])
    summary = run.wait(timeout_s=60)
    (outcome,) = run.outcomes()
    assert (outcome.ok, outcome.error_type) == (False, "BudgetExceeded"), outcome
    assert "made 2 model calls of a 2-call budget over every attempt" in (outcome.error or "")
    assert len(requests_for(mock, marker)) == 2, "the third attempt was stopped before its call"
    assert summary.retries == 2


def test_a_run_budget_alerts_at_its_share_then_stops_every_call_with_a_bounded_overshoot(
    fleet: Fleet, mock: MockMessagesServer, far: ScriptedServer, bcluster: LocalCluster
) -> None:
    marker = "run-budget"
    cap = 0.005
    run = fleet.map(dt.talker, [{"prompt": f"{marker}\n{LONG}", "calls": 20}] * SLOTS, budget_usd=cap)
    summary = run.wait(timeout_s=90)
    assert summary.status == "failed" and summary.succeeded == 0, summary
    assert {o.error_type for o in run.outcomes()} == {"BudgetExceeded"}
    prices = get_settings().llm.prices[dt.MODEL]
    costs = [
        (r.input_tokens * prices.input_per_mtok + r.output_tokens * prices.output_per_mtok) / 1e6
        for r in requests_for(mock, marker)
        if r.status == 200
    ]
    spent = SpendLedger.from_settings(fleet.settings, fleet.store.client).standing(run.id)[0]
    assert sum(costs) == pytest.approx(spent)
    assert cap <= spent <= cap + SLOTS * max(costs), "at most one call in flight per busy slot"
    wait_until(lambda: len(_alerts(far, f"run {run.id}")) == 2, 30, "both alerts at the webhook")
    soft, hard = sorted(_alerts(far, f"run {run.id}"))  # "alert" sorts before "reached"
    assert "budget alert" in soft and "of its $0.0050 cap" in soft
    assert "budget reached" in hard and "further model calls are refused" in hard
    logged = "".join(w.log_text() for w in bcluster.workers)
    assert logged.count('"scope": "run"') == 2 and f'"name": "{run.id}"' in logged


def test_a_tenants_daily_budget_stops_its_runs_and_no_others(
    fleet: Fleet, mock: MockMessagesServer, far: ScriptedServer
) -> None:
    spender = fleet.map(dt.talker, [{"prompt": f"tenant-1\n{LONG}", "calls": 20}], tenant="acme")
    (first,) = spender.wait(timeout_s=60) and spender.outcomes()
    assert first.error_type == "BudgetExceeded" and "tenant acme" in (first.error or "")
    late = fleet.map(dt.talker, [{"prompt": f"tenant-2\n{LONG}"}], tenant="acme")
    (refused,) = late.wait(timeout_s=60) and late.outcomes()
    assert refused.error_type == "BudgetExceeded"
    assert requests_for(mock, "tenant-2") == [], "no call is sent once the tenant is over its cap"
    other = fleet.map(dt.talker, [{"prompt": f"tenant-3\n{LONG}"}], tenant="beta")
    assert other.wait(timeout_s=60).succeeded == 1
    wait_until(lambda: len(_alerts(far, "tenant acme")) == 2, 30, "the tenant's alerts")


def test_budget_alerts_and_spending_are_metrics(fleet: Fleet) -> None:
    run = fleet.map(dt.talker, [{"prompt": f"metrics\n{LONG}", "calls": 20}], tenant="acme")
    run.wait(timeout_s=60)
    budgets = BudgetSettings(tenants={"acme": TenantBudget(daily_usd=TENANT_CAP_USD)})
    sources = _Sources(fleet.settings.model_copy(update={"budgets": budgets}), fleet.store)

    def figures() -> dict[str, dict[object, float]]:
        found: dict[str, dict[object, float]] = {}
        for s in collect_daily_budgets(sources):
            label = (s.labels["scope"], s.labels["level"]) if "level" in s.labels else s.labels.get("tenant")
            found.setdefault(s.name, {})[label] = s.value
        return found

    def counted() -> bool:
        found = figures()
        alerts = found["agentfleet_budget_alerts_total"]
        spent = found["agentfleet_budget_spent_usd"].get(None, 0.0)
        return spent >= TENANT_CAP_USD and alerts[("tenant", "soft")] >= 1 and alerts[("tenant", "hard")] >= 1

    # Each worker process adds its spending and alerts to the fleet's figures about once a second.
    wait_until(counted, 30, "the fleet's spending and alerts to be counted")
    found = figures()
    alerts = found["agentfleet_budget_alerts_total"]
    assert alerts[("tenant", "soft")] == alerts[("tenant", "hard")] == 1, "each alert is raised once a day"
    spent, caps = found["agentfleet_budget_spent_usd"], found["agentfleet_budget_cap_usd"]
    assert spent["acme"] >= TENANT_CAP_USD and caps["acme"] == TENANT_CAP_USD
    assert spent[None] >= spent["acme"], "the fleet's spending includes the tenant's"
