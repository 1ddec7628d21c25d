"""Batches: several small items of one map in one task message and one execution.

``Fleet.map(task, inputs, batch_size=N)`` sends one message per ``N`` consecutive items
(``agentfleet.protocol.batches``). The worker claims them all (one token, renewed while the
batch runs), then runs them one after another, each as a delivery of its own: its own
idempotency key, outcome, retries and dead letter. What a batch saves is the per-message cost
(publishing, consuming, acknowledging, the result backend, the events), which dominates items
that take milliseconds.

An item that must run again (a retry, a deferral, another copy holding its claim) is sent
again alone, so the rest of the batch goes on. When the batch has run so long that the next
item might not finish within the task's soft time limit, the items left are sent alone too.
If the worker dies mid-batch, the items that have an outcome keep it and the others run again
from the redelivered batch (or, sent alone, from the reconciler, which knows a batch's task
id).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentfleet.outages import repeatable
from agentfleet.protocol.batches import batch_items
from agentfleet.protocol.messages import item_signature
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.protocol.task import FleetTask
from agentfleet.runs import RunStore, new_claim_token
from agentfleet.runs.store import RUNS_LUA
from agentfleet.tasks.runtime import runtime

__all__ = ["execute_batch", "send_alone"]

log = logging.getLogger("agentfleet.batch")

Deliver = Callable[[dict[str, Any], str, str], "dict[str, Any] | None"]


def send_alone(
    task: FleetTask, meta: ItemMeta, inputs: Mapping[str, Any], queue: str, countdown_s: float
) -> None:
    """Send one item of a batch again in a message of its own."""
    item_signature(
        task.app, names=[task.name], queues=[queue], meta=meta, inputs=inputs, countdown_s=countdown_s
    ).apply_async()


@repeatable
def _claim_all(runs: RunStore, keys: Sequence[str], token: str, ttl_s: float) -> list[str]:
    """Claim every item of the batch that nobody else holds, under one token; the keys this
    token holds after it (those it held already too: the call sent again)."""
    pipe = runs.client.pipeline(transaction=False)
    for key in keys:
        pipe.set(runs.claim_key(key), token, nx=True, px=max(1, int(ttl_s * 1000)))
        pipe.get(runs.claim_key(key))
    holders = pipe.execute()[1::2]
    return [key for key, holder in zip(keys, holders, strict=True) if holder == token]


def _release_all(runs: RunStore, keys: Sequence[str], token: str) -> None:
    """Give back the claims ``token`` still holds on ``keys`` (items it did not end here)."""
    release = RUNS_LUA.register(runs.client, "release")
    pipe = runs.client.pipeline(transaction=False)
    for key in keys:
        release["release"](keys=[runs.claim_key(key)], args=[token, "exact"], client=pipe)
    pipe.execute()


def execute_batch(task: FleetTask, kwargs: Mapping[str, Any], deliver: Deliver) -> list[dict[str, Any]]:
    """Run a batch's items in order with ``deliver(item kwargs, task id, claim token)`` (None:
    the item was sent again alone); the outcomes of the items that ended here, as dicts.

    Every item is claimed first, under one token renewed while the batch runs: an item waiting
    its turn is neither run by another copy of the batch nor taken for lost by the reconciler.
    """
    rt = runtime()
    settings, runs = rt.settings, rt.runs
    queue = getattr(task, "queue", None) or settings.queues.agents
    ttl_s = settings.delivery.claim_ttl_s
    items = batch_items(kwargs)
    token = new_claim_token(str(getattr(task.request, "hostname", None) or "local"))
    held = rt.patience.call(_claim_all, runs, [m.key for _, m in items], token, ttl_s)
    for key in held:
        rt.claims.hold(runs, key, token, ttl_s)
    soft_s = float(task.soft_time_limit or 0)
    started = time.monotonic()
    longest = 0.0
    outcomes = []
    try:
        for n, (inputs, meta) in enumerate(items):
            if soft_s and time.monotonic() - started + longest >= soft_s:
                for rest_inputs, rest_meta in items[n:]:
                    send_alone(task, rest_meta, rest_inputs, queue, 0.0)
                break
            item_started = time.monotonic()
            outcome = deliver({**inputs, META_KWARG: meta.to_kwarg()}, meta.task_id, token)
            longest = max(longest, time.monotonic() - item_started)
            if outcome is not None:
                outcomes.append(outcome)
    finally:
        # Claims left over: items handed off, or not reached because the batch stopped.
        for key in held:
            rt.claims.drop(runs, key)
        try:
            _release_all(runs, held, token)
        except Exception as exc:  # they lapse on their own within claim_ttl_s
            log.warning("could not give back the claims of a batch: %s", exc)
    return outcomes
