"""Retries, dead letters, poison messages, requeue, circuit breakers, time limits and redaction,
against real worker processes (prefork: the pool enforces time limits and survives os._exit)
and a local HTTP server that answers as told.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import failure_test_tasks as ft
import pytest
import redis
from dlq_samples import sample_entry
from http_scripted import Reply, ScriptedServer
from redis_contents import key_contents
from typer.testing import CliRunner
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.cli.app import app as cli_app
from agentfleet.config import load_settings
from agentfleet.dlq import DeadLetter, DLQStore
from agentfleet.orchestration import Fleet, Run
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.runs import RunStore

pytestmark = pytest.mark.slow

COOLDOWN_S = 2.0
API_KEY = "sk-live-4f9a8b7c6d5e"
VENDOR_TOKEN = "vt-0c1d2e3f4a5b6c7d"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"tf{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def env(redis_url: str, prefix: str, server: ScriptedServer) -> dict[str, str]:
    return cluster_env(
        AGENTFLEET_TASK_MODULES="fleet_test_tasks,failure_test_tasks",
        AGENTFLEET_KEY_PREFIX=prefix,
        AGENTFLEET_RETRY__BACKOFF_BASE_S="0.1",
        AGENTFLEET_RETRY__BACKOFF_CAP_S="0.5",
        AGENTFLEET_DLQ__CIRCUIT_COOLDOWN_S=str(COOLDOWN_S),
        AGENTFLEET_DLQ__WEBHOOK_URL=server.url("/digest"),
        AGENTFLEET_DLQ__DIGEST_THRESHOLD="0",
        AGENTFLEET_CREDENTIALS=json.dumps({"vendor": {"env": "VENDOR_TOKEN", "domains": ["vendor.example"]}}),
        VENDOR_TOKEN=VENDOR_TOKEN,
    )


@pytest.fixture(scope="module")
def fcluster(redis_url: str, prefix: str, env: dict[str, str]) -> Iterator[LocalCluster]:
    settings = load_settings(key_prefix=prefix, dlq={"circuit_cooldown_s": COOLDOWN_S})
    with LocalCluster(
        workers=1, concurrency=4, pool="prefork", broker_url=redis_url, env=env, settings=settings
    ) as running:
        yield running


@pytest.fixture
def fleet(fcluster: LocalCluster) -> Fleet:
    return fcluster.fleet()


def _only_entry(fleet: Fleet, run: Run) -> DeadLetter:
    entries = fleet.dlq.list(run_id=run.id)
    assert len(entries) == 1, entries
    return entries[0]


def test_429_with_retry_after_waits_that_long_then_succeeds(fleet: Fleet, server: ScriptedServer) -> None:
    server.script("/r429", Reply(429, {"error": "slow down"}, {"retry-after": "2"}), Reply(200, {"ok": True}))
    run = fleet.map(ft.call_vendor, [{"url": server.url("/r429")}])
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 1
    first, second = server.hits("/r429")
    assert second.at - first.at >= 2.0
    assert run.outcomes()[0].attempts == 2
    assert fleet.dlq.list(run_id=run.id) == []


def test_400_is_one_attempt_then_a_bad_request_dead_letter(fleet: Fleet, server: ScriptedServer) -> None:
    server.script("/r400", Reply(400, {"error": "malformed"}))
    run = fleet.map(ft.call_vendor, [{"url": server.url("/r400")}])
    summary = run.wait(timeout_s=60)
    assert (summary.failed, summary.dead_lettered, summary.retries) == (1, 1, 0)
    assert len(server.hits("/r400")) == 1
    entry = _only_entry(fleet, run)
    assert (entry.category, entry.error_type, entry.status_code, entry.attempts) == (
        "bad_request",
        "BadRequest",
        400,
        1,
    )
    assert entry.inputs == {"url": server.url("/r400")}
    assert entry.task_name == ft.call_vendor.name and entry.task_id == f"{run.id}-0"
    assert "HTTPStatusError" in entry.traceback
    assert run.outcomes()[0].dead_lettered is True


def test_500_every_time_is_max_retries_plus_one_attempts_all_in_the_dead_letter(
    fleet: Fleet, server: ScriptedServer
) -> None:
    server.script("/r500", Reply(500, {"error": "boom"}))
    run = fleet.map(ft.call_vendor, [{"url": server.url("/r500")}])
    summary = run.wait(timeout_s=60)
    assert (summary.dead_lettered, summary.retries) == (1, 3)
    assert len(server.hits("/r500")) == 4
    entry = _only_entry(fleet, run)
    assert entry.attempts == 4 and entry.category == "downstream_error"
    assert [(e.attempt, e.error_type, e.status_code) for e in entry.errors] == [
        (n, "DownstreamError", 500) for n in (1, 2, 3, 4)
    ]
    assert entry.first_failure_at < entry.last_failure_at


def test_invalid_input_is_dead_lettered_at_once_with_the_validation_message(fleet: Fleet) -> None:
    # By name, dispatch checks the input's keys only: the worker validates the types.
    run = fleet.map("fleet_test_tasks.echo", [{"n": "not a number"}])
    summary = run.wait(timeout_s=60)
    assert (summary.dead_lettered, summary.retries) == (1, 0)
    entry = _only_entry(fleet, run)
    assert entry.category == "invalid_input" and entry.attempts == 1
    assert "n: Input should be a valid integer" in entry.error


def test_a_task_that_kills_its_worker_is_poison_while_50_healthy_tasks_succeed(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    token = uuid.uuid4().hex
    inputs = [{"n": i} for i in range(50)]
    inputs.insert(17, {"n": -1, "die": True, "token": token})
    run = fleet.map(ft.die_or_echo, inputs)
    summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.dead_lettered, summary.timed_out) == (50, 1, 0)
    entry = _only_entry(fleet, run)
    assert entry.category == "poison" and entry.index == 17
    assert 1 <= int(redis_client.get(f"test:count:deaths:{token}") or 0) <= 3


def _wait_for_status(fleet: Fleet, run_id: str, succeeded: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fleet.get_run(run_id).summary().succeeded >= succeeded:
            return
        time.sleep(0.2)


def test_requeue_after_the_downstream_is_fixed(
    fleet: Fleet, server: ScriptedServer, redis_url: str, prefix: str
) -> None:
    server.script("/flaky", Reply(400, {"error": "not yet"}))
    server.script("/ok", Reply(200, {"ok": True}))
    run = fleet.map(ft.call_vendor, [{"url": server.url("/flaky")}, {"url": server.url("/ok")}])
    assert run.wait(timeout_s=60).dead_lettered == 1
    entry = _only_entry(fleet, run)

    dry = CliRunner().invoke(
        cli_app,
        ["dlq", "requeue", entry.id, "--dry-run", "--json"],
        env={"AGENTFLEET_BROKER_URL": redis_url, "AGENTFLEET_KEY_PREFIX": prefix},
    )
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)[0]["action"] == "would requeue"
    time.sleep(1.0)
    assert fleet.dlq.get(entry.id) == entry
    assert len(server.hits("/flaky")) == 1
    assert (run.summary().dead_lettered, run.summary().redelivered) == (1, 0)

    server.script("/flaky", Reply(200, {"fixed": True}))
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "requeued"
    summary = fleet.get_run(run.id).wait(timeout_s=60)
    assert (summary.succeeded, summary.failed, summary.dead_lettered, summary.redelivered) == (2, 0, 0, 1)
    assert fleet.dlq.list(run_id=run.id) == []
    assert run.outcomes()[0].result == {"status": 200, "body": {"fixed": True}}


def test_requeue_of_a_pipeline_stage_reuses_the_stored_previous_result(
    fleet: Fleet, server: ScriptedServer, redis_client: redis.Redis
) -> None:
    tag = uuid.uuid4().hex
    server.script(f"/stage/{tag}", Reply(404, {"error": "missing"}))
    run = fleet.pipeline(
        [ft.first_stage, ft.second_stage, ft.third_stage], [{"tag": tag, "url": server.url(f"/stage/{tag}")}]
    )
    assert run.wait(timeout_s=60).dead_lettered == 1
    entry = _only_entry(fleet, run)
    names = [ft.first_stage.name, ft.second_stage.name, ft.third_stage.name]
    assert (entry.stage, entry.stages, entry.stage_tasks) == (1, 3, names)
    assert entry.inputs["prepared"] is True

    server.script(f"/stage/{tag}", Reply(200, {}))
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "requeued" and result.stages_sent == names[1:]
    summary = fleet.get_run(run.id).wait(timeout_s=60)
    assert (summary.succeeded, summary.redelivered) == (1, 1)
    assert run.outcomes()[0].result == {"tag": tag, "report": "status 200", "prepared": True}
    assert redis_client.get(f"test:count:first:{tag}") == "1"


def test_five_failures_open_the_circuit_and_later_tasks_wait_then_succeed(
    fleet: Fleet, server: ScriptedServer, fcluster: LocalCluster
) -> None:
    server.script("/vendor-b", *[Reply(503)] * 5, Reply(200))
    failing = fleet.map(ft.call_vendor_b, [{"url": server.url("/vendor-b")} for _ in range(5)])
    assert failing.wait(timeout_s=60).dead_lettered == 5
    breaker = CircuitBreaker.from_settings(fleet.settings, fleet.store.client)
    assert breaker.state(ft.VENDOR_B).state == "open"
    issues = {i.downstream: i for i in fleet.dlq.stats().vendor_issues}
    assert issues[ft.VENDOR_B].failures >= 5 and issues[ft.VENDOR_B].circuit == "open"

    waiting = fleet.map(ft.call_vendor_b, [{"url": server.url("/vendor-b")} for _ in range(5)])
    summary = waiting.wait(timeout_s=60)
    assert (summary.succeeded, summary.failed, summary.dead_lettered) == (5, 0, 0)
    assert summary.deferrals >= 5
    hits = server.hits("/vendor-b")
    assert len(hits) == 10, "no call went out while the circuit was open"
    assert hits[5].at - hits[4].at >= COOLDOWN_S - 0.5
    assert breaker.state(ft.VENDOR_B).state == "closed"


def test_a_soft_time_limit_is_a_retryable_timeout(fleet: Fleet) -> None:
    token = uuid.uuid4().hex
    run = fleet.map(ft.slow_first_time, [{"token": token}])
    summary = run.wait(timeout_s=60)
    assert (summary.succeeded, summary.retries) == (1, 1)
    outcome = run.outcomes()[0]
    assert outcome.result == {"executions": 2} and outcome.attempts == 2
    [error] = RunStore.from_settings(fleet.settings, fleet.store.client).attempt_errors(
        outcome.idempotency_key
    )
    assert error["error_type"] == "TaskTimeLimit" and "soft time limit of 1" in error["message"]


def test_a_hard_time_limit_is_retried_then_dead_lettered(fleet: Fleet) -> None:
    token = uuid.uuid4().hex
    run = fleet.map(
        ft.ignores_soft_limit, [{"token": token, "always": False}, {"token": token + "x", "always": True}]
    )
    summary = run.wait(timeout_s=60)
    assert (summary.succeeded, summary.dead_lettered) == (1, 1)
    assert run.outcomes()[0].attempts == 2
    entry = _only_entry(fleet, run)
    assert entry.index == 1 and entry.category == "time_limit" and entry.attempts == 2
    assert "hard time limit of 2" in entry.error


def test_secrets_never_reach_the_dead_letter(fleet: Fleet, redis_client: redis.Redis, prefix: str) -> None:
    run = fleet.map(ft.leaky, [{"api_key": API_KEY, "note": f"token was {VENDOR_TOKEN}"}])
    assert run.wait(timeout_s=60).dead_lettered == 1
    entry = _only_entry(fleet, run)
    assert entry.inputs == {"api_key": "[REDACTED]", "note": "token was [REDACTED]"}
    assert sorted(entry.redacted) == ["api_key", "note"]
    assert "RuntimeError" in entry.traceback and "[REDACTED]" in entry.traceback
    stored = [key_contents(redis_client, key) for key in redis_client.scan_iter(f"{prefix}:*")]
    assert len(stored) > 5
    assert not [s for s in stored if API_KEY in s or VENDOR_TOKEN in s]
    [result] = fleet.dlq.requeue([entry.id], dry_run=True)
    assert result.action == "skipped" and "redacted" in (result.reason or "")


def test_the_digest_task_runs_on_a_worker_and_posts_to_the_webhook(
    fleet: Fleet, fcluster: LocalCluster, server: ScriptedServer
) -> None:
    server.script("/digest", Reply(200, "ok"))
    DLQStore.from_settings(fleet.settings, fleet.store.client).add(sample_entry())
    before = len(server.hits("/digest"))
    fleet.app.send_task("agentfleet.maintenance.dlq_digest", queue=fleet.settings.queues.maintenance)
    hits = server.wait_for_hits("/digest", before + 1, timeout_s=60)
    assert len(hits) == before + 1
    payload = hits[-1].json()
    assert "dead letters" in payload["text"] and payload["blocks"]
