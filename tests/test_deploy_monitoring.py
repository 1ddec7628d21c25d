"""The Grafana dashboard and Prometheus alert rules in ``deploy/``: valid, tested, and about
metrics that ``/metrics`` really exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from agentfleet.config import load_settings
from agentfleet.models import TaskOutcome
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.runs import RunStore
from agentfleet.service import create_app

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
RULES = DEPLOY / "prometheus" / "agentfleet-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "agentfleet-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "agentfleet-dashboard.json"
METRIC = re.compile(r"\bagentfleet_[a-z_]+\b")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: install Debian's prometheus package (`make test` does so when run as root)"
        )
    return found


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def exported(redis_url: str) -> set[str]:
    """Every metric name ``/metrics`` exports once the fleet has limits, circuits and a budget."""
    settings = load_settings(
        broker_url=redis_url,
        key_prefix=f"t{uuid.uuid4().hex[:10]}",
        service={"probe_timeout_s": 0.5},
        limits={"vendor-a.example": {"rate_per_s": 5, "max_concurrency": 2}},
        budgets={"run_usd": 1.0},
    )
    store = RunStore.from_settings(settings)
    store.create_run(
        "budgeted", name="pricing", kind="map", task="t", items=[("t-0", "k0", "0"), ("t-1", "k1", "1")]
    )
    store.finish(TaskOutcome(task_id="t-0", run_id="budgeted", item_key="0", ok=True, idempotency_key="k0"))
    CircuitBreaker.from_settings(settings).record_failure("vendor-a.example")
    app = create_app(settings)
    # No workers here, and a Celery ping in this process would break later tests' forked children.
    app.state.service.ping_workers = lambda timeout_s: []
    with TestClient(app) as client:
        text = client.get("/metrics").text
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_the_alert_rules_are_valid_for_promtool() -> None:
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_each_alert_fires_on_its_unit_test_series_and_not_on_a_healthy_fleet() -> None:
    result = subprocess.run(
        [_promtool(), "test", "rules", RULE_TESTS.name], capture_output=True, text=True, cwd=RULE_TESTS.parent
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == {rule["alert"] for rule in _rules()}, "every alert has a unit test"


def test_the_alerts_cover_dlq_growth_staleness_circuits_budget_and_queue_age() -> None:
    watched = {name for rule in _rules() for name in METRIC.findall(rule["expr"])}
    assert {
        "agentfleet_items_dead_lettered_total",
        "agentfleet_last_completion_timestamp_seconds",
        "agentfleet_circuit_open",
        "agentfleet_run_budget_share",
        "agentfleet_queue_head_wait_seconds",
    } <= watched


def test_every_alert_and_panel_names_only_metrics_that_metrics_exports(exported: set[str]) -> None:
    queries = [rule["expr"] for rule in _rules()]
    queries += [target["expr"] for panel in _panels() for target in panel["targets"]]
    named = {name for query in queries for name in METRIC.findall(query)}
    assert named, "no query names a metric"
    assert named <= exported, f"not exported by /metrics: {sorted(named - exported)}"


def test_every_panel_queries_the_dashboards_prometheus_variable() -> None:
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for panel in _panels():
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(t["expr"].strip() and t["refId"] for t in panel["targets"]), panel["title"]


def test_panels_have_unique_ids_and_tile_the_24_column_grid_without_overlap() -> None:
    dashboard = _dashboard()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    taken: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
