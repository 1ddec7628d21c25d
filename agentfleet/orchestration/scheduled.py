"""The task beat sends for a ``[schedules.NAME]`` entry: start that fan-out with ``Fleet``.

It runs on the maintenance queue. Each beat firing is one message with its own task id; the
task claims that id in Redis before dispatching, so a redelivered message (its worker died
mid-dispatch) does not start the same scheduled run twice. A firing is therefore started at
most once: a crash after the claim and before the dispatch loses that one firing, which the
worker's log shows.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agentfleet.celery_app import app
from agentfleet.celery_config import RUN_SCHEDULE_TASK
from agentfleet.config import get_settings
from agentfleet.keys import firing_key
from agentfleet.orchestration.fleet import Fleet
from agentfleet.orchestration.named import start_named

__all__ = ["run_schedule"]

log = logging.getLogger("agentfleet.schedules")

# One Fleet per worker process: it holds the broker connection pool and the run store.
_fleet: Fleet | None = None
_fleet_lock = threading.Lock()
_CLAIM_TTL_S = 86400


def _process_fleet() -> Fleet:
    global _fleet
    with _fleet_lock:
        if _fleet is None:
            _fleet = Fleet(get_settings())
        return _fleet


@app.task(name=RUN_SCHEDULE_TASK, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_schedule(self: Any, name: str) -> dict[str, Any]:
    """Start the scheduled fan-out ``name``; returns its run id and size."""
    fleet = _process_fleet()
    firing = self.request.id or "direct"
    claim = firing_key(fleet.settings.key_prefix, firing)
    if not fleet.store.client.set(claim, "dispatching", nx=True, ex=_CLAIM_TTL_S):
        log.warning("schedule %s: firing %s was already dispatched; not starting it again", name, firing)
        return {"schedule": name, "run_id": None, "duplicate": True}
    run = start_named(fleet, name)
    fleet.store.client.set(claim, run.id, ex=_CLAIM_TTL_S)
    log.info("schedule %s: started run %s with %d tasks", name, run.id, run.total)
    return {"schedule": name, "run_id": run.id, "tasks": run.total}
