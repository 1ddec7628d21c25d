"""No caller names code: a function name from outside the process resolves only from what the
operator configured, and nothing else is imported; requeue sends only fleet tasks the workers
register. (The same against a real worker: ``test_security_aggregates.py``.)"""

from __future__ import annotations

import base64
import json
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from dlq_samples import dead_item, sample_entry

from agentfleet.callables import outside_aggregate, worker_aggregate
from agentfleet.config import Settings, load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry
from agentfleet.service.mcp_server import FleetTools

FOREIGN = ["subprocess:run", "os:system", "builtins:set", "sys:exit", "security_import_trap:anything"]


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={"agents": f"{key_prefix}.a", "fanin": f"{key_prefix}.f", "maintenance": f"{key_prefix}.m"},
        dispatch={"allow_aggregates": ["fleet_test_tasks:count_results"]},
        fanouts={"nightly": {"task": "t.echo", "aggregate": "fleet_test_tasks.sum_n"}},
        task_modules=["fleet_test_tasks"],
    )


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


@pytest.fixture(autouse=True)
def _no_trap() -> Iterator[None]:
    sys.modules.pop("security_import_trap", None)
    yield
    sys.modules.pop("security_import_trap", None)


def _published(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]


@pytest.mark.parametrize("path", FOREIGN)
def test_an_mcp_caller_cannot_name_a_function_the_operator_did_not_allow(fleet: Fleet, path: str) -> None:
    tools = FleetTools(fleet, allow_tasks=["security_test_tasks.say"])
    inputs = [{"text": "sh"}, {"text": "-c"}, {"text": "id > /tmp/x"}]
    with pytest.raises(DispatchError, match="not an allowed aggregate"):
        tools.fan_out("security_test_tasks.say", inputs, aggregate=path)
    assert fleet.runs() == []
    assert "security_import_trap" not in sys.modules, "refused without importing anything"


@pytest.mark.parametrize(
    ("path", "canonical"),
    [
        ("agentfleet.merge:concat", "agentfleet.merge:concat"),
        ("agentfleet.merge.merge_findings", "agentfleet.merge:merge_findings"),
        ("fleet_test_tasks:sum_n", "fleet_test_tasks:sum_n"),  # a named fan-out's aggregate
        ("fleet_test_tasks.count_results", "fleet_test_tasks:count_results"),  # the operator's list
    ],
)
def test_the_operators_aggregates_are_allowed_to_outside_callers(
    settings: Settings, path: str, canonical: str
) -> None:
    assert outside_aggregate(settings, path) == canonical


def test_an_outside_name_is_refused_before_anything_is_imported(settings: Settings) -> None:
    with pytest.raises(DispatchError, match="AGENTFLEET_DISPATCH__ALLOW_AGGREGATES"):
        outside_aggregate(settings, "security_import_trap:anything")
    assert "security_import_trap" not in sys.modules


@pytest.mark.parametrize("path", ["sys:exit", "builtins:set", "os:system", "json:JSONDecoder"])
def test_the_python_api_refuses_what_is_not_a_plain_function_at_dispatch(fleet: Fleet, path: str) -> None:
    with pytest.raises(DispatchError, match="defined with def"):
        fleet.map("t.echo", [{"n": 1}], aggregate=path)
    assert fleet.runs() == []


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("fleet_test_tasks:sum_n", True),  # defined in a task module
        ("agentfleet.merge:concat", True),
        ("subprocess:run", False),  # a plain function, outside the task modules
        ("fleet_test_tasks:time.sleep", False),  # reached through a task module
        ("fleet_test_tasks:fleet_task", False),  # imported into a task module, defined elsewhere
        ("security_import_trap:anything", False),
    ],
)
def test_a_worker_runs_only_its_task_modules_functions_and_the_operators_list(
    settings: Settings, path: str, allowed: bool
) -> None:
    if allowed:
        assert callable(worker_aggregate(settings, path))
    else:
        with pytest.raises(DispatchError, match="not allowed"):
            worker_aggregate(settings, path)
    assert "security_import_trap" not in sys.modules


# Requeue ---------------------------------------------------------------------------------


def _heartbeat(settings: Settings, fleet: Fleet, **tasks: TaskInfo) -> None:
    record = WorkerRecord(node=f"w{uuid.uuid4().hex[:6]}@test", queues=(settings.queues.agents,), tasks=tasks)
    WorkerRegistry.from_settings(settings, fleet.store.client).beat(record)


def _crafted_aggregate_entry(fleet: Fleet) -> Any:
    run_id = uuid.uuid4().hex[:16]
    entry = sample_entry(
        run_id=run_id,
        task_name="agentfleet.aggregate",
        inputs={"run_id": run_id, "fn": "subprocess:run"},
        category="downstream_error",
    )
    fleet.store.create_run(
        run_id, name="t", kind="map", task="t.echo", items=[(entry.task_id, entry.idempotency_key, "0")]
    )
    fleet.dlq.store.add(entry)
    return entry


def test_a_dead_letter_crafted_to_run_the_fan_in_task_is_neither_previewed_nor_requeued(
    settings: Settings, fleet: Fleet, redis_client: redis.Redis
) -> None:
    _heartbeat(
        settings, fleet, **{"t.echo": TaskInfo(fleet=True), "agentfleet.aggregate": TaskInfo(fleet=False)}
    )
    entry = _crafted_aggregate_entry(fleet)
    [preview] = fleet.dlq.requeue([entry.id], dry_run=True)
    assert preview.action == "skipped" and "not a fleet task" in (preview.reason or "")
    [done] = fleet.dlq.requeue([entry.id])
    assert done.action == "skipped"
    assert _published(redis_client, settings.queues.agents) == []
    assert fleet.dlq.store.get(entry.id) is not None, "the entry stays for a person to look at"


def test_a_dead_letter_of_a_task_no_live_worker_registers_is_not_requeued(
    settings: Settings, fleet: Fleet, redis_client: redis.Redis
) -> None:
    _heartbeat(settings, fleet, **{"t.other": TaskInfo(fleet=True)})
    entry = dead_item(fleet, registered=False, task_name="t.gone")
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "skipped" and "no live worker" in (result.reason or "")
    assert _published(redis_client, settings.queues.agents) == []


def test_a_dead_letter_of_a_registered_fleet_task_is_requeued(
    settings: Settings, fleet: Fleet, redis_client: redis.Redis
) -> None:
    _heartbeat(settings, fleet, **{"tests.fetch": TaskInfo(fleet=True)})
    entry = dead_item(fleet)
    [result] = fleet.dlq.requeue([entry.id])
    assert result.action == "requeued"
    [message] = _published(redis_client, settings.queues.agents)
    assert message["headers"]["task"] == "tests.fetch"
    _, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert kwargs["url"] == entry.inputs["url"]
