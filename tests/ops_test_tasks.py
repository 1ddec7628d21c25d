"""Fleet tasks for the operations tests (imported by workers via AGENTFLEET_TASK_MODULES).

The blocking calls here (a Redis BLPOP, HTTP requests through httpx, httpx2 and the Anthropic
SDK) finish together on a gevent worker only if the worker patched the standard library before
those libraries were imported.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# Imported when the worker loads this module, after its gevent patching: a first import
# inside a task would hold the whole gevent hub for the import's duration.
import anthropic  # noqa: F401
import httpx2
import redis

from agentfleet import TaskContext, fleet_task


@fleet_task
def nap(ctx: TaskContext, n: int, sleep_s: float) -> dict[str, Any]:
    time.sleep(sleep_s)
    return {"n": n}


@fleet_task
def patch_report(ctx: TaskContext) -> dict[str, Any]:
    """Which standard modules gevent patched in this worker, and the pool it runs."""
    import gevent.monkey

    modules = ("socket", "ssl", "select", "time", "threading")
    return {
        "patched": {name: bool(gevent.monkey.is_module_patched(name)) for name in modules},
        "argv": sys.argv,
    }


@fleet_task
def redis_block(ctx: TaskContext, n: int, block_s: int) -> dict[str, Any]:
    """Block in Redis for ``block_s`` seconds (BLPOP on a list nobody pushes to)."""
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"])
    try:
        client.blpop([f"ops-test:never:{n}"], timeout=block_s)
    finally:
        client.close()
    return {"n": n}


@fleet_task
def http_call(ctx: TaskContext, n: int, url: str, client: str) -> dict[str, Any]:
    """One request to ``url`` through ``client``: httpx (ctx.http), httpx2, or anthropic."""
    if client == "httpx":
        status = ctx.http.get(url).status_code
    elif client == "httpx2":
        with httpx2.Client(timeout=30) as http:
            status = http.get(url).status_code
    else:
        message = ctx.anthropic.messages.create(
            model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": f"item {n}"}]
        )
        status = 200 if message.content else 0
    return {"n": n, "status": status}
