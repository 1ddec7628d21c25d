"""Dependency graphs at dispatch and requeue: ``Node``, checking a graph, sending a failed step again.

``Fleet.graph(nodes, inputs)`` runs, for every input, a graph of named steps::

    Node("fetch", fetch)                               # no dependency: starts at once
    Node("summarize", summarize, after=["fetch"])      # these two run in parallel,
    Node("classify", classify, after=["fetch"])        # each once fetch succeeded
    Node("report", report, after=["summarize", "classify"])   # joins both outputs

A step with dependencies receives each one's result as a keyword named after it, plus the
keys of the item's input its function declares. How the graph runs is ``tasks/graph.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery

from agentfleet.dlq import DeadLetter, DLQStore
from agentfleet.errors import DispatchError
from agentfleet.idempotency import node_key
from agentfleet.protocol.graphs import step_signature
from agentfleet.protocol.meta import ItemMeta, run_meta_fields
from agentfleet.redaction import Redactor
from agentfleet.runs import GraphSpec, GraphState, RunStore, StepSpec

__all__ = ["Node", "graph_spec", "requeue_step"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Node:
    """One step of a dependency graph: its ``name``, the fleet ``task`` it runs (the task or
    its registered name) and the names of the steps it waits for (``after``)."""

    name: str
    task: Any
    after: Sequence[str] = ()


def graph_spec(steps: Sequence[tuple[str, str, str, Sequence[str]]]) -> GraphSpec:
    """The graph of ``(name, task name, queue, after)`` steps in topological order (ties keep
    the given order); ``DispatchError`` for a bad name, an unknown dependency or a cycle."""
    if not steps:
        raise DispatchError("a graph needs at least one step")
    names = [name for name, _, _, _ in steps]
    for name in names:
        if not _NAME.match(name):
            raise DispatchError(f"step name {name!r}: start with a letter; use letters, digits, '-' and '_'")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DispatchError(f"step name {name!r} is used twice")
        seen.add(name)
    for name, _, _, after in steps:
        unknown = [dep for dep in after if dep not in seen]
        if unknown:
            raise DispatchError(
                f"step {name!r} waits for {', '.join(map(repr, unknown))}, which is not a step"
            )
        if name in after:
            raise DispatchError(f"step {name!r} waits for itself")
    ordered: list[StepSpec] = []
    placed: set[str] = set()
    left = list(steps)
    while left:
        ready = [s for s in left if all(dep in placed for dep in s[3])]
        if not ready:
            raise DispatchError(
                f"the steps {', '.join(repr(s[0]) for s in left)} wait for each other in a cycle"
            )
        for name, task, queue, after in ready:
            ordered.append(StepSpec(name, task, queue, tuple(dict.fromkeys(after))))
            placed.add(name)
        left = [s for s in left if s[0] not in placed]
    return GraphSpec(tuple(ordered))


def requeue_step(
    entry: DeadLetter, *, app: Celery, runs: RunStore, dlq: DLQStore, redactor: Redactor
) -> None:
    """Send a failed graph step again: its failure and the skips it caused are undone, the
    item's outcome (if it had one) is reopened, and the step runs with its stored input."""
    assert entry.node is not None
    spec = GraphSpec.from_json(runs.get_run(entry.run_id)["graph"])
    graph = GraphState(runs)
    key = entry.idempotency_key
    graph.reopen(entry.run_id, key, spec, entry.node, node_key(key, entry.node))
    stored = runs.stored_outcomes([key])[0]
    kept_input = graph.item_input(key)
    runs.reopen(
        entry.run_id,
        entry.index,
        key,
        was_ok=False,
        was_dead=stored.dead_lettered if stored else True,
        input_json=json.dumps(kept_input) if kept_input is not None else "",
    )
    meta = ItemMeta(
        run=entry.run_id,
        idx=entry.index,
        key=key,
        item=entry.item_key,
        node=entry.node,
        requeues=entry.requeues + 1,
        **run_meta_fields(runs.get_run(entry.run_id)),
    )
    step_signature(app, spec, meta, inputs=entry.inputs, redactor=redactor).apply_async()
    dlq.remove([entry.id], generation=entry.requeues)
