"""``agentfleet demo``: a real fan-out of agents on an embedded cluster, with a live progress bar.

By default each task is the built-in ``classify_sentiment`` agent: the Anthropic SDK making
real HTTP calls to the built-in mock Messages API (injected 529s and 500s show up as retries;
two items fail for good and land in the dead-letter queue). With ``ANTHROPIC_API_KEY`` set,
the calls go to Anthropic instead. ``--simulated`` runs sleeping stand-ins with no LLM at all.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import ExitStack
from typing import Any

import typer

from agentfleet.cli.demo_texts import FAILING_TEXTS, QUICKSTART_TEXTS, extra_text
from agentfleet.cli.dlq_tables import entries_table, stats_view
from agentfleet.cli.output import console, outcomes_table, summary_table
from agentfleet.cli.progress import follow
from agentfleet.local import LocalCluster
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet, Run
from agentfleet.redis_client import mask_url

__all__ = ["demo"]


def _agent_inputs(tasks: int) -> list[dict[str, Any]]:
    texts = [*QUICKSTART_TEXTS, *(extra_text(i) for i in range(tasks)), *FAILING_TEXTS]
    return [{"text": text} for text in texts]


def _simulated_inputs(tasks: int, latency_s: float, failure_rate: float) -> list[dict[str, Any]]:
    inputs: list[dict[str, Any]] = [
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
    for i in range(min(2, tasks)):
        inputs[(i * 37) % tasks]["latency_s"] = "not-a-number"
    return inputs


def _report(fleet: Fleet, run: Run, *, labels: bool) -> None:
    summary = run.wait(timeout_s=0.1)
    console.print(summary_table(summary))
    outcomes = run.outcomes()
    if labels:
        counts = Counter(o.result["label"] for o in outcomes if o.ok and isinstance(o.result, dict))
        console.print("labels: " + ", ".join(f"{label} {n}" for label, n in counts.most_common()))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        console.print(outcomes_table(failed, title="failed items"))
    dead = fleet.dlq.list(run_id=run.id)
    if dead:
        console.print(entries_table(dead, title=f"the dead-letter queue of run {run.id}"))
        console.print(stats_view(fleet.dlq.stats()))


def _closing_hint(embedded: bool) -> str:
    """What to do next: where the run's records are, and how to keep a fleet running."""
    if not embedded:
        return (
            "The workers stopped; the run and its dead letters stay in your Redis: "
            "`agentfleet runs list`, `agentfleet dlq show ID`, `agentfleet dlq requeue ID`."
        )
    return (
        "The embedded Redis, the workers and the mock stopped with the demo, and the run and its "
        "dead letters with them. To keep a fleet running, with the console: `agentfleet dev` "
        "(Ctrl-C stops it). Or point every process at one Redis and start each in a terminal "
        "of its own:\n"
        "  export AGENTFLEET_BROKER_URL=redis://localhost:6379/0\n"
        "  agentfleet mock-llm --port 8765     # or set ANTHROPIC_API_KEY\n"
        "  AGENTFLEET_LLM__BASE_URL=http://127.0.0.1:8765 agentfleet worker --pool gevent --concurrency 200\n"
        "  agentfleet serve                    # /health, /metrics and the console\n"
        "Then `agentfleet demo` runs on that Redis, and `agentfleet dlq show ID` finds its dead "
        "letters afterwards (README: your own task on your own Redis)."
    )


def demo(
    tasks: int = typer.Option(
        0, "--tasks", "-t", min=0, help="Items beyond the ten quickstart texts.", metavar="N"
    ),
    workers: int = typer.Option(2, "--workers", "-w", min=1, help="Worker processes to start.", metavar="N"),
    concurrency: int = typer.Option(
        16, "--concurrency", "-c", min=1, help="Pool size per worker.", metavar="N"
    ),
    pool: str = typer.Option("threads", help="Worker pool: threads, prefork or gevent.", metavar="POOL"),
    latency_s: float = typer.Option(
        0.5, min=0.0, help="Median latency of a model call (or task), seconds.", metavar="SECONDS"
    ),
    failure_rate: float = typer.Option(
        0.1, min=0.0, max=1.0, help="Share of calls that fail transiently.", metavar="SHARE"
    ),
    simulated: bool = typer.Option(False, "--simulated", help="Sleeping stand-ins instead of LLM agents."),
    timeout_s: float = typer.Option(
        300.0, min=1.0, help="How long to wait for the run, seconds.", metavar="SECONDS"
    ),
) -> None:
    """Fan out agents over real workers and an embedded Redis.

    Shows the run as it goes, its summary and its dead letters.
    """
    real_api = bool(os.environ.get("ANTHROPIC_API_KEY")) and not simulated
    with ExitStack() as stack:
        env: dict[str, str] = {}
        if not simulated and not real_api:
            rates = {529: failure_rate * 0.6, 500: failure_rate * 0.4}
            latency = f"lognormal:{latency_s},0.3" if latency_s > 0 else 0.0
            server = stack.enter_context(MockMessagesServer(latency=latency, error_rates=rates, seed=7))
            env["AGENTFLEET_LLM__BASE_URL"] = server.url
            console.print(
                f"Started the mock Messages API at {server.url} (set ANTHROPIC_API_KEY for the real one)."
            )
        env.setdefault("AGENTFLEET_RETRY__BACKOFF_BASE_S", "0.5")
        cluster = stack.enter_context(
            LocalCluster(workers=workers, concurrency=concurrency, pool=pool, loglevel="WARNING", env=env)
        )
        where = "an embedded Redis" if cluster.embedded else "the Redis at AGENTFLEET_BROKER_URL"
        console.print(
            f"Using {where} ({mask_url(cluster.broker_url)}) and {workers} worker processes "
            f"({pool} pool, concurrency {concurrency} each)."
        )
        fleet = cluster.fleet()
        if simulated:
            inputs = _simulated_inputs(tasks or 100, latency_s, failure_rate)
            run = fleet.map("agentfleet.simulated_agent", inputs, name="demo")
        else:
            run = fleet.map("agentfleet.classify_sentiment", _agent_inputs(tasks), name="demo-sentiment")
        console.print(f"Dispatched run {run.id}: {run.total} tasks.")
        follow(run, fleet, timeout_s=timeout_s, label="simulated agents" if simulated else "sentiment agents")
        _report(fleet, run, labels=not simulated)
        embedded = cluster.embedded
    console.print(_closing_hint(embedded))
