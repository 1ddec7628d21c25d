"""``FleetRequest``: a fleet task's request in the worker, which finishes hard time limits.

When a task's hard time limit runs out, the pool process running it is killed, and Celery's
own handler marks the task failed. For a fleet item that would leave the run without an
outcome. Instead the worker's main process counts the attempt as a retryable
``TaskTimeLimit``: the item is sent again while it has retries left, else it is dead-lettered,
its ``ok=False`` outcome recorded (so fan-in still runs) and the task marked ``FAILURE`` with
a ``task-failed`` event, as any item that failed for good.

Only pools that enforce time limits get here (prefork; gevent for soft limits): Celery's threads
and solo pools do not enforce them.
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.einfo import ExceptionInfo
from billiard.exceptions import WorkerLostError
from celery.utils.saferepr import saferepr
from celery.worker import state
from celery.worker.request import Request

from agentfleet.tasks.celery_states import final_error
from agentfleet.tasks.process_loss import after_hard_time_limit, release_claim_of_dead_process
from agentfleet.transport.request import context_of, leave_active

__all__ = ["FleetRequest"]

log = logging.getLogger("agentfleet.worker")


class FleetRequest(Request):
    """Celery's request, with the hard time limit turned into a fleet retry or dead letter."""

    def _release_claim_of_dead_process(self) -> None:
        # The pool process died holding the item's claim: free it, so the next delivery runs
        # at once instead of waiting for the claim to lapse.
        pid = self.worker_pid
        if pid is None:
            return
        try:
            release_claim_of_dead_process(self.task, context_of(self), str(self.hostname), int(pid))
        except Exception:
            log.warning("could not release the claim of %s[%s]; it lapses on its own", self.name, self.id)

    def on_failure(
        self, exc_info: ExceptionInfo, send_failed_event: bool = True, return_ok: bool = False
    ) -> Any:
        exc = exc_info.exception
        if isinstance(getattr(exc, "exc", exc), WorkerLostError):
            self._release_claim_of_dead_process()
        return super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def on_timeout(self, soft: bool, timeout: float) -> None:
        if soft or state.should_terminate:
            super().on_timeout(soft, timeout)
            return
        log.error("hard time limit (%s s) exceeded for %s[%s]", timeout, self.name, self.id)
        self._release_claim_of_dead_process()
        try:
            outcome = after_hard_time_limit(self.task, context_of(self), timeout)
        except Exception:
            log.exception("could not finish %s[%s] after its hard time limit", self.name, self.id)
            super().on_timeout(soft, timeout)
            return
        leave_active(self)
        failed = final_error(outcome) if outcome is not None else None
        if failed is not None:
            self.task.backend.mark_as_failure(self.id, failed, request=context_of(self))
            self.send_event("task-failed", exception=saferepr(failed), traceback="")
        elif outcome is not None:
            self.task.backend.mark_as_done(self.id, outcome, request=context_of(self))
        if self.task.acks_late:
            self.acknowledge()
