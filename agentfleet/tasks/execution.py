"""One delivery of one item: idempotency, poison caps, validation, the body, retry or outcome.

The steps, in order:

1. A pipeline stage whose previous stage failed passes that failure on unchanged.
2. ``RunStore.begin``: a cancelled run records a cancelled outcome; an item with a stored
   outcome returns it without running (idempotency); a task id delivered more than
   ``max_deliveries`` times without finishing is poison.
3. The input is validated against the function's type hints (invalid: permanent).
4. The body runs with a fresh ``TaskContext``.
5. Success stores and records the outcome. ``Deferred`` reschedules without using a retry.
   A retryable error retries with backoff while the budget lasts. Anything else, or an
   exhausted budget, becomes an ``ok=False`` outcome (and a dead letter), so fan-in still runs.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from agentfleet.config import Settings, get_settings
from agentfleet.errors import (
    AgentfleetError,
    Deferred,
    InvalidInput,
    PermanentError,
    PoisonMessage,
    RetryableError,
    classify,
)
from agentfleet.idempotency import stage_key
from agentfleet.models import TaskOutcome
from agentfleet.runs import RunStore
from agentfleet.tasks import clients, failures
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.meta import META_KWARG, ItemMeta
from agentfleet.tasks.retry_policy import backoff_s, cap_countdown

if TYPE_CHECKING:
    from agentfleet.tasks.base import FleetTask

__all__ = ["cancelled_outcome", "execute"]

log = logging.getLogger("agentfleet.task")


def _meta_for(task: FleetTask, kwargs: dict[str, Any]) -> ItemMeta:
    raw = kwargs.pop(META_KWARG, None)
    if raw:
        return ItemMeta.model_validate(raw)
    # Called directly (``task.delay(...)``), outside any run: the task id is the item.
    task_id = task.request.id or "local"
    return ItemMeta(run=f"direct-{task_id}", key=f"direct:{task_id}", item=task_id)


def _previous_stage(args: tuple[Any, ...], meta: ItemMeta) -> TaskOutcome | None:
    if meta.stage == 0 or not args or not isinstance(args[0], dict):
        return None
    return TaskOutcome.model_validate(args[0])


def _outcome(meta: ItemMeta, task_id: str, **fields: Any) -> TaskOutcome:
    return TaskOutcome(
        task_id=task_id,
        run_id=meta.run,
        item_key=meta.item,
        index=meta.idx,
        idempotency_key=meta.key,
        **fields,
    )


def cancelled_outcome(meta: ItemMeta, task_id: str) -> TaskOutcome:
    """The outcome of an item whose run was cancelled before it started."""
    return _outcome(
        meta,
        task_id,
        ok=False,
        error_type="Cancelled",
        error="the run was cancelled before this item started",
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"the task's result is not JSON: {exc}") from None
    return value


def _validate(task: FleetTask, inputs: dict[str, Any]) -> dict[str, Any]:
    try:
        model = task.input_model.model_validate(inputs)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}" for err in exc.errors()
        )
        raise InvalidInput(f"invalid input for {task.name}: {problems}") from None
    return {name: getattr(model, name) for name in type(model).model_fields}


class _Delivery:
    """The state of one delivery; ``run()`` returns the outcome dict or raises Celery's Retry."""

    def __init__(self, task: FleetTask, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.task = task
        self.settings: Settings = get_settings()
        self.store = RunStore.from_settings(self.settings)
        self.kwargs = dict(kwargs)
        self.meta = _meta_for(task, self.kwargs)
        self.args = args
        self.task_id: str = task.request.id or self.meta.item
        self.key = stage_key(self.meta.key, self.meta.stage, self.meta.stages)
        # What earlier pipeline stages of this item spent: attempts, seconds, US dollars.
        self.carried: tuple[int, float, float] = (0, 0.0, 0.0)

    # Outcomes ------------------------------------------------------------------------------

    def _finish(self, outcome: TaskOutcome, *, store: bool = True) -> dict[str, Any]:
        """Store the outcome under this stage's key; count it for the run if it ends the item."""
        final = self.meta.last_stage or not outcome.ok
        scoped = outcome.model_copy(update={"idempotency_key": self.key})
        self.store.finish(scoped, store=store, record=final)
        return outcome.model_dump(mode="json")

    def _failure(
        self,
        err: AgentfleetError,
        *,
        attempts: int,
        elapsed_s: float,
        cost: float,
        tb: str = "",
        ctx: TaskContext | None = None,
    ) -> dict[str, Any]:
        outcome = _outcome(
            self.meta,
            self.task_id,
            ok=False,
            error_type=type(err).__name__,
            error=str(err),
            category=err.category,
            attempts=attempts,
            duration_s=round(self.carried[1] + elapsed_s, 6),
            cost_usd=self.carried[2] + cost,
        )
        dead = failures.on_final_failure(
            task=self.task,
            settings=self.settings,
            meta=self.meta,
            task_id=self.task_id,
            inputs=self.kwargs,
            error=err,
            traceback_text=tb,
            attempt_errors=self.store.attempt_errors(self.key),
            downstream=(ctx.last_downstream if ctx else None) or err.downstream or self.task.downstream,
        )
        if dead:
            outcome = outcome.model_copy(update={"dead_lettered": True})
        return self._finish(outcome)

    # The delivery --------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        previous = _previous_stage(self.args, self.meta)
        if previous is not None and not previous.ok:
            return previous.model_dump(mode="json")
        inputs = dict(previous.result or {}) if previous is not None else self.kwargs
        if previous is not None:
            self.carried = (previous.attempts, previous.duration_s, previous.cost_usd)
        self.kwargs = inputs

        state = self.store.begin(
            self.meta.run,
            self.key,
            self.task_id,
            deliveries_ttl_s=self.settings.visibility_timeout_s * 4,
        )
        if state.cancelled:
            # Not stored under the idempotency key: a resumed run must still do this item.
            return self._finish(cancelled_outcome(self.meta, self.task_id), store=False)
        if state.stored is not None:
            stored = state.stored.model_copy(
                update={"task_id": self.task_id, "run_id": self.meta.run, "index": self.meta.idx}
            )
            return self._finish(stored)
        attempts = self.carried[0] + self.meta.attempt + 1
        if state.deliveries > self.settings.dlq.max_deliveries:
            err = PoisonMessage(
                f"the worker process died {state.deliveries - 1} times running this task; "
                f"max_deliveries is {self.settings.dlq.max_deliveries}"
            )
            return self._failure(
                err, attempts=attempts - 1, elapsed_s=self.meta.elapsed_s, cost=self.meta.cost_usd
            )
        try:
            values = _validate(self.task, inputs)
        except InvalidInput as err:
            return self._failure(
                err, attempts=attempts, elapsed_s=self.meta.elapsed_s, cost=self.meta.cost_usd
            )
        return self._execute(values, attempts)

    def _context(self, workdir: Path) -> TaskContext:
        logger = logging.LoggerAdapter(
            logging.getLogger(f"agentfleet.tasks.{self.task.name}"),
            {"task_id": self.task_id, "run_id": self.meta.run, "item_key": self.meta.item},
        )
        return TaskContext(
            task_id=self.task_id,
            run_id=self.meta.run,
            item_key=self.meta.item,
            idempotency_key=self.meta.key,
            attempt=self.meta.attempt,
            workdir=workdir,
            log=logger,
            task_name=self.task.name,
            downstream=self.task.downstream,
            index=self.meta.idx,
            _http_factory=clients.http_client,
            _anthropic_factory=clients.anthropic_client,
        )

    def _execute(self, values: dict[str, Any], attempts: int) -> dict[str, Any]:
        workdir = Path(tempfile.mkdtemp(prefix="af-", dir=self.settings.workdir_root))
        ctx = self._context(workdir)
        started = time.monotonic()
        try:
            result = _jsonable(self.task.fn(ctx, **values))
        except Exception as exc:
            elapsed = time.monotonic() - started
            err = classify(
                exc,
                retryable=self.task.retry_on,
                permanent=self.task.fail_on,
                unknown_is_retryable=self.settings.retry.unknown_is_retryable,
            )
            tb = traceback.format_exc()
            return self._after_error(err, ctx, elapsed, attempts, tb)
        finally:
            ctx.close()
            shutil.rmtree(workdir, ignore_errors=True)
        elapsed = time.monotonic() - started
        outcome = _outcome(
            self.meta,
            self.task_id,
            ok=True,
            result=result,
            attempts=attempts,
            duration_s=round(self.carried[1] + self.meta.elapsed_s + elapsed, 6),
            cost_usd=self.carried[2] + self.meta.cost_usd + ctx.cost_usd,
        )
        return self._finish(outcome)

    def _after_error(
        self, err: AgentfleetError, ctx: TaskContext, elapsed: float, attempts: int, tb: str
    ) -> dict[str, Any]:
        spent_s = self.meta.elapsed_s + elapsed
        cost = self.meta.cost_usd + ctx.cost_usd
        if isinstance(err, Deferred):
            self.store.clear_deliveries(self.task_id)
            self.store.incr(self.meta.run, "deferrals")
            countdown = cap_countdown(err.wait_s, self.settings.max_countdown_s)
            nxt = self.meta.model_copy(
                update={"deferrals": self.meta.deferrals + 1, "elapsed_s": spent_s, "cost_usd": cost}
            )
            raise self._reschedule(nxt, countdown)
        self.store.add_attempt_error(
            self.key,
            {
                "attempt": attempts,
                "error_type": type(err).__name__,
                "category": err.category,
                "message": str(err)[:2000],
                "status_code": err.status_code,
                "downstream": ctx.last_downstream or err.downstream,
                "at": time.time(),
                "duration_s": round(elapsed, 6),
            },
        )
        retries_left = self.meta.attempt < self.task.fleet_max_retries
        if isinstance(err, RetryableError) and retries_left:
            self.store.clear_deliveries(self.task_id)
            self.store.incr(self.meta.run, "retries")
            countdown = cap_countdown(
                backoff_s(
                    self.meta.attempt,
                    base_s=self.settings.retry.backoff_base_s,
                    cap_s=self.settings.retry.backoff_cap_s,
                    retry_after_s=err.retry_after_s,
                ),
                self.settings.max_countdown_s,
            )
            ctx.log.warning(
                "attempt %d failed (%s: %s); retrying in %.2f s",
                attempts,
                type(err).__name__,
                err,
                countdown,
            )
            nxt = self.meta.model_copy(
                update={"attempt": self.meta.attempt + 1, "elapsed_s": spent_s, "cost_usd": cost}
            )
            raise self._reschedule(nxt, countdown)
        return self._failure(err, attempts=attempts, elapsed_s=spent_s, cost=cost, tb=tb, ctx=ctx)

    def _reschedule(self, meta: ItemMeta, countdown: float) -> BaseException:
        args: tuple[Any, ...] = ()
        kwargs = dict(self.kwargs)
        if self.meta.stage > 0:
            # A later stage keeps its input as the previous stage's outcome, as a chain sends it.
            args, kwargs = self.args, {}
        kwargs[META_KWARG] = meta.to_kwarg()
        return self.task.retry(args=args, kwargs=kwargs, countdown=countdown, max_retries=None)


def execute(task: FleetTask, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Run one delivery of ``task``; returns a ``TaskOutcome`` as a dict."""
    return _Delivery(task, args, kwargs).run()
