"""Sandboxes: an item of a task declared with ``@fleet_task(sandbox=...)`` holds a sandbox of
its own while its body runs (``agentfleet.sandbox``).

``hold_during_body`` takes one from the worker process's ``SandboxPool`` (warm, or made for
the item) and registers it under the delivery's claim token and item key, where
``ctx.sandbox`` finds it (``sandbox_of``); the first use starts its egress proxy when the task
declares network destinations (``agentfleet.tasks.egress``); releasing it stops its egress proxy, kills every
process left in it and resets it into the warm pool or destroys it, whatever the body did.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from agentfleet.errors import ConfigError
from agentfleet.sandbox.backend import SandboxHandle
from agentfleet.tasks.execution_state import execution_of
from agentfleet.tasks.hooks import DeliveryFeature, Held
from agentfleet.tasks.runtime import runtime

if TYPE_CHECKING:
    from agentfleet.sandbox.pool import Lease
    from agentfleet.tasks.context import TaskContext
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.execution_state import ExecutionState

__all__ = ["SandboxFeature", "item_sandbox", "sandbox_of"]

_held: dict[tuple[str, str], Lease] = {}
_held_lock = threading.Lock()


class _Holding:
    def __init__(self, slot: tuple[str, str], lease: Lease) -> None:
        self._slot = slot
        self._lease = lease

    def release(self) -> None:
        with _held_lock:
            _held.pop(self._slot, None)
        self._lease.release()


class SandboxFeature(DeliveryFeature):
    name = "sandbox"

    def applies(self, d: Delivery) -> bool:
        return getattr(d.task, "sandbox", None) is not None

    def hold_during_body(self, d: Delivery) -> Held | None:
        pool = runtime(d.settings).sandboxes()
        lease = pool.acquire(d.task.sandbox)
        slot = (d.token, d.key)
        with _held_lock:
            _held[slot] = lease
        return _Holding(slot, lease)


def item_sandbox(ctx: TaskContext) -> SandboxHandle | None:
    """``ctx.sandbox`` when its delivery holds one, else None (the fleet's tools ask this to
    run in the sandbox when there is one)."""
    state = execution_of(ctx)
    with _held_lock:
        lease = _held.get((state.token, state.key))
    return _handle(state, lease) if lease is not None else None


def _handle(state: ExecutionState, lease: Lease) -> SandboxHandle:
    # The egress proxy is wired to the execution (its limits, budgets, claim, audit), so it
    # starts at the first use of the sandbox rather than when the delivery takes it.
    from agentfleet.tasks.egress import egress_proxy

    spec = lease.spec
    lease.connect(lambda path: egress_proxy(state, spec, path, task_name=state.task_name))
    return SandboxHandle(lease.sandbox)


def sandbox_of(state: ExecutionState) -> SandboxHandle:
    """The sandbox the delivery of ``state`` holds (``ctx.sandbox``)."""
    with _held_lock:
        lease = _held.get((state.token, state.key))
    if lease is None:
        raise ConfigError(
            f"{state.task_name or 'this task'} has no sandbox: declare one with "
            "@fleet_task(sandbox=SandboxSpec(...)) (defaults from the [sandbox] settings)"
        )
    return _handle(state, lease)
