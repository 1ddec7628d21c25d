"""What a fan-out must pass before anything is sent: each mistake is one ``DispatchError``.

- every stage names a fleet task (a plain Celery task, a bare function or a task defined in
  the ``__main__`` script cannot run as one);
- every input is a JSON object of keyword arguments no larger than
  ``dispatch.max_input_bytes``, and fits the first stage's input: validated against its
  input model when the task object is at hand, else checked against the parameter names its
  workers registered (missing and unknown names);
- some live worker has registered each stage's task and consumes its queue (unless
  ``dispatch.require_workers`` is off); workers that are starting are waited for up to
  ``dispatch.wait_for_workers_s`` seconds. An unknown name is refused with the closest
  names the workers know.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Task

from agentfleet.errors import DispatchError, InvalidInput
from agentfleet.idempotency import canonical_json
from agentfleet.protocol.meta import META_KWARG
from agentfleet.protocol.task import FleetTask, validate_input
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry

__all__ = ["Stage", "admit_inputs", "require_fit", "require_workers", "stage_of"]

# Bad inputs named in one error; the rest are counted.
_SHOWN_PROBLEMS = 5


@dataclass(frozen=True)
class Stage:
    """A stage of a fan-out: its task name, its queue and, when given, the task object."""

    name: str
    queue: str
    task: FleetTask | None = None


def stage_of(task: Any, default_queue: str) -> Stage:
    """The ``Stage`` for a fleet task object or a registered task name."""
    if isinstance(task, str):
        if not task.strip():
            raise DispatchError("the task name is empty; give a registered name such as myapp.tasks.classify")
        return Stage(task, default_queue)
    if isinstance(task, FleetTask):
        module = getattr(getattr(task, "fn", None), "__module__", None)
        if module == "__main__":
            raise DispatchError(
                f"{task.name} is defined in the script being run (__main__), which worker processes "
                "cannot import; move it into a module (say tasks.py) and import it from there"
            )
        return Stage(task.name, getattr(task, "queue", None) or default_queue, task)
    if isinstance(task, Task):
        raise DispatchError(
            f"{task.name} is a plain Celery task; a fleet task takes a TaskContext as its first "
            "parameter: decorate the function with @fleet_task (from agentfleet import fleet_task)"
        )
    raise DispatchError(f"{task!r} is not a fleet task; decorate it with @fleet_task")


def _size_text(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KiB"


def _fit_problem(item: Mapping[str, Any], stage: Stage, info: TaskInfo | None) -> str | None:
    if stage.task is not None:
        try:
            validate_input(stage.task, dict(item))
        except InvalidInput as exc:
            return str(exc).removeprefix(f"invalid input for {stage.name}: ")
        return None
    if info is None or not info.fleet:
        return None
    missing = [name for name in info.required if name not in item]
    unknown = [name for name in item if name not in info.params]
    parts = [f"{name}: missing" for name in missing] + [f"{name}: not a parameter" for name in unknown]
    if not parts:
        return None
    return "; ".join(parts) + f" (it takes: {', '.join(info.params) or 'nothing'})"


def admit_inputs(
    inputs: Iterable[Mapping[str, Any]], *, max_bytes: int, start: int = 0
) -> list[dict[str, Any]]:
    """The inputs as dicts, once every one is a JSON object of at most ``max_bytes`` bytes; the
    first is named input ``start`` in an error (a chunk of a longer run)."""
    items: list[dict[str, Any]] = []
    for i, item in enumerate(inputs, start):
        if not isinstance(item, Mapping):
            raise DispatchError(
                f"input {i} is {type(item).__name__}; each input is a dict of keyword arguments"
            )
        if META_KWARG in item:
            raise DispatchError(f"input {i} uses the reserved key {META_KWARG}")
        try:
            size = len(canonical_json(item, finite=True).encode())
        except ValueError as exc:
            reason = "it holds NaN or Infinity, which JSON cannot carry" if "float" in str(exc) else str(exc)
            raise DispatchError(f"input {i} is not JSON: {reason}") from None
        except TypeError as exc:
            raise DispatchError(f"input {i} is not JSON: {exc}") from None
        if size > max_bytes:
            raise DispatchError(
                f"input {i} is {_size_text(size)} of JSON, over dispatch.max_input_bytes "
                f"({_size_text(max_bytes)}); pass large content by reference (a URL or a path), or raise "
                "AGENTFLEET_DISPATCH__MAX_INPUT_BYTES"
            )
        items.append(dict(item))
    return items


def require_fit(
    items: Sequence[Mapping[str, Any]], first: Stage, info: TaskInfo | None = None, *, start: int = 0
) -> None:
    """Raise one ``DispatchError`` naming the first few inputs that do not fit ``first`` (and
    counting the rest). ``info`` is what the workers registered of it, used when no task
    object is at hand; the first item is input ``start`` (a chunk of a longer run)."""
    problems = []
    for i, item in enumerate(items, start):
        problem = _fit_problem(item, first, info)
        if problem is not None:
            problems.append(f"input {i}: {problem}")
    if problems:
        shown = "; ".join(problems[:_SHOWN_PROBLEMS])
        more = len(problems) - _SHOWN_PROBLEMS
        raise DispatchError(
            f"{len(problems)} of {len(items)} inputs do not fit {first.name}: {shown}"
            + (f" (and {more} more)" if more > 0 else "")
        )


def _closest(name: str, known: Iterable[str]) -> str:
    names = sorted(set(known))
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        others = f" (also close: {', '.join(close[1:])})" if len(close) > 1 else ""
        return f"did you mean {close[0]}?{others}"
    if not names:
        return "they registered no task of their own"
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"they have: {shown}"


def _problems(workers: Sequence[WorkerRecord], stages: Sequence[Stage]) -> list[str]:
    if not workers:
        return [
            "no worker is running: none has sent a heartbeat to this Redis lately. Start one with "
            "`agentfleet worker`, or let dispatch wait for workers that are starting "
            "(AGENTFLEET_DISPATCH__WAIT_FOR_WORKERS_S, or --wait-for-workers)"
        ]
    known = {name: info for worker in workers for name, info in worker.tasks.items()}
    modules = sorted({module for worker in workers for module in worker.task_modules})
    problems = []
    for stage in dict.fromkeys(stages):
        info = known.get(stage.name)
        if info is None:
            imported = ", ".join(modules) or "none"
            problems.append(
                f"no live worker has the task {stage.name!r}; {_closest(stage.name, known)} "
                f"(workers import the modules in AGENTFLEET_TASK_MODULES; theirs: {imported})"
            )
        elif not info.fleet:
            problems.append(
                f"{stage.name} is a plain Celery task; decorate its function with @fleet_task to "
                "fan it out (a fleet task takes a TaskContext as its first parameter)"
            )
        elif not any(stage.name in w.tasks and stage.queue in w.queues for w in workers):
            serving = sorted({q for w in workers if stage.name in w.tasks for q in w.queues})
            problems.append(
                f"no live worker that has {stage.name} consumes its queue {stage.queue!r} (they "
                f"consume {', '.join(serving)}); start one with `agentfleet worker -Q {stage.queue}`"
            )
        elif info.llm and not any(
            w.llm and stage.name in w.tasks and stage.queue in w.queues for w in workers
        ):
            problems.append(
                f"{stage.name} calls an LLM and no worker that runs it has an LLM endpoint: set "
                "ANTHROPIC_API_KEY, or AGENTFLEET_LLM__BASE_URL (e.g. `agentfleet mock-llm`), "
                "where the workers run and restart them"
            )
    return problems


def require_workers(
    registry: WorkerRegistry,
    stages: Sequence[Stage],
    *,
    wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, TaskInfo]:
    """What live workers registered of each stage's task, once every stage can run.

    Waits up to ``wait_s`` seconds for workers that are starting; then raises one
    ``DispatchError`` with every problem found.
    """
    deadline = time.monotonic() + wait_s
    while True:
        workers = registry.live()
        problems = _problems(workers, stages)
        if not problems:
            wanted = {stage.name for stage in stages}
            return {name: info for w in workers for name, info in w.tasks.items() if name in wanted}
        left = deadline - time.monotonic()
        if left <= 0:
            raise DispatchError("; ".join(problems))
        sleep(min(0.5, left))
