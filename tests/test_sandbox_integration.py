"""Sandboxed fleet tasks end to end: a real Redis, a real Celery worker, real bubblewrap."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sandbox_test_tasks as st
from egress_support import Echo, echo_server
from sandbox_support import wait_gone
from worker_env import cluster_env, own_queues

from agentfleet import LocalCluster
from agentfleet.config import load_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    root = Path(f"/tmp/af-sbx-template-{uuid.uuid4().hex[:8]}")
    root.mkdir()
    (root / "seed.txt").write_text("from the template\n")
    yield root
    for entry in root.iterdir():
        entry.unlink()
    root.rmdir()


@pytest.fixture(scope="module")
def echo() -> Iterator[Echo]:
    with echo_server() as server:
        yield server


@pytest.fixture(scope="module")
def scluster(redis_url: str, template: Path, echo: Echo) -> Iterator[LocalCluster]:
    env = cluster_env(
        SBX_TEST_ECHO_PORT=str(echo.port),
        AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS='["127.0.0.1"]',
        AGENTFLEET_TASK_MODULES="sandbox_test_tasks",
        AGENTFLEET_SANDBOX__WARM="1",
        AGENTFLEET_SANDBOX__TEMPLATE=str(template),
        AGENTFLEET_COMMAND__ENABLED="true",
    )
    settings = load_settings(queues=own_queues(f"sbx{uuid.uuid4().hex[:6]}"))
    with LocalCluster(
        workers=1, concurrency=2, pool="threads", broker_url=redis_url, env=env, settings=settings
    ) as running:
        yield running


def test_items_run_in_sandboxes_made_from_the_template_and_see_nothing_of_each_other(
    scluster: LocalCluster,
) -> None:
    scripts = [{"script": f"cat seed.txt; id -u; echo {i} > mine; ls"} for i in range(4)]
    run = scluster.fleet().map(st.sandboxed_sh, scripts)
    assert run.wait(timeout_s=120).succeeded == 4
    for outcome in run.outcomes():
        result = outcome.result
        assert result["before"] == ["seed.txt"], "a fresh or reset workspace: only the template"
        assert result["exit_code"] == 0
        assert result["stdout"].splitlines()[:2] == ["from the template", "65534"]
        assert result["owner"] >= 200_000
        assert wait_gone(result["owner"])


def test_a_hostile_item_ends_with_a_clear_outcome_and_the_worker_goes_on(scluster: LocalCluster) -> None:
    bomb = (
        "(setsid sh -c 'while :; do sleep 1; done' &) ; "
        "python3 -c 'import os\nwhile True:\n try: os.fork()\n except OSError: pass'"
    )
    run = scluster.fleet().map(st.sandboxed_sh, [{"script": bomb, "timeout_s": 3}])
    assert run.wait(timeout_s=120).succeeded == 1
    hostile = run.outcomes()[0].result
    assert hostile["timed_out"] is True
    assert wait_gone(hostile["owner"]), "nothing of the hostile item is left"
    after = scluster.fleet().map(st.sandboxed_sh, [{"script": "echo still-here"}])
    assert after.wait(timeout_s=60).succeeded == 1
    assert after.outcomes()[0].result["stdout"] == "still-here\n"
    assert not os.path.exists(hostile["workspace"]) or os.listdir(hostile["workspace"]) == ["seed.txt"]


def test_a_task_without_a_sandbox_is_told_how_to_declare_one(scluster: LocalCluster) -> None:
    run = scluster.fleet().map(st.no_sandbox, [{}])
    summary = run.wait(timeout_s=60)
    assert summary.failed == 1
    error = run.outcomes()[0].error or ""
    assert "has no sandbox" in error and "@fleet_task(sandbox=" in error


def test_the_agents_run_command_tool_runs_in_the_items_sandbox_without_an_allowlist(
    scluster: LocalCluster,
) -> None:
    run = scluster.fleet().map(st.agent_command, [{"argv": ["sh", "-c", "id -u; cat seed.txt; ip -o link"]}])
    assert run.wait(timeout_s=60).succeeded == 1
    result = run.outcomes()[0].result
    assert result["exit_code"] == 0, result
    lines = result["stdout"].splitlines()
    assert lines[:2] == ["65534", "from the template"]
    assert len(lines) == 3 and ": lo:" in lines[2], "loopback only"


def test_a_sandboxed_program_reaches_its_declared_destination_through_the_egress_proxy(
    scluster: LocalCluster, echo: Echo
) -> None:
    declared = f"http://127.0.0.1:{echo.port}/echo"
    undeclared = "http://127.0.0.1:9/echo"
    run = scluster.fleet().map(st.fetch_in_sandbox, [{"urls": [declared, undeclared]}])
    assert run.wait(timeout_s=60).succeeded == 1
    assert run.outcomes()[0].result == ["200", "HTTPError"]
    assert [path for path, _ in echo.seen] == ["/echo"], "the far end saw the declared request only"
