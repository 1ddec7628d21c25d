"""A dead letter: an item that failed for good, with everything needed to triage and requeue it."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentfleet.dlq.artifacts import Artifact
from agentfleet.errors import MalformedMessage
from agentfleet.idempotency import stable_hash

__all__ = ["MALFORMED_BLOCKER", "AttemptRecord", "DeadLetter", "PreviousStage", "dead_letter_id"]

#: Why a dead letter of category ``malformed`` is never requeued.
MALFORMED_BLOCKER = "it is a malformed message, with no task a worker could run (purge it instead)"


def dead_letter_id(idempotency_key: str, stage: int = 0) -> str:
    """The entry id of an item's dead letter: the same for every write of the same failure.

    A worker that dies while writing, or a redelivery that fails again, writes the same id, so a
    failure is never listed twice.
    """
    return stable_hash([idempotency_key, stage], length=16)


class AttemptRecord(BaseModel):
    """One failed execution. ``at`` is a Unix time; ``duration_s`` the seconds the body ran.

    ``requeues`` tells which generation the attempt belongs to: 0 before the first requeue.
    """

    model_config = ConfigDict(extra="ignore")

    attempt: int
    error_type: str
    category: str
    message: str
    status_code: int | None = None
    downstream: str | None = None
    at: float = Field(default_factory=time.time)
    duration_s: float = 0.0
    requeues: int = 0


class PreviousStage(BaseModel):
    """What the earlier stages of a pipeline item spent: attempts, seconds, US dollars."""

    attempts: int = 0
    duration_s: float = 0.0
    cost_usd: float = 0.0


class DeadLetter(BaseModel):
    """An item that failed for good (retries exhausted, a permanent error, or poison).

    ``inputs`` are the keyword inputs of the failed stage with secrets replaced; ``redacted``
    lists where (``a.b[0]``), and an entry with redactions cannot be requeued as it is.
    ``stage_tasks`` are a pipeline's stage task names (empty for a map). Times are Unix times.
    ``requeues`` counts how often the item was requeued before this failure. ``node`` is the
    step of a dependency graph that failed (``None`` for maps and pipelines); an entry of
    category ``compensation`` is a succeeded item whose compensation failed. An entry of
    category ``malformed`` is a queue entry no worker could decode or deliver as a task:
    ``raw_message`` holds it as it was found, as text (secrets redacted, a base64 body shown
    decoded, cut to ``dlq.malformed_keep_bytes``), ``error`` says what is wrong with it, and the
    item fields are what it named of itself, if anything; it cannot be requeued.
    ``artifacts`` are the files the item left in its workspace that matched its artifact
    patterns (``agentfleet.dlq.evidence``), without their bytes: ``DLQStore.artifact`` reads
    those, and they go with the entry.
    """

    model_config = ConfigDict(extra="ignore")

    id: str
    task_name: str
    task_id: str
    run_id: str
    item_key: str
    index: int = 0
    idempotency_key: str
    stage: int = 0
    stages: int = 1
    stage_tasks: list[str] = Field(default_factory=list)
    node: str | None = None
    queue: str | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    redacted: list[str] = Field(default_factory=list)
    previous: PreviousStage | None = None
    error_type: str
    error: str
    category: str
    fingerprint: str
    status_code: int | None = None
    downstream: str | None = None
    attempts: int = 0
    errors: list[AttemptRecord] = Field(default_factory=list)
    traceback: str = ""
    first_failure_at: float
    last_failure_at: float
    dead_lettered_at: float = Field(default_factory=time.time)
    worker: str = ""
    requeues: int = 0
    cost_usd: float = 0.0
    raw_message: str = ""
    artifacts: list[Artifact] = Field(default_factory=list)

    def artifact_named(self, name: str) -> Artifact | None:
        """The artifact called ``name``, or None."""
        return next((a for a in self.artifacts if a.name == name), None)

    @property
    def requeue_blocker(self) -> str | None:
        """Why this entry cannot be requeued as it is, or None when it can."""
        if self.category == MalformedMessage.category:
            return MALFORMED_BLOCKER
        if self.redacted:
            return "its input had secret values redacted (" + ", ".join(self.redacted[:3]) + ")"
        if self.stages > 1 and len(self.stage_tasks) != self.stages:
            return "the pipeline's stage names were not recorded"
        return None

    def age_s(self, now: float | None = None) -> float:
        """Seconds since it was dead-lettered."""
        return max(0.0, (time.time() if now is None else now) - self.dead_lettered_at)
