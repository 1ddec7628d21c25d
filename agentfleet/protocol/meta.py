"""The reserved keyword argument ``_af`` that carries an item's place in its run."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from agentfleet.idempotency import node_key, stage_key

__all__ = ["META_KWARG", "ItemMeta", "run_meta_fields"]

META_KWARG = "_af"


class ItemMeta(BaseModel):
    """Where an item belongs and how far it has come. Travels in the task message.

    ``attempt`` counts failed executions so far (0 on the first); ``deferrals`` counts waits for
    limits, which never use up retries; ``elapsed_s`` and ``cost_usd`` carry what earlier
    attempts of this stage spent, in seconds and US dollars. ``max_in_flight`` is the run's own
    cap on items executing at once (a pool), if it has one. ``node`` names the step of a
    dependency graph this message runs (empty for maps and pipelines). ``tenant`` is the run's
    tenant label, for its daily budget.
    """

    model_config = ConfigDict(extra="ignore")

    run: str
    idx: int = 0
    key: str
    item: str
    stage: int = 0
    stages: int = 1
    attempt: int = 0
    deferrals: int = 0
    requeues: int = 0
    elapsed_s: float = 0.0
    cost_usd: float = 0.0
    max_in_flight: int | None = None
    node: str = ""
    tenant: str | None = None

    @property
    def last_stage(self) -> bool:
        return self.stage >= self.stages - 1

    @property
    def own_key(self) -> str:
        """The key this message's work is stored under: its stage's, its graph step's, or the
        item's own idempotency key."""
        return node_key(self.key, self.node) if self.node else stage_key(self.key, self.stage, self.stages)

    @property
    def task_id(self) -> str:
        """The Celery task id of this item's stage (or graph step) in its run:
        ``{run}-{idx}[-s{stage}]`` or ``{run}-{idx}-n-{node}``."""
        if self.node:
            return f"{self.run}-{self.idx}-n-{self.node}"
        return f"{self.run}-{self.idx}" + (f"-s{self.stage}" if self.stage else "")

    def to_kwarg(self) -> dict[str, Any]:
        return self.model_dump(exclude_defaults=True) | {"run": self.run, "key": self.key, "item": self.item}


def run_meta_fields(record: dict[str, str]) -> dict[str, Any]:
    """The ``ItemMeta`` fields every message of a run carries, read back from its record (its
    pool size and tenant), for messages a requeue or the reconciler sends again."""
    found: dict[str, Any] = {}
    if int(record.get("max_in_flight") or 0):
        found["max_in_flight"] = int(record["max_in_flight"])
    if record.get("tenant"):
        found["tenant"] = record["tenant"]
    return found
