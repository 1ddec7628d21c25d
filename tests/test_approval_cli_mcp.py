"""Deciding from the command line (``agentfleet approvals``, the real binary) and from an MCP
client (``agentfleet mcp`` over stdio, driven by the SDK's client). The oracle is the store."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from approval_support import pending
from mcp import ClientSession, StdioServerParameters, stdio_client
from ops_support import BIN
from typer.testing import CliRunner, Result

from agentfleet.approvals import ApprovalStore
from agentfleet.cli.app import app
from agentfleet.config import Settings, load_settings

pytestmark = pytest.mark.slow


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(broker_url=redis_url, key_prefix=key_prefix)


@pytest.fixture
def store(settings: Settings) -> Iterator[ApprovalStore]:
    yield ApprovalStore.from_settings(settings)


@pytest.fixture
def env(redis_url: str, key_prefix: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")},
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": key_prefix,
        "COLUMNS": "80",
    }


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "agentfleet"), "approvals", *args], env=env, capture_output=True, text=True, timeout=60
    )


def _in_process(env: dict[str, str], *args: str) -> Result:
    """The command run in this process (faster than the binary; user errors need the binary)."""
    return CliRunner().invoke(app, ["approvals", *args], env=env, terminal_width=80)


# The command line -----------------------------------------------------------------------------


def test_list_shows_pending_approvals_as_a_table_and_as_json(
    env: dict[str, str], store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings, name="rotate the keys", details={"env": "prod"})
    table = _in_process(env, "list")
    assert table.exit_code == 0 and asked.id in table.stdout and "rotate the keys" in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())
    listed = json.loads(_in_process(env, "list", "--json", "--run", asked.run_id).stdout)
    assert [a["id"] for a in listed] == [asked.id] and listed[0]["details"] == {"env": "prod"}
    assert json.loads(_in_process(env, "list", "--json", "--status", "approved").stdout) == []
    wrong = _cli(env, "list", "--status", "maybe")
    assert wrong.returncode == 2 and "pending" in wrong.stderr and "Traceback" not in wrong.stderr


def test_approve_by_id_prefix_with_data_then_a_second_decision_exits_1_saying_who(
    env: dict[str, str], store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings)
    done = _in_process(env, "approve", asked.id[:12], "-m", "go", "--data", '{"replicas": 2}', "--by", "erin")
    assert done.exit_code == 0, done.output
    assert "approved" in done.stdout and "erin" in done.stdout
    decision = store.get(asked.id).decision
    assert decision is not None and decision.approved and decision.by == "erin"
    assert decision.data == {"replicas": 2} and decision.comment == "go"
    again = _in_process(env, "reject", asked.id, "--comment", "no")
    assert again.exit_code == 1
    assert "already approved by erin" in again.stderr and "first decision stands" in again.stderr
    assert store.get(asked.id).decision == decision


def test_unknown_ids_and_bad_data_are_one_line_and_exit_2(
    env: dict[str, str], store: ApprovalStore, settings: Settings
) -> None:
    missing = _cli(env, "reject", "ap_nothing")
    assert missing.returncode == 2 and "no approval ap_nothing" in missing.stderr
    asked = pending(store, settings)
    bad = _cli(env, "approve", asked.id, "--data", "{not json")
    assert bad.returncode == 2 and "--data is not JSON" in bad.stderr and "Traceback" not in bad.stderr
    assert store.get(asked.id).status == "pending"


def test_a_decision_after_the_timeout_is_refused_with_exit_1(
    env: dict[str, str], store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings, timeout_s=0.2)
    anyio.run(anyio.sleep, 0.6)
    late = _in_process(env, "approve", asked.id)
    assert late.exit_code == 1 and "timed out" in late.stderr
    assert store.get(asked.id).status == "timed_out"


# MCP ------------------------------------------------------------------------------------------


def _mcp(env: dict[str, str], body: Any, *extra: str) -> Any:
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


async def _call(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any]:
    result = await session.call_tool(tool, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    return bool(result.is_error), (text if result.is_error else json.loads(text))


def test_mcp_lists_and_decides_only_the_allowed_tasks_approvals(
    env: dict[str, str], store: ApprovalStore, settings: Settings
) -> None:
    mine = pending(store, settings, task_name="tests.allowed")
    theirs = pending(store, settings, task_name="tests.other")

    async def body(session: ClientSession) -> dict[str, Any]:
        listed = await _call(session, "list_approvals")
        hidden = await _call(session, "decide_approval", approval_id=theirs.id, approved=True)
        decided = await _call(session, "decide_approval", approval_id=mine.id, approved=False, comment="no")
        again = await _call(session, "decide_approval", approval_id=mine.id, approved=True)
        return {"listed": listed, "hidden": hidden, "decided": decided, "again": again}

    seen = _mcp(env, body, "--allow-task", "tests.allowed")
    assert [a["id"] for a in seen["listed"][1]["approvals"]] == [mine.id]
    assert seen["hidden"][0] and f"no approval {theirs.id}" in seen["hidden"][1]
    assert seen["decided"][1]["decided"] and seen["decided"][1]["approval"]["status"] == "rejected"
    assert not seen["again"][1]["decided"] and seen["again"][1]["approval"]["decision"]["by"] == "mcp"
    assert store.get(theirs.id).status == "pending"
    decision = store.get(mine.id).decision
    assert decision is not None and not decision.approved and decision.comment == "no"
