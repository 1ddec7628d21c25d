"""What a pause for a decision is: an ``Approval`` (a person's) or an event wait (a system's),
and the ``Decision`` that ends it.

Times are Unix seconds (Redis server time where Redis decides them). ``details`` are stored
redacted (``agentfleet.redaction``): a pending approval is shown to people and services that
must never see a secret the task held.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Approval", "ApprovalKind", "ApprovalStatus", "Decision", "OnTimeout", "approval_id"]

ApprovalKind = Literal["approval", "event"]
ApprovalStatus = Literal["pending", "approved", "rejected", "timed_out", "cancelled"]
OnTimeout = Literal["reject", "approve"]


class Decision(BaseModel):
    """How a pause ended. ``approved``: go ahead (an event that arrived is approved); ``by``:
    who decided (None: not said, or the timeout); ``comment``: why, as they wrote it; ``data``:
    JSON given with the decision (edited arguments, an event's payload); ``timed_out``: the
    timeout decided, as the call's ``on_timeout`` says; ``decided_at``: Unix seconds."""

    model_config = ConfigDict(frozen=True)

    approved: bool
    by: str | None = None
    comment: str | None = None
    data: Any = None
    timed_out: bool = False
    decided_at: float = 0.0


class Approval(BaseModel):
    """One pause of one item. ``kind`` is ``approval`` (``name`` set: what is asked) or
    ``event`` (``key`` set: the event waited for). ``run_id``, ``item_key`` (the item's
    idempotency key), ``index`` (its place in the run), ``task_name`` and ``task_id`` say which
    item waits. ``created_at`` and ``expires_at`` (None: waits until decided) are Unix
    seconds; ``on_timeout`` is what a timeout decides. ``decision`` is set once ``status`` is
    no longer ``pending`` (a cancelled pause has none)."""

    id: str
    kind: ApprovalKind = "approval"
    name: str | None = None
    key: str | None = None
    run_id: str
    item_key: str
    index: int = 0
    task_name: str = ""
    task_id: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    created_at: float = 0.0
    expires_at: float | None = None
    on_timeout: OnTimeout = "reject"
    status: ApprovalStatus = "pending"
    decision: Decision | None = None

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @property
    def label(self) -> str:
        """What is waited for: the approval's name, or ``event <key>``."""
        return self.name or "" if self.kind == "approval" else f"event {self.key}"


def approval_id(item_key: str, kind: ApprovalKind, name: str, call: int) -> str:
    """The id of the ``call``-th pause named ``name`` (0 for the first) of the item with
    idempotency key ``item_key``: the same on every execution of the item, so a resumed body
    that reaches the same call finds the same approval."""
    digest = hashlib.sha256(f"{item_key}\0{kind}\0{name}\0{call}".encode()).hexdigest()
    return f"ap_{digest[:24]}"
