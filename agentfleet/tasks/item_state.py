"""What one execution of an item starts from: its context, memory, budgets, earlier spending.

``item_context`` builds the ``TaskContext`` a delivery hands the task's body. Besides ids,
log and clients, its ``ExecutionState`` holds what outlives one execution (``item_state``):
the item's memory in Redis (steps and agent checkpoints, written under this delivery's
claim), its budgets over every attempt with what earlier attempts spent (read only when the
task has an item budget), and its run's tenant.
"""

from __future__ import annotations

import logging
from typing import Any

from agentfleet.config import Settings
from agentfleet.log_filter import RedactingAdapter
from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.task import FleetTask
from agentfleet.redaction import Redactor
from agentfleet.runs import Claim, Spend
from agentfleet.tasks import clients
from agentfleet.tasks.circuit_guard import CircuitGuard
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.execution_state import new_context
from agentfleet.tasks.features.sandbox import sandbox_of
from agentfleet.tasks.memory import StoredMemory
from agentfleet.tasks.runtime import runtime

__all__ = ["item_context", "item_state"]


def item_context(
    settings: Settings,
    task: FleetTask,
    meta: ItemMeta,
    *,
    task_id: str,
    key: str,
    token: str,
    guard: CircuitGuard,
    redactor: Redactor,
    claim: Claim | None = None,
) -> TaskContext:
    """The context of one execution of ``meta``'s item by the delivery holding ``token`` (and,
    as this process knows it, ``claim``); its ``log`` redacts what ``redactor`` knows."""
    logger = RedactingAdapter(
        logging.getLogger(f"agentfleet.tasks.{task.name}"),
        {"task_id": task_id, "run_id": meta.run, "item_key": meta.item},
        redactor,
    )
    return new_context(
        task_id=task_id,
        run_id=meta.run,
        item_key=meta.item,
        idempotency_key=meta.key,
        attempt=meta.attempt,
        log=logger,
        workdir_root=settings.workdir_root,
        task_name=task.name,
        downstream=task.downstream,
        index=meta.idx,
        breaker=guard.for_transport(),
        http_factory=clients.http_client,
        anthropic_factory=clients.anthropic_client,
        sandbox_factory=sandbox_of,
        **item_state(settings, task, meta, key, token, claim),
    )


def item_state(
    settings: Settings, task: FleetTask, meta: ItemMeta, key: str, token: str, claim: Claim | None = None
) -> dict[str, Any]:
    """``ExecutionState`` fields for the delivery holding ``token``'s claim on ``key``."""
    budget, caps = task.budget, settings.budgets
    rt = runtime(settings)
    state: dict[str, Any] = {
        "key": key,
        "token": token,
        "claim": claim,
        "tenant": meta.tenant,
        "budget_usd": budget.usd if budget.usd is not None else caps.task_usd,
        "budget_tokens": budget.tokens if budget.tokens is not None else caps.task_tokens,
        "budget_turns": budget.turns if budget.turns is not None else caps.task_turns,
        "budget_wall_s": budget.wall_s if budget.wall_s is not None else caps.task_wall_s,
        "memory": StoredMemory(
            rt.memory, key, token=token, claim_ttl_s=settings.delivery.claim_ttl_s, claim=claim
        ),
        "prior": Spend(),
        "approvals": rt.approvals,
    }
    capped = (state["budget_usd"], state["budget_tokens"], state["budget_turns"], state["budget_wall_s"])
    if capped != (None, None, None, None):
        state["prior"] = rt.patience.call(rt.budgets.item, key)
    return state
