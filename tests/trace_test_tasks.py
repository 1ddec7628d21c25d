"""Fleet tasks for the tracing tests, imported by workers via ``AGENTFLEET_TASK_MODULES``."""

from __future__ import annotations

from typing import Any

from agentfleet import PermanentError, TaskContext, fleet_task


@fleet_task(max_retries=1)
def call_service(ctx: TaskContext, url: str) -> dict[str, Any]:
    """A pipeline's first stage: one request to the user's own service."""
    return {"url": url, "status": ctx.http.get(url).status_code}


@fleet_task(max_retries=1)
def after_call(ctx: TaskContext, url: str, status: int) -> dict[str, Any]:
    return {"url": url, "status": status}


@fleet_task(max_retries=0)
def always_fails(ctx: TaskContext, n: int) -> dict[str, Any]:
    raise PermanentError(f"item {n} never works")
