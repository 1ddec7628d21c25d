"""Compensation: undoing a run's succeeded work, newest first, each piece once.

A task declares how to undo one of its successes: ``@fleet_task(compensate=fn)`` with
``fn(ctx, inputs, result)``. Every success of such a task (an item, a pipeline stage, a graph
step) is noted in the run's undo log (``agentfleet.runs.undo``) before its outcome is stored.

A run is told to compensate when it fails fast (its first final failure), when it is
cancelled (``Run.cancel()``), or on demand (``Run.compensate()``, ``agentfleet runs
compensate``). Then one ``agentfleet.compensate`` message per run (task id ``{run}-comp``, on
the fan-in queue) waits, by its countdown, until every item of the run has its outcome (so
items still running when the run failed are undone too), and runs the compensations one after
another, the most recent success first:

- ``ctx.idempotency_key`` is the success's own key plus ``:compensate``, the same on every
  try: a compensation cut off by a crash runs again, so pass the key to what it calls;
- one that succeeded is recorded (``compensated``) and never runs again;
- one that fails with a retryable error is tried again with backoff, up to its task's
  ``max_retries``, the later ones waiting (the order holds); past that, or on a permanent
  error, it is dead-lettered with category ``compensation`` (``compensations_failed``) and
  the next one runs. Requeuing that dead letter runs that compensation again.

The message holds the run's compensation lock (a claim, renewed while it runs) so that two
copies never undo at once; the reconciler sends it again if it is lost. The task itself is
``tasks/compensator.py``; a run is told to compensate by ``protocol.messages.request_compensation``.
"""

from __future__ import annotations

from typing import Any

from agentfleet.config import Settings
from agentfleet.outages import repeatable
from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.task import FleetTask
from agentfleet.tasks.runtime import runtime

__all__ = ["note_success"]


@repeatable
def note_success(
    settings: Settings, task: FleetTask, meta: ItemMeta, key: str, inputs: dict[str, Any], result: Any
) -> None:
    """Note a success of ``task`` (which has a compensation) under its own ``key`` (the first
    note of a key stands)."""
    runtime(settings).undo.note(
        meta.run,
        key,
        {"task": task.name, "inputs": inputs, "result": result, "meta": meta.to_kwarg()},
    )
