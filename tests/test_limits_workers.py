"""``agentfleet limits show`` against real worker processes: the limits it reports are the
ones the workers were started with, read from their heartbeats, not the caller's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from worker_env import cluster_env, own_queues

from agentfleet.config import load_settings
from agentfleet.local import LocalCluster
from agentfleet.registry import WorkerRegistry

pytestmark = pytest.mark.slow


def test_show_reports_the_limits_real_workers_were_started_with(redis_url: str, key_prefix: str) -> None:
    settings = load_settings(broker_url=redis_url, key_prefix=key_prefix, queues=own_queues(key_prefix))
    worker_limits = {"vendor-a.example": {"rate_per_s": 7, "max_concurrency": 5}}
    env = cluster_env(AGENTFLEET_LIMITS=json.dumps(worker_limits))
    with LocalCluster(workers=1, concurrency=2, env=env, settings=settings, broker_url=redis_url):
        nodes = [w.node for w in WorkerRegistry.from_settings(settings).live()]
        out = subprocess.run(
            [sys.executable, "-m", "agentfleet", "limits", "show", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "AGENTFLEET_BROKER_URL": redis_url,
                "AGENTFLEET_KEY_PREFIX": key_prefix,
                # The caller's own configuration says something else.
                "AGENTFLEET_LIMITS": json.dumps({"vendor-a.example": {"rate_per_s": 2}}),
            },
        )
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["view"] == "workers"
    by_name = {d["downstream"]: d for d in document["downstreams"]}
    assert by_name["vendor-a.example"]["limits"] == {"rate_per_s": 7, "max_concurrency": 5}
    assert document["workers"] == nodes and len(nodes) == 1
