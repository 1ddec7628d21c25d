"""The console's Approvals page: what items wait for, and deciding it.

``GET /approvals`` lists the pending approvals (the oldest first: name, details, run, age,
expiry), each with a form to approve or reject with a comment, and below them the latest
decided ones (who decided what, and when); ``?run=`` narrows both to one run.
``POST /approvals/{id}`` decides one (the session, CSRF token and origin are checked by the
guard in ``routes`` first); the operator's decision is recorded as ``console``, or the name
typed in the form. A second decision shows the one that stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from agentfleet.errors import ApprovalAlreadyDecided, ApprovalExpired, ApprovalNotFound
from agentfleet.service.console.auth import Session

if TYPE_CHECKING:
    from agentfleet.service.console.routes import Console, Form

__all__ = ["approvals_page", "decide"]

# Approvals listed at once, of each kind (pending, decided).
PAGE = 200
_DECIDED = ("approved", "rejected", "timed_out", "cancelled")


def approvals_page(console: Console, request: Request, session: Session | None) -> Response:
    run = request.query_params.get("run", "").strip() or None
    store = console.data.fleet.approval_store
    pending = sorted(store.list(run, "pending", PAGE), key=lambda a: a.created_at)
    decided = sorted(
        (a for a in store.list(run, None, PAGE) if a.status in _DECIDED),
        key=lambda a: a.decision.decided_at if a.decision else a.created_at,
        reverse=True,
    )[:50]
    return console.page(
        request,
        "approvals.html",
        session,
        pending=pending,
        decided=decided,
        run=run or "",
        notice=request.query_params.get("notice", ""),
    )


def _one(form: Form, name: str) -> str:
    return (form.get(name) or [""])[0].strip()


def decide(console: Console, request: Request, session: Session, form: Form) -> Response:
    approval_id = request.path_params["approval_id"]
    choice = _one(form, "decision")
    if choice not in ("approve", "reject"):
        return console.problem(request, session, "Choose Approve or Reject.", 422)
    by = _one(form, "by")[:200] or "console"
    comment = _one(form, "comment")[:2000] or None
    fleet = console.data.fleet
    try:
        if choice == "approve":
            fleet.approve(approval_id, by=by, comment=comment)
        else:
            fleet.reject(approval_id, by=by, comment=comment)
    except ApprovalNotFound:
        return console.problem(request, session, f"No approval {approval_id}: it may have expired.", 404)
    except (ApprovalAlreadyDecided, ApprovalExpired) as exc:
        return console.page(request, "approval.html", session, 409, approval=exc.approval, notice=str(exc))
    base = request.scope.get("root_path", "")
    return RedirectResponse(f"{base}/approvals?notice={choice}d", status_code=303)
