"""Dependency graphs: an item is a set of steps (``tasks/graph.py``), each delivered as an
item of its own under ``meta.node``.

A step reads its input from the steps before it, its outcome never ends the item by itself
(the graph's does), and once stored it moves the graph on: it releases the steps that waited
for it and, when every step has a status, records the item's outcome. The reconciler asks
for a graph run's items with no live claim on an open step, and sends those steps again (or
records the item's outcome when only that was missing).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agentfleet.protocol.meta import ItemMeta, run_meta_fields
from agentfleet.tasks.graph import finish_step, graph_waiting, recover_graph_item, step_inputs
from agentfleet.tasks.hooks import Candidate, DeliveryFeature
from agentfleet.tasks.item import cancelled_outcome
from agentfleet.transport.broker_view import forget_stale

if TYPE_CHECKING:
    from agentfleet.models import TaskOutcome
    from agentfleet.runs import FinishState
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.reconciler import PassReport, Reconciler

__all__ = ["Graph"]

log = logging.getLogger("agentfleet.reconciler")


class Graph(DeliveryFeature):
    name = "graph"

    def applies(self, d: Delivery) -> bool:
        return bool(d.meta.node)

    def before_body(self, d: Delivery) -> None:
        if not d.kwargs:
            d.kwargs = d.patience.call(step_inputs, d.runs, d.rt.graphs, d.task, d.meta)

    def ends_item(self, d: Delivery, outcome: TaskOutcome) -> bool:
        return False

    def after_outcome(self, d: Delivery, outcome: TaskOutcome, state: FinishState) -> FinishState:
        step = (d.settings, d.task.app, d.runs, d.meta, outcome)
        return d.patience.call(finish_step, *step) or state

    def open_items(
        self, rec: Reconciler, run_id: str, record: dict[str, str], items: dict[int, tuple[str, str, str]]
    ) -> list[Candidate] | None:
        if record.get("kind") != "graph":
            return None
        open_steps = graph_waiting(rec.store, rec.rt.graphs, run_id, items)
        return [Candidate(run_id, str(i), ids, record, i, items[i], self) for i, ids in open_steps.items()]

    def recover(
        self, rec: Reconciler, candidate: Candidate, stale: list[str], report: PassReport, now: float
    ) -> None:
        assert candidate.item is not None and candidate.index is not None
        _, key, item_key = candidate.item
        meta = ItemMeta(
            run=candidate.run_id,
            idx=candidate.index,
            key=key,
            item=item_key,
            **run_meta_fields(candidate.record),
        )
        if candidate.record.get("status") in ("cancelled", "failed"):
            rec.store.finish(cancelled_outcome(meta, meta.task_id), store=False)
            report.cancelled += 1
            return
        forget_stale(rec.broker, stale)
        if recover_graph_item(rec.settings, rec.app, rec.store, meta) is None:
            rec.store.incr(candidate.run_id, "recovered", event=f"{meta.task_id} {now!r}")
            report.recovered.append(meta.task_id)
            log.warning(
                "run %s: item %s had lost its open steps' messages; sent them again", meta.run, meta.item
            )
