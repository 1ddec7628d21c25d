"""``agentfleet beat``: celery beat with the Redis scheduler (one sends; others wait)."""

from __future__ import annotations

import os
import sys

import typer

__all__ = ["beat"]


def beat(loglevel: str = typer.Option("INFO", "--loglevel", "-l", help="Log level.")) -> None:
    """Run celery beat for agentfleet.celery_app; a second beat waits for the lock instead of sending."""
    argv = ["-m", "celery", "-A", "agentfleet.celery_app", "beat", "--loglevel", loglevel]
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])
