"""The service against a real Redis and real workers: stale and back, the run trigger, metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from ops_support import wait_for
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.config import Settings, load_settings
from agentfleet.service import create_app

pytestmark = pytest.mark.slow

TOKEN = "integration-token-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STALE_AFTER_S = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """An embedded Redis of this module's own, with no worker until a test adds one (so its
    fleet queues work for tasks no live worker has yet)."""
    settings = load_settings(dispatch={"require_workers": False})
    with LocalCluster(workers=0, concurrency=4, env=cluster_env(), settings=settings) as running:
        yield running


@pytest.fixture(scope="module")
def settings(cluster: LocalCluster) -> Settings:
    return load_settings(
        broker_url=cluster.broker_url,
        service={"token": TOKEN, "stale_after_s": STALE_AFTER_S},
        fanouts={"echoes": {"task": "fleet_test_tasks.echo"}},
    )


@pytest.fixture(scope="module")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _status(client: TestClient, wanted: str, completed: int = 0) -> dict[str, Any] | None:
    """/health's answer once it says ``wanted`` with at least ``completed`` completions counted."""
    health: dict[str, Any] = client.get("/health").json()
    return health if health["status"] == wanted and health["completed_last_minute"] >= completed else None


def test_health_turns_stale_when_work_waits_and_ok_once_it_completes(
    cluster: LocalCluster, client: TestClient
) -> None:
    sent = time.monotonic()
    run = cluster.fleet().map("fleet_test_tasks.echo", [{"n": i} for i in range(5)])
    first = client.get("/health").json()
    if time.monotonic() - sent < STALE_AFTER_S:  # a loaded machine may take longer to get here
        assert first["status"] == "degraded", "no worker yet, and the work has waited less than 2 s"
    assert first["queues"]["agentfleet.agents"] == 5
    assert first["workers_active"] == 0
    stale = wait_for(lambda: _status(client, "stale"), timeout_s=20, what="/health to say stale")
    assert stale["queues"]["agentfleet.agents"] == 5

    cluster.add_worker()
    assert run.wait(timeout_s=60).succeeded == 5
    # Each process adds its completions to the shared count about once a second: wait for all 5.
    healthy = wait_for(
        lambda: _status(client, "ok", completed=5),
        timeout_s=30,
        what="/health to say ok with 5 completions counted",
    )
    assert healthy["workers_active"] == 1
    assert 0 <= healthy["seconds_since_last_completion"] < 30


def test_a_triggered_run_executes_on_the_cluster(cluster: LocalCluster, client: TestClient) -> None:
    if not cluster.workers:
        cluster.add_worker()
    response = client.post(
        "/runs", json={"fanout": "echoes", "inputs": [{"n": i} for i in range(6)]}, headers=AUTH
    )
    assert response.status_code == 202
    started = response.json()
    assert started["tasks"] == 6 and started["summary_url"] == f"/runs/{started['run_id']}"

    def finished() -> dict[str, object] | None:
        summary: dict[str, object] = client.get(started["summary_url"], headers=AUTH).json()
        return summary if summary["status"] == "finished" else None

    summary = wait_for(finished, timeout_s=60, what="the triggered run to finish")
    assert summary["name"] == "echoes"
    assert summary["succeeded"] == 6 and summary["failed"] == 0


def test_metrics_parse_and_count_queues_outcomes_and_runs(cluster: LocalCluster, client: TestClient) -> None:
    if not cluster.workers:
        cluster.add_worker()
    assert (
        cluster.fleet().map("fleet_test_tasks.echo", [{"n": 1}, {"n": 2}]).wait(timeout_s=60).succeeded == 2
    )
    text = client.get("/metrics").text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    depth = families["agentfleet_queue_depth"]
    assert "Scale agent worker replicas" in depth.documentation
    assert {s.labels["queue"]: s.value for s in depth.samples}["agentfleet.agents"] == 0
    items = {s.labels["outcome"]: s.value for s in families["agentfleet_items"].samples}
    assert items["succeeded"] >= 2
    assert families["agentfleet_runs_started"].samples[0].value >= 1
    assert families["agentfleet_workers_active"].samples[0].value == len(cluster.workers)
    last = families["agentfleet_last_completion_timestamp_seconds"].samples[0].value
    assert abs(time.time() - last) < 60
