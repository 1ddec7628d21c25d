"""Fleet tasks for the failure-handling tests (imported by workers via AGENTFLEET_TASK_MODULES)."""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import redis
from celery.exceptions import SoftTimeLimitExceeded

from agentfleet import TaskContext, fleet_task
from agentfleet.errors import error_for_status

VENDOR_B = "vendor-b.example"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)


def _count(name: str) -> int:
    return int(_redis().incr(f"test:count:{name}"))


@fleet_task(max_retries=3)
def call_vendor(ctx: TaskContext, url: str) -> dict[str, Any]:
    """GET ``url``; an HTTP error status raises httpx's own error, for ``classify`` to map."""
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


@fleet_task(downstream=VENDOR_B, max_retries=0)
def call_vendor_b(ctx: TaskContext, url: str) -> dict[str, Any]:
    """GET ``url``, standing in for vendor-b.example: its errors name that downstream."""
    response = httpx.get(url, timeout=10)
    err = error_for_status(response.status_code, headers=dict(response.headers), downstream=VENDOR_B)
    if err is not None:
        raise err
    return {"status": response.status_code}


@fleet_task
def die_or_echo(ctx: TaskContext, n: int, die: bool = False, token: str = "") -> dict[str, Any]:
    """Kills its own worker process when ``die``: the pool process exits mid-task."""
    if die:
        _count(f"deaths:{token}")
        os._exit(1)
    return {"n": n}


@fleet_task(time_limit_s=3, soft_time_limit_s=1, max_retries=2)
def slow_first_time(ctx: TaskContext, token: str) -> dict[str, Any]:
    """Overruns its soft time limit on the first execution only."""
    executions = _count(f"slow:{token}")
    if executions == 1:
        time.sleep(2.5)
    return {"executions": executions}


@fleet_task(time_limit_s=2, soft_time_limit_s=1, max_retries=1)
def ignores_soft_limit(ctx: TaskContext, token: str, always: bool) -> dict[str, Any]:
    """Swallows the soft time limit and runs into the hard one (always, or the first time)."""
    executions = _count(f"stubborn:{token}")
    if always or executions == 1:
        try:
            time.sleep(6)
        except SoftTimeLimitExceeded:
            time.sleep(6)
    return {"executions": executions}


@fleet_task(max_retries=0)
def leaky(ctx: TaskContext, api_key: str, note: str) -> dict[str, Any]:
    """Fails with a message (and so a traceback) that quotes its API key and a credential."""
    token = os.environ["VENDOR_TOKEN"]
    raise RuntimeError(f"vendor refused key {api_key} with token {token} ({note})")


@fleet_task
def first_stage(ctx: TaskContext, tag: str, url: str) -> dict[str, Any]:
    _count(f"first:{tag}")
    return {"tag": tag, "url": url, "prepared": True}


@fleet_task(max_retries=0)
def second_stage(ctx: TaskContext, tag: str, url: str, prepared: bool) -> dict[str, Any]:
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return {"tag": tag, "prepared": prepared, "status": response.status_code}


@fleet_task
def third_stage(ctx: TaskContext, tag: str, prepared: bool, status: int) -> dict[str, Any]:
    return {"tag": tag, "report": f"status {status}", "prepared": prepared}
