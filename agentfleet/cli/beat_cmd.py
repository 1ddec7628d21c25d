"""``agentfleet beat``: celery beat with the Redis scheduler, or a check that one is running."""

from __future__ import annotations

import os
import sys

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.output import console
from agentfleet.config import get_settings
from agentfleet.redis_client import connect

__all__ = ["beat"]


def _lock_key() -> str:
    from agentfleet.celery_app import redbeat_key_prefix

    return redbeat_key_prefix(get_settings()) + ":lock"


def beat(
    loglevel: str = typer.Option("INFO", "--loglevel", "-l", help="Log level."),
    check: bool = typer.Option(
        False, "--check", help="Exit 0 when a beat holds the schedule lock, 1 when none does."
    ),
) -> None:
    """Run celery beat (one per cluster: a second one waits for the lock) or check on it."""
    if check:
        url = require_broker()
        ttl_ms = int(connect(url).pttl(_lock_key()))
        if ttl_ms <= 0:
            console.print("no beat holds the schedule lock")
            raise typer.Exit(1)
        console.print(f"a beat holds the schedule lock ({ttl_ms / 1000:.1f} s left before it must renew)")
        return
    argv = ["-m", "celery", "-A", "agentfleet.celery_app", "beat", "--loglevel", loglevel]
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])
