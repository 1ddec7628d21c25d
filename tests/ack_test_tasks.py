"""Tasks on agentfleet's app for the acknowledgement and priority tests (imported by workers via
AGENTFLEET_TASK_MODULES): a fleet task and a plain Celery task that mark when their bodies end,
and a plain task that marks when it started."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from agentfleet import TaskContext, fleet_task
from agentfleet.celery_app import app


def _mark_end(token: str) -> None:
    with redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"]) as client:
        client.set(f"test:end:{token}", time.time(), ex=600)


@fleet_task
def fleet_marked(ctx: TaskContext, token: str) -> dict[str, Any]:
    _mark_end(token)
    return {"token": token}


@app.task(name="ack_test_tasks.plain_marked")
def plain_marked(token: str) -> str:
    _mark_end(token)
    return token


@app.task(name="ack_test_tasks.timed_plain")
def timed_plain(token: str, sleep_s: float) -> str:
    """Marks when it started (Unix seconds) under ``test:start:{token}``, then sleeps."""
    with redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"]) as client:
        client.set(f"test:start:{token}", time.time(), ex=600)
    time.sleep(sleep_s)
    return token
