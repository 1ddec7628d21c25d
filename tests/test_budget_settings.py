"""Budget settings: one clear line for a bad value, and each tenant's cap."""

from __future__ import annotations

import pytest

from agentfleet.config import BudgetSettings, TenantBudget, load_settings
from agentfleet.errors import ConfigError


def test_a_bad_alert_share_names_the_setting_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_BUDGETS__ALERT_AT", "1.5")
    with pytest.raises(ConfigError, match=r"AGENTFLEET_BUDGETS__ALERT_AT / budgets\.alert_at: .*1"):
        load_settings()


def test_a_budget_webhook_must_be_an_http_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_BUDGETS__WEBHOOK_URL", "hooks.slack.com/x")
    with pytest.raises(
        ConfigError, match=r"AGENTFLEET_BUDGETS__WEBHOOK_URL / budgets\.webhook_url: must be an http"
    ):
        load_settings()


def test_a_tenants_own_cap_wins_over_the_default_one() -> None:
    budgets = BudgetSettings(tenant_daily_usd=5.0, tenants={"acme": TenantBudget(daily_usd=50.0)})
    assert budgets.tenant_cap("acme") == 50.0
    assert budgets.tenant_cap("beta") == 5.0
    assert budgets.tenant_cap(None) is None
