"""``agentfleet mcp`` over stdio, driven by the MCP SDK's own client, against a real cluster.

The client starts ``agentfleet mcp`` as a subprocess (as Claude Code or any MCP client
would); the cluster's workers run what it fans out, and the Anthropic SDK inside them talks
to the mock Messages API in this process.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from ops_support import BIN
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.mock_llm import MockMessagesServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture(scope="module")
def cluster(mock: MockMessagesServer) -> Iterator[LocalCluster]:
    env = cluster_env(AGENTFLEET_LLM__BASE_URL=mock.url)
    # One slot: items run one after another, so a budget stops the run at a known point.
    with LocalCluster(workers=1, concurrency=1, env=env) as running:
        yield running


Session = Callable[[ClientSession], Awaitable[Any]]


def with_session(cluster: LocalCluster, body: Session, *extra: str) -> Any:
    """Start ``agentfleet mcp`` the way an MCP client does and run ``body`` on its session."""
    env = {k: v for k, v in cluster.worker_env().items() if k.startswith(("AGENTFLEET_", "PYTHON", "PATH"))}
    params = StdioServerParameters(command=str(BIN / "agentfleet"), args=["mcp", *extra], env=env)

    async def main() -> Any:
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await body(session)

    return anyio.run(main)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, text
    found: dict[str, Any] = json.loads(text)
    return found


async def until_finished(session: ClientSession, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = await call(session, "run_status", run_id=run_id)
        if status["status"] != "running" or time.monotonic() > deadline:
            return status
        await anyio.sleep(0.3)


def test_the_server_offers_its_tools_with_their_schemas(cluster: LocalCluster) -> None:
    async def body(session: ClientSession) -> Any:
        return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in with_session(cluster, body)}
    assert set(tools) == {
        "fan_out_tasks",
        "run_status",
        "run_results",
        "dlq_stats",
        "list_approvals",
        "decide_approval",
    }
    schema = tools["fan_out_tasks"].input_schema
    assert schema["required"] == ["task", "inputs"]
    assert {"max_in_flight", "budget_usd", "aggregate", "name"} <= set(schema["properties"])


def test_a_fan_out_runs_on_the_cluster_and_its_results_come_back(cluster: LocalCluster) -> None:
    async def body(session: ClientSession) -> Any:
        started = await call(
            session,
            "fan_out_tasks",
            task="fleet_test_tasks.maybe_fail",
            inputs=[{"n": n, "fail": n == 2} for n in range(4)],
            name="from-mcp",
            max_in_flight=2,
        )
        status = await until_finished(session, started["run_id"])
        results = await call(session, "run_results", run_id=started["run_id"])
        failed = await call(session, "run_results", run_id=started["run_id"], failed_only=True)
        stats = await call(session, "dlq_stats")
        return started, status, results, failed, stats

    started, status, results, failed, stats = with_session(cluster, body)
    assert started["tasks"] == 4 and started["name"] == "from-mcp"
    assert (status["status"], status["succeeded"], status["dead_lettered"]) == ("finished", 3, 1)
    assert [o["result"]["n"] for o in results["outcomes"] if o["ok"]] == [0, 1, 3]
    assert [(o["index"], o["error_type"]) for o in failed["outcomes"]] == [(2, "PermanentError")]
    assert stats["depth"] >= 1 and stats["by_category"]


def test_a_runs_budget_stops_its_items_once_spent(cluster: LocalCluster, mock: MockMessagesServer) -> None:
    mock.reset()

    async def body(session: ClientSession) -> Any:
        started = await call(
            session,
            "fan_out_tasks",
            task="agentfleet.agent",
            inputs=[{"prompt": f"LONG 40 item {n}", "max_turns": 1} for n in range(6)],
            budget_usd=0.000001,
        )
        return await until_finished(session, started["run_id"])

    status = with_session(cluster, body)
    assert status["budget_usd"] == 0.000001
    assert status["spent_usd"] > 0 and list(status["spent_by_downstream"]) == ["anthropic:claude-haiku-4-5"]
    assert status["succeeded"] == 1, "the first item spent the whole budget; none after it ran"
    assert len(mock.requests) == 1


def test_a_task_outside_the_allowlist_is_refused_with_a_clear_error(cluster: LocalCluster) -> None:
    async def body(session: ClientSession) -> Any:
        return await session.call_tool(
            "fan_out_tasks", {"task": "fleet_test_tasks.echo", "inputs": [{"n": 1}]}
        )

    result = with_session(cluster, body, "--allow-task", "fleet_test_tasks.maybe_fail")
    assert result.is_error
    assert "not allowed here; allowed: fleet_test_tasks.maybe_fail" in result.content[0].text
