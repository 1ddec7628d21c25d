"""Against real workers: their heartbeat, refusals at dispatch from every entry point, and
``agentfleet run``'s exit status."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from worker_env import TESTS_DIR

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.ratelimit import Limiter
from agentfleet.registry import TaskInfo
from agentfleet.service import create_app

pytestmark = pytest.mark.slow

TOKEN = "dispatch-token-" + "0" * 32


def _cli(cluster: LocalCluster, *args: str, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": TESTS_DIR,
        "AGENTFLEET_BROKER_URL": cluster.broker_url,
        **{
            f"AGENTFLEET_QUEUES__{role.upper()}": q
            for role, q in cluster.settings.queues.model_dump().items()
        },
    }
    return subprocess.run(
        [sys.executable, "-m", "agentfleet", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def _inputs(tmp_path: Path, items: list[dict[str, object]]) -> str:
    path = tmp_path / "inputs.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return str(path)


def test_each_worker_publishes_its_queues_modules_and_fleet_tasks(cluster: LocalCluster) -> None:
    records = {r.node: r for r in cluster.registry().live()}
    assert {w.name for w in cluster.workers} <= set(records)
    record = records[cluster.workers[0].name]
    assert set(cluster.settings.queues.model_dump().values()) == set(record.queues)
    assert record.task_modules == ("fleet_test_tasks",)
    assert record.tasks["fleet_test_tasks.echo"] == TaskInfo(fleet=True, params=("n",), required=("n",))
    assert record.tasks["agentfleet.aggregate"] == TaskInfo(fleet=False)


def test_run_with_a_misspelt_task_exits_2_at_once_naming_the_closest(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    started = time.monotonic()
    out = _cli(cluster, "run", "fleet_test_tasks.ecoh", "--inputs", _inputs(tmp_path, [{"n": 1}]))
    assert out.returncode == 2, out.stderr
    assert "did you mean fleet_test_tasks.echo?" in out.stderr
    assert "Traceback" not in out.stderr
    assert time.monotonic() - started < 30, "refused at dispatch, not after the run's timeout"


def test_run_exits_0_when_every_item_succeeded(cluster: LocalCluster, tmp_path: Path) -> None:
    out = _cli(cluster, "run", "fleet_test_tasks.echo", "--inputs", _inputs(tmp_path, [{"n": 1}, {"n": 2}]))
    assert out.returncode == 0, out.stdout + out.stderr


def test_run_exits_1_when_items_failed(cluster: LocalCluster, tmp_path: Path) -> None:
    items = [{"n": 1}, {"n": 2, "fail": True}]
    out = _cli(cluster, "run", "fleet_test_tasks.maybe_fail", "--json", "--inputs", _inputs(tmp_path, items))
    assert out.returncode == 1, out.stdout + out.stderr
    assert json.loads(out.stdout)["summary"]["dead_lettered"] == 1


def test_run_exits_3_when_items_had_no_outcome_in_time(cluster: LocalCluster, tmp_path: Path) -> None:
    items = [{"n": 1, "sleep_s": 0.0}, {"n": 2, "sleep_s": 8.0}]
    args = ("run", "fleet_test_tasks.sleepy", "--timeout-s", "2", "--inputs", _inputs(tmp_path, items))
    out = _cli(cluster, *args)
    assert out.returncode == 3, out.stdout + out.stderr


def test_post_runs_for_a_fanout_of_a_misspelt_task_is_refused_with_422(cluster: LocalCluster) -> None:
    settings = load_settings(
        broker_url=cluster.broker_url,
        queues=cluster.settings.queues.model_dump(),
        service={"token": TOKEN},
        fanouts={"typo": {"task": "fleet_test_tasks.ecoh", "inputs": [{"n": 1}]}},
    )
    with TestClient(create_app(settings)) as client:
        response = client.post("/runs", json={"fanout": "typo"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 422
    assert "did you mean fleet_test_tasks.echo?" in response.json()["error"]


def test_run_prints_plain_progress_lines_when_not_on_a_terminal(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    Limiter.from_settings(cluster.settings, cluster.fleet().store.client).pause("vendor-z.example", 120)
    items = [{"n": i, "sleep_s": 1.5} for i in range(3)]
    args = ("run", "fleet_test_tasks.sleepy", "--progress-every", "0.5", "--inputs", _inputs(tmp_path, items))
    out = _cli(cluster, *args)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [
        line
        for line in out.stdout.splitlines()
        if re.match(r"^\d\d:\d\d:\d\d fleet_test_tasks\.sleepy: ", line)
    ]
    assert len(lines) >= 2, out.stdout
    assert "vendor-z.example paused" in lines[0]
    assert "3/3 done (3 ok" in lines[-1]
