"""Pauses for a decision: ``ctx.approval`` (a person's) and ``ctx.wait_for_event`` (a system's).

An item that reaches a pause with no decision yet is parked: its message is acknowledged and
kept with the pause, its worker slot freed. A decision (``ApprovalStore.decide``,
``send_event``, the timeout, a cancelled run) sends the message again; the body runs through
its stored steps to the same call, which returns the ``Decision``. See docs/approvals.md.
"""

from agentfleet.approvals.model import (
    Approval,
    ApprovalKind,
    ApprovalStatus,
    Decision,
    OnTimeout,
    approval_id,
)
from agentfleet.approvals.notify import approval_created
from agentfleet.approvals.store import ApprovalStore

__all__ = [
    "Approval",
    "ApprovalKind",
    "ApprovalStatus",
    "ApprovalStore",
    "Decision",
    "OnTimeout",
    "approval_created",
    "approval_id",
]
