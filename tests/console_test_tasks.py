"""Fleet tasks for the console's browser test (imported by workers via AGENTFLEET_TASK_MODULES)."""

from __future__ import annotations

import os
from typing import Any

import redis

from agentfleet import TaskContext, fleet_task
from agentfleet.errors import BadRequest


def gate_key(gate: str) -> str:
    return f"test:gate:{gate}"


@fleet_task(max_retries=0)
def gated(ctx: TaskContext, n: int, gate: str) -> dict[str, Any]:
    """Fails for good while the gate is closed (no Redis key), succeeds once it is open."""
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)
    if n % 2 and not client.exists(gate_key(gate)):
        raise BadRequest(f"the vendor refused item {n}: its gate {gate} is closed")
    return {"n": n, "gate": gate}
