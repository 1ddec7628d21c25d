"""Fleet tasks for the console's browser test (imported by workers via AGENTFLEET_TASK_MODULES)."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from agentfleet import TaskContext, fleet_task
from agentfleet.errors import BadRequest, Deferred, DownstreamError


def gate_key(gate: str) -> str:
    return f"test:gate:{gate}"


@fleet_task(max_retries=0)
def gated(ctx: TaskContext, n: int, gate: str) -> dict[str, Any]:
    """Fails for good while the gate is closed (no Redis key), succeeds once it is open."""
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)
    if n % 2 and not client.exists(gate_key(gate)):
        raise BadRequest(f"the vendor refused item {n}: its gate {gate} is closed")
    return {"n": n, "gate": gate}


def bumpy_key(tag: str, n: int) -> str:
    return f"test:bumpy:{tag}:{n}"


@fleet_task(max_retries=2)
def bumpy(ctx: TaskContext, n: int, tag: str, sleep_s: float = 0.0) -> dict[str, Any]:
    """Sleeps ``sleep_s``; then item ``n % 4 == 1`` fails once (retryable) and ``n % 4 == 2``
    defers once before succeeding; ``n % 4 == 3`` fails for good."""
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)
    seen = client.incr(bumpy_key(tag, n))
    time.sleep(sleep_s)
    if n % 4 == 1 and seen == 1:
        raise DownstreamError(f"vendor hiccup on item {n}")
    if n % 4 == 2 and seen == 1:
        raise Deferred(0.2, f"item {n} waits for a slot")
    if n % 4 == 3:
        raise BadRequest(f"the vendor refused item {n}")
    return {"n": n, "pid": os.getpid()}


@fleet_task(max_retries=1)
def noop(ctx: TaskContext, n: int, sleep_s: float = 0.0) -> dict[str, Any]:
    """Sleeps ``sleep_s`` and returns its input: the bulk of a large run. Item ``n % 97 == 96``
    fails for good; ``n % 89 == 0`` fails its first attempt (retryable)."""
    time.sleep(sleep_s)
    if n % 97 == 96:
        raise BadRequest(f"the vendor refused item {n}")
    if n % 89 == 0 and ctx.attempt == 0:
        raise DownstreamError(f"vendor hiccup on item {n}")
    return {"n": n}
