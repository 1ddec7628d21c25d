"""The task of bench/ratelimit_vs_celery.py, twice: limited by agentfleet, and by Celery.

Both make one GET to the benchmark's local server. ``BENCH_RATE_PER_S`` is the configured
rate (requests a second); Celery's ``rate_limit`` is set from it.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from agentfleet import TaskContext, fleet_task
from agentfleet.celery_app import app

RATE_PER_S = float(os.environ.get("BENCH_RATE_PER_S", "20"))

# One client per process, thread-safe: the Celery task pays nothing per call that ours
# does not (ctx.http is built once per execution, on a process-wide SSL context).
_client = httpx.Client(timeout=30)


@fleet_task
def fleet_limited_get(ctx: TaskContext, url: str) -> dict[str, Any]:
    """Limited by the cluster-wide limiter (``[limits]`` for the server's host)."""
    return {"status": ctx.http.get(url).status_code}


@app.task(name="bench.celery_limited_get", acks_late=True, rate_limit=f"{RATE_PER_S:g}/s")
def celery_limited_get(url: str) -> int:
    """Limited by Celery's ``rate_limit``, which each worker enforces on its own."""
    return _client.get(url).status_code
