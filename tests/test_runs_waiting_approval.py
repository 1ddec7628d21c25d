"""Items parked for a decision are shown where runs are: ``Fleet.runs()``, ``agentfleet runs
list`` / ``runs show`` and the console's runs and run pages (a real Redis; the pauses are
recorded in the store as a parked item records them)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest
from approval_support import nowhere_message
from starlette.testclient import TestClient
from typer.testing import CliRunner, Result

from agentfleet.approvals import Approval, ApprovalStore
from agentfleet.cli.app import app
from agentfleet.config import Settings, load_settings
from agentfleet.orchestration import Fleet
from agentfleet.service import create_app

TOKEN = "runs-waiting-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(broker_url=redis_url, key_prefix=key_prefix, service={"token": TOKEN})


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as opened:
        yield opened


@pytest.fixture
def env(redis_url: str, key_prefix: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")},
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": key_prefix,
        "COLUMNS": "100",
    }


def _run(fleet: Fleet, items: int) -> str:
    run_id = uuid.uuid4().hex[:16]
    fleet.store.create_run(
        run_id,
        name=f"review-{run_id[:4]}",
        kind="map",
        task="tests.deploy",
        items=[(f"{run_id}-{i}", f"{run_id}:{i}:k", str(i)) for i in range(items)],
        inputs=[{"i": i} for i in range(items)],
    )
    return run_id


def _park(store: ApprovalStore, settings: Settings, run_id: str, index: int, name: str) -> Approval:
    approval = Approval(
        id=f"ap_{uuid.uuid4().hex[:24]}",
        name=name,
        run_id=run_id,
        item_key=f"{run_id}:{index}:k",
        index=index,
        task_name="tests.deploy",
        task_id=f"{run_id}-{index}",
    )
    assert store.create(approval, nowhere_message(settings))
    return store.get(approval.id)


def _cli(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["runs", *args], env=env, terminal_width=100)


def test_runs_and_the_cli_show_the_items_waiting_for_a_decision(
    fleet: Fleet, settings: Settings, env: dict[str, str]
) -> None:
    asking, quiet = _run(fleet, 3), _run(fleet, 2)
    first = _park(fleet.approval_store, settings, asking, 0, "deploy to prod")
    second = _park(fleet.approval_store, settings, asking, 2, "send the email")

    counts = {s.run_id: s.waiting_approval for s in fleet.runs(10)}
    assert counts == {asking: 2, quiet: 0}

    listed = _cli(env, "list")
    assert listed.exit_code == 0, listed.output
    assert "to decide" in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if asking in line)
    assert " 2 " in row
    as_json = {s["run_id"]: s["waiting_approval"] for s in json.loads(_cli(env, "list", "--json").stdout)}
    assert as_json == {asking: 2, quiet: 0}

    shown = _cli(env, "show", asking)
    assert shown.exit_code == 0, shown.output
    assert first.id in shown.stdout and second.id in shown.stdout
    assert "deploy to prod" in shown.stdout and "send the email" in shown.stdout
    assert f"agentfleet approvals list --run {asking}" in shown.stdout
    doc = json.loads(_cli(env, "show", asking, "--json").stdout)
    assert doc["summary"]["waiting_approval"] == 2
    waiting = {(w["index"], w["approval_id"]) for w in doc["waiting_approval"]}
    assert waiting == {(0, first.id), (2, second.id)}

    quiet_shown = _cli(env, "show", quiet)
    assert quiet_shown.exit_code == 0 and "approvals list" not in quiet_shown.stdout
    newest = _cli(env, "list", "-n", "1").stdout
    assert quiet in newest and "to decide" not in newest, "no column when no run listed waits"

    fleet.approve(first.id, by="erin")
    left = {s.run_id: s.waiting_approval for s in fleet.runs(10)}
    assert left[asking] == 1, "the decided item was sent again"
    after = json.loads(_cli(env, "show", asking, "--json").stdout)
    assert [w["approval_id"] for w in after["waiting_approval"]] == [second.id]


def test_the_console_shows_the_items_waiting_for_a_decision(fleet: Fleet, settings: Settings) -> None:
    asking, quiet = _run(fleet, 2), _run(fleet, 1)
    parked = _park(fleet.approval_store, settings, asking, 1, "spend past $50")
    with TestClient(create_app(settings)) as client:
        runs = client.get("/console/runs", headers=AUTH)
        assert runs.status_code == 200
        assert f'href="/console/approvals?run={asking}">1 to decide</a>' in runs.text
        assert f"approvals?run={quiet}" not in runs.text
        page = client.get(f"/console/runs/{asking}", headers=AUTH)
        assert page.status_code == 200
        assert "Waiting for a decision" in page.text
        assert parked.id in page.text and "spend past $50" in page.text
        assert f"agentfleet approvals list --run {asking}" in page.text
        other = client.get(f"/console/runs/{quiet}", headers=AUTH)
        assert other.status_code == 200 and "Waiting for a decision" not in other.text
