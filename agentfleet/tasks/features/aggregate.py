"""The aggregate (fan-in): the outcome that ends a run sends its aggregate; the reconciler
sends again an aggregate whose message was lost (every item ended, no aggregate result).

Fan-in is driven by the run store, not by a Celery chord, so redelivered copies cannot make
it run early or twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agentfleet.protocol.messages import aggregate_signature
from agentfleet.protocol.names import aggregate_task_id
from agentfleet.tasks.hooks import Candidate, DeliveryFeature
from agentfleet.transport.broker_view import forget_stale

if TYPE_CHECKING:
    from agentfleet.models import TaskOutcome
    from agentfleet.runs import FinishState
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.reconciler import PassReport, Reconciler

__all__ = ["Aggregate"]

log = logging.getLogger("agentfleet.task")
rlog = logging.getLogger("agentfleet.reconciler")


class Aggregate(DeliveryFeature):
    name = "aggregate"

    def after_outcome(self, d: Delivery, outcome: TaskOutcome, state: FinishState) -> FinishState:
        if state.run_ended and state.aggregate:
            try:
                aggregate_signature(
                    d.task.app, d.meta.run, state.aggregate, d.settings.queues.fanin
                ).apply_async()
            except Exception:
                # The run stays active without its aggregate: the reconciler sends it.
                log.exception("could not send the aggregate of run %s; the reconciler will", d.meta.run)
        return state

    def ended_run(self, rec: Reconciler, run_id: str, record: dict[str, str]) -> list[Candidate] | None:
        if record.get("aggregate") and not record.get("aggregate_result"):
            return [Candidate(run_id, self.name, [aggregate_task_id(run_id)], record, feature=self)]
        return None

    def recover(
        self, rec: Reconciler, candidate: Candidate, stale: list[str], report: PassReport, now: float
    ) -> None:
        forget_stale(rec.broker, stale)
        run_id = candidate.run_id
        aggregate_signature(
            rec.app, run_id, candidate.record["aggregate"], rec.settings.queues.fanin
        ).apply_async()
        report.aggregates += 1
        rlog.warning("run %s: sent its aggregate again (its message was lost)", run_id)
