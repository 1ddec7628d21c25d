"""Parking: a body that reached a pause with no decision yet (``Parked``, from
``ctx.approval`` or ``ctx.wait_for_event``, see ``tasks/pauses.py``) leaves its slot.

In ``on_error``: the pause is recorded with the message that sends the item again (the same
task id, queue and chain, its meta carrying the seconds and dollars spent so far, so wall and
dollar budgets do not tick while parked), the item's claim released and its deliveries
forgotten (a parked item is no poison), and the delivery ends without a state: no retry used,
no attempt recorded, no outcome stored, the message acknowledged. The order makes a crash at
any point safe: until the pause is recorded the message is unacknowledged and comes back; once
it is, a copy delivered again finds it pending and is acknowledged in turn.

For the reconciler, a parked item (its pause pending, or decided but not yet sent again) is
neither lost nor to be sent again: it is ``resting``.
The timeouts and what a decider left unsent are the reconciler pass's too
(``approvals.resume.sweep``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Ignore

from agentfleet import tracing
from agentfleet.approvals import approval_created
from agentfleet.errors import AgentfleetError, Parked
from agentfleet.protocol.messages import item_signature
from agentfleet.protocol.meta import META_KWARG
from agentfleet.tasks.approval_webhook import notify_webhook
from agentfleet.tasks.hooks import DeliveryFeature, message_args
from agentfleet.tasks.next_step import Rescheduled
from agentfleet.tasks.runtime import runtime

if TYPE_CHECKING:
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.reconciler import Reconciler

__all__ = ["Approvals"]

log = logging.getLogger("agentfleet.task")


def _message(d: Delivery, spent_s: float, cost_usd: float) -> dict[str, Any]:
    """The message that sends the item again, as a JSON-able Celery signature."""
    meta = d.meta.model_copy(update={"elapsed_s": spent_s, "cost_usd": cost_usd})
    args, kwargs = message_args(d)
    kwargs[META_KWARG] = meta.to_kwarg()
    if d.in_batch:
        inputs = {k: v for k, v in kwargs.items() if k != META_KWARG}
        sig = item_signature(d.task.app, names=[d.task.name], queues=[d.queue()], meta=meta, inputs=inputs)
    else:
        request = d.request if d.request is not None else d.task.request
        sig = d.task.signature_from_request(request, args=args, kwargs=kwargs)
    message: dict[str, Any] = json.loads(json.dumps(dict(sig), default=str))
    return message


class Approvals(DeliveryFeature):
    name = "approvals"

    def on_error(self, d: Delivery, err: AgentfleetError, spent_s: float, cost_usd: float) -> None:
        if isinstance(err, Parked):
            park(d, err, spent_s, cost_usd)

    def resting(self, rec: Reconciler, run_id: str) -> set[int]:
        return rec.rt.approvals.parked_indices(run_id)


def park(d: Delivery, err: Parked, spent_s: float, cost_usd: float) -> NoReturn:
    """Record the pause (if new) with the item's message, free the item, end the delivery."""
    store = runtime(d.settings).approvals
    approval = err.approval
    if approval is not None:
        approval = approval.model_copy(update={"details": d.redactor.value(approval.details)})
        message = _message(d, spent_s, cost_usd)
        if d.patience.call(store.create, approval, message, timeout_s=err.timeout_s):
            made = store.find(approval.id) or approval
            approval_created(d.settings, made, client=store.client)
            notify_webhook(d.settings, made)
    tracing.annotate({"agentfleet.outcome": "parked"}, settled=True)
    log.info("%s[%s] parked: %s", d.task.name, d.task_id, err)
    d.store.clear_deliveries(d.task_id, d.key)
    d.release_claim()
    if d.request is not None or d.in_batch:
        raise Rescheduled
    raise Ignore()
