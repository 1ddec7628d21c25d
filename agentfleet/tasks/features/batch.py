"""Batches, on the delivery's side: an item of a batch that must run again (a retry, a
deferral, another copy holding its claim) is sent again in a message of its own, so the rest
of the batch goes on (``tasks/batch.py`` runs the batch); on the reconciler's: an item of a
batched map waits while its batch's message does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfleet.protocol.names import batch_task_id
from agentfleet.tasks.batch import send_alone
from agentfleet.tasks.hooks import DeliveryFeature

if TYPE_CHECKING:
    from agentfleet.protocol.meta import ItemMeta
    from agentfleet.tasks.execution import Delivery

__all__ = ["Batch"]


class Batch(DeliveryFeature):
    name = "batch"

    def applies(self, d: Delivery) -> bool:
        return d.in_batch

    def reschedule(self, d: Delivery, meta: ItemMeta, countdown_s: float) -> bool:
        send_alone(d.task, meta, d.kwargs, d.queue(), countdown_s)
        return True

    def stands_for(self, run_id: str, record: dict[str, str], index: int) -> list[str]:
        batch = int(record.get("batch_size") or 0)
        # Its batch's message stands for it, until it is sent alone.
        return [batch_task_id(run_id, index - index % batch)] if batch else []
