"""One delivery of one item: claim it, run the body, record the outcome, decide what next.

The steps, in order (the features of ``tasks/features/`` attach at the points named in
``tasks/hooks.py``; ``before_claim`` lets a pipeline stage whose previous stage failed pass
that failure on unchanged):

1. ``RunStore.begin`` (one round trip): an item with a stored outcome returns it without
   running (idempotency); a cancelled run records a cancelled outcome; an item another
   delivery holds a live claim on is rescheduled for when that claim would lapse, without
   using a retry (overlapping copies never both run the body); otherwise this delivery claims
   the item, and its claim is renewed until the delivery ends. A task id delivered more than
   ``max_deliveries`` times without finishing is poison.
2. The input is validated against the function's type hints (invalid: permanent).
3. The body runs with a fresh ``TaskContext``.
   A task with a declared ``downstream`` first asks that downstream's circuit breaker: while it
   is open the item is deferred, not failed.
4. Success stores and records the outcome. What comes next after an error is
   ``tasks/next_step.py``: ``Deferred`` reschedules without using a retry; a retryable error
   (a soft time limit included) retries with backoff while the budget lasts; anything else,
   or an exhausted budget, becomes an ``ok=False`` outcome and a dead letter, so fan-in still
   runs, then Celery ``FAILURE``. Downstream faults count for circuits.

Fencing: a delivery whose claim is lost (its worker was cut off from Redis or frozen for
longer than the claim's TTL, see ``runs/claims.py``) hands the item back instead of ending it:
the body stops at its next fleet call (``ClaimLost``), and an error after the loss uses no
retry and writes no dead letter. The finish script stores nothing while another delivery
holds a live claim (``FinishState.fenced``); the outcome of a delivery whose claim lapsed
with nobody taking it over is stored, since nothing else runs the item. Handing back publishes
the message again for when the other claim would lapse: that copy then returns the outcome
that stands. Whatever a delivery returns to Celery (its result, Flower's view) is the
outcome that stands for the item, not its own when another was stored first.

A hard time limit kills the worker process mid-body; ``after_hard_time_limit`` then does step
4 from the worker's main process (see ``tasks/process_loss.py`` and ``tasks/request.py``).

Every bookkeeping call rides out a Redis outage of ``delivery.redis_retry_s``; past it the
message is rejected for redelivery, never acknowledged without an outcome. The last outcome
of a run with an aggregate sends the aggregate (``tasks/features/aggregate.py``).
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Reject

from agentfleet import tracing
from agentfleet.config import Settings, get_settings
from agentfleet.errors import BrokerUnavailable, InvalidInput, Parked, PoisonMessage
from agentfleet.models import TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.protocol.batches import is_batch
from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.task import validate_input
from agentfleet.redaction import Redactor
from agentfleet.runs import AttemptSpan, BeginState, Claim, new_claim_token
from agentfleet.tasks import next_step
from agentfleet.tasks.batch import execute_batch
from agentfleet.tasks.celery_states import raise_for_failures
from agentfleet.tasks.circuit_guard import CircuitGuard
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.features import FEATURES
from agentfleet.tasks.hooks import taking_part
from agentfleet.tasks.item import cancelled_outcome, jsonable, meta_for, outcome_for
from agentfleet.tasks.item_state import item_context
from agentfleet.tasks.next_step import Rescheduled
from agentfleet.tasks.process_logging import process_redactor
from agentfleet.tasks.runtime import runtime
from agentfleet.transport.result_repr import OutcomeDict

if TYPE_CHECKING:
    from celery.app.task import Context

    from agentfleet.protocol.task import FleetTask
    from agentfleet.tasks.hooks import Held

__all__ = ["Delivery", "Rescheduled", "cancelled_outcome", "execute"]

log = logging.getLogger("agentfleet.task")


class Delivery:
    """The state of one delivery; ``run()`` returns the outcome dict or raises Celery's Retry
    (a failed attempt tried again) or Ignore (a deferral sent again).

    ``request`` is given when the delivery is finished from outside the task (the worker's
    main process after a hard time limit); then rescheduling publishes a new message. An item
    of a batch (``task_id`` given) is rescheduled in a message of its own.
    """

    def __init__(
        self,
        task: FleetTask,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        request: Context | None = None,
        task_id: str | None = None,
        claim_token: str = "",
    ) -> None:
        self.task = task
        self.request = request
        self.in_batch = task_id is not None
        self.claim_token = claim_token
        self.settings: Settings = get_settings()
        # ``runs`` is the process's run store; ``store`` is the same, riding out Redis outages.
        self.rt = runtime(self.settings)
        self.runs = self.rt.runs
        self.patience = self.rt.patience
        self.store = self.rt.patient_runs
        self.kwargs = dict(kwargs)
        current = request if request is not None else task.request
        own_id = task_id or current.id or None
        # The worker node running this delivery (its claim tokens and timeline name it).
        self.worker_node = str(getattr(current, "hostname", None) or "local")
        self.meta = meta_for(self.kwargs, own_id)
        self.args = args
        self.task_id: str = own_id or self.meta.item
        self.key = self.meta.own_key
        self.previous: TaskOutcome | None = None
        # What earlier pipeline stages of this item spent: attempts, seconds, US dollars.
        self.carried: tuple[int, float, float] = (0, 0.0, 0.0)
        # The claim this delivery holds on its item while it runs the body ('' when none).
        self.token = ""
        self.claim: Claim | None = None
        # When (monotonic seconds) this delivery claimed its item, for the run's timeline.
        self.claimed_at: float | None = None
        # The context of the execution running the body (None before it runs).
        self.context: TaskContext | None = None
        # The features taking part in this delivery, and for each hook those that act there.
        self.hooks = taking_part(FEATURES, self)

    @cached_property
    def redactor(self) -> Redactor:
        # Built when the body is about to run (for ``ctx.log``) or on the first failure, when
        # ``kwargs`` holds this stage's final input.
        return process_redactor().learn(self.kwargs)

    # Outcomes ------------------------------------------------------------------------------

    def finish(self, outcome: TaskOutcome, *, store: bool = True) -> dict[str, Any]:
        """Store the outcome under this stage's key, release the claim, count the outcome for
        the run if it ends the item, and let the features act on it (``after_outcome``)."""
        final = all(f.ends_item(self, outcome) for f in self.hooks["ends_item"])
        scoped = outcome
        if outcome.idempotency_key != self.key:
            scoped = outcome.model_copy(update={"idempotency_key": self.key})
        if store and outcome.ok:
            for feature in self.hooks["before_finish"]:
                feature.before_finish(self, outcome)
        if self.claim is not None:
            self.claim.finishing = True
        tracing.annotate(
            {
                "agentfleet.outcome": "ok" if outcome.ok else "failed",
                "agentfleet.cost_usd": outcome.cost_usd,
                "error.type": outcome.error_type,
            },
            error=None if outcome.ok else (outcome.error_type or "failed"),
        )
        state = self.store.finish(scoped, store=store, record=final, token=self.token, span=self.span())
        if state.fenced:
            why = "another delivery holds this item's claim; this outcome was not stored"
            self.hand_back(state.claim_left_s, why)
        if state.stood is not None:
            ids = {"task_id": self.task_id, "run_id": self.meta.run, "index": self.meta.idx}
            scoped = state.stood.model_copy(update=ids)
            outcome = scoped.model_copy(update={"idempotency_key": outcome.idempotency_key})
        for feature in self.hooks["after_outcome"]:
            state = feature.after_outcome(self, scoped, state)
        return outcome.model_dump(mode="json")

    def unless_taken_over(self) -> None:
        """Before an effect the finish script does not fence (a dead letter, a success noted for
        compensation): hand the item back if this delivery lost its claim and another holds one."""
        if self.claim is not None and self.claim.lost and self.store.live_claims([self.key])[0]:
            self.hand_back(self.settings.delivery.claim_ttl_s, "another delivery holds this item's claim")

    def hand_back(self, wait_s: float, why: str, meta: ItemMeta | None = None) -> NoReturn:
        """Send the item again for when another delivery's claim would lapse (``wait_s``), using
        no retry: that copy returns the outcome the item ends with, or runs it if none did."""
        next_step.hand_back(self, wait_s, why, meta)

    def reschedule(self, meta: ItemMeta, countdown: float, *, deferral: str | None = None) -> NoReturn:
        """Send the item again in ``countdown`` s: a retry, or a deferral (``deferral``: why)."""
        next_step.reschedule(self, meta, countdown, deferral=deferral)

    def stop_renewing(self) -> None:
        if self.token:
            self.rt.claims.drop(self.runs, self.key)

    def release_claim(self) -> None:
        if self.token:
            self.stop_renewing()
            self.store.release_claim(self.key, self.token)
            self.token = ""

    def span(self) -> AttemptSpan | None:
        """This delivery's attempt for the run's timeline: its worker and seconds since it
        claimed the item (None when it claimed nothing)."""
        if self.claimed_at is None:
            return None
        return AttemptSpan(self.worker_node, time.monotonic() - self.claimed_at)

    def queue(self) -> str:
        return getattr(self.task, "queue", None) or self.settings.queues.agents

    # The delivery --------------------------------------------------------------------------

    def before_claim(self) -> dict[str, Any] | None:
        """The features' ``before_claim``: an outcome (as a dict) ends the delivery at once."""
        for feature in self.hooks["before_claim"]:
            ended = feature.before_claim(self)
            if ended is not None:
                return ended
        return None

    def run(self) -> dict[str, Any]:
        """The delivery, in its span when tracing is on (continuing the message's trace)."""
        if not tracing.enabled():
            return self._run()
        meta = self.meta
        attributes = {
            "agentfleet.run.id": meta.run,
            "agentfleet.task.id": self.task_id,
            "agentfleet.task.name": self.task.name,
            "agentfleet.item.key": meta.item,
            "agentfleet.item.index": meta.idx,
            "agentfleet.item.stage": meta.stage,
            "agentfleet.item.node": meta.node or None,
            "agentfleet.item.attempt": meta.attempt,
            "agentfleet.item.deferrals": meta.deferrals,
            "agentfleet.item.requeues": meta.requeues,
        }
        request = self.request if self.request is not None else self.task.request
        with tracing.message_span(f"item {self.task.name}", request, attributes):
            return self._run()

    def _run(self) -> dict[str, Any]:
        ended = self.before_claim()
        if ended is not None:
            return ended
        token = self.claim_token or new_claim_token(self.worker_node)
        ttl_s = self.settings.delivery.claim_ttl_s
        sent = time.monotonic()

        @repeatable
        def begin() -> BeginState:
            # The claim lives at least ``ttl_s`` past the send of the attempt that took it
            # (safe to send again: ``RunStore.begin`` counts a delivery once per claim token).
            nonlocal sent
            sent = time.monotonic()
            return self.runs.begin(
                self.meta.run,
                self.key,
                self.task_id,
                deliveries_ttl_s=self.settings.visibility_timeout_s * 4,
                token=token,
                claim_ttl_s=ttl_s,
                preclaimed=bool(self.claim_token),
            )

        state = self.patience.call(begin)
        if state.verdict == "cancelled":
            # Not stored under the idempotency key: a resumed run must still do this item.
            return self.finish(cancelled_outcome(self.meta, self.task_id), store=False)
        if state.stored is not None:
            ids = {"task_id": self.task_id, "run_id": self.meta.run, "index": self.meta.idx}
            return self.finish(state.stored.model_copy(update=ids))
        if state.verdict == "busy":
            next_step.runs_elsewhere(self, state.claim_left_s)
        self.token = token
        self.claimed_at = time.monotonic()
        self.claim = self.rt.claims.hold(self.runs, self.key, token, ttl_s, confirmed_at=sent)
        try:
            return self._claimed(state.deliveries)
        finally:
            self.stop_renewing()

    def _claimed(self, deliveries: int) -> dict[str, Any]:
        """The rest of a delivery that holds the item's claim: poison check, input, body."""
        attempts = self.carried[0] + self.meta.attempt + 1
        if deliveries > self.settings.dlq.max_deliveries:
            died = deliveries - 1
            err = PoisonMessage(
                f"the worker process died {died} times running this task; "
                f"max_deliveries is {self.settings.dlq.max_deliveries}"
            )
            next_step.record_attempt(self, err, self.meta.attempt + died, self.task.downstream)
            return next_step.failure(
                self,
                err,
                attempts=attempts - 1,
                stage_attempts=self.meta.attempt + died,
                elapsed_s=self.meta.elapsed_s,
                cost=self.meta.cost_usd,
            )
        for feature in self.hooks["before_body"]:
            feature.before_body(self)
        try:
            values = validate_input(self.task, self.kwargs)
        except InvalidInput as err:
            next_step.record_attempt(self, err, self.meta.attempt + 1, None)
            return next_step.failure(
                self,
                err,
                attempts=attempts,
                stage_attempts=self.meta.attempt + 1,
                elapsed_s=self.meta.elapsed_s,
                cost=self.meta.cost_usd,
            )
        return self._execute(values, attempts)

    def _task_context(self, guard: CircuitGuard) -> TaskContext:
        return item_context(
            self.settings,
            self.task,
            self.meta,
            redactor=self.redactor,
            task_id=self.task_id,
            key=self.key,
            token=self.token,
            guard=guard,
            claim=self.claim,
        )

    def _execute(self, values: dict[str, Any], attempts: int) -> dict[str, Any]:
        guard = CircuitGuard(self.rt.breaker, self.task.downstream)
        ctx = self.context = self._task_context(guard)
        started = time.monotonic()
        held: list[Held] = []
        try:
            for feature in self.hooks["hold_during_body"]:
                # A pool's slot, say: waited for briefly, else the item is deferred.
                hold = feature.hold_during_body(self)
                if hold is not None:
                    held.append(hold)
            guard.enter()
            with tracing.span(f"attempt {attempts}", attributes={"agentfleet.item.attempt": attempts}):
                result = jsonable(self.task.fn(ctx, **values))
        except Exception as exc:
            elapsed = time.monotonic() - started
            err = next_step.classify(self, exc, ctx)
            guard.failed(err, ctx.last_downstream or err.downstream or self.task.downstream)
            # A parked item is no failure: its traceback, costly to format, is never shown.
            tb = "" if isinstance(err, Parked) else traceback.format_exc()
            return next_step.after_error(self, err, ctx, elapsed, attempts, tb)
        finally:
            ctx.close()
            for hold in held:
                hold.release()
        elapsed = time.monotonic() - started
        guard.succeeded()
        outcome = outcome_for(
            self.meta,
            self.task_id,
            ok=True,
            result=self.redactor.value(result),
            attempts=attempts,
            duration_s=round(self.carried[1] + self.meta.elapsed_s + elapsed, 6),
            cost_usd=self.carried[2] + self.meta.cost_usd + ctx.cost_usd,
        )
        return self.finish(outcome)


def execute(task: FleetTask, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one delivery of ``task``; returns a ``TaskOutcome`` as a dict (a list of them for a
    batch, see ``tasks/batch.py``); an item that failed for good raises (``celery_states``).

    When Redis stays out of reach longer than ``delivery.redis_retry_s``, the message is
    rejected for redelivery rather than acknowledged without an outcome.
    """
    try:
        if is_batch(kwargs):
            outcomes = execute_batch(task, kwargs, functools.partial(_deliver_in_batch, task))
        else:
            outcomes = [Delivery(task, args, kwargs).run()]
    except BrokerUnavailable as exc:
        log.error("%s[%s]: %s; handing the message back for redelivery", task.name, task.request.id, exc)
        raise Reject(str(exc), requeue=True) from None
    raise_for_failures(outcomes)
    return outcomes if is_batch(kwargs) else OutcomeDict(outcomes[0])


def _deliver_in_batch(
    task: FleetTask, kwargs: dict[str, Any], task_id: str, token: str
) -> dict[str, Any] | None:
    """One item of a batch, under the batch's claim ``token``; None when it was sent again in a
    message of its own."""
    try:
        return Delivery(task, (), kwargs, task_id=task_id, claim_token=token).run()
    except Rescheduled:
        return None
