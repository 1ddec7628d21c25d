"""/health and /metrics: fast (they read what workers keep in Redis, they ping nobody), a long
pause shown with its time left, /metrics through prometheus_client, GET /runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from worker_env import own_queues

from agentfleet import Fleet
from agentfleet.config import Settings, load_settings
from agentfleet.ratelimit import Limiter
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry
from agentfleet.service import create_app

TOKEN = "probe-token-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues=own_queues(key_prefix),
        service={"token": TOKEN},
        dispatch={"require_workers": False},
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _heartbeat(settings: Settings, node: str) -> None:
    record = WorkerRecord(node=node, queues=(settings.queues.agents,), tasks={"t": TaskInfo(fleet=True)})
    WorkerRegistry.from_settings(settings, redis.Redis.from_url(settings.broker_url)).beat(record)


def _metrics(client: TestClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def _median_s(client: TestClient, path: str) -> float:
    timings = []
    for _ in range(7):
        started = time.perf_counter()
        assert client.get(path).status_code == 200
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def test_health_and_metrics_answer_well_within_a_probes_one_second(
    settings: Settings, client: TestClient
) -> None:
    _heartbeat(settings, "w1@host")
    # Kubernetes' default probe timeout is 1 s; the target is well under 100 ms, bounded
    # generously here for a loaded CI machine (bench/probes.py measures it).
    assert _median_s(client, "/health") < 0.5
    assert _median_s(client, "/metrics") < 0.5


def test_live_workers_are_counted_from_their_heartbeats(settings: Settings, client: TestClient) -> None:
    _heartbeat(settings, "w1@host")
    _heartbeat(settings, "w2@host")
    assert client.get("/health").json()["workers_active"] == 2
    metrics = _metrics(client)
    assert metrics["agentfleet_workers_active"] == [({}, 2.0)]
    assert sorted(labels["worker"] for labels, _ in metrics["agentfleet_worker_up"]) == ["w1@host", "w2@host"]


def test_metrics_say_agentfleet_up_1_when_redis_answers(client: TestClient) -> None:
    assert _metrics(client)["agentfleet_up"] == [({}, 1.0)]


def test_a_long_pause_makes_health_degraded_naming_the_downstream_and_the_time_left(
    settings: Settings, client: TestClient
) -> None:
    _heartbeat(settings, "w1@host")
    limiter = Limiter.from_settings(settings, redis.Redis.from_url(settings.broker_url))
    limiter.pause("anthropic:claude-haiku-4-5", 470)
    limiter.pause("vendor-a.example", 2)
    health = client.get("/health").json()
    assert health["status"] == "degraded"
    assert list(health["paused_downstreams"]) == ["anthropic:claude-haiku-4-5"], "a 2 s pause is not news"
    assert 460 < health["paused_downstreams"]["anthropic:claude-haiku-4-5"] <= 470
    assert "anthropic:claude-haiku-4-5 is paused for every worker for 7.8m more" in health["reasons"][0]


def test_get_runs_lists_the_newest_runs_with_the_bearer_token(settings: Settings, client: TestClient) -> None:
    with Fleet(settings) as fleet:
        first = fleet.map("t.echo", [{"n": 1}], name="first")
        second = fleet.map("t.echo", [{"n": 1}, {"n": 2}], name="second")
    assert client.get("/runs").status_code == 401
    listed = client.get("/runs", headers=AUTH).json()["runs"]
    assert [(r["run_id"], r["tasks_total"]) for r in listed] == [(second.id, 2), (first.id, 1)]
    assert client.get("/runs?limit=1", headers=AUTH).json()["runs"][0]["name"] == "second"
    assert client.get("/runs?limit=zero", headers=AUTH).status_code == 422
