"""``max_in_flight`` pools: a run's items take one of its slots while their body runs.

The slot is waited for briefly (``limiter.short_wait_s``), else the item is deferred, using
no retry (``clients.pool_slot`` raises ``Deferred``); it is released when the body ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfleet.tasks import clients
from agentfleet.tasks.hooks import DeliveryFeature, Held

if TYPE_CHECKING:
    from agentfleet.tasks.execution import Delivery

__all__ = ["Pool"]


class Pool(DeliveryFeature):
    name = "pool"

    def applies(self, d: Delivery) -> bool:
        return bool(d.meta.max_in_flight)

    def hold_during_body(self, d: Delivery) -> Held | None:
        slots = d.meta.max_in_flight
        return clients.pool_slot(d.settings, d.meta.run, slots) if slots else None
