"""The state of dependency-graph items: which steps ended how, and which were released.

A graph run's record holds its spec (``graph``: every step's task, queue and dependencies, in
topological order). Each item's progress is one hash, under its idempotency key:

- ``p:graph:{<tag>}...``  hash (tagged like the item's other keys, ``agentfleet.keys``):
  ``{step}`` -> ``succeeded``, ``failed`` or ``skipped``;
  ``{step}:r`` -> 1 once the step was released (its dependencies all succeeded: its message
  was or is about to be sent; steps without dependencies are released at dispatch);
  ``_usd``, ``_s``, ``_attempts`` -> what its steps spent (US dollars, seconds, executions);
  ``_input`` -> the item's input, kept for steps sent again after the run's copy is dropped.
  Expires ``ttl_s`` after its last change.
- ``p:run:{id}`` fields ``step:{step}:{status}``: items per step and status, for the summary.
- a step's own outcome is stored under ``node_key(key, step)`` (``p:out:...``) as any stage's.

``graph_advance.lua`` records a step's final status at most once (``HSETNX``), skips every
step downstream of a failure and releases the steps that became ready, all in one call; the
caller sends the released steps. If it dies before sending them, the reconciler finds a
released step with no status, no claim and no message, and sends it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfleet.runs.store import RUNS_LUA, RunStore

__all__ = ["Advance", "GraphSpec", "GraphState", "StepSpec"]


@dataclass(frozen=True)
class StepSpec:
    """One step of a graph: its name, fleet task, queue and the steps it waits for."""

    name: str
    task: str
    queue: str
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraphSpec:
    """A graph's steps in topological order (every step after its dependencies)."""

    steps: tuple[StepSpec, ...]

    def __getitem__(self, name: str) -> StepSpec:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    @property
    def roots(self) -> list[StepSpec]:
        return [s for s in self.steps if not s.after]

    def to_json(self) -> str:
        return json.dumps([[s.name, s.task, s.queue, list(s.after)] for s in self.steps])

    @classmethod
    def from_json(cls, raw: str) -> GraphSpec:
        return cls(tuple(StepSpec(n, t, q, tuple(a)) for n, t, q, a in json.loads(raw)))

    def script_json(self) -> str:
        """The shape ``graph_*.lua`` reads: ``{order: [...], after: {step: [...]}}``."""
        return json.dumps({"order": self.names, "after": {s.name: list(s.after) for s in self.steps}})


@dataclass(frozen=True)
class Advance:
    """What recording one step did: whether it counted (False: it was counted before), the
    steps it released and skipped, and whether the item is now complete."""

    counted: bool
    released: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    complete: bool = False


class GraphState:
    """Graph items' progress, on a run store's Redis and key prefix."""

    def __init__(self, runs: RunStore) -> None:
        self.runs = runs
        self.client: Any = runs.client
        scripts = RUNS_LUA.register(runs.client, "graph_advance", "graph_reopen")
        self._advance, self._reopen = scripts["graph_advance"], scripts["graph_reopen"]

    def key(self, key: str) -> str:
        return self.runs.keys.item("graph", key)

    def advance(
        self,
        run_id: str,
        key: str,
        spec: GraphSpec,
        step: str,
        *,
        ok: bool,
        cost_usd: float,
        duration_s: float,
        attempts: int,
        index: int,
    ) -> Advance:
        """Record ``step``'s final status for item ``index`` (see the module docstring)."""
        counted, released, skipped, complete = self._advance(
            keys=[self.key(key), self.runs.run_key(run_id), self.runs.run_key(run_id, "inputs")],
            args=[
                step,
                "succeeded" if ok else "failed",
                spec.script_json(),
                repr(cost_usd),
                repr(duration_s),
                attempts,
                index,
                self.runs.ttl_s,
            ],
        )
        return Advance(bool(counted), [str(s) for s in released], [str(s) for s in skipped], bool(complete))

    def reopen(self, run_id: str, key: str, spec: GraphSpec, step: str, step_outcome_key: str) -> bool:
        """Forget ``step``'s failure and what it skipped, so a requeue can run it again."""
        return bool(
            self._reopen(
                keys=[self.key(key), self.runs.run_key(run_id), self.runs.outcome_key(step_outcome_key)],
                args=[step, spec.script_json()],
            )
        )

    def item_input(self, key: str) -> dict[str, Any] | None:
        """The item's input as its graph kept it (None: no step has ended yet)."""
        raw = self.client.hget(self.key(key), "_input")
        return json.loads(raw) if raw else None

    def states(self, keys: Sequence[str]) -> list[dict[str, str]]:
        """Each item's whole graph hash, for ``keys`` (``{}`` for an item not started)."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(self.key(key))
        return [dict(h) for h in pipe.execute()]
