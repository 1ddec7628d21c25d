"""Fleet tasks the approval suites run on real workers (imported via AGENTFLEET_TASK_MODULES).

Each counts what it did in Redis under ``test:appr:<marker>:<what>``: ``before`` (a step
before the pause), ``body`` (how often the body ran) and ``after`` (a step after it)."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from agentfleet import Decision, TaskContext, fleet_task


def note(marker: str, what: str) -> int:
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)
    try:
        return int(client.incr(f"test:appr:{marker}:{what}"))
    finally:
        client.close()


def _shown(decision: Decision) -> dict[str, Any]:
    return decision.model_dump(mode="json")


@fleet_task
def gated(
    ctx: TaskContext, marker: str, timeout_s: float | None = None, on_timeout: str = "reject"
) -> dict[str, Any]:
    """A step, a pause for a person, a step: what a deploy after review looks like."""
    ctx.step("before", note, marker, "before")
    note(marker, "body")
    details = {"marker": marker, "api_key": "sk-live-0123456789abcdef", "plan": "deploy v2"}
    decision = ctx.approval("deploy", details=details, timeout_s=timeout_s, on_timeout=on_timeout)  # type: ignore[arg-type]
    ctx.step("after", note, marker, "after")
    return _shown(decision)


@fleet_task
def waiter(ctx: TaskContext, marker: str, key: str, timeout_s: float | None = None) -> dict[str, Any]:
    """Waits for event ``key`` (writes nothing of its own to Redis)."""
    return _shown(ctx.wait_for_event(key, timeout_s=timeout_s))


@fleet_task
def twice(ctx: TaskContext, marker: str) -> dict[str, Any]:
    """Two approvals of one name in a row: each its own pause, each found again on resume."""
    first = ctx.approval("step")
    second = ctx.approval("step")
    return {"first": _shown(first), "second": _shown(second)}


@fleet_task
def asked(ctx: TaskContext, timeout_s: float | None = None) -> bool:
    """One approval, nothing else (writes nothing of its own to Redis)."""
    return ctx.approval("census", details={"why": "the key census"}, timeout_s=timeout_s).approved


@fleet_task
def plain(ctx: TaskContext, n: int) -> int:
    return n


@fleet_task
def stamped(ctx: TaskContext, token: str) -> bool:
    """Waits for approval ``go``; once resumed, notes when (Unix s) under ``test:appr:resumed``."""
    decision = ctx.approval("go")
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)
    try:
        client.hset("test:appr:resumed", token, repr(time.time()))
    finally:
        client.close()
    return decision.approved


@fleet_task
def work(ctx: TaskContext, n: int, sleep_s: float = 0.02) -> int:
    """Holds its slot ``sleep_s`` seconds."""
    time.sleep(sleep_s)
    return n


@fleet_task(budget_wall_s=3.0)
def budgeted(ctx: TaskContext) -> dict[str, Any]:
    """A wall budget of 3 s over every attempt: parked for longer, it still has its seconds."""
    decision = ctx.approval("spend")
    ctx.check_budget()
    return _shown(decision)
