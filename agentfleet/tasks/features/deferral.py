"""Deferral: a body (or a pool, or an open circuit) that raises ``Deferred`` is sent again
after the wait it names, using no retry; the deferral is counted once for the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfleet.errors import AgentfleetError, Deferred
from agentfleet.protocol.messages import cap_countdown
from agentfleet.tasks.hooks import DeliveryFeature
from agentfleet.tasks.next_step import count_attempt
from agentfleet.tasks.retry_policy import deferral_s

if TYPE_CHECKING:
    from agentfleet.tasks.execution import Delivery

__all__ = ["Deferral"]


class Deferral(DeliveryFeature):
    name = "deferral"

    def on_error(self, d: Delivery, err: AgentfleetError, spent_s: float, cost_usd: float) -> None:
        if not isinstance(err, Deferred):
            return
        d.store.clear_deliveries(d.task_id, d.key)
        count_attempt(d, "deferrals")
        countdown = cap_countdown(deferral_s(err.wait_s), d.settings.max_countdown_s)
        nxt = d.meta.model_copy(
            update={"deferrals": d.meta.deferrals + 1, "elapsed_s": spent_s, "cost_usd": cost_usd}
        )
        d.reschedule(nxt, countdown, deferral=str(err))
