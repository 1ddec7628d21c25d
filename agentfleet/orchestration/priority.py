"""Run priorities: which run's waiting messages workers take first.

A run's priority goes from 0 to 9, higher first. It is sent as kombu's message priority (see
``protocol.messages.message_priority``): workers take the messages of a higher run before those
of a lower one that waited longer, and messages a worker sends for an item while running it
(a graph's next steps, a batch item sent alone) inherit it (``task_inherit_parent_priority``).
Retries keep their message's priority; the reconciler and requeue send at the run's recorded one.

By default a run of at most ``dispatch.small_run_items`` items gets ``SMALL_RUN_PRIORITY`` and
a larger one ``RUN_PRIORITY``: a small interactive run never waits behind the queued messages
of a batch of thousands, however early the batch came.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery.canvas import Signature

from agentfleet.config import Settings
from agentfleet.errors import DispatchError
from agentfleet.protocol.messages import MAX_PRIORITY, message_priority

__all__ = ["RUN_PRIORITY", "SMALL_RUN_PRIORITY", "prioritized", "run_priority"]

# Different lists of kombu's for each (see ``message_priority``).
RUN_PRIORITY = 5
SMALL_RUN_PRIORITY = 8


def run_priority(priority: int | None, items: int, settings: Settings) -> int:
    """A run's priority: ``priority`` when given (``DispatchError`` outside 0-9), else the
    default for a run of ``items`` items."""
    if priority is not None:
        if not 0 <= priority <= MAX_PRIORITY:
            raise DispatchError(
                f"priority must be between 0 and {MAX_PRIORITY} (higher first), not {priority}"
            )
        return priority
    return SMALL_RUN_PRIORITY if items <= settings.dispatch.small_run_items else RUN_PRIORITY


def prioritized(sigs: Sequence[Signature], priority: int) -> list[Signature]:
    """``sigs`` with every message (each stage of a chain too) sent at the run's ``priority``."""
    value = message_priority(priority)
    for sig in sigs:
        for part in sig.tasks if sig.subtask_type == "chain" else [sig]:
            part.set(priority=value)
    return list(sigs)
