"""The worker's side of a sandbox's egress proxy: wired to what the execution's ``ctx.http`` uses.

A request a sandboxed program sends meets the same fleet transport as the task's own: the
cluster-wide limits and per-destination concurrency caps, the circuit breakers, the budgets
and the claim check (``clients.fleet_hooks``), the credential audit log under the execution's
task id, and the worker process's shared connection pools.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from agentfleet.config import Settings, get_settings
from agentfleet.sandbox.egress import EgressProxy, EgressSpec, EgressWiring
from agentfleet.tasks.clients import fleet_hooks
from agentfleet.tasks.runtime import runtime

if TYPE_CHECKING:
    from agentfleet.tasks.execution_state import ExecutionState

__all__ = ["egress_proxy", "egress_wiring"]


def egress_wiring(state: ExecutionState, settings: Settings | None = None) -> EgressWiring:
    """The collaborators of ``state``'s execution for an egress proxy."""
    settings = settings or get_settings()
    worker = runtime(settings)
    return EgressWiring(
        hooks=fleet_hooks(state, settings),
        audit=worker.audit,
        pools=worker.pools(httpx),
        task_id=state.task_id,
    )


def egress_proxy(
    state: ExecutionState,
    spec: EgressSpec,
    socket_path: Path,
    *,
    task_name: str,
    settings: Settings | None = None,
) -> EgressProxy:
    """An egress proxy (not started) for one sandbox of ``state``'s execution."""
    settings = settings or get_settings()
    return EgressProxy(
        settings,
        spec,
        socket_path,
        run_id=state.run_id,
        task_name=task_name,
        wiring=egress_wiring(state, settings),
    )
