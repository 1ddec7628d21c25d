"""Fleet tasks the benchmarks run on workers (imported through ``AGENTFLEET_TASK_MODULES``)."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import redis
from _ack_probe import install

from agentfleet import TaskContext, fleet_task
from agentfleet.celery_app import app

install()


@fleet_task(name="bench.fetch_shared")
def fetch_shared(ctx: TaskContext, url: str) -> dict[str, Any]:
    """One GET through ``ctx.http``: the guard, the limiter and the worker's shared pools."""
    return {"status": ctx.http.get(url).status_code}


@fleet_task(name="bench.fetch_fresh")
def fetch_fresh(ctx: TaskContext, url: str) -> dict[str, Any]:
    """One GET through a client of its own, as each execution had before pools were shared."""
    with httpx.Client(verify=os.environ["SSL_CERT_FILE"], trust_env=False) as client:
        return {"status": client.get(url).status_code}


def _mark_end(token: str) -> None:
    with redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"]) as client:
        client.set(f"bench:end:{token}", time.time(), ex=600)


@fleet_task(name="bench.fleet_marked")
def fleet_marked(ctx: TaskContext, token: str) -> dict[str, Any]:
    """Marks when its body ended (Unix seconds) under ``bench:end:{token}``."""
    _mark_end(token)
    return {"token": token}


@app.task(name="bench.plain_marked")
def plain_marked(token: str) -> None:
    """A plain Celery task on agentfleet's app that marks when its body ended, as above."""
    _mark_end(token)
