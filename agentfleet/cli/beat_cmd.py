"""``agentfleet beat``: celery beat with the Redis scheduler (one sends; others wait)."""

from __future__ import annotations

import os
import sys

import typer

__all__ = ["beat"]


def beat(
    log_level: str = typer.Option("INFO", "--log-level", "-l", help="Log level.", metavar="LEVEL"),
    old_log_level: str | None = typer.Option(
        None, "--loglevel", hidden=True, help="Old spelling of --log-level."
    ),
) -> None:
    """Run celery beat, which sends the schedules.

    A second beat waits for the lock instead of sending.
    """
    argv = ["-m", "celery", "-A", "agentfleet.celery_app", "beat", "--loglevel", old_log_level or log_level]
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])
