"""LocalCluster starts real processes and leaves none behind, whatever happens in its body."""

from __future__ import annotations

import os
import signal

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
