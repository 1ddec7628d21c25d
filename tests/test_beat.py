"""Scheduled fan-outs on real beat processes: they fire, and two beats do not double them."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ops_support import ServiceProcess, wait_for
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.models import RunSummary

pytestmark = pytest.mark.slow

INTERVAL_S = 2.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    config = tmp_path_factory.mktemp("beat") / "agentfleet.toml"
    config.write_text(
        "[schedules.tick]\n"
        'task = "ops_test_tasks.nap"\n'
        f"interval_s = {INTERVAL_S}\n"
        "inputs = [{ n = 1, sleep_s = 0.0 }, { n = 2, sleep_s = 0.0 }]\n"
    )
    env = cluster_env(
        AGENTFLEET_TASK_MODULES="ops_test_tasks",
        AGENTFLEET_CONFIG=str(config),
        # Beat wakes every second; a dead beat's lock expires after 3 s.
        AGENTFLEET_BEAT__MAX_LOOP_INTERVAL_S="1",
        AGENTFLEET_BEAT__LOCK_TIMEOUT_S="3",
    )
    with LocalCluster(workers=1, concurrency=4, env=env) as running:
        yield running


def _beat(cluster: LocalCluster, name: str, log_dir: Path) -> ServiceProcess:
    return ServiceProcess(name, [sys.executable, "-m", "agentfleet", "beat"], cluster.worker_env(), log_dir)


def _ticks(cluster: LocalCluster) -> list[RunSummary]:
    return sorted((r for r in cluster.fleet().runs(200) if r.name == "tick"), key=lambda r: r.created_at)


def test_a_schedule_fires_once_per_interval_with_two_beats_running(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    beats = [_beat(cluster, "beat-a", tmp_path), _beat(cluster, "beat-b", tmp_path)]
    try:
        holder = wait_for(
            lambda: next((b for b in beats if "Acquired lock" in b.log()), None),
            timeout_s=60,
            what="a beat to take the lock",
            processes=beats,
        )
        waiting = beats[1] if holder is beats[0] else beats[0]
        wait_for(
            lambda: "beat: Starting" in waiting.log(), timeout_s=60, what="the other beat", processes=beats
        )
        overlap_from = len(_ticks(cluster))
        wait_for(
            lambda: len(_ticks(cluster)) >= max(3, overlap_from + 2),
            timeout_s=60,
            what="scheduled runs while both beats run",
            processes=beats,
        )
        runs = _ticks(cluster)
        assert all(r.tasks_total == 2 for r in runs)
        gaps = [b.created_at - a.created_at for a, b in itertools.pairwise(runs)]
        assert min(gaps) > INTERVAL_S / 2, f"two runs of one firing: gaps {gaps}"
        assert "Acquired lock" not in waiting.log(), "the second beat waits for the lock"
        wait_for(
            lambda: all(r.status == "finished" for r in _ticks(cluster)[:3]),
            timeout_s=30,
            what="the scheduled runs to finish",
        )

        # When the beat holding the lock dies, the waiting one takes over once the lock expires.
        holder.kill()
        before = len(_ticks(cluster))
        wait_for(
            lambda: "Acquired lock" in waiting.log(), timeout_s=30, what="the takeover", processes=[waiting]
        )
        wait_for(
            lambda: len(_ticks(cluster)) >= before + 1,
            timeout_s=30,
            what="runs sent by the second beat",
            processes=[waiting],
        )
        later = _ticks(cluster)[before - 1 :]
        gaps = [b.created_at - a.created_at for a, b in itertools.pairwise(later)]
        assert min(gaps) > INTERVAL_S / 2, f"two runs of one firing after the takeover: gaps {gaps}"
    finally:
        for beat in beats:
            beat.terminate()
        for beat in beats:
            beat.stop()
