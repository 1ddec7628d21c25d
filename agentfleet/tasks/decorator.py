"""``@fleet_task``: turn a function into a Celery task on the agentfleet app."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, create_model

from agentfleet.config import get_settings
from agentfleet.errors import ConfigError
from agentfleet.protocol.meta import META_KWARG
from agentfleet.protocol.task import FleetTask, TaskBudget
from agentfleet.sandbox.spec import SandboxSpec, task_sandbox
from agentfleet.transport.acks import ack_later

__all__ = ["fleet_task", "input_model_for"]


def input_model_for(fn: Callable[..., Any], *, model_name: str) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters after the first (the ``TaskContext``)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigError(
            f"{fn.__qualname__}: a fleet task's first parameter receives the TaskContext; "
            "write it as def task(ctx: TaskContext, ...)"
        )
    hints = typing.get_type_hints(fn)
    fields: dict[str, Any] = {}
    for param in params[1:]:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigError(f"{fn.__qualname__}: fleet task inputs must be named parameters")
        if param.name == META_KWARG:
            raise ConfigError(f"{fn.__qualname__}: the parameter name {META_KWARG} is reserved")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return create_model(model_name, __config__=config, **fields)


def _time_limits(
    task_name: str, settings: Any, time_limit_s: float | None, soft_time_limit_s: float | None
) -> tuple[float, float]:
    """The task's hard and soft time limits (seconds), checked against the settings."""
    hard = time_limit_s if time_limit_s is not None else settings.task_time_limit_s
    if hard >= settings.visibility_timeout_s:
        raise ConfigError(
            f"{task_name}: time_limit_s ({hard}) must be below visibility_timeout_s "
            f"({settings.visibility_timeout_s}), or Redis delivers the task twice; "
            "lower time_limit_s or raise AGENTFLEET_VISIBILITY_TIMEOUT_S"
        )
    if soft_time_limit_s is not None:
        soft = soft_time_limit_s
    elif time_limit_s is not None:
        soft = max(1.0, hard * 0.9)
    else:
        soft = settings.task_soft_time_limit_s
    if soft >= hard:
        raise ConfigError(f"{task_name}: soft_time_limit_s ({soft}) must be below time_limit_s ({hard})")
    return hard, soft


def _register(
    fn: Callable[..., Any],
    *,
    name: str | None,
    downstream: str | None,
    max_retries: int | None,
    time_limit_s: float | None,
    soft_time_limit_s: float | None,
    retry_on: Iterable[type[BaseException]],
    fail_on: Iterable[type[BaseException]],
    queue: str | None,
    budget: TaskBudget,
    compensate: Callable[..., Any] | None,
    sandbox: SandboxSpec | dict[str, Any] | None = None,
) -> FleetTask:
    from agentfleet.celery_app import app
    from agentfleet.tasks.execution import execute

    settings = get_settings()
    task_name = name or f"{fn.__module__}.{fn.__qualname__}"
    hard, soft = _time_limits(task_name, settings, time_limit_s, soft_time_limit_s)

    def run(self: FleetTask, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return execute(self, args, kwargs)

    run.__name__ = fn.__name__
    run.__qualname__ = fn.__qualname__
    run.__module__ = fn.__module__
    run.__doc__ = fn.__doc__
    options: dict[str, Any] = {
        "bind": True,
        "base": FleetTask,
        "name": task_name,
        "fn": staticmethod(fn),
        "input_model": input_model_for(fn, model_name=f"{fn.__name__}_input"),
        "fleet_max_retries": settings.retry.max_retries if max_retries is None else max_retries,
        "downstream": downstream,
        "uses_llm": downstream is not None
        and (downstream.startswith("anthropic:") or downstream == "api.anthropic.com"),
        "retry_on": tuple(retry_on),
        "fail_on": tuple(fail_on),
        "budget": budget,
        "compensate": staticmethod(compensate) if compensate is not None else None,
        "sandbox": task_sandbox(sandbox, settings, task_name),
        "time_limit": hard,
        "soft_time_limit": soft,
        "lazy": False,
    }
    if queue:
        options["queue"] = queue
    task: FleetTask = app.task(**options)(run)
    # A delivery of a fleet task returns the stored outcome when its message comes again: its
    # acknowledgement may ride with the next round trip (``transport.acks``).
    ack_later(task_name)
    return task


@overload
def fleet_task(fn: Callable[..., Any], /) -> FleetTask: ...


@overload
def fleet_task(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    downstream: str | None = None,
    max_retries: int | None = None,
    time_limit_s: float | None = None,
    soft_time_limit_s: float | None = None,
    retry_on: Iterable[type[BaseException]] = (),
    fail_on: Iterable[type[BaseException]] = (),
    queue: str | None = None,
    budget_usd: float | None = None,
    budget_tokens: int | None = None,
    budget_turns: int | None = None,
    budget_wall_s: float | None = None,
    compensate: Callable[..., Any] | None = None,
    sandbox: SandboxSpec | dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], FleetTask]: ...


def fleet_task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    downstream: str | None = None,
    max_retries: int | None = None,
    time_limit_s: float | None = None,
    soft_time_limit_s: float | None = None,
    retry_on: Iterable[type[BaseException]] = (),
    fail_on: Iterable[type[BaseException]] = (),
    queue: str | None = None,
    budget_usd: float | None = None,
    budget_tokens: int | None = None,
    budget_turns: int | None = None,
    budget_wall_s: float | None = None,
    compensate: Callable[..., Any] | None = None,
    sandbox: SandboxSpec | dict[str, Any] | None = None,
) -> FleetTask | Callable[[Callable[..., Any]], FleetTask]:
    """Register ``fn(ctx, **inputs)`` as a fleet task. Works bare or with options.

    ``downstream`` names what the task mostly calls (a host, or ``provider:model``) for its
    dead letters and circuit breaker. ``max_retries`` (default from settings, 3) counts failed
    executions. ``time_limit_s`` is the hard limit in seconds; the soft limit, 90% of it unless
    given, raises a retryable timeout inside the task. ``retry_on`` and ``fail_on`` are the
    task's own exception types that are retryable or permanent. ``budget_usd`` (US dollars),
    ``budget_tokens``, ``budget_turns`` (model calls) and ``budget_wall_s`` (seconds) cap one
    item's spending over all its attempts (defaults from ``[budgets]``); crossing one stops it
    with a permanent ``BudgetExceeded``. ``compensate(ctx, inputs, result)`` undoes one
    succeeded item when its run fails fast, is cancelled or is told to compensate.
    ``sandbox`` (a ``SandboxSpec`` or a dict of its fields, over the ``[sandbox]`` settings)
    gives each item a sandbox, ``ctx.sandbox`` (see docs/sandbox.md).
    """

    def decorate(func: Callable[..., Any]) -> FleetTask:
        return _register(
            func,
            name=name,
            downstream=downstream,
            max_retries=max_retries,
            time_limit_s=time_limit_s,
            soft_time_limit_s=soft_time_limit_s,
            retry_on=retry_on,
            fail_on=fail_on,
            queue=queue,
            budget=TaskBudget(usd=budget_usd, tokens=budget_tokens, turns=budget_turns, wall_s=budget_wall_s),
            compensate=compensate,
            sandbox=sandbox,
        )

    if fn is not None:
        return decorate(fn)
    return decorate
