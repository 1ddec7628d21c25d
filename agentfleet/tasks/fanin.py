"""A run's fan-in: its aggregate, run once on the successful results, and always recorded.

The fan-in message (``agentfleet.aggregate``, task id ``<run>-agg``) names the run and its
aggregate. A delivery:

1. returns the stored aggregate if there is one (a second copy changes nothing);
2. counts itself on the run (``aggregate_attempts``): past ``dlq.max_deliveries`` deliveries
   without a stored result (each killed its worker, or was lost with it) it runs no more;
3. runs only the aggregate the run recorded at dispatch, and only if this worker may
   (``callables.worker_aggregate``: the operator's aggregates and functions defined in its
   task modules), importing nothing else;
4. calls it on the successful results in input order, catching everything it raises,
   ``SystemExit`` and ``KeyboardInterrupt`` included (a pool thread or process is never
   taken down by it);
5. stores its value only if JSON holds it.

Every way it can go wrong ends the same way, once: the run's aggregate is stored as failed
(``Run.result()`` raises ``RunError`` with the reason, the summary says ``failed``) and one
dead letter of category ``aggregate`` is written (its id is the same for every delivery).
Nothing is raised back to Celery, so the message is acknowledged and never sent again: the
reconciler sends a fan-in again only while no aggregate result is stored.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import traceback
from typing import Any

from agentfleet.callables import worker_aggregate
from agentfleet.config import Settings
from agentfleet.dlq import DeadLetter, dead_letter_id, error_fingerprint
from agentfleet.errors import AggregateFailed, DispatchError
from agentfleet.protocol.names import AGGREGATE_TASK, aggregate_task_id
from agentfleet.runs import RunStore
from agentfleet.tasks.failures import on_final_failure
from agentfleet.tasks.runtime import runtime

__all__ = ["aggregate_dead_letter", "run_aggregate"]

log = logging.getLogger("agentfleet.tasks")

_ATTEMPTS = "aggregate_attempts"


def aggregate_dead_letter(
    run_id: str, fn: str, error: str, *, attempts: int, trace: str, worker: str
) -> DeadLetter:
    """The dead letter of a run's failed aggregate: item key ``aggregate``, index -1, no inputs
    (a requeue runs the aggregate the run recorded, never one an entry names)."""
    now = time.time()
    key = f"{run_id}:aggregate"
    kind = AggregateFailed.__name__
    return DeadLetter(
        id=dead_letter_id(key),
        task_name=AGGREGATE_TASK,
        task_id=aggregate_task_id(run_id),
        run_id=run_id,
        item_key="aggregate",
        index=-1,
        idempotency_key=key,
        error_type=kind,
        error=f"aggregate {fn}: {error}",
        category=AggregateFailed.category,
        fingerprint=error_fingerprint(kind, f"aggregate {fn}: {error}"),
        attempts=attempts,
        traceback=trace,
        first_failure_at=now,
        last_failure_at=now,
        dead_lettered_at=now,
        worker=worker,
    )


def _storable(value: Any) -> str | None:
    """None when JSON holds ``value``; else why not."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"it returned a {type(value).__name__}, which cannot be stored as JSON ({exc})"
    return None


class _Fanin:
    def __init__(self, settings: Settings, store: RunStore, run_id: str, fn: str, worker: str) -> None:
        self.settings, self.store, self.run_id, self.fn, self.worker = settings, store, run_id, fn, worker
        self.redactor = settings.redactor()
        self.attempts = 0

    def fail(self, error: str, trace: str = "") -> None:
        """Record the aggregate as failed and dead-letter it, once."""
        message = self.redactor.text(error)[:2000]
        log.error("aggregate %s of run %s failed: %s", self.fn, self.run_id, message)
        if not self.store.set_aggregate(self.run_id, ok=False, error=message):
            return
        entry = aggregate_dead_letter(
            self.run_id,
            self.redactor.text(self.fn),
            message,
            attempts=self.attempts,
            trace=self.redactor.text(trace),
            worker=self.worker,
        )
        on_final_failure(entry, runtime(self.settings).dlq)

    def run(self) -> Any:
        store, run_id = self.store, self.run_id
        found = store.get_aggregate(run_id)
        if found is not None:
            return found.get("value")
        record = store.get_run(run_id)
        if not record:
            log.error("a fan-in message names run %s, which does not exist; dropped", run_id)
            return None
        self.attempts = int(store.client.hincrby(store.run_key(run_id), _ATTEMPTS, 1))
        store.mark_aggregate_started(run_id)
        if record.get("status") == "failed":
            store.set_aggregate(run_id, ok=False, error="an item failed and the run fails fast")
            return None
        recorded = record.get("aggregate", "")
        if self.fn != recorded:
            self.fail(
                f"the fan-in message names {self.fn!r}, but the run's aggregate is {recorded!r}; not allowed"
            )
            return None
        limit = self.settings.dlq.max_deliveries
        if self.attempts > limit:
            self.fail(f"started {self.attempts - 1} times without finishing (did it kill its worker?)")
            return None
        try:
            target = worker_aggregate(self.settings, recorded)
        except DispatchError as exc:
            self.fail(str(exc))
            return None
        return self._call(target)

    def _call(self, target: Any) -> Any:
        outcomes = self.store.outcomes(self.run_id)
        results = [outcomes[i].result for i in sorted(outcomes) if outcomes[i].ok]
        started = time.monotonic()
        try:
            value = target(results)
        except BaseException as exc:  # SystemExit too: it must not end the pool's thread
            self.fail(f"{type(exc).__name__}: {exc}", traceback.format_exc())
            return None
        problem = _storable(value)
        if problem is not None:
            self.fail(problem)
            return None
        self.store.set_aggregate(self.run_id, ok=True, value=value)
        log.info("aggregate %s for run %s took %.3f s", self.fn, self.run_id, time.monotonic() - started)
        return value


def run_aggregate(
    settings: Settings, store: RunStore, run_id: str, fn: str, *, worker: str | None = None
) -> Any:
    """Deliver the fan-in of run ``run_id`` naming ``fn`` (see the module docstring); its value,
    or None when there is none."""
    return _Fanin(settings, store, run_id, fn, worker or socket.gethostname()).run()
