"""What a worker process makes once and shares: the run store and its companions (memories,
budgets, graphs, compensations), the limiter, the circuit breaker and the spend ledger.

Each holds registered Lua scripts and a connection pool, so making one per delivery would
repeat that work on the hot path. They are keyed by the settings object they were made from;
settings are not hashable, so the key is the object's id, and the settings are kept alive with
their objects so that id is never handed to a later ``Settings``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from agentfleet.config import Settings
from agentfleet.ratelimit import Limiter
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.redis_client import state_client
from agentfleet.runs import BudgetLedger, GraphState, MemoryStore, RunStore, UndoLog
from agentfleet.spend import SpendLedger

__all__ = [
    "budget_ledger",
    "circuit_breaker",
    "graph_state",
    "limiter",
    "memory_store",
    "per_process",
    "run_store",
    "spend_ledger",
    "undo_log",
]

T = TypeVar("T")

_made: dict[tuple[str, int], tuple[Settings, Any]] = {}
_lock = threading.Lock()


def per_process(kind: str, settings: Settings, make: Callable[[], T]) -> T:
    """The ``kind`` object for ``settings``, made by ``make()`` the first time it is asked for."""
    key = (kind, id(settings))
    with _lock:
        if key not in _made:
            _made[key] = (settings, make())
        return cast(T, _made[key][1])


def run_store(settings: Settings) -> RunStore:
    return per_process("runs", settings, lambda: RunStore.from_settings(settings, state_client(settings)))


def limiter(settings: Settings) -> Limiter:
    return per_process("limiter", settings, lambda: Limiter.from_settings(settings, state_client(settings)))


def circuit_breaker(settings: Settings) -> CircuitBreaker:
    return per_process(
        "circuits", settings, lambda: CircuitBreaker.from_settings(settings, state_client(settings))
    )


def spend_ledger(settings: Settings) -> SpendLedger:
    return per_process("spend", settings, lambda: SpendLedger.from_settings(settings, state_client(settings)))


def memory_store(settings: Settings) -> MemoryStore:
    runs = run_store(settings)  # outside the lock: per_process does not nest
    return per_process(
        "memory", settings, lambda: MemoryStore(runs.client, prefix=runs.prefix, ttl_s=runs.ttl_s)
    )


def budget_ledger(settings: Settings) -> BudgetLedger:
    runs = run_store(settings)
    day_ttl_s = (settings.budgets.ledger_days + 1) * 86400
    return per_process(
        "budgets",
        settings,
        lambda: BudgetLedger(runs.client, prefix=runs.prefix, ttl_s=runs.ttl_s, day_ttl_s=day_ttl_s),
    )


def graph_state(settings: Settings) -> GraphState:
    runs = run_store(settings)
    return per_process("graph", settings, lambda: GraphState(runs))


def undo_log(settings: Settings) -> UndoLog:
    runs = run_store(settings)
    return per_process("undo", settings, lambda: UndoLog(runs))
