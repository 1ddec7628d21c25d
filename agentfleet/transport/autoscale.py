"""The worker pool autoscaler (``worker_autoscaler``): Celery's, growing faster under a backlog.

Celery's autoscaler sizes the pool to the requests the worker has reserved. A prefork worker
reserves up to the pool's maximum, so its pool jumps to the demand at once. A gevent worker
stops reserving when every slot is busy (spawning waits for a free slot), so it never holds
more than one request beyond its pool size, and Celery's autoscaler grows it by one slot per
second: 90 s from 10 to 100 slots. Here, while a request waits for a slot, the pool doubles
instead (capped at the maximum); shrinking is Celery's: down to the reserved requests (at
least the minimum) once the pool has been idle ``keepalive`` seconds.

The keepalive comes from ``worker.autoscale_keepalive_s`` (the Celery setting
``agentfleet_autoscale_keepalive_s``).
"""

from __future__ import annotations

from typing import Any

from celery.worker.autoscale import AUTOSCALE_KEEPALIVE, Autoscaler

__all__ = ["KEEPALIVE_SETTING", "FleetAutoscaler"]

KEEPALIVE_SETTING = "agentfleet_autoscale_keepalive_s"


class FleetAutoscaler(Autoscaler):
    """Doubles the pool while requests wait for a slot; shrinks after ``keepalive`` idle seconds."""

    def __init__(
        self,
        pool: Any,
        max_concurrency: int,
        min_concurrency: int = 0,
        worker: Any = None,
        keepalive: float | None = None,
        mutex: Any = None,
    ) -> None:
        configured = worker.app.conf.get(KEEPALIVE_SETTING) if worker is not None else None
        super().__init__(
            pool,
            max_concurrency,
            min_concurrency,
            worker=worker,
            keepalive=keepalive or configured or AUTOSCALE_KEEPALIVE,
            mutex=mutex,
        )

    def _maybe_scale(self, req: Any = None) -> bool | None:
        procs = self.processes
        waiting = self.qty - procs
        if waiting > 0 and procs < self.max_concurrency:
            target = min(self.max_concurrency, max(self.qty, 2 * procs, 1))
            self.scale_up(target - procs)
            return True
        result: bool | None = super()._maybe_scale(req)
        return result
