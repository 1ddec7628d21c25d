"""Failures look like failures to Celery tooling: counted at the far end, by Flower's own event
state fed with the events real workers send, and by Celery's result backend."""

from __future__ import annotations

import time
from collections.abc import Iterator

import fleet_test_tasks as tt
import pytest
import redis
from celery import Celery
from event_tap import EventTap

from agentfleet import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def tap(cluster: LocalCluster) -> Iterator[EventTap]:
    with EventTap(cluster.fleet().app) as running:
        yield running


def _settle(tap: EventTap, event_type: str, at_least: int, ids: set[str], timeout_s: float = 20.0) -> int:
    """Events of ``event_type`` about ``ids`` once ``at_least`` arrived (and a second more)."""
    deadline = time.monotonic() + timeout_s
    while tap.counted_of(event_type, ids) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # and nothing more arrives
    return tap.counted_of(event_type, ids)


def _final_state(app: Celery, task_id: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        state = str(app.AsyncResult(task_id).state)
        if state in ("SUCCESS", "FAILURE") or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def test_flowers_failed_count_equals_the_dead_letters_of_a_run(cluster: LocalCluster, tap: EventTap) -> None:
    fleet = cluster.fleet()
    inputs = [{"n": i, "fail": i % 5 == 0} for i in range(20)]
    run = fleet.map(tt.maybe_fail, inputs)
    summary = run.wait(timeout_s=60)
    dead = fleet.dlq.list(run_id=run.id)
    assert summary.dead_lettered == len(dead) == 4
    ids = {o.task_id for o in run.outcomes()}
    assert _settle(tap, "task-failed", 4, ids) == 4
    assert _settle(tap, "task-succeeded", 16, ids) == 16
    # Flower's own count agrees (its state holds only this test's events so far).
    assert tap.counted("task-failed") >= 4
    failed_ids = {o.task_id for o in run.outcomes() if not o.ok}
    assert {tap.state_of(task_id) for task_id in failed_ids} == {"FAILURE"}


def test_a_dead_lettered_item_is_failure_in_the_result_backend_and_a_success_writes_nothing(
    cluster: LocalCluster,
) -> None:
    run = cluster.fleet().map(tt.maybe_fail, [{"n": 1, "fail": True}, {"n": 2}])
    run.wait(timeout_s=60)
    failed, ok = sorted(run.outcomes(), key=lambda o: o.ok)
    app = cluster.fleet().app
    # The worker stores Celery's result just after the item's outcome.
    assert _final_state(app, failed.task_id) == "FAILURE"
    assert type(app.AsyncResult(failed.task_id).result).__name__ == "PermanentError"
    assert "item 1 is broken" in str(app.AsyncResult(failed.task_id).result)
    # A success's outcome is in the run store alone: Celery's backend gets no write for it.
    assert ok.ok and ok.result["n"] == 2
    assert app.AsyncResult(ok.task_id).state == "PENDING"


def test_deferrals_are_neither_failures_nor_retries(cluster: LocalCluster, tap: EventTap) -> None:
    fleet = cluster.fleet()
    run = fleet.map(tt.sleepy, [{"n": i, "sleep_s": 0.4} for i in range(4)], max_in_flight=1)
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 4
    assert summary.deferrals > 0, "items waited for the pool's one slot"
    ids = {o.task_id for o in run.outcomes()}
    assert _settle(tap, "task-deferred", summary.deferrals, ids) == summary.deferrals
    assert tap.counted_of("task-failed", ids) == 0
    assert tap.counted_of("task-retried", ids) == 0
    assert {tap.state_of(o.task_id) for o in run.outcomes()} == {"SUCCESS"}


def test_a_failed_pipeline_stage_is_the_one_failure_and_fan_in_still_runs(
    cluster: LocalCluster, tap: EventTap
) -> None:
    urls = [{"url": "https://ok.example/page"}, {"url": "https://broken.example"}]
    fleet = cluster.fleet()
    run = fleet.pipeline([tt.stage_fetch, tt.stage_extract, tt.stage_report], urls)
    assert (run.wait(timeout_s=60).succeeded, len(fleet.dlq.list(run_id=run.id))) == (1, 1)
    dead = fleet.dlq.list(run_id=run.id)
    assert _settle(tap, "task-failed", 1, {entry.task_id for entry in dead}) == 1
    mapped = fleet.map(tt.maybe_fail, [{"n": 1, "fail": True}, {"n": 2}], aggregate=tt.count_results)
    mapped.wait(timeout_s=60)
    assert mapped.result(timeout_s=30) == 1


def test_a_threads_worker_publishes_its_task_events_in_batches(
    cluster: LocalCluster, tap: EventTap, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    before = int(client.info("commandstats")["cmdstat_publish"]["calls"])
    run = cluster.fleet().map(tt.echo, [{"n": n} for n in range(100)])
    assert run.wait(timeout_s=60).succeeded == 100
    # Every event still arrives (within the half-second batches)...
    assert _settle(tap, "task-succeeded", 100, {f"{run.id}-{n}" for n in range(100)}) == 100
    publishes = int(client.info("commandstats")["cmdstat_publish"]["calls"]) - before
    client.close()
    # ... in a few publishes: Celery's event loop alone sends about one per item (300 events).
    assert publishes < 40, publishes
    # Flower shows each result as the outcome's repr (``result_repr``'s quick one).
    with tap.lock:
        shown = tap.flower.tasks[f"{run.id}-7"].result
    assert shown.startswith(f"{{'task_id': '{run.id}-7', 'run_id': '{run.id}'") and "'ok': True" in shown
