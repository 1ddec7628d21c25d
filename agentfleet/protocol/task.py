"""``FleetTask``: the Celery base class of every fleet task, and the check of its input.

Both sides read a fleet task's declaration: the client checks inputs against its
``input_model`` and sends to its name and queue; the worker runs its ``fn``. ``@fleet_task``
(``agentfleet.tasks.decorator``) makes one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Task
from pydantic import BaseModel, ValidationError

from agentfleet.errors import AgentfleetError, InvalidInput
from agentfleet.transport.request import request_class

__all__ = ["FleetTask", "TaskBudget", "validate_input"]


@dataclass(frozen=True)
class TaskBudget:
    """One item's caps over all its attempts: US dollars, tokens (input plus output), model
    calls (turns), seconds executing.

    Unset means the ``[budgets]`` setting (``task_usd``, ``task_tokens``, ``task_turns``,
    ``task_wall_s``).
    """

    usd: float | None = None
    tokens: int | None = None
    turns: int | None = None
    wall_s: float | None = None


class FleetTask(Task):
    """A Celery task whose body is a function ``fn(ctx: TaskContext, **inputs)``.

    Delivery is at least once (``acks_late``, rejected on worker loss). Celery's own retry
    counter is not the budget: ``fleet_max_retries`` counts failed executions only, so
    waiting for rate limits never uses up retries. A hard time limit is handled by
    ``FleetRequest`` in the worker's main process: the item is retried or dead-lettered.

    Celery's result backend gets no write for an item that ends normally: its outcome is in
    the run store, which is what ``Run`` and fan-in read, so the backend's GET, SETEX and
    PUBLISH per task would buy nothing. A failure (``FAILURE``) or a retry is still stored
    (``store_errors_even_if_ignored``), so Flower and ``AsyncResult`` still show it.

    An item that failed for good ends as Celery ``FAILURE`` with its fleet error, which is
    expected (``throws``): logged in one line, its traceback kept in the dead letter.
    ``compensate(ctx, inputs, result)``, when set, undoes one succeeded item (see
    ``tasks/compensation.py``).
    """

    abstract = True
    Request = request_class()
    acks_late = True
    reject_on_worker_lost = True
    typing = False
    max_retries = None
    ignore_result = True
    store_errors_even_if_ignored = True
    throws = (AgentfleetError,)

    fn: Callable[..., Any]
    input_model: type[BaseModel]
    fleet_max_retries: int = 3
    downstream: str | None = None
    # Calls the Messages API (``ctx.anthropic``): refused at dispatch by workers that have no
    # LLM endpoint. True for a ``downstream`` naming Anthropic, and for the built-in LLM tasks.
    uses_llm: bool = False
    retry_on: tuple[type[BaseException], ...] = ()
    fail_on: tuple[type[BaseException], ...] = ()
    budget: TaskBudget = TaskBudget()
    compensate: Callable[..., Any] | None = None
    # The task's sandbox (a resolved ``agentfleet.sandbox.SandboxSpec``), or None.
    sandbox: Any = None


def validate_input(task: FleetTask, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` validated against ``task``'s input model, by parameter name; ``InvalidInput``
    naming every problem."""
    try:
        model = task.input_model.model_validate(inputs)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(input)'}: {err['msg']}" for err in exc.errors()
        )
        raise InvalidInput(f"invalid input for {task.name}: {problems}") from None
    return {name: getattr(model, name) for name in type(model).model_fields}
