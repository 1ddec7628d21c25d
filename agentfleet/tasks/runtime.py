"""The worker runtime: what one worker process holds, built once and handed to its deliveries.

A process builds its runtime when it starts serving (a prefork pool process at
``worker_process_init``, a worker's main process at ``worker_init``; a process that runs a
fleet task any other way at its first delivery), from its settings, and tears it down once
when it stops (``close``). Every store holds registered Lua scripts and a connection pool, so
making them per delivery would repeat that work on the hot path. It holds:

- ``runs``: the run store (run records, outcomes, claims; ``agentfleet.runs``; ``patient_runs``
  is the same, riding out Redis outages), and beside it
  ``memory`` (steps and checkpoints), ``budgets`` (spending over attempts), ``graphs`` (graph
  items) and ``undo`` (the undo log);
- ``limiter``, ``breaker``, ``spend``: the cluster-wide limits, the circuit breakers, the spend
  ledger;
- ``leases``: the one lease renewer (one thread) for the limiter's permits and the item claims
  this process holds (``claims``, a ``runs.ClaimRenewer``);
- ``dlq``: the dead-letter queue, where a delivery's final failure is stored;
- ``audit`` and ``pools(module)``: the credential audit log, the connection pools under the guard;
- ``sandboxes()``: the process's sandboxes and their warm pool (``agentfleet.sandbox.pool``);
- the reconciler and the heartbeat, in a worker's main process only (``start_services``).

A forked child keeps none of its parent's runtimes: this module's one ``os.register_at_fork``
hook forgets them, so a pool process builds its own (its own renewer thread and claims) and
never renews, reports or serves what its parent holds.
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

from agentfleet.approvals import ApprovalStore
from agentfleet.config import Settings, get_settings
from agentfleet.dlq import DLQStore
from agentfleet.leases import LeaseRenewer
from agentfleet.outages import Patience
from agentfleet.ratelimit import Limiter
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.redis_client import state_client
from agentfleet.runs import (
    BudgetLedger,
    ClaimRenewer,
    GraphState,
    MemoryStore,
    RunStore,
    UndoLog,
    flush_tallies,
)
from agentfleet.spend import SpendLedger
from agentfleet.tools.audit import AuditLog
from agentfleet.tools.guard import shared_pools
from agentfleet.tools.pools import TransportPools

if TYPE_CHECKING:
    from celery import Celery

    from agentfleet.sandbox.pool import SandboxPool
    from agentfleet.tasks.heartbeat import Heartbeat

__all__ = ["WorkerRuntime", "close_runtimes", "runtime"]

log = logging.getLogger("agentfleet.worker")


class WorkerRuntime:
    """One worker process's stores, renewer and services (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        client = state_client(settings)
        self.leases = LeaseRenewer()
        self.claims = ClaimRenewer(self.leases)
        self.runs = RunStore.from_settings(settings, client)
        runs = self.runs
        self.memory = MemoryStore(client, prefix=runs.prefix, ttl_s=runs.ttl_s)
        self.spend = SpendLedger.from_settings(settings, client)
        day_ttl_s = (settings.budgets.ledger_days + 1) * 86400
        self.budgets = BudgetLedger(client, prefix=runs.prefix, ttl_s=runs.ttl_s, day_ttl_s=day_ttl_s)
        self.graphs = GraphState(runs)
        self.undo = UndoLog(runs)
        self.approvals = ApprovalStore(client, prefix=runs.prefix, keep_s=runs.ttl_s)
        self.limiter = Limiter.from_settings(settings, client, renewer=self.leases)
        self.breaker = CircuitBreaker.from_settings(settings, client)
        self.audit = AuditLog(client, settings.key_prefix)
        self.dlq = DLQStore(client, prefix=settings.key_prefix)
        #: Bookkeeping calls ride out a Redis outage of ``delivery.redis_retry_s`` seconds.
        self.patience = Patience(settings.delivery.redis_retry_s, settings.broker_url)
        #: ``runs``, each of its repeatable methods riding out an outage so.
        self.patient_runs = self.patience.wrap(self.runs)
        self._pools: dict[str, TransportPools] = {}
        self._lock = threading.Lock()
        self._reconciler: threading.Event | None = None
        self._heartbeat: Heartbeat | None = None
        self._sandboxes: SandboxPool | None = None
        self._closed = False

    def pools(self, module: ModuleType) -> TransportPools:
        """This process's connection pools for ``module`` (``httpx``, or ``httpx2`` under the SDK)."""
        with self._lock:
            found = self._pools.get(module.__name__)
            if found is None:
                found = shared_pools(module, keepalive_s=self.settings.fetch.keepalive_s)
                self._pools[module.__name__] = found
            return found

    def sandboxes(self) -> SandboxPool:
        """This process's sandboxes (``agentfleet.sandbox.pool``), made at first use."""
        with self._lock:
            if self._sandboxes is None:
                from agentfleet.sandbox.pool import SandboxPool

                self._sandboxes = SandboxPool(self.settings)
            return self._sandboxes

    def start_services(self, app: Celery, node: str, queues: list[str], *, pool: Any = None) -> None:
        """Start what runs beside the deliveries in a worker's main process: first the heartbeat
        (dispatch admits work for this worker's tasks once it is listed), then the reconciler
        (every worker runs one; a lock in Redis lets one of them act at a time). ``pool`` is the
        worker's Celery pool, whose load the heartbeat reports."""
        from agentfleet.tasks.heartbeat import Heartbeat
        from agentfleet.tasks.reconciler import start_reconciler

        self._heartbeat = Heartbeat(self.settings, app, node, queues, pool=pool).start()
        self._reconciler = start_reconciler(self, app, node=node)

    def close(self) -> None:
        """Tear down, once: stop the reconciler (its lock goes at once to another worker) and
        the heartbeat (this worker leaves the registry), and write the completion counters."""
        if self._closed:
            return
        self._closed = True
        if self._reconciler is not None:
            self._reconciler.set()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self._sandboxes is not None:
            self._sandboxes.close()
        flush_tallies()


# The runtime of each settings object (a process has one; tests make several). Settings are not
# hashable: the key is the object's id, and each runtime keeps its settings alive, so that id
# is never handed to a later ``Settings``.
_runtimes: dict[int, WorkerRuntime] = {}
_runtimes_lock = threading.Lock()


def runtime(settings: Settings | None = None) -> WorkerRuntime:
    """The process's runtime for ``settings`` (default: the process's), built at first use."""
    settings = settings or get_settings()
    found = _runtimes.get(id(settings))
    if found is not None and found.settings is settings:
        return found
    with _runtimes_lock:
        found = _runtimes.get(id(settings))
        if found is None or found.settings is not settings:
            found = _runtimes[id(settings)] = WorkerRuntime(settings)
        return found


def close_runtimes() -> None:
    """Tear down every runtime of the process (a worker process is stopping), and write the
    completion counters of any run store."""
    for rt in list(_runtimes.values()):
        rt.close()
    flush_tallies()


def _forget_in_child() -> None:
    # The one fork hook (see the module docstring). The lock too: another thread may have held
    # it at the fork, and nothing in the child would ever release it.
    global _runtimes_lock
    _runtimes.clear()
    _runtimes_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
