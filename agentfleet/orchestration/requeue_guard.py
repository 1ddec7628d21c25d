"""What a requeue may send: a dead letter is data in Redis, so it is checked before it is sent.

An entry names its task(s); requeue sends its stored input to them. So before anything is
sent (and in a preview too):

- every task an entry names must be a fleet task that a live worker registered (unless
  ``dispatch.require_workers`` is off: then only the fleet's own machinery, the fan-in, the
  compensation runner, maintenance and Celery's tasks, is refused by name). An entry naming
  ``agentfleet.aggregate`` with a function in its input is refused, whatever it names;
- a dead-lettered aggregate (category ``aggregate``) is run again from its run's record, never
  from what the entry says, and only when that aggregate is one a worker may run: an
  operator's aggregate (``callables.allowed_aggregates``) or a function of a module the live
  workers import as task modules; decided on the name, importing nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentfleet.callables import allowed_aggregates
from agentfleet.config import Settings
from agentfleet.dlq import DeadLetter
from agentfleet.errors import DispatchError
from agentfleet.protocol.names import AGGREGATE_TASK, COMPENSATE_TASK
from agentfleet.references import canonical_path, split_path
from agentfleet.registry import WorkerRecord, WorkerRegistry
from agentfleet.runs import RunStore

__all__ = ["aggregate_refusal", "live_workers", "task_refusal"]

_MACHINERY = (AGGREGATE_TASK, COMPENSATE_TASK)
_MACHINERY_PREFIXES = ("agentfleet.maintenance.", "celery.")


def live_workers(settings: Settings, runs: RunStore) -> list[WorkerRecord] | None:
    """The live workers' records, or None when dispatch does not require workers."""
    if not settings.dispatch.require_workers:
        return None
    return WorkerRegistry.from_settings(settings, runs.client).live()


def _machinery(name: str) -> bool:
    return name in _MACHINERY or name.startswith(_MACHINERY_PREFIXES)


def task_refusal(entry: DeadLetter, workers: Sequence[WorkerRecord] | None) -> str | None:
    """Why ``entry``'s tasks may not be sent again, or None when they may."""
    names = list(dict.fromkeys([entry.task_name, *entry.stage_tasks]))
    if workers is None:
        for name in names:
            if _machinery(name):
                return f"{name} is not a fleet task; only fleet tasks are requeued"
        return None
    known = {name: info for worker in workers for name, info in worker.tasks.items()}
    for name in names:
        info = known.get(name)
        if info is None:
            if _machinery(name):
                return f"{name} is not a fleet task; only fleet tasks are requeued"
            return f"no live worker has the task {name!r}; start its workers, then requeue"
        if not info.fleet:
            return f"{name} is not a fleet task; only fleet tasks are requeued"
    return None


def aggregate_refusal(
    recorded: str, settings: Settings, workers: Sequence[WorkerRecord] | None
) -> str | None:
    """Why a run's recorded aggregate ``recorded`` may not be run again, or None when it may."""
    if not recorded:
        return "its run has no aggregate recorded (it may have expired)"
    try:
        canonical = canonical_path(recorded)
        module, qualname = split_path(canonical)
    except DispatchError:
        return f"its run's aggregate {recorded!r} is not a function name"
    if canonical in allowed_aggregates(settings):
        return None
    modules = {m for worker in workers or () for m in worker.task_modules}
    if "." not in qualname and any(module == m or module.startswith(f"{m}.") for m in modules):
        return None
    return f"its run's aggregate {recorded!r} is not one the workers may run"
