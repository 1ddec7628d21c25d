"""A fleet task and a plain Celery task on agentfleet's app that mark when their bodies end, for
the acknowledgement tests (imported by workers via AGENTFLEET_TASK_MODULES)."""

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
