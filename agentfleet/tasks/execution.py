"""One delivery of one item: idempotency, poison caps, validation, the body, retry or outcome.

The steps, in order:

1. A pipeline stage whose previous stage failed passes that failure on unchanged.
2. ``RunStore.begin`` (one round trip): an item with a stored outcome returns it without
   running (idempotency); a cancelled run records a cancelled outcome; an item another
   delivery holds a live claim on is rescheduled for when that claim would lapse, without
   using a retry (overlapping copies never both run the body); otherwise this delivery claims
   the item, and its claim is renewed until the delivery ends. A task id delivered more than
   ``max_deliveries`` times without finishing is poison.
3. The input is validated against the function's type hints (invalid: permanent).
4. The body runs with a fresh ``TaskContext``.
   A task with a declared ``downstream`` first asks that downstream's circuit breaker: while it
   is open the item is deferred, not failed.
5. Success stores and records the outcome. ``Deferred`` reschedules without using a retry.
   A retryable error (a soft time limit included) retries with backoff while the budget
   lasts. Anything else, or an exhausted budget, becomes an ``ok=False`` outcome and a dead
   letter, so fan-in still runs, then Celery ``FAILURE``. Downstream faults count for circuits.

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
5 from the worker's main process (see ``tasks/process_loss.py`` and ``tasks/request.py``).

Every bookkeeping call rides out a Redis outage of ``delivery.redis_retry_s``; past it the
message is rejected for redelivery, never acknowledged without an outcome. The last outcome
of a run with an aggregate sends the aggregate (fan-in is driven by the run store, not by a
Celery chord, so redelivered copies cannot make it run early or twice).
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Reject, SoftTimeLimitExceeded

from agentfleet import tracing
from agentfleet.config import Settings, get_settings
from agentfleet.errors import (
    AgentfleetError,
    BrokerUnavailable,
    ClaimLost,
    Deferred,
    InvalidInput,
    PoisonMessage,
    RetryableError,
    TaskTimeLimit,
)
from agentfleet.models import TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.protocol.batches import is_batch
from agentfleet.protocol.messages import aggregate_signature, cap_countdown, request_compensation
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.protocol.task import validate_input
from agentfleet.redaction import Redactor
from agentfleet.runs import AttemptSpan, BeginState, Claim, FinishState, new_claim_token
from agentfleet.tasks import clients, failures
from agentfleet.tasks.batch import execute_batch, send_alone
from agentfleet.tasks.celery_states import defer, raise_for_failures
from agentfleet.tasks.circuit_guard import CircuitGuard
from agentfleet.tasks.compensation import note_success
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.graph import finish_step, step_inputs
from agentfleet.tasks.item import cancelled_outcome, jsonable, meta_for, outcome_for, previous_stage
from agentfleet.tasks.item_state import item_context
from agentfleet.tasks.process_logging import process_redactor
from agentfleet.tasks.retry_policy import backoff_s, deferral_s
from agentfleet.tasks.runtime import runtime
from agentfleet.transport.result_repr import OutcomeDict

if TYPE_CHECKING:
    from celery.app.task import Context

    from agentfleet.protocol.task import FleetTask

__all__ = ["cancelled_outcome", "execute"]

log = logging.getLogger("agentfleet.task")


class _Rescheduled(Exception):
    """The item was sent again from outside its task (after a hard time limit)."""


class _Delivery:
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
        self.store = self.patience.wrap(self.runs)
        self.kwargs = dict(kwargs)
        own_id = task_id or (request.id if request is not None else task.request.id) or None
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

    @cached_property
    def redactor(self) -> Redactor:
        # Built when the body is about to run (for ``ctx.log``) or on the first failure, when
        # ``kwargs`` holds this stage's final input.
        return process_redactor().learn(self.kwargs)

    # Outcomes ------------------------------------------------------------------------------

    def _finish(self, outcome: TaskOutcome, *, store: bool = True) -> dict[str, Any]:
        """Store the outcome under this stage's key, release the claim, count the outcome for
        the run if it ends the item, and send the aggregate if it ends the run. A success to
        compensate is noted first; a graph step's outcome moves its graph on."""
        final = (self.meta.last_stage or not outcome.ok) and not self.meta.node
        scoped = outcome
        if outcome.idempotency_key != self.key:
            scoped = outcome.model_copy(update={"idempotency_key": self.key})
        if store and outcome.ok and self.task.compensate is not None:
            self._unless_taken_over()
            noted = (self.settings, self.task, self.meta, self.key, self.kwargs, outcome.result)
            self.patience.call(note_success, *noted)
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
        state = self.store.finish(scoped, store=store, record=final, token=self.token, span=self._span())
        if state.fenced:
            why = "another delivery holds this item's claim; this outcome was not stored"
            self._hand_back(state.claim_left_s, why)
        if state.stood is not None:
            ids = {"task_id": self.task_id, "run_id": self.meta.run, "index": self.meta.idx}
            scoped = state.stood.model_copy(update=ids)
            outcome = scoped.model_copy(update={"idempotency_key": outcome.idempotency_key})
        if self.meta.node:
            step = (self.settings, self.task.app, self.runs, self.meta, scoped)
            state = self.patience.call(finish_step, *step) or state
        if state.run_ended and state.aggregate:
            self._send_aggregate(state)
        return outcome.model_dump(mode="json")

    def _unless_taken_over(self) -> None:
        """Before an effect the finish script does not fence (a dead letter, a success noted for
        compensation): hand the item back if this delivery lost its claim and another holds one."""
        if self.claim is not None and self.claim.lost and self.store.live_claims([self.key])[0]:
            self._hand_back(self.settings.delivery.claim_ttl_s, "another delivery holds this item's claim")

    def _hand_back(self, wait_s: float, why: str, meta: ItemMeta | None = None) -> NoReturn:
        """Send the item again for when another delivery's claim would lapse (``wait_s``), using
        no retry: that copy returns the outcome the item ends with, or runs it if none did."""
        countdown = cap_countdown(deferral_s(wait_s), self.settings.max_countdown_s)
        log.warning(
            "%s[%s]: %s; this copy comes back in %.1f s", self.task.name, self.task_id, why, countdown
        )
        self._reschedule(meta or self.meta, countdown, deferral=why)

    def _send_aggregate(self, state: FinishState) -> None:
        try:
            aggregate_signature(
                self.task.app, self.meta.run, state.aggregate, self.settings.queues.fanin
            ).apply_async()
        except Exception:
            # The run stays active without its aggregate: the reconciler sends it.
            log.exception("could not send the aggregate of run %s; the reconciler will", self.meta.run)

    def _stop_renewing(self) -> None:
        if self.token:
            self.rt.claims.drop(self.runs, self.key)

    def _release_claim(self) -> None:
        if self.token:
            self._stop_renewing()
            self.store.release_claim(self.key, self.token)
            self.token = ""

    def _record_attempt(
        self, err: AgentfleetError, attempt: int, downstream: str | None, duration_s: float = 0.0
    ) -> None:
        record = failures.attempt_record(
            err,
            attempt=attempt,
            downstream=downstream,
            redactor=self.redactor,
            duration_s=duration_s,
            requeues=self.meta.requeues,
        )
        self.store.add_attempt_error(self.key, record)

    def _span(self) -> AttemptSpan | None:
        """This delivery's attempt for the run's timeline: its worker and seconds since it
        claimed the item (None when it claimed nothing)."""
        if self.claimed_at is None:
            return None
        node = str(getattr(self.request or self.task.request, "hostname", None) or "local")
        return AttemptSpan(node, time.monotonic() - self.claimed_at)

    def _count_attempt(self, field: str) -> None:
        """Count a retry or a deferral once for the run, noting it on the run's timeline."""
        span = self._span() or AttemptSpan("", 0.0)
        self.store.count_attempt(self.meta.run, field, event=self._event(), index=self.meta.idx, span=span)

    def _event(self) -> str:
        """What this delivery counts is its message's own: the same task id, requeue, attempt
        and deferral (a copy redelivered after its worker died) counts once."""
        meta = self.meta
        return f"{self.task_id} {meta.requeues}:{meta.attempt}:{meta.deferrals}"

    def _queue(self) -> str:
        return getattr(self.task, "queue", None) or self.settings.queues.agents

    def _stage_tasks(self) -> list[str]:
        if self.meta.stages <= 1:
            return []
        return [name for name in self.store.get_run(self.meta.run).get("task", "").split(",") if name]

    def _failure(
        self,
        err: AgentfleetError,
        *,
        attempts: int,
        stage_attempts: int,
        elapsed_s: float,
        cost: float,
        tb: str = "",
        downstream: str | None = None,
    ) -> dict[str, Any]:
        downstream = downstream or err.downstream or self.task.downstream
        self._unless_taken_over()
        message = self.redactor.text(str(err))
        outcome = outcome_for(
            self.meta,
            self.task_id,
            ok=False,
            error_type=type(err).__name__,
            error=message,
            category=err.category,
            attempts=attempts,
            duration_s=round(self.carried[1] + elapsed_s, 6),
            cost_usd=self.carried[2] + cost,
        )
        entry = failures.build_dead_letter(
            task=self.task,
            redactor=self.redactor,
            meta=self.meta,
            task_id=self.task_id,
            inputs=self.kwargs,
            error=err,
            traceback_text=tb,
            attempt_errors=self.store.attempt_errors(self.key),
            downstream=downstream,
            attempts=stage_attempts,
            previous=self.previous,
            stage_tasks=self._stage_tasks(),
            cost_usd=self.carried[2] + cost,
        )
        if self.patience.call(failures.on_final_failure, self.settings, entry, client=self.runs.client):
            outcome = outcome.model_copy(update={"dead_lettered": True})
        finished = self._finish(outcome)
        if self.store.get_run(self.meta.run).get("fail_fast") == "1":
            # Fail-fast: the first final failure cancels every item that has not started.
            self.store.fail_fast(self.meta.run)
            undo, fanin = self.rt.undo, self.settings.queues.fanin
            self.patience.call(request_compensation, undo, self.task.app, self.meta.run, fanin)
        return finished

    # The delivery --------------------------------------------------------------------------

    def _take_previous_stage(self) -> TaskOutcome | None:
        """For a later pipeline stage: its input is the previous stage's result."""
        previous = previous_stage(self.args, self.meta)
        if previous is not None and previous.ok:
            self.previous = previous
            self.carried = (previous.attempts, previous.duration_s, previous.cost_usd)
            self.kwargs = dict(previous.result or {})
        return previous

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
        previous = self._take_previous_stage()
        if previous is not None and not previous.ok:
            return previous.model_dump(mode="json")

        token = self.claim_token or new_claim_token(
            str(getattr(self.task.request, "hostname", None) or "local")
        )
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
            )

        state = self.patience.call(begin)
        if state.verdict == "cancelled":
            # Not stored under the idempotency key: a resumed run must still do this item.
            return self._finish(cancelled_outcome(self.meta, self.task_id), store=False)
        if state.stored is not None:
            stored = state.stored.model_copy(
                update={"task_id": self.task_id, "run_id": self.meta.run, "index": self.meta.idx}
            )
            return self._finish(stored)
        if state.verdict == "busy":
            # Another copy of this message is running the item: come back when its claim would
            # have lapsed (by then it has an outcome, or its worker died and this copy runs).
            log.info(
                "%s[%s] runs elsewhere; this copy comes back in %.1f s",
                self.task.name,
                self.task_id,
                state.claim_left_s,
            )
            wait_s = cap_countdown(deferral_s(state.claim_left_s), self.settings.max_countdown_s)
            self._reschedule(self.meta, wait_s, deferral="another delivery of this item is running it")
        self.token = token
        self.claimed_at = time.monotonic()
        self.claim = self.rt.claims.hold(self.runs, self.key, token, ttl_s, confirmed_at=sent)
        try:
            return self._claimed(state.deliveries)
        finally:
            self._stop_renewing()

    def _claimed(self, deliveries: int) -> dict[str, Any]:
        """The rest of a delivery that holds the item's claim: poison check, input, body."""
        attempts = self.carried[0] + self.meta.attempt + 1
        if deliveries > self.settings.dlq.max_deliveries:
            died = deliveries - 1
            err = PoisonMessage(
                f"the worker process died {died} times running this task; "
                f"max_deliveries is {self.settings.dlq.max_deliveries}"
            )
            self._record_attempt(err, self.meta.attempt + died, self.task.downstream)
            return self._failure(
                err,
                attempts=attempts - 1,
                stage_attempts=self.meta.attempt + died,
                elapsed_s=self.meta.elapsed_s,
                cost=self.meta.cost_usd,
            )
        if self.meta.node and not self.kwargs:
            graph = self.rt.graphs
            self.kwargs = self.patience.call(step_inputs, self.runs, graph, self.task, self.meta)
        try:
            values = validate_input(self.task, self.kwargs)
        except InvalidInput as err:
            self._record_attempt(err, self.meta.attempt + 1, None)
            return self._failure(
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

    def _classify(self, exc: Exception, ctx: TaskContext) -> AgentfleetError:
        if isinstance(exc, SoftTimeLimitExceeded):
            where = f" while calling {ctx.last_downstream}" if ctx.downstreams_called else ""
            return TaskTimeLimit(
                f"the soft time limit of {self.task.soft_time_limit} s ran out{where}",
                downstream=ctx.last_downstream,
            )
        return failures.classify_failure(self.task, exc, self.settings)

    def _execute(self, values: dict[str, Any], attempts: int) -> dict[str, Any]:
        guard = CircuitGuard(self.rt.breaker, self.task.downstream)
        ctx = self._task_context(guard)
        started = time.monotonic()
        slot = None
        try:
            if self.meta.max_in_flight:
                # The run is a pool: wait briefly for one of its slots, else defer (no retry used).
                slot = clients.pool_slot(self.settings, self.meta.run, self.meta.max_in_flight)
            guard.enter()
            with tracing.span(f"attempt {attempts}", attributes={"agentfleet.item.attempt": attempts}):
                result = jsonable(self.task.fn(ctx, **values))
        except Exception as exc:
            elapsed = time.monotonic() - started
            err = self._classify(exc, ctx)
            guard.failed(err, ctx.last_downstream or err.downstream or self.task.downstream)
            return self._after_error(err, ctx, elapsed, attempts, traceback.format_exc())
        finally:
            ctx.close()
            if slot is not None:
                slot.release()
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
        return self._finish(outcome)

    # Retries ---------------------------------------------------------------------------------

    def _after_error(
        self, err: AgentfleetError, ctx: TaskContext | None, elapsed: float, attempts: int, tb: str
    ) -> dict[str, Any]:
        spent_s = self.meta.elapsed_s + elapsed
        cost = self.meta.cost_usd + (ctx.cost_usd if ctx is not None else 0.0)
        downstream = (ctx.last_downstream if ctx is not None else None) or err.downstream
        if isinstance(err, ClaimLost) or (self.claim is not None and self.claim.lost):
            # Another delivery may be running the item: this one's error is no attempt of it.
            spent = self.meta.model_copy(update={"elapsed_s": spent_s, "cost_usd": cost})
            after = "" if isinstance(err, ClaimLost) else f" (and then it raised {type(err).__name__})"
            self._hand_back(self.settings.delivery.claim_ttl_s, f"its claim is lost{after}", spent)
        if isinstance(err, Deferred):
            self.store.clear_deliveries(self.task_id, self.key)
            self._count_attempt("deferrals")
            countdown = cap_countdown(deferral_s(err.wait_s), self.settings.max_countdown_s)
            nxt = self.meta.model_copy(
                update={"deferrals": self.meta.deferrals + 1, "elapsed_s": spent_s, "cost_usd": cost}
            )
            self._reschedule(nxt, countdown, deferral=str(err))
        self._record_attempt(err, self.meta.attempt + 1, downstream or self.task.downstream, elapsed)
        retries_left = self.meta.attempt < self.task.fleet_max_retries
        if isinstance(err, RetryableError) and retries_left:
            self.store.clear_deliveries(self.task_id, self.key)
            self._count_attempt("retries")
            countdown = cap_countdown(
                backoff_s(
                    self.meta.attempt,
                    base_s=self.settings.retry.backoff_base_s,
                    cap_s=self.settings.retry.backoff_cap_s,
                    retry_after_s=err.retry_after_s,
                ),
                self.settings.max_countdown_s,
            )
            log.warning(
                "%s[%s] attempt %d failed (%s: %s); retrying in %.2f s",
                self.task.name,
                self.task_id,
                attempts,
                type(err).__name__,
                self.redactor.text(str(err))[:300],
                countdown,
            )
            nxt = self.meta.model_copy(
                update={"attempt": self.meta.attempt + 1, "elapsed_s": spent_s, "cost_usd": cost}
            )
            self._reschedule(nxt, countdown)
        return self._failure(
            err,
            attempts=attempts,
            stage_attempts=self.meta.attempt + 1,
            elapsed_s=spent_s,
            cost=cost,
            tb=tb,
            downstream=downstream,
        )

    def _reschedule(self, meta: ItemMeta, countdown: float, *, deferral: str | None = None) -> NoReturn:
        """Send the item again in ``countdown`` s: a retry, or a deferral (``deferral``: why)."""
        tracing.annotate(
            {
                "agentfleet.outcome": "retry" if deferral is None else "deferred",
                "agentfleet.countdown_s": countdown,
            },
            settled=True,
        )
        self._release_claim()
        args: tuple[Any, ...] = ()
        kwargs = dict(self.kwargs)
        if self.meta.stage > 0:
            # A later stage keeps its input as the previous stage's outcome, as a chain sends it.
            args, kwargs = self.args, {}
        kwargs[META_KWARG] = meta.to_kwarg()
        if self.in_batch:
            send_alone(self.task, meta, self.kwargs, self._queue(), countdown)
            raise _Rescheduled
        if self.request is None:
            if deferral is not None:
                defer(self.task, self.task.request, args, kwargs, countdown, deferral)
            raise self.task.retry(args=args, kwargs=kwargs, countdown=countdown, max_retries=None)
        # Outside the task: the same message again (chain and chord included), as retry() sends it.
        self.task.signature_from_request(
            self.request, args=args, kwargs=kwargs, countdown=countdown
        ).apply_async()
        raise _Rescheduled


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
            outcomes = [_Delivery(task, args, kwargs).run()]
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
        return _Delivery(task, (), kwargs, task_id=task_id, claim_token=token).run()
    except _Rescheduled:
        return None
