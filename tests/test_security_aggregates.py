"""No caller names code, against a real worker: an aggregate is what the operator deployed,
and one that fails, exits or returns what cannot be stored is one recorded failure.

The attacks are the ones that worked before: an MCP client naming ``subprocess:run`` as the
aggregate of three echoed inputs ``sh``, ``-c``, ``id > FILE``; a fan-in message (and run
record) crafted in Redis naming it; aggregates raising ``SystemExit`` on a threads worker;
an aggregate whose result cannot be stored, which the reconciler used to send again and again.
The oracle is at the far end: the file the command would write, the aggregates' own call
counters in Redis, the run's record and the dead-letter queue.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import security_test_tasks as st
from mcp import ClientSession, StdioServerParameters, stdio_client
from ops_support import BIN, wait_for
from worker_env import cluster_env, own_queues

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.errors import RunError
from agentfleet.orchestration import Fleet
from agentfleet.protocol.messages import aggregate_signature

pytestmark = pytest.mark.slow

PREFIX = f"sec{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(redis_url: str) -> Iterator[LocalCluster]:
    """One threads worker with two slots: an aggregate that took a slot with it would show."""
    env = cluster_env(
        AGENTFLEET_TASK_MODULES="security_test_tasks",
        AGENTFLEET_DELIVERY__RECONCILE_INTERVAL_S="0.5",
        AGENTFLEET_DELIVERY__RECONCILE_GRACE_S="1",
    )
    settings = load_settings(key_prefix=PREFIX, queues=own_queues(PREFIX))
    with LocalCluster(
        workers=1, concurrency=2, pool="threads", broker_url=redis_url, env=env, settings=settings
    ) as running:
        yield running


@pytest.fixture
def fleet(cluster: LocalCluster) -> Fleet:
    return cluster.fleet()


def _calls(fleet: Fleet, name: str) -> int:
    return int(fleet.store.client.get(f"test:agg:{name}:{PREFIX}") or 0)


def _aggregate(fleet: Fleet, run_id: str, timeout_s: float = 30) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        lambda: fleet.store.get_aggregate(run_id), timeout_s=timeout_s, what=f"the aggregate of {run_id}"
    )
    return found


def _attack_inputs(target: Path) -> list[dict[str, str]]:
    return [{"text": "sh"}, {"text": "-c"}, {"text": f"id > {target}"}]


def _mcp_call(
    cluster: LocalCluster, arguments: dict[str, Any], *extra: str, env: dict[str, str] | None = None
) -> Any:
    """One ``fan_out_tasks`` call to ``agentfleet mcp`` over stdio, started as a client does."""
    wanted = {
        k: v for k, v in cluster.worker_env().items() if k.startswith(("AGENTFLEET_", "PYTHON", "PATH"))
    }
    params = StdioServerParameters(
        command=str(BIN / "agentfleet"), args=["mcp", *extra], env={**wanted, **(env or {})}
    )

    async def main() -> Any:
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await session.call_tool("fan_out_tasks", arguments)

    return anyio.run(main)


def test_an_mcp_client_naming_subprocess_run_as_aggregate_starts_nothing(
    cluster: LocalCluster, fleet: Fleet, tmp_path: Path
) -> None:
    target = tmp_path / "owned"
    before = {s.run_id for s in fleet.runs(100)}
    arguments = {
        "task": "security_test_tasks.say",
        "inputs": _attack_inputs(target),
        "aggregate": "subprocess:run",
    }
    result = _mcp_call(cluster, arguments, "--allow-task", "security_test_tasks.say")
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error and "not an allowed aggregate" in text, text
    assert {s.run_id for s in fleet.runs(100)} == before, "no run exists"
    time.sleep(2)
    assert not target.exists()


def test_an_mcp_client_may_name_an_aggregate_the_operator_allowed(
    cluster: LocalCluster, fleet: Fleet
) -> None:
    arguments = {
        "task": "security_test_tasks.say",
        "inputs": [{"text": "a"}, {"text": "b"}],
        "aggregate": "security_test_tasks:joined",
    }
    allow = {"AGENTFLEET_DISPATCH__ALLOW_AGGREGATES": "security_test_tasks:joined"}
    result = _mcp_call(cluster, arguments, "--allow-task", "security_test_tasks.say", env=allow)
    started = json.loads(result.content[0].text)
    assert not result.is_error, started
    assert fleet.get_run(started["run_id"]).result(timeout_s=30) == "a b"


def _dead_letters(fleet: Fleet, run_id: str) -> list[str]:
    """The categories of the run's dead letters, once there is one: the aggregate's outcome is
    stored before its dead letter is written, so a busy machine may show the first alone."""
    wait_for(lambda: fleet.dlq.list(run_id=run_id), timeout_s=30, what="the aggregate's dead letter")
    return [e.category for e in fleet.dlq.list(run_id=run_id)]


@pytest.mark.parametrize("recorded", ["subprocess:run", "security_test_tasks:joined"])
def test_a_fan_in_message_crafted_in_redis_runs_no_foreign_function(
    fleet: Fleet, tmp_path: Path, recorded: str
) -> None:
    """Someone who can write to Redis records ``recorded`` as a finished run's aggregate and
    sends the fan-in message naming ``subprocess:run``: the worker runs neither."""
    target = tmp_path / "owned"
    run = fleet.map(st.say, _attack_inputs(target))
    assert run.wait(timeout_s=30).succeeded == 3
    fleet.store.client.hset(fleet.store.run_key(run.id), "aggregate", recorded)
    aggregate_signature(fleet.app, run.id, "subprocess:run", fleet.settings.queues.fanin).apply_async()
    found = _aggregate(fleet, run.id)
    assert found["ok"] is False and "not allowed" in found["error"], found
    assert fleet.store.summary(run.id).aggregate == "failed"
    assert _dead_letters(fleet, run.id) == ["aggregate"]
    time.sleep(2)
    assert not target.exists()


def test_aggregates_raising_system_exit_fail_once_and_free_their_slots(fleet: Fleet) -> None:
    runs = [fleet.map(st.say, [{"text": f"x{n}"}], aggregate=st.exits) for n in range(5)]
    for run in runs:
        found = _aggregate(fleet, run.id)
        assert found["ok"] is False and "SystemExit" in found["error"]
        with pytest.raises(RunError, match="SystemExit"):
            run.result(timeout_s=5)
        assert _dead_letters(fleet, run.id) == ["aggregate"]
    assert _calls(fleet, "exits") == 5
    after = fleet.map(st.say, [{"text": str(n)} for n in range(20)])
    assert after.wait(timeout_s=60).succeeded == 20, "both slots still take work"


def test_an_unstorable_aggregate_fails_once_and_is_never_sent_again(fleet: Fleet) -> None:
    run = fleet.map(st.say, [{"text": "a"}], aggregate=st.unstorable)
    found = _aggregate(fleet, run.id)
    assert found["ok"] is False and "cannot be stored" in found["error"], found
    summary = fleet.store.summary(run.id)
    assert (summary.aggregate, summary.status) == ("failed", "finished")
    # Several reconciler passes, each past the grace period (0.5 s apart, 1 s of grace).
    time.sleep(4)
    assert _calls(fleet, "unstorable") == 1
    assert len(fleet.dlq.list(run_id=run.id)) == 1
    assert run.id not in fleet.store.active_runs()


def test_the_workers_refuse_an_aggregate_outside_their_task_modules(fleet: Fleet) -> None:
    """The Python API imports what it is given; the worker still runs only its own modules'
    functions and the operator's list (here ``subprocess.run``, a plain function elsewhere)."""
    run = fleet.map(st.say, [{"text": "true"}], aggregate="subprocess:run")
    found = _aggregate(fleet, run.id)
    assert found["ok"] is False and "not allowed" in found["error"]
    assert [e.category for e in fleet.dlq.list(run_id=run.id)] == ["aggregate"]
