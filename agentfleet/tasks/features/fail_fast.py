"""Fail-fast: a run's first final failure cancels every item that has not started, and asks
for the run's compensation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfleet.protocol.messages import request_compensation
from agentfleet.tasks.hooks import DeliveryFeature

if TYPE_CHECKING:
    from agentfleet.tasks.execution import Delivery

__all__ = ["FailFast"]


class FailFast(DeliveryFeature):
    name = "fail_fast"

    def on_final_failure(self, d: Delivery) -> None:
        if d.store.get_run(d.meta.run).get("fail_fast") == "1":
            d.store.fail_fast(d.meta.run)
            undo, fanin = d.rt.undo, d.settings.queues.fanin
            d.patience.call(request_compensation, undo, d.task.app, d.meta.run, fanin)
