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

As a delivery feature: a success of a task that declares ``compensate`` is noted in its run's
undo log before its outcome is stored (``note_success``); the reconciler sends a requested
compensation whose message was lost again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agentfleet.config import Settings
from agentfleet.outages import repeatable
from agentfleet.protocol.messages import compensation_signature
from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.names import compensation_task_id
from agentfleet.protocol.task import FleetTask
from agentfleet.tasks.hooks import Candidate, DeliveryFeature
from agentfleet.tasks.runtime import runtime
from agentfleet.transport.broker_view import forget_stale

if TYPE_CHECKING:
    from agentfleet.models import TaskOutcome
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.reconciler import PassReport, Reconciler

__all__ = ["Compensation", "note_success"]

log = logging.getLogger("agentfleet.reconciler")


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


class Compensation(DeliveryFeature):
    name = "compensation"

    def applies(self, d: Delivery) -> bool:
        return d.task.compensate is not None

    def before_finish(self, d: Delivery, outcome: TaskOutcome) -> None:
        d.unless_taken_over()
        d.patience.call(note_success, d.settings, d.task, d.meta, d.key, d.kwargs, outcome.result)

    def ended_run(self, rec: Reconciler, run_id: str, record: dict[str, str]) -> list[Candidate] | None:
        if record.get("compensation") != "requested":
            return None
        if rec.store.live_claims([f"comp:{run_id}"])[0]:
            return []
        return [Candidate(run_id, self.name, [compensation_task_id(run_id)], record, feature=self)]

    def recover(
        self, rec: Reconciler, candidate: Candidate, stale: list[str], report: PassReport, now: float
    ) -> None:
        forget_stale(rec.broker, stale)
        compensation_signature(rec.app, candidate.run_id, rec.settings.queues.fanin).apply_async()
        report.compensations += 1
        log.warning("run %s: sent its compensation again (its message was lost)", candidate.run_id)
