"""The fleet's own task names and the task ids of a run's messages, shared by both sides.

A task id names one piece of work in its run, so a second send of the same work is the same
message (Celery and the reconciler tell copies apart by it):

- an item: ``{run}-{index}``, a later pipeline stage ``{run}-{index}-s{stage}``, a graph step
  ``{run}-{index}-n-{step}`` (``ItemMeta.task_id``);
- a batch of a batched map: ``{run}-b{first index}``;
- a run's aggregate: ``{run}-agg``; its compensation: ``{run}-comp``.
"""

from __future__ import annotations

__all__ = [
    "AGGREGATE_TASK",
    "COMPENSATE_TASK",
    "aggregate_task_id",
    "batch_task_id",
    "compensation_task_id",
]

AGGREGATE_TASK = "agentfleet.aggregate"
COMPENSATE_TASK = "agentfleet.compensate"


def aggregate_task_id(run_id: str) -> str:
    """The task id of a run's aggregate: one per run, so a second send is the same message."""
    return f"{run_id}-agg"


def compensation_task_id(run_id: str) -> str:
    """The task id of a run's compensation: one per run, so a second send is the same message."""
    return f"{run_id}-comp"


def batch_task_id(run_id: str, first: int) -> str:
    """The task id of the batch of run ``run_id`` that starts at item index ``first``."""
    return f"{run_id}-b{first}"
