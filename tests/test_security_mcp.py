"""The MCP server sees only its own and takes only sane numbers (a real Redis, no workers)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from dlq_samples import sample_entry
from starlette.testclient import TestClient

from agentfleet.config import Settings, load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.service.mcp_server import MCP_PATH, FleetTools, build_server, http_app

TOKEN = "mcp-" + "0123456789abcdef" * 2
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={"agents": f"{key_prefix}.a", "fanin": f"{key_prefix}.f", "maintenance": f"{key_prefix}.m"},
        service={"token": TOKEN},
        dispatch={"require_workers": False},
        budgets={"run_usd": 5.0},
    )


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


@pytest.fixture
def tools(fleet: Fleet) -> FleetTools:
    return FleetTools(fleet, allow_tasks=["t.allowed"])


def _run_of(fleet: Fleet, task: str) -> str:
    run_id = uuid.uuid4().hex[:16]
    fleet.store.create_run(
        run_id, name="r", kind="map", task=task, items=[(f"{run_id}-0", f"{run_id}:0:x", "0")]
    )
    return run_id


@pytest.mark.parametrize("budget", [math.inf, float("1e309"), math.nan, -1.0, 0.0])
def test_a_budget_that_is_not_a_finite_positive_amount_is_refused(tools: FleetTools, budget: float) -> None:
    with pytest.raises(DispatchError, match="budget_usd"):
        tools.fan_out("t.allowed", [{"n": 1}], budget_usd=budget)
    assert tools.fleet.runs() == []


def test_a_caller_cannot_raise_the_operators_run_budget(tools: FleetTools) -> None:
    with pytest.raises(DispatchError, match="at most 5"):
        tools.fan_out("t.allowed", [{"n": 1}], budget_usd=50.0)
    started = tools.fan_out("t.allowed", [{"n": 1}], budget_usd=2.0)
    assert started["budget_usd"] == 2.0


def test_the_operator_may_let_callers_go_above_the_run_budget(fleet: Fleet, settings: Settings) -> None:
    raised = settings.model_copy(
        update={"service": settings.service.model_copy(update={"max_run_usd": 100.0})}
    )
    with Fleet(raised) as wider:
        assert FleetTools(wider, allow_tasks=["t.allowed"]).fan_out("t.allowed", [{"n": 1}], budget_usd=50.0)


def test_the_tool_schema_refuses_infinity_before_the_tool_runs(tools: FleetTools) -> None:
    server = build_server(tools)

    async def call() -> Any:
        return await server.call_tool(
            "fan_out_tasks", {"task": "t.allowed", "inputs": [{"n": 1}], "budget_usd": math.inf}
        )

    with pytest.raises(Exception, match="finite"):
        anyio.run(call)
    assert tools.fleet.runs() == []


def test_status_and_results_answer_only_for_runs_of_allowed_tasks(tools: FleetTools, fleet: Fleet) -> None:
    mine, theirs = _run_of(fleet, "t.allowed"), _run_of(fleet, "t.payroll")
    assert tools.status(mine)["run_id"] == mine
    assert tools.results(mine)["run_id"] == mine
    for read in (tools.status, tools.results):
        with pytest.raises(DispatchError, match="no run"):
            read(theirs)
    # A prefix finds nothing: a caller cannot enumerate run ids.
    with pytest.raises(DispatchError, match="no run"):
        tools.status(mine[:6])


def test_dlq_stats_count_only_dead_letters_of_allowed_tasks(tools: FleetTools, fleet: Fleet) -> None:
    fleet.dlq.store.add(sample_entry(task_name="t.allowed", error="allowed broke"))
    for n in range(3):
        fleet.dlq.store.add(sample_entry(task_name="t.payroll", error=f"payroll of ceo broke {n}"))
    stats = tools.dlq_stats()
    assert stats["depth"] == 1
    assert "payroll" not in str(stats)


def _mcp_app(tools: FleetTools) -> Any:
    server = build_server(tools, http_base_url="http://127.0.0.1:8766")
    return http_app(server, host="127.0.0.1", tools=tools)


def test_guessing_the_mcp_bearer_over_http_is_throttled(tools: FleetTools) -> None:
    wrong = {**HEADERS, "Authorization": "Bearer " + "9" * 40}
    with TestClient(_mcp_app(tools), base_url="http://127.0.0.1:8766") as client:
        codes = [client.post(MCP_PATH, json=INITIALIZE, headers=wrong).status_code for _ in range(8)]
        assert codes[:6] == [401] * 6 and codes[6:] == [429, 429], codes
    # Another MCP server process on the same Redis, reached from another address.
    with TestClient(_mcp_app(tools), base_url="http://127.0.0.1:8766", client=("10.1.1.1", 1)) as other:
        right = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
        assert other.post(MCP_PATH, json=INITIALIZE, headers=right).status_code == 200
