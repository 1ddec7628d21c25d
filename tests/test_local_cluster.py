"""LocalCluster starts real processes and leaves none behind, whatever happens in its body."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import fleet_test_tasks as tt
import pytest
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.errors import ConfigError

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes once reaped or defunct.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().split()[3]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def test_embedded_cluster_runs_work_and_stops_every_process() -> None:
    env = cluster_env()
    with LocalCluster(workers=2, concurrency=2, pool="prefork", env=env) as cluster:
        assert cluster.embedded
        pids = cluster.pids()
        children = [c for w in cluster.workers for c in _children(w.pid)]
        assert len(children) >= 4, "each prefork worker runs its pool of child processes"
        assert cluster.fleet().map(tt.echo, [{"n": 1}]).wait(timeout_s=30).succeeded == 1
    assert not [pid for pid in pids + children if _alive(pid)]


def test_processes_are_stopped_when_the_body_raises() -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        LocalCluster(workers=1, concurrency=1, env=cluster_env()) as cluster,
    ):
        pids = cluster.pids()
        raise RuntimeError("boom")
    assert not [pid for pid in pids if _alive(pid)]


def test_processes_are_stopped_on_ctrl_c() -> None:
    with (
        pytest.raises(KeyboardInterrupt),
        LocalCluster(workers=1, concurrency=1, env=cluster_env()) as cluster,
    ):
        pids = cluster.pids()
        os.kill(os.getpid(), signal.SIGINT)
    assert not [pid for pid in pids if _alive(pid)]


def test_a_worker_that_cannot_start_is_reported_with_its_log() -> None:
    env = cluster_env(AGENTFLEET_TASK_MODULES="no_such_module_anywhere")
    with (
        pytest.raises(ConfigError, match="no_such_module_anywhere"),
        LocalCluster(workers=1, concurrency=1, env=env, startup_timeout_s=30),
    ):
        pass


def test_a_task_object_whose_module_the_workers_lack_is_added_to_them(tmp_path: Path) -> None:
    """The README's first example, run as written: no AGENTFLEET_TASK_MODULES anywhere."""
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(
        "from agentfleet import TaskContext, fleet_task\n\n"
        "@fleet_task\n"
        "def shout(ctx: TaskContext, text: str) -> dict:\n"
        "    return {'text': text.upper()}\n"
    )
    (tmp_path / "script.py").write_text(
        "from agentfleet import LocalCluster\n"
        "from myapp.tasks import shout\n\n"
        "with LocalCluster(workers=1, concurrency=2) as cluster:\n"
        "    run = cluster.fleet().map(shout, [{'text': 'a'}, {'text': 'b'}])\n"
        "    print(run.wait(timeout_s=60).succeeded, sorted(o.result['text'] for o in run.outcomes()))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")}
    out = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2 ['A', 'B']"
    assert "restarting 1 workers to import myapp.tasks" in out.stderr


def test_the_log_folder_is_removed_after_a_clean_exit() -> None:
    with LocalCluster(workers=1, concurrency=1, env=cluster_env()) as cluster:
        logs = cluster.log_dir
        assert any(logs.iterdir())
    assert not logs.exists()


def test_the_log_folder_is_kept_and_named_after_a_failed_exit(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RuntimeError), LocalCluster(workers=1, concurrency=1, env=cluster_env()) as cluster:
        logs = cluster.log_dir
        raise RuntimeError("the body failed")
    try:
        assert [p.suffix for p in logs.iterdir()] == [".log"]
        assert f"the workers' logs are kept in {logs}" in caplog.text
    finally:
        shutil.rmtree(logs, ignore_errors=True)
