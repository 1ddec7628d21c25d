"""``ctx.approval`` and ``ctx.wait_for_event``: a pause keyed like a step.

The ``n``-th pause of one name in an item's body has an id made from the item's idempotency
key, its kind, its name and ``n`` (``approvals.approval_id``), so every execution of the item
(the first, a redelivery, the one a decision sends) that reaches the same call finds the same
pause. With no pause of that id yet, the body stops with ``Parked`` carrying the pause to
record; the delivery's ``Approvals`` feature (``tasks/features/approval.py``) records it with
the item's message and parks the item. A pending one (a copy delivered while parked) stops the
body the same way, with nothing to record. A decided one returns its ``Decision``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentfleet.approvals import Approval, ApprovalKind, Decision, OnTimeout, approval_id
from agentfleet.errors import ConfigError, Parked

if TYPE_CHECKING:
    from agentfleet.tasks.execution_state import ExecutionState

__all__ = ["pause"]


def _checked(kind: ApprovalKind, name: str, timeout_s: float | None, on_timeout: str) -> None:
    what = "approval name" if kind == "approval" else "event key"
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ConfigError(f"the {what} must be a non-empty string of at most 200 characters, not {name!r}")
    if timeout_s is not None and not timeout_s > 0:
        raise ConfigError(f"timeout_s must be a number of seconds above 0 (or None), not {timeout_s!r}")
    if on_timeout not in ("reject", "approve"):
        raise ConfigError(f"on_timeout must be 'reject' or 'approve', not {on_timeout!r}")


def pause(
    execution: ExecutionState,
    kind: ApprovalKind,
    name: str,
    details: dict[str, Any] | None,
    timeout_s: float | None,
    on_timeout: OnTimeout,
) -> Decision:
    """The decision on this call's pause, or ``Parked`` (see the module docstring)."""
    _checked(kind, name, timeout_s, on_timeout)
    if details is not None and not isinstance(details, dict):
        raise ConfigError(f"details must be a dict, not {type(details).__name__}")
    store = execution.approvals
    if store is None:
        raise RuntimeError("a pause needs a fleet delivery: this context runs outside one")
    execution.check_claim()
    call = execution.next_call(f"p:{kind}:{name}")
    pause_id = approval_id(execution.key, kind, name, call)
    found = store.find(pause_id)
    if found is None:
        approval = Approval(
            id=pause_id,
            kind=kind,
            name=name if kind == "approval" else None,
            key=name if kind == "event" else None,
            run_id=execution.run_id,
            item_key=execution.key,
            index=execution.index,
            task_name=execution.task_name,
            task_id=execution.task_id,
            details=dict(details or {}),
            on_timeout=on_timeout,
        )
        raise Parked(pause_id, approval, timeout_s=timeout_s)
    if found.pending:
        raise Parked(pause_id)
    if found.decision is None:  # cancelled: the run was, and this item ends with it
        return Decision(approved=False, comment="cancelled with its run")
    return found.decision
