"""Built-in tasks: the simulated agent (demo and benchmarks) and the fan-in callback."""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Literal, Protocol

from agentfleet.celery_app import app
from agentfleet.errors import DownstreamError, InvalidInput
from agentfleet.tasks import (
    flower_setup,  # noqa: F401  (configures Flower from the settings when Flower imports this)
    lifecycle,  # noqa: F401  (connects worker signals)
    process_logging,  # noqa: F401  (filters every log handler)
)
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.decorator import fleet_task
from agentfleet.tasks.fanin import run_aggregate
from agentfleet.tasks.runtime import runtime

__all__ = ["aggregate", "simulated_agent"]

log = logging.getLogger("agentfleet.tasks")


class _Draws(Protocol):
    def random(self) -> float: ...
    def uniform(self, a: float, b: float) -> float: ...
    def lognormvariate(self, mu: float, sigma: float) -> float: ...


def _latency(distribution: str, latency_s: float, jitter_s: float, rng: _Draws) -> float:
    if distribution == "uniform":
        return max(0.0, rng.uniform(latency_s - jitter_s, latency_s + jitter_s))
    if distribution == "lognormal":
        sigma = jitter_s / latency_s if latency_s > 0 else 0.0
        return latency_s * rng.lognormvariate(0.0, sigma) if latency_s > 0 else 0.0
    return latency_s


@fleet_task(name="agentfleet.simulated_agent")
def simulated_agent(
    ctx: TaskContext,
    item: Any = None,
    latency_s: float = 1.0,
    jitter_s: float = 0.0,
    distribution: Literal["fixed", "uniform", "lognormal"] = "fixed",
    failure_rate: float = 0.0,
    permanent: bool = False,
    seed: int | None = None,
) -> dict[str, Any]:
    """Stand in for an agent: sleep ``latency_s`` seconds (drawn from ``distribution``).

    With probability ``failure_rate`` an attempt fails with a retryable downstream error
    (decided per item and attempt, so runs are repeatable given ``seed``); ``permanent``
    makes the item fail for good instead.
    """
    if permanent:
        raise InvalidInput(f"item {item!r} is marked to fail permanently")
    # Unseeded items share the ``random`` module's generator (seeding a new one reads the OS's
    # entropy each time), which Python reseeds in a forked pool process.
    rng: _Draws = random.Random(f"{seed}:{ctx.item_key}:{ctx.attempt}") if seed is not None else random
    slept = _latency(distribution, latency_s, jitter_s, rng)
    if slept:
        time.sleep(slept)
    if failure_rate and rng.random() < failure_rate:
        raise DownstreamError("simulated transient failure", status_code=503, downstream="simulated")
    return {"item": item, "slept_s": round(slept, 4), "attempt": ctx.attempt}


@app.task(name="agentfleet.aggregate", bind=True, acks_late=True, reject_on_worker_lost=True)
def aggregate(self: Any, run_id: str, fn: str) -> Any:
    """The fan-in: the run's aggregate over the successful items' results, in input order.

    Sent by the worker that records a run's last outcome (or by the reconciler, if that worker
    died first). A second copy finds the stored aggregate and returns it. Whatever the
    aggregate does, its result or its failure is recorded once (``tasks/fanin.py``).
    """
    rt = runtime()
    return run_aggregate(rt.settings, rt.runs, run_id, fn, worker=self.request.hostname)
