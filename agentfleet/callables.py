"""Which functions a name from outside may stand for: only what the operator configured.

An aggregate is a function named ``module:qualname``. A name that arrives from outside the
Python process that chose it (an MCP client, ``POST /runs``, a schedule, a dead letter being
requeued, a fan-in message read from the broker) is never imported just because it was
named. Two rules, both decided on the name alone, before anything is imported:

- **outside callers** (MCP, HTTP, requeue) may name only the operator's aggregates: the
  functions of ``agentfleet.merge``, the ``aggregate`` of each ``[fanouts]`` and
  ``[schedules]`` entry, and those listed in ``dispatch.allow_aggregates``;
- **a worker** runs, besides those, a function defined (with ``def``, at the top level) in one
  of its own task modules (``task_modules``, or a module inside one): code the operator
  deployed to it. Anything else, ``subprocess:run`` or ``os:system`` say, is refused.

Python code calling ``Fleet.map(aggregate=...)`` in its own process is trusted as a task
author is (``references.callable_path`` checks that what it names is a plain function); its
workers still hold it to the second rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentfleet import merge
from agentfleet.config import Settings
from agentfleet.errors import DispatchError
from agentfleet.references import canonical_path, defined_function, resolve_callable, split_path

__all__ = ["allowed_aggregates", "outside_aggregate", "worker_aggregate"]

_ALLOW_SETTING = "dispatch.allow_aggregates (AGENTFLEET_DISPATCH__ALLOW_AGGREGATES)"


def allowed_aggregates(settings: Settings) -> frozenset[str]:
    """The operator's aggregates, as ``module:qualname``: ``agentfleet.merge``'s functions,
    the named fan-outs' and schedules' aggregates and ``dispatch.allow_aggregates``."""
    names = [f"{merge.__name__}:{name}" for name in merge.__all__ if callable(getattr(merge, name))]
    names += [spec.aggregate for spec in settings.fanouts.values() if spec.aggregate]
    names += [spec.aggregate for spec in settings.schedules.values() if spec.aggregate]
    names += settings.dispatch.allow_aggregates
    return frozenset(canonical_path(name) for name in names)


def outside_aggregate(settings: Settings, path: str) -> str:
    """``path`` as ``module:qualname`` when the operator allows it; else ``DispatchError``.

    Imports nothing: a refused name never runs its module's import-time code here.
    """
    canonical = canonical_path(path)
    if canonical not in allowed_aggregates(settings):
        raise DispatchError(
            f"{path!r} is not an allowed aggregate: name one of agentfleet.merge's functions, a "
            f"[fanouts] or [schedules] aggregate, or one the operator lists in {_ALLOW_SETTING}"
        )
    return canonical


def _in_modules(module: str, task_modules: Sequence[str]) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in task_modules if name)


def worker_aggregate(settings: Settings, path: str) -> Callable[..., Any]:
    """The function a worker runs for ``path``: an operator's aggregate, or a top-level
    function defined in one of ``settings.task_modules``; else ``DispatchError``, with nothing
    imported."""
    canonical = canonical_path(path)
    if canonical in allowed_aggregates(settings):
        return resolve_callable(canonical)
    module, qualname = split_path(canonical)
    if _in_modules(module, settings.task_modules) and "." not in qualname:
        target = resolve_callable(canonical)
        if defined_function(target, module, qualname):
            return target
    modules = ", ".join(settings.task_modules) or "none"
    raise DispatchError(
        f"{path!r} is not allowed on this worker: an aggregate is a function defined in one of its "
        f"task modules (AGENTFLEET_TASK_MODULES: {modules}), one of agentfleet.merge's, a "
        f"[fanouts] aggregate, or one listed in {_ALLOW_SETTING}"
    )
