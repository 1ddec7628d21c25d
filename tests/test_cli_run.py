"""``agentfleet run`` against real workers: it says where the run is at dispatch, Ctrl-C leaves
the run going (or cancels it with --cancel-on-interrupt), --output writes outcomes as they
arrive, and inputs are refused exactly as ``Fleet.map`` refuses them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from worker_env import TESTS_DIR

from agentfleet import LocalCluster
from agentfleet.models import TaskOutcome

pytestmark = pytest.mark.slow

TOKEN = "run-console-token-" + "0" * 32


def _env(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": TESTS_DIR,
        "COLUMNS": "80",
        "AGENTFLEET_BROKER_URL": cluster.broker_url,
        **{
            f"AGENTFLEET_QUEUES__{role.upper()}": q
            for role, q in cluster.settings.queues.model_dump().items()
        },
        **extra,
    }


def _cli(cluster: LocalCluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfleet", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(cluster, **env),
    )


def _start(cluster: LocalCluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentfleet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(cluster),
    )


def _inputs(tmp_path: Path, items: list[dict[str, object]]) -> str:
    path = tmp_path / "inputs.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return str(path)


def _run_id_from(process: subprocess.Popen[str]) -> str:
    """The run id from the line ``agentfleet run`` prints once it dispatched (within 60 s)."""
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("run ") and "dispatched" in line:
            return line.split()[1].rstrip(":")
        assert line or process.poll() is None, "the command ended before it dispatched"
    raise AssertionError("no dispatch line within 60 s")


def _wait_for(check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the state was not reached in time"
        time.sleep(0.1)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def test_run_prints_the_run_id_and_its_console_page_before_the_outcomes(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = _cli(
        cluster,
        "run",
        "fleet_test_tasks.echo",
        "--inputs",
        _inputs(tmp_path, [{"n": 1}]),
        AGENTFLEET_SERVICE__TOKEN=TOKEN,
        AGENTFLEET_SERVICE__PUBLIC_URL="https://fleet.example/",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    run_id = first.split()[1].rstrip(":")
    assert first == (
        f"run {run_id}: 1 tasks dispatched; follow it with `agentfleet runs show {run_id}` "
        f"or https://fleet.example/console/runs/{run_id} (with `agentfleet serve`)"
    )
    assert cluster.fleet().get_run(run_id).summary().succeeded == 1


def test_ctrl_c_leaves_the_run_going_and_says_how_to_cancel_it(cluster: LocalCluster, tmp_path: Path) -> None:
    items = [{"n": i, "sleep_s": 2.0} for i in range(3)]
    process = _start(cluster, "run", "fleet_test_tasks.sleepy", "--inputs", _inputs(tmp_path, items))
    try:
        run_id = _run_id_from(process)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        _stop(process)
    assert process.returncode == 130, err
    assert f"run {run_id} goes on in the workers" in err
    assert f"agentfleet runs cancel {run_id}" in err and "--cancel-on-interrupt" in err
    assert "Traceback" not in err
    summary = cluster.fleet().get_run(run_id).wait(60)
    assert summary.succeeded == 3


def test_ctrl_c_with_cancel_on_interrupt_cancels_the_run(cluster: LocalCluster, tmp_path: Path) -> None:
    # More items than the cluster's 16 slots, each long: some have not started at Ctrl-C.
    items = [{"n": i, "sleep_s": 3.0} for i in range(40)]
    args = ("run", "fleet_test_tasks.sleepy", "--cancel-on-interrupt", "--inputs", _inputs(tmp_path, items))
    process = _start(cluster, *args)
    try:
        run_id = _run_id_from(process)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        _stop(process)
    assert process.returncode == 130, err
    assert f"cancelled run {run_id}" in err, (out, err)
    run = cluster.fleet().get_run(run_id)
    # The run is marked cancelled at once; its waiting items count as cancelled as they come up.
    _wait_for(lambda: run.summary().cancelled > 0 or run.summary().succeeded == 40, timeout_s=120)
    summary = run.summary()
    assert summary.cancelled > 0 and summary.succeeded < 40


def test_output_writes_each_outcome_as_it_arrives(cluster: LocalCluster, tmp_path: Path) -> None:
    output = tmp_path / "outcomes.jsonl"
    items = [{"n": 0, "sleep_s": 0.0}, {"n": 1, "sleep_s": 8.0}]
    args = ("run", "fleet_test_tasks.sleepy", "--output", str(output), "--inputs", _inputs(tmp_path, items))
    process = _start(cluster, *args)
    try:
        _wait_for(lambda: output.exists() and output.read_text().count("\n") == 1)
        assert process.poll() is None, "the first outcome is in the file while the run goes on"
        process.communicate(timeout=60)
    finally:
        _stop(process)
    assert process.returncode == 0
    outcomes = [TaskOutcome.model_validate_json(line) for line in output.read_text().splitlines()]
    assert [o.result["n"] for o in outcomes if o.result] == [0, 1]


def test_output_and_json_together_write_the_file_too(cluster: LocalCluster, tmp_path: Path) -> None:
    output = tmp_path / "outcomes.jsonl"
    items = [{"n": 1}, {"n": 2, "fail": True}]
    args = ("run", "fleet_test_tasks.maybe_fail", "--json", "-o", str(output), "--inputs")
    out = _cli(cluster, *args, _inputs(tmp_path, items))
    assert out.returncode == 1, out.stderr
    written = sorted(json.loads(line)["ok"] for line in output.read_text().splitlines())
    assert written == [False, True]
    assert len(json.loads(out.stdout)["outcomes"]) == 2


def test_an_input_of_the_wrong_type_is_refused_before_anything_is_sent(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    before = {s.run_id for s in cluster.fleet().runs(100)}
    items = [{"n": 1}, {"n": "many"}]
    out = _cli(cluster, "run", "fleet_test_tasks.echo", "--inputs", _inputs(tmp_path, items))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "1 of 2 inputs do not fit fleet_test_tasks.echo: input 1: n: Input should be a valid integer" in (
        out.stderr
    )
    assert {s.run_id for s in cluster.fleet().runs(100)} == before


def test_runs_show_says_how_many_outcomes_it_shows_and_pages(cluster: LocalCluster) -> None:
    run = cluster.fleet().map("fleet_test_tasks.echo", [{"n": i} for i in range(60)])
    assert run.wait(60).succeeded == 60
    table = _cli(cluster, "runs", "show", run.id[:8])
    assert table.returncode == 0, table.stderr
    assert (
        f"50 of 60 outcomes shown (1-50); --offset 50 for the next, --all for every one "
        f"(agentfleet runs show {run.id} --all)"
    ) in " ".join(table.stdout.split())
    first = json.loads(_cli(cluster, "runs", "show", run.id, "--json").stdout)
    assert (first["outcomes_total"], len(first["outcomes"])) == (60, 50)
    rest = json.loads(_cli(cluster, "runs", "show", run.id, "--json", "--offset", "50").stdout)
    assert [o["index"] for o in rest["outcomes"]] == list(range(50, 60))
    every = json.loads(_cli(cluster, "runs", "show", run.id, "--json", "--all").stdout)
    assert len(every["outcomes"]) == 60
    assert "outcomes shown" not in _cli(cluster, "runs", "show", run.id, "--all").stdout


def test_a_worker_that_cannot_import_its_task_module_says_so_in_one_line(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(tmp_path),
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": key_prefix,
        "AGENTFLEET_TASK_MODULES": "no_such_tasks_module",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfleet", "worker", "--pool", "solo", "-Q", f"{key_prefix}.q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _, err = process.communicate(timeout=60)
    finally:
        _stop(process)
    assert process.returncode == 2, err
    assert err.strip().count("\n") == 0, err
    assert "no_such_tasks_module" in err and "AGENTFLEET_TASK_MODULES" in err
    assert f"PYTHONPATH (now {tmp_path})" in err


def test_a_task_module_that_fails_while_importing_is_named_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken_tasks_module.py").write_text("import json\nimport no_such_dependency\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    probe = (
        "from agentfleet.cli.worker_cmd import require_task_modules\n"
        "require_task_modules(['json', 'broken_tasks_module'])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "broken_tasks_module (ModuleNotFoundError: No module named 'no_such_dependency')" in last
    assert "AGENTFLEET_TASK_MODULES" in last and "json" not in last.split("named in")[0]


def test_an_llm_task_with_no_llm_endpoint_on_the_workers_is_refused_in_one_line(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    assert not any(w.llm for w in cluster.registry().live()), "the session's workers have no LLM endpoint"
    before = {s.run_id for s in cluster.fleet().runs(100)}
    out = _cli(
        cluster, "run", "agentfleet.classify_sentiment", "--inputs", _inputs(tmp_path, [{"text": "hi"}])
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "agentfleet.classify_sentiment calls an LLM and no worker that runs it has an LLM endpoint" in (
        out.stderr
    )
    assert "ANTHROPIC_API_KEY" in out.stderr and "AGENTFLEET_LLM__BASE_URL" in out.stderr
    assert {s.run_id for s in cluster.fleet().runs(100)} == before
