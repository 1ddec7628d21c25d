"""What one execution of an item starts from: its memory, its budgets, what it spent before.

``item_state`` gives ``new_context`` the parts of an ``ExecutionState`` that outlive one
execution: the item's memory in Redis (steps and agent checkpoints, written under this
delivery's claim), its budgets over every attempt with what earlier attempts spent (read only
when the task has an item budget), and its run's tenant and dollar cap.
"""

from __future__ import annotations

from typing import Any

from agentfleet.config import Settings
from agentfleet.outages import ride_out
from agentfleet.runs import Spend
from agentfleet.tasks.base import FleetTask
from agentfleet.tasks.memory import StoredMemory
from agentfleet.tasks.meta import ItemMeta
from agentfleet.tasks.shared import memory_store, spend_ledger

__all__ = ["item_state"]


def item_state(settings: Settings, task: FleetTask, meta: ItemMeta, key: str, token: str) -> dict[str, Any]:
    """``ExecutionState`` fields for the delivery holding ``token``'s claim on ``key``."""
    budget, caps = task.budget, settings.budgets
    state: dict[str, Any] = {
        "key": key,
        "token": token,
        "tenant": meta.tenant,
        "run_budget_usd": meta.budget_usd,
        "budget_usd": budget.usd if budget.usd is not None else caps.task_usd,
        "budget_tokens": budget.tokens if budget.tokens is not None else caps.task_tokens,
        "budget_turns": budget.turns if budget.turns is not None else caps.task_turns,
        "budget_wall_s": budget.wall_s if budget.wall_s is not None else caps.task_wall_s,
        "memory": StoredMemory(
            memory_store(settings), key, token=token, claim_ttl_s=settings.delivery.claim_ttl_s
        ),
        "prior": Spend(),
    }
    capped = [state[name] for name in ("budget_usd", "budget_tokens", "budget_turns", "budget_wall_s")]
    if any(cap is not None for cap in capped):
        ledger = spend_ledger(settings)
        state["prior"] = ride_out(
            lambda: ledger.item(key), budget_s=settings.delivery.redis_retry_s, url=settings.broker_url
        )
    return state
