"""Plain Celery tasks on the agentfleet app: the baseline the benchmarks compare against."""

from __future__ import annotations

import time

from agentfleet.celery_app import app


@app.task(name="bench.sleep", acks_late=True)
def sleep_task(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(name="bench.noop", acks_late=True)
def noop_task() -> None:
    return None
