"""Finishing deliveries whose pool process died: their claims, and the hard time limit.

Both run in the worker's main process (``FleetRequest``), after the pool process running the
delivery was killed. For a batch (``tasks/batch.py``) there is no single attempt to finish:
every claim the dead process held on the batch's items is released, and after a hard time
limit the items that have no outcome are sent again alone (the one that was running counts
a delivery towards ``dlq.max_deliveries``, so one that always overruns ends as poison).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentfleet.errors import TaskTimeLimit
from agentfleet.protocol.batches import batch_items, is_batch
from agentfleet.runs.claims import claim_owner_prefix
from agentfleet.tasks.batch import send_alone
from agentfleet.tasks.execution import Delivery
from agentfleet.tasks.next_step import Rescheduled, after_error
from agentfleet.tasks.runtime import runtime

if TYPE_CHECKING:
    from celery.app.task import Context

    from agentfleet.protocol.task import FleetTask

__all__ = ["after_hard_time_limit", "release_claim_of_dead_process"]


def release_claim_of_dead_process(task: FleetTask, request: Context, node: str, pid: int) -> None:
    """Release the claim a pool process that died (``pid`` of worker ``node``) held on the item of
    ``request``, so its next delivery runs at once instead of after the claim lapses."""
    kwargs = dict(request.kwargs or {})
    if is_batch(kwargs):
        keys = [meta.key for _, meta in batch_items(kwargs)]
    else:
        keys = [Delivery(task, tuple(request.args or ()), kwargs, request=request).key]
    runs = runtime().runs
    for key in keys:
        runs.release_claim_of(key, claim_owner_prefix(node, pid))


def _resend_unfinished(task: FleetTask, kwargs: dict[str, Any]) -> None:
    rt = runtime()
    settings = rt.settings
    items = batch_items(kwargs)
    stored = rt.runs.stored_outcomes([meta.key for _, meta in items])
    queue = getattr(task, "queue", None) or settings.queues.agents
    for (inputs, meta), outcome in zip(items, stored, strict=True):
        if outcome is None:
            send_alone(task, meta, inputs, queue, 0.0)


def after_hard_time_limit(task: FleetTask, request: Context, limit_s: float) -> dict[str, Any] | None:
    """Finish an attempt that its hard time limit killed: retry it, or end it as a dead letter.

    Returns the item's outcome as a dict when it ended, None when it was sent again (a
    batch's unfinished items are sent again alone).
    """
    kwargs = dict(request.kwargs or {})
    if is_batch(kwargs):
        _resend_unfinished(task, kwargs)
        return None
    delivery = Delivery(task, tuple(request.args or ()), kwargs, request=request)
    ended = delivery.before_claim()
    if ended is not None:
        return ended
    err = TaskTimeLimit(f"the hard time limit of {limit_s} s ran out and the worker process was killed")
    attempts = delivery.carried[0] + delivery.meta.attempt + 1
    try:
        return after_error(delivery, err, None, float(limit_s), attempts, "")
    except Rescheduled:
        return None
