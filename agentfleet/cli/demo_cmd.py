"""``agentfleet demo``: a real fan-out on an embedded cluster, with a live progress bar."""

from __future__ import annotations

import typer

from agentfleet.cli.dlq_tables import entries_table
from agentfleet.cli.output import console, outcomes_table, summary_table
from agentfleet.cli.progress import follow
from agentfleet.local import LocalCluster

__all__ = ["demo"]


def demo(
    tasks: int = typer.Option(100, "--tasks", "-t", min=1, help="How many simulated agent tasks."),
    workers: int = typer.Option(2, "--workers", "-w", min=1, help="Worker processes to start."),
    concurrency: int = typer.Option(16, "--concurrency", "-c", min=1, help="Pool size per worker."),
    pool: str = typer.Option("threads", help="Worker pool: threads, prefork or gevent."),
    latency_s: float = typer.Option(1.0, min=0.0, help="Median simulated latency of a task, seconds."),
    failure_rate: float = typer.Option(0.1, min=0.0, max=1.0, help="Chance an attempt fails transiently."),
    broken: int = typer.Option(2, min=0, help="Items whose input is bad, so they fail permanently."),
    timeout_s: float = typer.Option(300.0, min=1.0, help="How long to wait for the run, seconds."),
) -> None:
    """Fan out simulated agents over real Celery workers on an embedded Redis."""
    inputs = [
        {
            "item": f"doc-{i:04d}",
            "latency_s": latency_s,
            "jitter_s": latency_s * 0.3,
            "distribution": "lognormal",
            "failure_rate": failure_rate,
            "seed": 7,
        }
        for i in range(tasks)
    ]
    for i in range(min(broken, tasks)):
        inputs[(i * 37) % tasks]["latency_s"] = "not-a-number"
    with LocalCluster(workers=workers, concurrency=concurrency, pool=pool, loglevel="WARNING") as cluster:
        where = "an embedded Redis" if cluster.embedded else "the Redis at AGENTFLEET_BROKER_URL"
        console.print(
            f"Using {where} ({cluster.broker_url}) and {workers} worker processes "
            f"({pool} pool, concurrency {concurrency} each)."
        )
        fleet = cluster.fleet()
        run = fleet.map("agentfleet.simulated_agent", inputs, name="demo")
        console.print(f"Dispatched run {run.id}: {tasks} tasks.")
        follow(run, timeout_s=timeout_s, label="simulated agents")
        summary = run.wait(timeout_s=0.1)
        console.print(summary_table(summary))
        failed = [o for o in run.outcomes() if not o.ok]
        if failed:
            console.print(outcomes_table(failed, title="failed items"))
        dead = fleet.dlq.list(run_id=run.id)
        if dead:
            console.print(entries_table(dead, title=f"the dead-letter queue of run {run.id}"))
            console.print("On a Redis of your own: `agentfleet dlq show ID`, `agentfleet dlq requeue ID`.")
