"""Tasks and aggregates the security tests run on real workers (AGENTFLEET_TASK_MODULES).

Each aggregate counts its calls in Redis under ``test:agg:<name>:<run id>`` before it
misbehaves, so a test counts at the far end how often a worker ran it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import redis

from agentfleet import TaskContext, fleet_task


def _count(name: str, results: list[Any]) -> None:
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"])
    client.incr(f"test:agg:{name}:{os.environ.get('AGENTFLEET_KEY_PREFIX', 'af')}")
    client.close()


@fleet_task
def say(ctx: TaskContext, text: str) -> str:
    """Returns its input: what an attacker needs to build an argv list out of results."""
    return text


def exits(results: list[Any]) -> None:
    """An aggregate that raises ``SystemExit`` (as ``sys.exit`` named by a caller did)."""
    _count("exits", results)
    sys.exit(3)


def unstorable(results: list[Any]) -> object:
    """An aggregate whose result JSON cannot hold."""
    _count("unstorable", results)
    return object()


def joined(results: list[Any]) -> str:
    """A well-behaved aggregate."""
    _count("joined", results)
    return " ".join(str(r) for r in results)
