"""Dependency graphs in the worker: a step's input, what its end sets off, the item's outcome.

Each step of an item is a message of its own (task id ``{run}-{idx}-n-{step}``), never a
chord or a nested chain: the graph is driven from the run store (``agentfleet.runs.graph``).

- A step's input is the item's input restricted to the parameters its function declares, plus
  one keyword per dependency: that step's result, under its name. A step sent with its input
  (a retry, a requeue) uses that input as it is.
- A step's final outcome (success, or failure after its retries) is stored under its own key;
  ``graph_advance.lua`` then records it, skips what depended on a failure and releases what
  became ready, and this worker sends the released steps. Other branches go on.
- Once every step has a status, the item's outcome is recorded: ``ok`` when every step
  succeeded, ``result`` the succeeded steps' results by name, ``steps`` each step's status,
  and the first failed step's error. The reconciler does the same for an item whose worker
  died in between (``graph_waiting``, ``recover_graph_item``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from celery import Celery

from agentfleet.config import Settings
from agentfleet.idempotency import node_key
from agentfleet.models import TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.protocol.graphs import step_meta, step_signature
from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.task import FleetTask
from agentfleet.runs import FinishState, GraphSpec, GraphState, RunStore
from agentfleet.tasks.item import cancelled_outcome
from agentfleet.tasks.runtime import runtime

__all__ = [
    "finish_step",
    "graph_waiting",
    "item_outcome",
    "recover_graph_item",
    "spec_of",
    "step_inputs",
]

_specs: dict[tuple[str, str], GraphSpec] = {}
_specs_lock = threading.Lock()
_SPECS_KEPT = 512


def spec_of(runs: RunStore, run_id: str) -> GraphSpec:
    """Run ``run_id``'s graph (read once per process: a run's graph never changes)."""
    cache_key = (runs.prefix, run_id)
    with _specs_lock:
        found = _specs.get(cache_key)
    if found is None:
        found = GraphSpec.from_json(runs.get_run(run_id)["graph"])
        with _specs_lock:
            if len(_specs) >= _SPECS_KEPT:
                _specs.pop(next(iter(_specs)))
            _specs[cache_key] = found
    return found


@repeatable
def step_inputs(runs: RunStore, graph: GraphState, task: FleetTask, meta: ItemMeta) -> dict[str, Any]:
    """Step ``meta.node``'s keyword input (see the module docstring)."""
    step = spec_of(runs, meta.run)[meta.node]
    item_input = runs.item_inputs(meta.run, [meta.idx]).get(meta.idx)
    if item_input is None:
        item_input = graph.item_input(meta.key) or {}
    params = set(task.input_model.model_fields)
    kwargs = {k: v for k, v in item_input.items() if k in params and k not in step.after}
    outcomes = runs.stored_outcomes([node_key(meta.key, dep) for dep in step.after])
    for dep, outcome in zip(step.after, outcomes, strict=True):
        kwargs[dep] = outcome.result if outcome is not None else None
    return kwargs


def item_outcome(runs: RunStore, graph: GraphState, spec: GraphSpec, meta: ItemMeta) -> TaskOutcome:
    """The outcome of ``meta``'s item once every step has a status."""
    state = graph.states([meta.key])[0]
    names = spec.names
    outcomes = dict(zip(names, runs.stored_outcomes([node_key(meta.key, n) for n in names]), strict=True))
    steps = {name: state.get(name, "skipped") for name in names}
    results = {n: o.result for n, o in outcomes.items() if o is not None and o.ok and steps[n] == "succeeded"}
    failed = [(n, outcomes[n]) for n in names if steps[n] == "failed"]
    fields: dict[str, Any] = {}
    if failed:
        name, first = failed[0]
        fields = {
            "error_type": first.error_type if first else "StepFailed",
            "error": f"step {name} failed: {first.error if first else 'no outcome stored'}",
            "category": first.category if first else None,
            "dead_lettered": any(o is not None and o.dead_lettered for _, o in failed),
        }
    return TaskOutcome(
        task_id=meta.model_copy(update={"node": ""}).task_id,
        run_id=meta.run,
        item_key=meta.item,
        index=meta.idx,
        idempotency_key=meta.key,
        ok=all(status == "succeeded" for status in steps.values()),
        result=results,
        steps=steps,
        attempts=int(state.get("_attempts") or 0),
        duration_s=round(float(state.get("_s") or 0.0), 6),
        cost_usd=float(state.get("_usd") or 0.0),
        **fields,
    )


@repeatable
def finish_step(
    settings: Settings, app: Celery, runs: RunStore, meta: ItemMeta, outcome: TaskOutcome
) -> FinishState | None:
    """After step ``meta.node``'s final ``outcome`` was stored: record it, send the steps it
    released, and once every step has a status record the item's outcome (its ``FinishState``
    is returned; None while the item goes on). Sent again, it finds the step recorded and does
    nothing: what the first call did not send is the reconciler's to send."""
    if outcome.error_type == "Cancelled":
        # The run was cancelled: the item ends cancelled, whatever its other steps do.
        return runs.finish(
            cancelled_outcome(meta.model_copy(update={"node": ""}), outcome.task_id), store=False
        )
    graph = runtime(settings).graphs
    spec = spec_of(runs, meta.run)
    advance = graph.advance(
        meta.run,
        meta.key,
        spec,
        meta.node,
        ok=outcome.ok,
        cost_usd=outcome.cost_usd,
        duration_s=outcome.duration_s,
        attempts=outcome.attempts,
        index=meta.idx,
    )
    for name in advance.released:
        step_signature(app, spec, step_meta(meta, name)).apply_async()
    if advance.complete:
        return runs.finish(item_outcome(runs, graph, spec, meta))
    return None


def _open_steps(spec: GraphSpec, state: Mapping[str, str]) -> list[str]:
    """Steps released (roots always are) that have no status yet."""
    return [s.name for s in spec.steps if s.name not in state and (not s.after or state.get(f"{s.name}:r"))]


def graph_waiting(
    runs: RunStore, graph: GraphState, run_id: str, items: Mapping[int, tuple[str, str, str]]
) -> dict[int, list[str]]:
    """For the reconciler: items with no live claim on any open step, and the task ids of
    their open steps (none: every step has a status, the item's outcome is missing)."""
    spec = spec_of(runs, run_id)
    indices = list(items)
    states = graph.states([items[i][1] for i in indices])
    opened = {i: _open_steps(spec, state) for i, state in zip(indices, states, strict=True)}
    keys = [node_key(items[i][1], s) for i in indices for s in opened[i]]
    alive = iter(runs.live_claims(keys))
    found = {}
    for i in indices:
        if any([next(alive) for _ in opened[i]]):
            continue
        base = ItemMeta(run=run_id, idx=i, key=items[i][1], item=items[i][2])
        found[i] = [step_meta(base, s).task_id for s in opened[i]]
    return found


def recover_graph_item(settings: Settings, app: Celery, runs: RunStore, meta: ItemMeta) -> FinishState | None:
    """For the reconciler: send the open steps of an item that lost their messages again, or
    record its outcome when only that was missing."""
    graph = runtime(settings).graphs
    spec = spec_of(runs, meta.run)
    opened = _open_steps(spec, graph.states([meta.key])[0])
    if not opened:
        return runs.finish(item_outcome(runs, graph, spec, meta))
    for name in opened:
        step_signature(app, spec, step_meta(meta, name)).apply_async()
    return None
