"""``agentfleet worker``: a Celery worker with agentfleet's defaults."""

from __future__ import annotations

import os
import sys

import typer

from agentfleet.config import get_settings

__all__ = ["worker"]


def worker(
    pool: str | None = typer.Option(None, help="prefork, threads, gevent or solo (default from settings)."),
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", min=1, help="Pool size."),
    autoscale: str | None = typer.Option(None, help="'max,min' pool sizes; prefork and gevent only."),
    queues: str | None = typer.Option(None, "--queues", "-Q", help="Comma-separated queues (default: all)."),
    loglevel: str = typer.Option("INFO", "--loglevel", "-l", help="Log level."),
    hostname: str | None = typer.Option(None, "--hostname", "-n", help="Node name, e.g. agents1@%h."),
) -> None:
    """Start a worker on the configured broker (``celery -A agentfleet.celery_app worker``)."""
    settings = get_settings()
    chosen_pool = pool or settings.worker.pool
    autoscale = autoscale or settings.worker.autoscale
    if autoscale and chosen_pool not in ("prefork", "gevent"):
        raise typer.BadParameter("--autoscale needs --pool prefork or gevent", param_hint="--autoscale")
    argv = [
        "-m",
        "celery",
        "-A",
        "agentfleet.celery_app",
        "worker",
        "--pool",
        chosen_pool,
        "--loglevel",
        loglevel,
        "--task-events",
    ]
    argv += ["--queues", queues or ",".join(settings.queues.model_dump().values())]
    if autoscale:
        argv += ["--autoscale", autoscale]
    else:
        argv += ["--concurrency", str(concurrency or settings.worker.concurrency)]
    if hostname:
        argv += ["--hostname", hostname]
    # Replace this process with Celery's own command, so a gevent pool is patched before any
    # import and signals reach the worker directly.
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])
