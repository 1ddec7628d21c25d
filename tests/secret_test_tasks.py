"""Tasks and probes for the secret-handling suite (imported via AGENTFLEET_TASK_MODULES).

The credential ``vendor_a`` (value in ``VENDOR_A_KEY``) is configured in every process. The
task asks a server that echoes the key back, then returns, logs and prints what it got.
Each process kind also logs the value itself through a library's logger once it is up
(worker ready, beat started, Flower building its application), with a traceback quoting it:
every one of those lines must come out redacted.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from celery.signals import beat_init, worker_ready

from agentfleet import TaskContext, fleet_task

library = logging.getLogger("vendor.sdk")


@fleet_task
def echo_credential(ctx: TaskContext, url: str, note: str = "") -> dict[str, Any]:
    body = ctx.http.get(url, headers={"X-Key": "$CRED{vendor_a}"}).text
    ctx.log.warning("the server answered %s", body)
    library.warning("raw response body: %s", body)
    print(f"printed by the task: {body}")
    return {"echo": body, "note": note}


def _log_the_value(where: str) -> None:
    value = os.environ["VENDOR_A_KEY"]
    library.warning("%s: the SDK was configured with key=%s", where, value)
    try:
        raise RuntimeError(f"{where}: connection refused for token {value}")
    except RuntimeError:
        library.exception("%s: a failure quoting the key", where)


@worker_ready.connect
def _worker_up(**_: Any) -> None:
    _log_the_value("worker")


@beat_init.connect
def _beat_up(**_: Any) -> None:
    _log_the_value("beat")


def _in_flower() -> bool:
    # Every celery command imports flower.command (Flower registers its subcommand); only
    # Flower's own command runs under a click context named "flower".
    if "flower.command" not in sys.modules:
        return False
    import click

    context = click.get_current_context(silent=True)
    return context is not None and context.info_name == "flower"


if _in_flower():  # imported by Flower, while it builds its application
    _log_the_value("flower")
