"""Requeue without workers: what it publishes, what it changes in the run, and what a dry run does not."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from celery.canvas import Signature
from dlq_samples import dead_item

from agentfleet.config import load_settings
from agentfleet.dlq import PreviousStage
from agentfleet.orchestration import Fleet


@pytest.fixture
def fleet(redis_url: str, key_prefix: str) -> Fleet:
    # A queue no worker listens to, so the published message stays there to be read.
    settings = load_settings(
        broker_url=redis_url, key_prefix=key_prefix, queues={"agents": f"q-{key_prefix}"}
    )
    return Fleet(settings)


def _published(client: redis.Redis, queue: str) -> list[tuple[dict[str, Any], list[Any]]]:
    found = []
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        args, kwargs, embed = json.loads(base64.b64decode(message["body"]))
        found.append((message["headers"], [args, kwargs, embed]))
    return found


def test_requeue_publishes_the_same_key_with_a_fresh_budget_then_removes_the_entry(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    entry = dead_item(fleet)
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "requeued"
    [(headers, (args, kwargs, _))] = _published(redis_client, fleet.settings.queues.agents)
    assert (headers["task"], headers["id"]) == (entry.task_name, entry.task_id)
    meta = kwargs.pop("_af")
    assert kwargs == entry.inputs and args == []
    assert (meta["key"], meta.get("attempt", 0), meta["requeues"]) == (entry.idempotency_key, 0, 1)
    assert fleet.dlq.store.get(entry.id) is None
    summary = fleet.store.summary(entry.run_id)
    assert (summary.failed, summary.dead_lettered, summary.redelivered, summary.status) == (
        0,
        0,
        1,
        "running",
    )
    assert fleet.store.stored_outcomes([entry.idempotency_key]) == [None]


def test_a_dry_run_changes_nothing(fleet: Fleet, redis_client: redis.Redis) -> None:
    entry = dead_item(fleet)
    [result] = fleet.dlq.requeue([entry.id], dry_run=True)
    assert result.action == "would requeue" and result.stages_sent == [entry.task_name]
    assert fleet.dlq.store.get(entry.id) == entry
    assert _published(redis_client, fleet.settings.queues.agents) == []
    summary = fleet.store.summary(entry.run_id)
    assert (summary.failed, summary.dead_lettered, summary.redelivered) == (1, 1, 0)


def test_when_the_broker_refuses_the_entry_and_the_outcome_stay(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = dead_item(fleet)

    def refuse(self: Signature, *args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(Signature, "apply_async", refuse)
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "failed" and "broker down" in (result.reason or "")
    assert fleet.dlq.store.get(entry.id) == entry
    summary = fleet.store.summary(entry.run_id)
    assert (summary.failed, summary.dead_lettered, summary.redelivered, summary.status) == (
        1,
        1,
        0,
        "finished",
    )


def test_a_later_pipeline_stage_is_sent_with_the_previous_result_and_the_rest_of_the_chain(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    entry = dead_item(
        fleet,
        stage=1,
        stages=3,
        stage_tasks=["tests.fetch", "tests.extract", "tests.report"],
        task_name="tests.extract",
        inputs={"url": "https://a.example", "text": "hello"},
        previous=PreviousStage(attempts=2, duration_s=1.5, cost_usd=0.01),
    )
    [result] = fleet.dlq.requeue([entry.id])
    assert result.stages_sent == ["tests.extract", "tests.report"]
    [(headers, (args, kwargs, embed))] = _published(redis_client, fleet.settings.queues.agents)
    assert headers["task"] == "tests.extract"
    [previous] = args
    assert (previous["ok"], previous["result"], previous["attempts"]) == (True, entry.inputs, 2)
    assert kwargs["_af"]["stage"] == 1 and kwargs["_af"]["requeues"] == 1
    [later] = embed["chain"]
    assert later["task"] == "tests.report" and later["options"]["task_id"] == f"{entry.run_id}-0-s2"


def test_entries_with_redacted_input_are_skipped(fleet: Fleet) -> None:
    entry = dead_item(fleet, inputs={"api_key": "[REDACTED]"}, redacted=["api_key"])
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "skipped" and "api_key" in (result.reason or "")
    assert fleet.dlq.store.get(entry.id) == entry


def test_a_pipeline_entry_without_its_stage_names_is_skipped(fleet: Fleet) -> None:
    entry = dead_item(fleet, stage=0, stages=2, stage_tasks=[])
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "skipped" and "stage names" in (result.reason or "")
