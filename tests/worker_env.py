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
