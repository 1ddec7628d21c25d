"""Requeue: send a dead letter's item again, with the same idempotency key and a fresh budget.

For one entry, in this order:

1. refuse it when it cannot run as it was (secrets were redacted from its input, its run was
   cancelled, a pipeline's stage names are unknown) or may not be sent at all (a task that is
   not a fleet task a live worker registers: ``requeue_guard.py``);
2. reopen the item in its run: its failed outcome is dropped and un-counted, and the run's
   ``redelivered`` counter goes up (without this the new delivery would find the stored
   failure and return it, as idempotency demands);
3. publish: the failed stage with its stored input (for a pipeline, the previous stage's stored
   result) and, chained behind it, the stages that never ran. ``meta.requeues`` goes up and
   ``attempt`` starts at 0 again;
4. only once the broker took the message, delete the entry, and only if it is still the same
   generation: a requeued item that already failed again keeps its new dead letter.

If publishing fails, the item's failed outcome is recorded again and the entry stays.

A requeued item keeps its steps and agent checkpoints (it resumes where it failed) but starts
its spending over: its budgets count from the requeue on. A failed step of a dependency
graph is sent again alone, its skipped dependents released once it succeeds
(``orchestration/graph.py``); a dead-lettered compensation (category ``compensation``) runs
again in its run's compensation; a dead-lettered aggregate (category ``aggregate``) runs
again, the one its run recorded, if its workers may run it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from celery import Celery
from celery.canvas import Signature
from pydantic import BaseModel

from agentfleet import tracing
from agentfleet.config import Settings
from agentfleet.dlq import DeadLetter, DLQStore
from agentfleet.dlq.model import MALFORMED_BLOCKER
from agentfleet.errors import AggregateFailed, CompensationFailed, MalformedMessage
from agentfleet.idempotency import node_key, stage_key
from agentfleet.models import TaskOutcome
from agentfleet.orchestration.graph import requeue_step
from agentfleet.orchestration.requeue_guard import aggregate_refusal, task_refusal
from agentfleet.protocol.messages import (
    aggregate_signature,
    compensation_signature,
    item_signature,
    recorded_priority,
)
from agentfleet.protocol.meta import ItemMeta, run_meta_fields
from agentfleet.registry import WorkerRecord
from agentfleet.runs import MemoryStore, RunStore, UndoLog

__all__ = ["RequeueResult", "requeue_entry"]

Action = Literal["requeued", "would requeue", "skipped", "failed"]


class RequeueResult(BaseModel):
    """What requeue did (or, in a dry run, would do) with one entry, and why when it did not."""

    id: str
    task_name: str
    task_id: str
    run_id: str
    stage: int
    action: Action
    reason: str | None = None
    stages_sent: list[str] = []


def _meta(entry: DeadLetter, stage: int, **run_fields: Any) -> ItemMeta:
    return ItemMeta(
        run=entry.run_id,
        idx=entry.index,
        key=entry.idempotency_key,
        item=entry.item_key,
        stage=stage,
        stages=entry.stages,
        requeues=entry.requeues + 1,
        **run_fields,
    )


def _previous_outcome(entry: DeadLetter) -> dict[str, Any]:
    """The previous stage's outcome as a chain hands it on: its result is this stage's input."""
    before = _meta(entry, entry.stage - 1)
    spent = entry.previous
    return TaskOutcome(
        task_id=before.task_id,
        run_id=entry.run_id,
        item_key=entry.item_key,
        ok=True,
        result=entry.inputs,
        attempts=spent.attempts if spent else 0,
        duration_s=spent.duration_s if spent else 0.0,
        cost_usd=spent.cost_usd if spent else 0.0,
        index=entry.index,
        idempotency_key=stage_key(entry.idempotency_key, entry.stage - 1, entry.stages),
    ).model_dump(mode="json")


def _signature(entry: DeadLetter, app: Celery, settings: Settings, record: dict[str, str]) -> Signature:
    names = entry.stage_tasks or [entry.task_name]
    queues = [settings.queues.agents] * len(names)
    queues[entry.stage] = entry.queue or settings.queues.agents
    meta = _meta(entry, entry.stage, **run_meta_fields(record))
    shown = settings.redactor()  # what Flower and `inspect` show of the message: redacted inputs
    priority = recorded_priority(record)  # the item goes back at its run's priority
    if entry.stage == 0:
        return item_signature(
            app, names=names, queues=queues, meta=meta, inputs=entry.inputs, redactor=shown, priority=priority
        )
    previous = _previous_outcome(entry)
    return item_signature(
        app, names=names, queues=queues, meta=meta, previous=previous, redactor=shown, priority=priority
    )


def _stages_sent(entry: DeadLetter) -> list[str]:
    names = entry.stage_tasks or [entry.task_name]
    return [entry.task_name, *names[entry.stage + 1 :]]


def _blocker(entry: DeadLetter, runs: RunStore) -> str | None:
    reason = entry.requeue_blocker
    if reason is None and runs.get_run(entry.run_id).get("status") == "cancelled":
        reason = "its run was cancelled"
    return reason


def _own_key(entry: DeadLetter) -> str:
    if entry.node:
        return node_key(entry.idempotency_key, entry.node)
    return stage_key(entry.idempotency_key, entry.stage, entry.stages)


def _requeue_compensation(
    entry: DeadLetter,
    result: RequeueResult,
    *,
    app: Celery,
    runs: RunStore,
    dlq: DLQStore,
    settings: Settings,
    dry_run: bool,
) -> RequeueResult:
    """Run a dead-lettered compensation again: its run compensates once more, this one only."""
    result.stages_sent = [f"{entry.task_name} (compensation)"]
    if dry_run:
        return result
    if not UndoLog(runs).reopen(entry.run_id, _own_key(entry)):
        return result.model_copy(
            update={"action": "skipped", "reason": "its compensation is not dead-lettered"}
        )
    compensation_signature(app, entry.run_id, settings.queues.fanin).apply_async()
    dlq.remove([entry.id], generation=entry.requeues)
    return result


def _requeue_aggregate(
    entry: DeadLetter,
    result: RequeueResult,
    *,
    app: Celery,
    runs: RunStore,
    dlq: DLQStore,
    settings: Settings,
    workers: Sequence[WorkerRecord] | None,
    dry_run: bool,
) -> RequeueResult:
    """Run a failed aggregate again: the one its run recorded, if its workers may run it."""
    recorded = runs.get_run(entry.run_id).get("aggregate", "")
    reason = aggregate_refusal(recorded, settings, workers)
    if reason is not None:
        return result.model_copy(update={"action": "skipped", "reason": reason})
    result.stages_sent = [f"{recorded} (aggregate)"]
    if dry_run:
        return result
    runs.reopen_aggregate(entry.run_id)
    aggregate_signature(app, entry.run_id, recorded, settings.queues.fanin).apply_async()
    dlq.remove([entry.id], generation=entry.requeues)
    return result


def requeue_entry(
    entry: DeadLetter,
    *,
    app: Celery,
    runs: RunStore,
    dlq: DLQStore,
    settings: Settings,
    workers: Sequence[WorkerRecord] | None = None,
    dry_run: bool = False,
) -> RequeueResult:
    """Requeue one entry (see the module docstring); with ``dry_run``, change nothing.

    ``workers`` are the live workers' records (None: dispatch does not require workers).
    """
    result = RequeueResult(
        id=entry.id,
        task_name=entry.task_name,
        task_id=entry.task_id,
        run_id=entry.run_id,
        stage=entry.stage,
        action="would requeue" if dry_run else "requeued",
    )
    if entry.category == AggregateFailed.category:
        return _requeue_aggregate(
            entry, result, app=app, runs=runs, dlq=dlq, settings=settings, workers=workers, dry_run=dry_run
        )
    # What the entry itself holds decides first (a malformed entry names no task a worker has).
    malformed = entry.category == MalformedMessage.category
    refused = MALFORMED_BLOCKER if malformed else task_refusal(entry, workers)
    if refused is not None:
        return result.model_copy(update={"action": "skipped", "reason": refused})
    if entry.category == CompensationFailed.category:
        return _requeue_compensation(
            entry, result, app=app, runs=runs, dlq=dlq, settings=settings, dry_run=dry_run
        )
    reason = _blocker(entry, runs)
    if reason is not None:
        return result.model_copy(update={"action": "skipped", "reason": reason})
    result.stages_sent = _stages_sent(entry)
    if dry_run:
        return result
    parent = runs.get_run(entry.run_id).get(tracing.TRACE_FIELD) if tracing.enabled() else None
    attributes = {"agentfleet.run.id": entry.run_id, "agentfleet.task.id": entry.task_id}
    with tracing.span("requeue", kind="producer", attributes=attributes, parent=parent):
        return _requeue_item(entry, result, app=app, runs=runs, dlq=dlq, settings=settings)


def _requeue_item(
    entry: DeadLetter,
    result: RequeueResult,
    *,
    app: Celery,
    runs: RunStore,
    dlq: DLQStore,
    settings: Settings,
) -> RequeueResult:
    """Send a dead-lettered item (not an aggregate or compensation) again."""
    key = _own_key(entry)
    MemoryStore(runs.client, prefix=runs.prefix, ttl_s=runs.ttl_s).forget_spending(key)
    if entry.node:
        requeue_step(entry, app=app, runs=runs, dlq=dlq, redactor=settings.redactor())
        return result
    signature = _signature(entry, app, settings, runs.get_run(entry.run_id))
    stored = runs.stored_outcomes([key])[0]
    reopened = runs.reopen(
        entry.run_id,
        entry.index,
        key,
        was_ok=False,
        was_dead=stored.dead_lettered if stored else True,
        input_json=json.dumps(entry.inputs) if entry.stage == 0 else "",
    )
    try:
        signature.apply_async()
    except Exception as exc:
        if stored is not None:
            runs.finish(stored)
            if reopened:
                runs.incr(entry.run_id, "redelivered", -1, event=f"refused {entry.id} {entry.requeues}")
        return result.model_copy(update={"action": "failed", "reason": f"the broker refused it: {exc}"})
    dlq.remove([entry.id], generation=entry.requeues)
    return result
