"""Sending a parked item again once its pause is decided: its message as it was kept.

The message is the Celery signature the delivery built when it parked (the same task id,
queue, chain and options, with the item's meta), so the item runs again as any redelivered
item does: ``RunStore.begin`` claims it (or finds its outcome, or its run cancelled) and the
body goes through its steps, stored, to the same pause call, which now returns the decision.
Publishing twice is harmless for the same reasons: a second copy finds the claim or the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from celery import signature

if TYPE_CHECKING:
    from celery import Celery

    from agentfleet.approvals.store import ApprovalStore

__all__ = ["send_again", "sweep"]

log = logging.getLogger("agentfleet.approvals")


def send_again(store: ApprovalStore, app: Celery, ids: Iterable[str]) -> int:
    """Publish the messages of the decided pauses ``ids`` still in the outbox, then take them
    out of it; returns how many were sent. (A crash between the two sends them again later:
    harmless, a second copy finds the item's claim or outcome.)"""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return 0
    scores = store.client.zmscore(store.keys.outbox, ids)
    waiting = [approval_id for approval_id, score in zip(ids, scores, strict=True) if score is not None]
    if not waiting:
        return 0
    messages = store.messages(waiting)
    sent = 0
    with app.producer_or_acquire() as producer:
        for message in messages:
            if message is not None:
                signature(message, app=app).apply_async(producer=producer)
                sent += 1
    store.mark_sent(waiting)
    if sent:
        log.info("sent %d decided items again", sent)
    return sent


def sweep(store: ApprovalStore, app: Celery, now: float, grace_s: float) -> int:
    """What the reconciler does for pauses each pass: let the timeout decide those past it,
    and send again the items of pauses decided at least ``grace_s`` seconds before ``now``
    (Unix s) that their decider left unsent (it died, or had no app). Returns items sent."""
    sent = send_again(store, app, store.time_out_due())
    return sent + send_again(store, app, store.outbox(now - grace_s))
