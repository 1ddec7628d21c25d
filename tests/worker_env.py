"""The environment test workers run with."""

from __future__ import annotations

import os

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def cluster_env(**extra: str) -> dict[str, str]:
    """Environment for test workers: the test task module importable and named."""
    env = {
        "PYTHONPATH": TESTS_DIR,
        "AGENTFLEET_TASK_MODULES": "fleet_test_tasks",
    }
    env.update(extra)
    return env


def own_queues(prefix: str) -> dict[str, str]:
    """Queue names no other test uses, so workers elsewhere on the same Redis never take them."""
    return {"agents": f"{prefix}.a", "fanin": f"{prefix}.f", "maintenance": f"{prefix}.m"}
