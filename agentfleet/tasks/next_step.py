"""What comes next after a delivery's body failed, or its item runs elsewhere: hand the item
back, defer it, retry it, or end it as a final failure; and how an item is sent again.

- A lost claim (``ClaimLost``, or an error after the loss) hands the item back for when the
  other claim would lapse: no retry used, no dead letter written.
- The features' ``on_error`` come next (``Deferred`` reschedules without using a retry).
- A retryable error (a soft time limit included) retries with backoff while the task's
  ``max_retries`` lasts.
- Anything else, or an exhausted budget of retries, becomes an ``ok=False`` outcome and a
  dead letter, then the features' ``on_final_failure`` (fail-fast).

Rescheduling raises: Celery's ``Retry`` from inside the task (or ``Ignore`` for a deferral,
``celery_states.defer``), or ``Rescheduled`` when a feature sent the item (a batch's item goes
alone) or the delivery is finished outside its task (after a hard time limit: the same
message is published again, as ``retry()`` sends it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import SoftTimeLimitExceeded

from agentfleet import tracing
from agentfleet.errors import AgentfleetError, ClaimLost, RetryableError, TaskTimeLimit
from agentfleet.protocol.messages import cap_countdown
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.runs import AttemptSpan
from agentfleet.tasks import failures
from agentfleet.tasks.celery_states import defer
from agentfleet.tasks.hooks import message_args
from agentfleet.tasks.item import outcome_for
from agentfleet.tasks.retry_policy import backoff_s, deferral_s

if TYPE_CHECKING:
    from agentfleet.tasks.context import TaskContext
    from agentfleet.tasks.execution import Delivery

__all__ = [
    "Rescheduled",
    "after_error",
    "classify",
    "count_attempt",
    "failure",
    "hand_back",
    "record_attempt",
    "reschedule",
    "runs_elsewhere",
]

log = logging.getLogger("agentfleet.task")


class Rescheduled(Exception):
    """The item was sent again from outside its task's retry (a batch's item alone, or after a
    hard time limit)."""


def classify(d: Delivery, exc: Exception, ctx: TaskContext) -> AgentfleetError:
    """What the body's exception ``exc`` is to the fleet (its soft time limit included)."""
    if isinstance(exc, SoftTimeLimitExceeded):
        where = f" while calling {ctx.last_downstream}" if ctx.downstreams_called else ""
        return TaskTimeLimit(
            f"the soft time limit of {d.task.soft_time_limit} s ran out{where}",
            downstream=ctx.last_downstream,
        )
    return failures.classify_failure(d.task, exc, d.settings)


def record_attempt(
    d: Delivery, err: AgentfleetError, attempt: int, downstream: str | None, duration_s: float = 0.0
) -> None:
    """Append this failed attempt (``duration_s`` seconds long) to the item's history."""
    record = failures.attempt_record(
        err,
        attempt=attempt,
        downstream=downstream,
        redactor=d.redactor,
        duration_s=duration_s,
        requeues=d.meta.requeues,
    )
    d.store.add_attempt_error(d.key, record)


def count_attempt(d: Delivery, field: str) -> None:
    """Count a retry or a deferral once for the run, noting it on the run's timeline. What a
    delivery counts is its message's own: the same task id, requeue, attempt and deferral (a
    copy redelivered after its worker died) counts once."""
    span = d.span() or AttemptSpan("", 0.0)
    meta = d.meta
    event = f"{d.task_id} {meta.requeues}:{meta.attempt}:{meta.deferrals}"
    d.store.count_attempt(meta.run, field, event=event, index=meta.idx, span=span)


def after_error(
    d: Delivery, err: AgentfleetError, ctx: TaskContext | None, elapsed: float, attempts: int, tb: str
) -> dict[str, Any]:
    """After the body failed with ``err`` (having run ``elapsed`` s): hand back, reschedule
    (a feature's deferral or a retry, which raise), or return the final failure's outcome."""
    spent_s = d.meta.elapsed_s + elapsed
    cost = d.meta.cost_usd + (ctx.cost_usd if ctx is not None else 0.0)
    downstream = (ctx.last_downstream if ctx is not None else None) or err.downstream
    if isinstance(err, ClaimLost) or (d.claim is not None and d.claim.lost):
        # Another delivery may be running the item: this one's error is no attempt of it.
        spent = d.meta.model_copy(update={"elapsed_s": spent_s, "cost_usd": cost})
        after = "" if isinstance(err, ClaimLost) else f" (and then it raised {type(err).__name__})"
        hand_back(d, d.settings.delivery.claim_ttl_s, f"its claim is lost{after}", spent)
    for feature in d.hooks["on_error"]:
        feature.on_error(d, err, spent_s, cost)
    record_attempt(d, err, d.meta.attempt + 1, downstream or d.task.downstream, elapsed)
    if isinstance(err, RetryableError) and d.meta.attempt < d.task.fleet_max_retries:
        _retry(d, err, attempts, spent_s, cost)
    return failure(
        d,
        err,
        attempts=attempts,
        stage_attempts=d.meta.attempt + 1,
        elapsed_s=spent_s,
        cost=cost,
        tb=tb,
        downstream=downstream,
    )


def _retry(d: Delivery, err: RetryableError, attempts: int, spent_s: float, cost: float) -> NoReturn:
    d.store.clear_deliveries(d.task_id, d.key)
    count_attempt(d, "retries")
    countdown = cap_countdown(
        backoff_s(
            d.meta.attempt,
            base_s=d.settings.retry.backoff_base_s,
            cap_s=d.settings.retry.backoff_cap_s,
            retry_after_s=err.retry_after_s,
        ),
        d.settings.max_countdown_s,
    )
    log.warning(
        "%s[%s] attempt %d failed (%s: %s); retrying in %.2f s",
        d.task.name,
        d.task_id,
        attempts,
        type(err).__name__,
        d.redactor.text(str(err))[:300],
        countdown,
    )
    nxt = d.meta.model_copy(update={"attempt": d.meta.attempt + 1, "elapsed_s": spent_s, "cost_usd": cost})
    reschedule(d, nxt, countdown)


def failure(
    d: Delivery,
    err: AgentfleetError,
    *,
    attempts: int,
    stage_attempts: int,
    elapsed_s: float,
    cost: float,
    tb: str = "",
    downstream: str | None = None,
) -> dict[str, Any]:
    """End the item with ``err``: its ``ok=False`` outcome and its dead letter."""
    downstream = downstream or err.downstream or d.task.downstream
    d.unless_taken_over()
    outcome = outcome_for(
        d.meta,
        d.task_id,
        ok=False,
        error_type=type(err).__name__,
        error=d.redactor.text(str(err)),
        category=err.category,
        attempts=attempts,
        duration_s=round(d.carried[1] + elapsed_s, 6),
        cost_usd=d.carried[2] + cost,
    )
    fields: dict[str, Any] = {"stage_tasks": []}
    for feature in d.hooks["dead_letter"]:
        feature.dead_letter(d, fields)
    kept: dict[str, bytes] = fields.pop("artifact_data", {})
    entry = failures.build_dead_letter(
        task=d.task,
        redactor=d.redactor,
        meta=d.meta,
        task_id=d.task_id,
        inputs=d.kwargs,
        error=err,
        traceback_text=tb,
        attempt_errors=d.store.attempt_errors(d.key),
        downstream=downstream,
        attempts=stage_attempts,
        previous=d.previous,
        cost_usd=d.carried[2] + cost,
        **fields,
    )
    if d.patience.call(
        failures.on_final_failure,
        entry,
        d.rt.dlq,
        artifacts=kept,
        max_stored_bytes=d.settings.dlq.artifact_max_stored_bytes,
    ):
        outcome = outcome.model_copy(update={"dead_lettered": True})
    finished = d.finish(outcome)
    for feature in d.hooks["on_final_failure"]:
        feature.on_final_failure(d)
    return finished


def runs_elsewhere(d: Delivery, claim_left_s: float) -> NoReturn:
    """Another copy of this message is running the item: come back when its claim would have
    lapsed (by then it has an outcome, or its worker died and this copy runs)."""
    log.info("%s[%s] runs elsewhere; this copy comes back in %.1f s", d.task.name, d.task_id, claim_left_s)
    wait_s = cap_countdown(deferral_s(claim_left_s), d.settings.max_countdown_s)
    reschedule(d, d.meta, wait_s, deferral="another delivery of this item is running it")


def hand_back(d: Delivery, wait_s: float, why: str, meta: ItemMeta | None = None) -> NoReturn:
    """Send the item again for when another delivery's claim would lapse (``wait_s``), using
    no retry: that copy returns the outcome the item ends with, or runs it if none did. This
    delivery comes off the task id's count of unfinished deliveries: its worker did not die."""
    countdown = cap_countdown(deferral_s(wait_s), d.settings.max_countdown_s)
    log.warning("%s[%s]: %s; this copy comes back in %.1f s", d.task.name, d.task_id, why, countdown)
    if d.token:
        d.store.uncount_delivery(d.task_id, d.key, d.token, mark_ttl_s=d.settings.delivery.claim_ttl_s)
    reschedule(d, meta or d.meta, countdown, deferral=why)


def reschedule(d: Delivery, meta: ItemMeta, countdown: float, *, deferral: str | None = None) -> NoReturn:
    """Send the item again in ``countdown`` s: a retry, or a deferral (``deferral``: why)."""
    tracing.annotate(
        {
            "agentfleet.outcome": "retry" if deferral is None else "deferred",
            "agentfleet.countdown_s": countdown,
        },
        settled=True,
    )
    d.release_claim()
    args, kwargs = message_args(d)
    kwargs[META_KWARG] = meta.to_kwarg()
    if any(feature.reschedule(d, meta, countdown) for feature in d.hooks["reschedule"]):
        raise Rescheduled
    if d.request is None:
        if deferral is not None:
            defer(d.task, d.task.request, args, kwargs, countdown, deferral)
        raise d.task.retry(args=args, kwargs=kwargs, countdown=countdown, max_retries=None)
    # Outside the task: the same message again (chain and chord included), as retry() sends it.
    d.task.signature_from_request(d.request, args=args, kwargs=kwargs, countdown=countdown).apply_async()
    raise Rescheduled
