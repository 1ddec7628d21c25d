"""Fleet tasks for the rate-limit integration tests (imported via AGENTFLEET_TASK_MODULES)."""

from __future__ import annotations

import os
import time
from typing import Any

from agentfleet import TaskContext, fleet_task

# Sent with every request, so a test can tell which worker process holds a call.
PID_HEADER = "x-worker-pid"
# Sent with every request: when the task began the call (Unix seconds), before the fleet's
# transport admitted it.
STARTED_HEADER = "x-started-at"


def _get(ctx: TaskContext, url: str) -> dict[str, Any]:
    headers = {PID_HEADER: str(os.getpid()), STARTED_HEADER: f"{time.time():.6f}"}
    response = ctx.http.get(url, headers=headers)
    response.raise_for_status()
    return {"status": response.status_code, "pid": os.getpid()}


@fleet_task
def call(ctx: TaskContext, url: str) -> dict[str, Any]:
    """One GET through the fleet transport; a 5xx is a retryable failure."""
    return _get(ctx, url)


@fleet_task(max_retries=2)
def call_with_two_retries(ctx: TaskContext, url: str) -> dict[str, Any]:
    """``call`` with a retry budget of two."""
    return _get(ctx, url)
