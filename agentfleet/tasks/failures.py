"""What happens when an item fails for good: it becomes a dead letter, and one log line."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentfleet.config import Settings
from agentfleet.dlq import (
    AttemptRecord,
    DeadLetter,
    DLQStore,
    PreviousStage,
    dead_letter_id,
    error_fingerprint,
)
from agentfleet.dlq.artifacts import Artifact
from agentfleet.errors import AgentfleetError, classify
from agentfleet.idempotency import node_key
from agentfleet.llm.vendors import map_vendor_error, vendors_for
from agentfleet.models import TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.protocol.meta import ItemMeta
from agentfleet.redaction import Redactor

if TYPE_CHECKING:
    from agentfleet.protocol.task import FleetTask

__all__ = ["attempt_record", "build_dead_letter", "classify_failure", "on_final_failure"]

log = logging.getLogger("agentfleet.failures")


def classify_failure(task: FleetTask, exc: BaseException, settings: Settings) -> AgentfleetError:
    """The fleet error an exception from ``task``'s body stands for.

    The task's own ``retry_on`` / ``fail_on`` types come first; then a vendor's error (only its
    body tells a spend limit from a rate limit, and an error event inside a 200 stream carries
    its real status in its type); then the tree's ``classify``.
    """
    own_types = (*task.retry_on, *task.fail_on)
    if not (own_types and isinstance(exc, own_types)):
        mapped = map_vendor_error(exc, vendors_for(settings))
        if mapped is not None:
            return mapped
    return classify(
        exc,
        retryable=task.retry_on,
        permanent=task.fail_on,
        unknown_is_retryable=settings.retry.unknown_is_retryable,
    )


def attempt_record(
    err: AgentfleetError,
    *,
    attempt: int,
    downstream: str | None,
    redactor: Redactor,
    duration_s: float = 0.0,
    requeues: int = 0,
) -> dict[str, Any]:
    """One failed execution as the item's attempt history keeps it (a dead letter's
    ``AttemptRecord``); ``duration_s`` is the seconds the body ran; the message is redacted."""
    return AttemptRecord(
        attempt=attempt,
        error_type=type(err).__name__,
        category=err.category,
        message=redactor.text(str(err))[:2000],
        status_code=err.status_code,
        downstream=downstream,
        duration_s=round(duration_s, 6),
        requeues=requeues,
    ).model_dump()


def _worker_name(task: FleetTask) -> str:
    hostname = getattr(task.request, "hostname", None)
    return str(hostname) if hostname else socket.gethostname()


def _previous_stage(previous: TaskOutcome | None) -> PreviousStage | None:
    if previous is None:
        return None
    return PreviousStage(
        attempts=previous.attempts, duration_s=previous.duration_s, cost_usd=previous.cost_usd
    )


def build_dead_letter(
    *,
    task: FleetTask,
    redactor: Redactor,
    meta: ItemMeta,
    task_id: str,
    inputs: dict[str, Any],
    error: AgentfleetError,
    traceback_text: str,
    attempt_errors: Sequence[dict[str, Any]],
    downstream: str | None,
    attempts: int,
    previous: TaskOutcome | None = None,
    stage_tasks: Sequence[str] = (),
    cost_usd: float = 0.0,
    artifacts: Sequence[Artifact] = (),
) -> DeadLetter:
    """The dead letter of a final failure, with secrets replaced in its input and texts;
    ``artifacts`` are what the item left as evidence (their bytes go to ``on_final_failure``)."""
    now = time.time()
    records = [AttemptRecord.model_validate(e) for e in attempt_errors]
    redacted: list[str] = []
    message = redactor.text(str(error))
    return DeadLetter(
        id=dead_letter_id(node_key(meta.key, meta.node) if meta.node else meta.key, meta.stage),
        task_name=task.name,
        task_id=task_id,
        run_id=meta.run,
        item_key=meta.item,
        index=meta.idx,
        idempotency_key=meta.key,
        stage=meta.stage,
        node=meta.node or None,
        stages=meta.stages,
        stage_tasks=list(stage_tasks),
        queue=getattr(task, "queue", None),
        inputs=redactor.value(inputs, paths=redacted),
        redacted=redacted,
        previous=_previous_stage(previous),
        error_type=type(error).__name__,
        error=message,
        category=error.category,
        fingerprint=error_fingerprint(type(error).__name__, message),
        status_code=error.status_code,
        downstream=downstream,
        attempts=attempts,
        errors=records,
        traceback=redactor.text(traceback_text),
        first_failure_at=min((r.at for r in records), default=now),
        last_failure_at=max((r.at for r in records), default=now),
        dead_lettered_at=now,
        worker=_worker_name(task),
        requeues=meta.requeues,
        cost_usd=cost_usd,
        artifacts=list(artifacts),
    )


@repeatable
def on_final_failure(
    entry: DeadLetter,
    store: DLQStore,
    *,
    artifacts: Mapping[str, bytes] | None = None,
    max_stored_bytes: int | None = None,
) -> bool:
    """Store ``entry`` in the dead-letter queue, with the bytes of its ``artifacts`` (kept
    while all entries' artifacts hold under ``max_stored_bytes``), and log it; True once it is
    stored (an entry of the same id is updated in place).

    A dead letter that cannot be written (Redis unreachable) is logged in full instead, so the
    failure is never silent; the item's outcome is recorded either way.
    """
    record = {
        "event": "task_dead_lettered",
        "dead_letter": entry.id,
        "task": entry.task_name,
        "task_id": entry.task_id,
        "run_id": entry.run_id,
        "item_key": entry.item_key,
        "error_type": entry.error_type,
        "category": entry.category,
        "fingerprint": entry.fingerprint,
        "error": entry.error[:500],
        "attempts": entry.attempts,
        "downstream": entry.downstream,
        "artifacts": [a.name for a in entry.artifacts],
    }
    try:
        store.add(entry, artifacts, max_stored_bytes=max_stored_bytes)
    except Exception:
        log.exception(
            json.dumps({**record, "event": "dead_letter_write_failed", "entry": entry.model_dump()})
        )
        return False
    log.error(json.dumps(record))
    return True
