"""Compensation, on the delivery's side: a success of a task that declares ``compensate`` is
noted in its run's undo log before its outcome is stored (see ``tasks/compensation.py``); on
the reconciler's: a requested compensation whose message was lost is sent again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agentfleet.protocol.messages import compensation_signature
from agentfleet.protocol.names import compensation_task_id
from agentfleet.tasks.compensation import note_success
from agentfleet.tasks.hooks import Candidate, DeliveryFeature
from agentfleet.transport.broker_view import forget_stale

if TYPE_CHECKING:
    from agentfleet.models import TaskOutcome
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.reconciler import PassReport, Reconciler

__all__ = ["Compensation"]

log = logging.getLogger("agentfleet.reconciler")


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
