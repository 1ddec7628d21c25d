"""Fleet tasks the benchmarks run on workers (imported through ``AGENTFLEET_TASK_MODULES``)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from agentfleet import TaskContext, fleet_task


@fleet_task(name="bench.fetch_shared")
def fetch_shared(ctx: TaskContext, url: str) -> dict[str, Any]:
    """One GET through ``ctx.http``: the guard, the limiter and the worker's shared pools."""
    return {"status": ctx.http.get(url).status_code}


@fleet_task(name="bench.fetch_fresh")
def fetch_fresh(ctx: TaskContext, url: str) -> dict[str, Any]:
    """One GET through a client of its own, as each execution had before pools were shared."""
    with httpx.Client(verify=os.environ["SSL_CERT_FILE"], trust_env=False) as client:
        return {"status": client.get(url).status_code}
