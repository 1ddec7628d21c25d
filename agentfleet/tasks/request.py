"""``FleetRequest``: a fleet task's request in the worker, which finishes hard time limits.

When a task's hard time limit runs out, the pool process running it is killed, and Celery's
own handler marks the task failed. For a fleet item that would leave the run without an
outcome and a chord without its member. Instead the worker's main process counts the attempt
as a retryable ``TaskTimeLimit``: the item is sent again while it has retries left, else it is
dead-lettered and its ``ok=False`` outcome stored as the task's result, so fan-in still runs.

Only pools that enforce time limits get here (prefork; gevent for soft limits): Celery's threads
and solo pools do not enforce them.
"""

from __future__ import annotations

import logging

from celery.worker import state
from celery.worker.request import Request

from agentfleet.tasks.execution import after_hard_time_limit

__all__ = ["FleetRequest"]

log = logging.getLogger("agentfleet.worker")


class FleetRequest(Request):
    """Celery's request, with the hard time limit turned into a fleet retry or dead letter."""

    def on_timeout(self, soft: bool, timeout: float) -> None:
        if soft or state.should_terminate:
            super().on_timeout(soft, timeout)
            return
        log.error("hard time limit (%s s) exceeded for %s[%s]", timeout, self.name, self.id)
        try:
            outcome = after_hard_time_limit(self.task, self._context, timeout)
        except Exception:
            log.exception("could not finish %s[%s] after its hard time limit", self.name, self.id)
            super().on_timeout(soft, timeout)
            return
        state.task_ready(self)
        if outcome is not None:
            self.task.backend.mark_as_done(self.id, outcome, request=self._context)
        if self.task.acks_late:
            self.acknowledge()
