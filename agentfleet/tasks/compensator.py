"""``agentfleet.compensate``: the task that undoes a run's succeeded work (see
``tasks/features/compensation.py`` for what it guarantees)."""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from celery import Task

from agentfleet.celery_app import app
from agentfleet.dlq import dead_letter_id
from agentfleet.errors import CompensationFailed, RetryableError
from agentfleet.protocol.messages import cap_countdown
from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.names import COMPENSATE_TASK, compensation_task_id
from agentfleet.protocol.task import FleetTask
from agentfleet.runs import UndoEntry, new_claim_token, take_lock
from agentfleet.tasks import failures
from agentfleet.tasks.circuit_guard import CircuitGuard
from agentfleet.tasks.item_state import item_context
from agentfleet.tasks.process_logging import process_redactor
from agentfleet.tasks.retry_policy import backoff_s
from agentfleet.tasks.runtime import WorkerRuntime, runtime

__all__ = ["compensate"]

log = logging.getLogger("agentfleet.compensation")

_WAIT_FOR_ITEMS_S = 1.0


def _dead_letter(
    rt: WorkerRuntime, task: FleetTask, entry: UndoEntry, err: Exception, tb: str, tries: int
) -> None:
    meta = ItemMeta.model_validate(entry.data["meta"])
    failure = CompensationFailed(f"compensating {task.name} failed: {type(err).__name__}: {err}")
    dead = failures.build_dead_letter(
        task=task,
        redactor=process_redactor().learn(entry.data["inputs"]),
        meta=meta,
        task_id=compensation_task_id(meta.run),
        inputs=entry.data["inputs"],
        error=failure,
        traceback_text=tb,
        attempt_errors=[],
        downstream=task.downstream,
        attempts=tries,
    )
    dead = dead.model_copy(update={"id": dead_letter_id(f"{entry.key}:compensate")})
    failures.on_final_failure(dead, rt.dlq)


def _undo(rt: WorkerRuntime, task: FleetTask, entry: UndoEntry, token: str) -> None:
    """Run one compensation; raises what it raised."""
    if task.compensate is None:
        raise CompensationFailed(f"{task.name} no longer declares a compensation")
    meta = ItemMeta.model_validate(entry.data["meta"])
    meta = meta.model_copy(update={"key": f"{entry.key}:compensate"})
    guard = CircuitGuard(rt.breaker, task.downstream)
    ctx = item_context(
        rt.settings,
        task,
        meta,
        task_id=compensation_task_id(meta.run),
        key=meta.key,
        token=token,
        guard=guard,
        redactor=process_redactor().learn(entry.data["inputs"]),
    )
    try:
        task.compensate(ctx, dict(entry.data["inputs"]), entry.data["result"])
    finally:
        ctx.close()


def _run_all(self: Task, rt: WorkerRuntime, run_id: str, token: str) -> dict[str, Any]:
    settings, undo = rt.settings, rt.undo
    settled = undo.settled(run_id)
    for entry in undo.newest_first(run_id):
        if entry.key in settled:
            continue
        task = app.tasks.get(entry.data["task"])
        if not isinstance(task, FleetTask):
            # A deployment mistake, not the compensation's: no task to dead-letter it under.
            log.error(
                "run %s: task %s is not registered on this worker; not compensated",
                run_id,
                entry.data["task"],
            )
            undo.settle(run_id, entry.key, done=False)
            continue
        try:
            _undo(rt, task, entry, token)
        except Exception as exc:
            err = failures.classify_failure(task, exc, settings)
            tries = undo.failed_try(run_id, entry.key)
            if isinstance(err, RetryableError) and tries <= task.fleet_max_retries:
                wait = backoff_s(
                    tries - 1,
                    base_s=settings.retry.backoff_base_s,
                    cap_s=settings.retry.backoff_cap_s,
                    retry_after_s=err.retry_after_s,
                )
                log.warning("compensating %s of run %s failed (%s); trying again", task.name, run_id, err)
                raise self.retry(countdown=cap_countdown(wait, settings.max_countdown_s)) from None
            _dead_letter(rt, task, entry, exc, traceback.format_exc(), tries)
            undo.settle(run_id, entry.key, done=False)
            continue
        undo.settle(run_id, entry.key, done=True)
    undo.finish(run_id)
    record = rt.runs.get_run(run_id)
    return {
        "run_id": run_id,
        "compensated": int(record.get("compensated") or 0),
        "compensations_failed": int(record.get("compensations_failed") or 0),
    }


@app.task(name=COMPENSATE_TASK, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def compensate(self: Task, run_id: str) -> dict[str, Any]:
    """Run run ``run_id``'s compensations (see the module docstring)."""
    rt = runtime()
    runs, ttl_s = rt.runs, rt.settings.delivery.claim_ttl_s
    record = runs.get_run(run_id)
    if record.get("compensation") != "requested":
        return {"run_id": run_id, "compensation": record.get("compensation", "")}
    if int(record.get("done") or 0) < int(record.get("tasks_total") or 0):
        # Items still running may yet succeed: undo them too, once they have ended.
        raise self.retry(countdown=_WAIT_FOR_ITEMS_S)
    lock = f"comp:{run_id}"
    token = new_claim_token(str(getattr(self.request, "hostname", None) or "local"))
    if not take_lock(runs, lock, token, ttl_s):
        raise self.retry(countdown=ttl_s)
    rt.claims.hold(runs, lock, token, ttl_s)
    started = time.monotonic()
    try:
        result = _run_all(self, rt, run_id, token)
    finally:
        rt.claims.drop(runs, lock)
        runs.release_claim(lock, token)
    log.info("compensated run %s in %.2f s: %s", run_id, time.monotonic() - started, result)
    return result
