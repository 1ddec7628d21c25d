"""The messages that carry an item from a given stage on, a run's aggregate and its compensation.

Dispatch, requeue, the reconciler and the workers send the same message for the same work:
an item's stage ``s`` with its input (stage 0: the item's input; a later stage: the previous
stage's stored outcome, as a chain hands it on), chained to the stages after it, under the
item's task ids (``names.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery, chain
from celery.canvas import Signature

from agentfleet.outages import repeatable
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.protocol.names import (
    AGGREGATE_TASK,
    COMPENSATE_TASK,
    aggregate_task_id,
    compensation_task_id,
)
from agentfleet.protocol.reprs import message_reprs
from agentfleet.redaction import Redactor
from agentfleet.runs import UndoLog

__all__ = [
    "MAX_PRIORITY",
    "aggregate_signature",
    "cap_countdown",
    "compensation_signature",
    "item_signature",
    "message_priority",
    "recorded_priority",
    "request_compensation",
]

log = logging.getLogger("agentfleet.compensation")

#: Run priorities go from 0 to this; a higher one is served sooner.
MAX_PRIORITY = 9


def cap_countdown(countdown_s: float, max_countdown_s: float) -> float:
    """Clamp a countdown to ``[0, max_countdown_s]``.

    On Redis a message held longer than the visibility timeout is delivered again, so a
    longer countdown would run the task twice.
    """
    return max(0.0, min(countdown_s, max_countdown_s))


def aggregate_signature(app: Celery, run_id: str, fn: str, queue: str) -> Signature:
    """The fan-in message: ``fn`` over the run's successful results."""
    return app.signature(
        AGGREGATE_TASK,
        kwargs={"run_id": run_id, "fn": fn},
        task_id=aggregate_task_id(run_id),
        queue=queue,
    )


def recorded_priority(record: Mapping[str, str]) -> int | None:
    """The priority a run's record names (None for a run recorded without one)."""
    raw = record.get("priority", "")
    return int(raw) if raw else None


def compensation_signature(app: Celery, run_id: str, queue: str) -> Signature:
    """The message that runs run ``run_id``'s compensations (``tasks/compensator.py``)."""
    return app.signature(
        COMPENSATE_TASK, kwargs={"run_id": run_id}, task_id=compensation_task_id(run_id), queue=queue
    )


@repeatable
def request_compensation(undo: UndoLog, celery: Celery, run_id: str, queue: str) -> bool:
    """Tell run ``run_id`` to compensate, its message on ``queue``; True when this call did
    (the first to ask). Asked again, it sends nothing: a message the first call did not get
    out is the reconciler's to send."""
    if not undo.request(run_id):
        return False
    try:
        compensation_signature(celery, run_id, queue).apply_async()
    except Exception:
        # The run stays active with its compensation requested: the reconciler sends it.
        log.exception("could not send the compensation of run %s; the reconciler will", run_id)
    return True


def message_priority(priority: int) -> int:
    """kombu's message priority for a run's ``priority`` (0 to 9, higher first).

    kombu's Redis transport keeps a queue's messages in four lists (priorities 0-2, 3-5, 6-8
    and 9) and a worker's ``BRPOP`` takes from them in that order: a lower kombu number is
    served first. So run priorities 7-9 share the first list, 4-6 the second, 1-3 the third
    and 0 the last; within a list, first in, first out. Retries keep their message's priority.
    """
    return MAX_PRIORITY - max(0, min(MAX_PRIORITY, priority))


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
    priority: int | None = None,
) -> Signature:
    """Stage ``meta.stage`` of an item, chained to the stages after it.

    ``inputs`` is the keyword input of stage 0; ``previous`` the outcome (as a dict) of the stage
    before a later one. ``names`` and ``queues`` give every stage's task name and queue. With
    ``redactor``, each message shows (in Flower, ``inspect``, events) only its redacted user
    inputs (``message_reprs``), never the ``_af`` block. ``priority`` is the run's (0 to 9,
    higher first; see ``message_priority``).
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
        if priority is not None:
            options["priority"] = message_priority(priority)
        sigs.append(app.signature(names[stage], args=args, kwargs=kwargs, **options))
    return chain(*sigs, app=app) if len(sigs) > 1 else sigs[0]
