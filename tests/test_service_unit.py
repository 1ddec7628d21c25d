"""The service's parts without workers: Prometheus text, the health verdict, auth and validation."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from ratelimit_support import StoppedRenewer
from starlette.testclient import TestClient

from agentfleet.config import Settings, load_settings
from agentfleet.service import Sample, create_app
from agentfleet.service.collectors import DEFAULT_COLLECTORS, Collected, Sources
from agentfleet.service.health import PendingClock, assess
from agentfleet.service.prometheus import render

RIGHT = "right-token-" + "0" * 32


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_render_is_valid_prometheus_text_with_help_and_escaped_labels() -> None:
    exposition = render(
        [
            Sample("agentfleet_queue_depth", 3, {"queue": 'we"ird\\q'}, help="Waiting.\nMessages."),
            Sample("agentfleet_items_total", 7, {"outcome": "succeeded"}, kind="counter", help="Items."),
            Sample("agentfleet_cost_usd_total", 0.125, kind="counter"),
        ]
    )
    text = exposition.decode()
    assert "# HELP agentfleet_queue_depth Waiting.\\nMessages." in text
    assert "# TYPE agentfleet_items_total counter" in text
    parsed = _families(text)
    assert parsed["agentfleet_queue_depth"] == [({"queue": 'we"ird\\q'}, 3.0)]
    assert parsed["agentfleet_items_total"] == [({"outcome": "succeeded"}, 7.0)]
    assert parsed["agentfleet_cost_usd_total"] == [({}, 0.125)]


def _collected(
    at: float, *, depth: int, workers: int, last_done: float | None, extra: Sequence[Sample] = ()
) -> Collected:
    samples = [
        Sample("agentfleet_queue_depth", depth, {"queue": "agentfleet.agents", "role": "agents"}),
        Sample("agentfleet_unacked_messages", 0),
        Sample("agentfleet_workers_active", workers),
        Sample("agentfleet_items_completed_last_minute", 0),
        *extra,
    ]
    if last_done is not None:
        samples.append(Sample("agentfleet_last_completion_timestamp_seconds", last_done))
    return Collected(samples=samples, errors={}, at=at)


def test_health_is_stale_only_after_the_configured_time_without_completions() -> None:
    clock = PendingClock()
    t0 = 1_000_000.0
    first = assess(_collected(t0, depth=5, workers=2, last_done=t0 - 3600), clock, stale_after_s=30)
    assert first["status"] == "ok", "work just became pending: not stale yet, whatever the last completion"
    later = assess(_collected(t0 + 31, depth=5, workers=2, last_done=t0 - 3600), clock, stale_after_s=30)
    assert later["status"] == "stale"
    assert "5 messages pending" in later["reasons"][0]
    progressing = assess(_collected(t0 + 40, depth=5, workers=2, last_done=t0 + 35), clock, stale_after_s=30)
    assert progressing["status"] == "ok", "a recent completion means progress"
    drained = assess(_collected(t0 + 200, depth=0, workers=2, last_done=t0 + 35), clock, stale_after_s=30)
    assert drained["status"] == "ok" and drained["seconds_since_last_completion"] == 165
    again = assess(_collected(t0 + 201, depth=1, workers=2, last_done=t0 + 35), clock, stale_after_s=30)
    assert again["status"] == "ok", "pending time restarts once the queues were seen empty"


def test_health_is_degraded_without_workers_or_with_an_open_circuit() -> None:
    none = assess(_collected(1.0, depth=0, workers=0, last_done=None), PendingClock(), stale_after_s=30)
    assert none["status"] == "degraded"
    assert none["reasons"] == ["no worker is running (none has a live heartbeat)"]
    assert none["dlq_depth"] is None and none["open_circuits"] is None, "not collected: null, not zero"
    circuit = [
        Sample("agentfleet_circuit_open", 1, {"downstream": "vendor-a.example"}),
        Sample("agentfleet_circuit_open", 0, {"downstream": "vendor-b.example"}),
        Sample("agentfleet_dlq_depth", 4, {"category": "rate_limited"}),
        Sample("agentfleet_dlq_depth", 2, {"category": "bad_request"}),
    ]
    opened = assess(
        _collected(1.0, depth=0, workers=1, last_done=None, extra=circuit), PendingClock(), stale_after_s=30
    )
    assert opened["status"] == "degraded"
    assert opened["open_circuits"] == ["vendor-a.example"]
    assert opened["dlq_depth"] == 6


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={
            "agents": f"{key_prefix}.agents",
            "fanin": f"{key_prefix}.fanin",
            "maintenance": f"{key_prefix}.m",
        },
        service={"token": RIGHT},
        fanouts={"echoes": {"task": "fleet_test_tasks.echo"}},
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_the_run_trigger_refuses_requests_without_the_bearer_token(client: TestClient) -> None:
    body = {"fanout": "echoes", "inputs": [{"n": 1}]}
    missing = client.post("/runs", json=body)
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert client.post("/runs", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/runs", json=body, headers={"Authorization": f"Basic {RIGHT}"}).status_code == 401
    assert client.get("/runs/abc").status_code == 401


def test_the_run_trigger_is_off_without_a_configured_token(redis_url: str, key_prefix: str) -> None:
    settings = load_settings(broker_url=redis_url, key_prefix=key_prefix, fanouts={"e": {"task": "t"}})
    with TestClient(create_app(settings)) as client:
        response = client.post("/runs", json={"fanout": "e"}, headers={"Authorization": "Bearer x"})
    assert response.status_code == 403
    assert "AGENTFLEET_SERVICE__TOKEN" in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"fanout": "nope"}, 404, "no fan-out named 'nope'"),
        ({"inputs": []}, 422, '{"fanout"'),
        ({"fanout": "echoes", "inputs": [1, 2]}, 422, "list of JSON objects"),
        ({"fanout": "echoes", "inputs": [{"n": 1, "_af": {}}]}, 422, "reserved key"),
    ],
)
def test_the_run_trigger_explains_a_bad_request(
    client: TestClient, body: dict[str, object], status: int, fragment: str
) -> None:
    response = client.post("/runs", json=body, headers={"Authorization": f"Bearer {RIGHT}"})
    assert response.status_code == status
    assert fragment in response.json()["error"]


def test_an_unknown_run_is_404(client: TestClient) -> None:
    response = client.get("/runs/doesnotexist", headers={"Authorization": f"Bearer {RIGHT}"})
    assert response.status_code == 404


def test_metrics_show_what_extra_collectors_add(settings: Settings) -> None:
    def dlq_and_slots(_: Sources) -> list[Sample]:
        return [
            Sample("agentfleet_dlq_depth", 3, {"category": "rate_limited"}, help="Dead letters."),
            Sample("agentfleet_limiter_slots_in_use", 2, {"downstream": "vendor-a.example"}, help="Leases."),
        ]

    def broken(_: Sources) -> list[Sample]:
        raise RuntimeError("source down")

    with TestClient(create_app(settings, collectors=[*DEFAULT_COLLECTORS, dlq_and_slots, broken])) as client:
        metrics = _families(client.get("/metrics").text)
        health = client.get("/health").json()
    assert ({"category": "rate_limited"}, 3.0) in metrics["agentfleet_dlq_depth"]
    assert ({"downstream": "vendor-a.example"}, 2.0) in metrics["agentfleet_limiter_slots_in_use"]
    assert health["dlq_depth"] == 3
    assert health["status"] == "degraded"
    assert "broken failed: RuntimeError: source down" in health["reasons"]


def test_health_answers_503_when_redis_is_unreachable() -> None:
    settings = load_settings(broker_url="redis://127.0.0.1:1/0")
    with TestClient(create_app(settings)) as client:
        health = client.get("/health")
    assert health.status_code == 503 and "Redis does not answer" in health.json()["reasons"][0]


def test_metrics_answer_200_with_agentfleet_up_0_when_redis_is_unreachable() -> None:
    settings = load_settings(broker_url="redis://127.0.0.1:1/0")
    with TestClient(create_app(settings)) as client:
        metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert _families(metrics.text)["agentfleet_up"] == [({}, 0.0)]


def test_metrics_and_health_read_the_dlq_the_limiter_and_the_circuits(
    redis_url: str, key_prefix: str
) -> None:
    from dlq_samples import sample_entry

    from agentfleet.dlq.store import DLQStore
    from agentfleet.ratelimit import Limiter
    from agentfleet.ratelimit.circuit import CircuitBreaker

    settings = load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={"agents": f"{key_prefix}.a", "fanin": f"{key_prefix}.f", "maintenance": f"{key_prefix}.m"},
        limits={"vendor-a.example": {"rate_per_s": 5, "burst": 5, "max_concurrency": 3}},
        dlq={"vendor_issue_failures": 2},
        service={"probe_timeout_s": 0.5},
    )
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    store = DLQStore.from_settings(settings, client)
    store.add(sample_entry(category="rate_limited"))
    store.add(sample_entry(category="rate_limited"))
    store.add(sample_entry(category="bad_request"))
    dead = Limiter.from_settings(settings, client, renewer=StoppedRenewer())
    dead.lease_ttl_s = 0.1
    dead.acquire("vendor-a.example")  # never renewed nor released: a worker that died holding it
    time.sleep(0.15)
    permits = [Limiter.from_settings(settings, client).acquire("vendor-a.example") for _ in range(2)]
    breaker = CircuitBreaker.from_settings(settings, client)
    for _ in range(3):
        breaker.record_failure("vendor-b.example")
    try:
        with TestClient(create_app(settings)) as service:
            metrics = _families(service.get("/metrics").text)
            health = service.get("/health").json()
    finally:
        for permit in permits:
            permit.release()
    assert sorted(metrics["agentfleet_dlq_depth"], key=str) == sorted(
        [({"category": "bad_request"}, 1.0), ({"category": "rate_limited"}, 2.0)], key=str
    )
    assert ({"downstream": "vendor-a.example"}, 2.0) in metrics["agentfleet_limiter_slots_in_use"]
    assert ({"downstream": "vendor-a.example"}, 3.0) in metrics["agentfleet_limiter_slots_max"]
    assert ({"downstream": "vendor-a.example"}, 1.0) in metrics["agentfleet_limiter_leases_reclaimed_total"]
    assert health["dlq_depth"] == 3
    assert health["open_circuits"] == ["vendor-b.example"]
    assert health["status"] == "degraded"
