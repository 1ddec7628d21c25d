"""The messages that carry an item from a given stage on, a run's aggregate and its compensation.

Dispatch, requeue and the reconciler send the same message for the same work: an item's stage
``s`` with its input (stage 0: the item's input; a later stage: the previous stage's stored
outcome, as a chain hands it on), chained to the stages after it, under the item's task ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery, chain
from celery.canvas import Signature

from agentfleet.redaction import Redactor
from agentfleet.tasks.message_reprs import message_reprs
from agentfleet.tasks.meta import META_KWARG, ItemMeta

__all__ = [
    "AGGREGATE_TASK",
    "COMPENSATE_TASK",
    "aggregate_signature",
    "aggregate_task_id",
    "compensation_signature",
    "compensation_task_id",
    "item_signature",
]

AGGREGATE_TASK = "agentfleet.aggregate"
COMPENSATE_TASK = "agentfleet.compensate"


def aggregate_task_id(run_id: str) -> str:
    """The task id of a run's aggregate: one per run, so a second send is the same message."""
    return f"{run_id}-agg"


def aggregate_signature(app: Celery, run_id: str, fn: str, queue: str) -> Signature:
    """The fan-in message: ``fn`` over the run's successful results."""
    return app.signature(
        AGGREGATE_TASK,
        kwargs={"run_id": run_id, "fn": fn},
        task_id=aggregate_task_id(run_id),
        queue=queue,
    )


def compensation_task_id(run_id: str) -> str:
    """The task id of a run's compensation: one per run, so a second send is the same message."""
    return f"{run_id}-comp"


def compensation_signature(app: Celery, run_id: str, queue: str) -> Signature:
    """The message that runs run ``run_id``'s compensations (``tasks/compensator.py``)."""
    return app.signature(
        COMPENSATE_TASK, kwargs={"run_id": run_id}, task_id=compensation_task_id(run_id), queue=queue
    )


def _later_stage(meta: ItemMeta, stage: int) -> ItemMeta:
    # A stage not yet reached starts with nothing spent.
    return meta.model_copy(
        update={"stage": stage, "attempt": 0, "deferrals": 0, "elapsed_s": 0.0, "cost_usd": 0.0}
    )


def item_signature(
    app: Celery,
    *,
    names: Sequence[str],
    queues: Sequence[str],
    meta: ItemMeta,
    inputs: Mapping[str, Any] | None = None,
    previous: Mapping[str, Any] | None = None,
    countdown_s: float = 0.0,
    redactor: Redactor | None = None,
) -> Signature:
    """Stage ``meta.stage`` of an item, chained to the stages after it.

    ``inputs`` is the keyword input of stage 0; ``previous`` the outcome (as a dict) of the stage
    before a later one. ``names`` and ``queues`` give every stage's task name and queue. With
    ``redactor``, each message shows (in Flower, ``inspect``, events) only its redacted user
    inputs (``message_reprs``), never the ``_af`` block.
    """
    sigs = []
    for stage in range(meta.stage, len(names)):
        stage_meta = meta if stage == meta.stage else _later_stage(meta, stage)
        kwargs: dict[str, Any] = {META_KWARG: stage_meta.to_kwarg()}
        args: list[Any] = []
        if stage == meta.stage:
            if stage == 0:
                kwargs = {**(inputs or {}), **kwargs}
            elif previous is not None:
                args = [dict(previous)]
        options: dict[str, Any] = {"task_id": stage_meta.task_id, "queue": queues[stage]}
        if stage == meta.stage and countdown_s > 0:
            options["countdown"] = countdown_s
        if redactor is not None:
            options.update(message_reprs(kwargs, redactor, args))
        sigs.append(app.signature(names[stage], args=args, kwargs=kwargs, **options))
    return chain(*sigs, app=app) if len(sigs) > 1 else sigs[0]
