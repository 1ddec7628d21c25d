"""``agentfleet approvals``: list the decisions items wait for, and make them.

Exit codes: 0 decided (or listed); 1 the approval was decided already (the standing decision
is printed: who, what, when) or expired before this decision; 2 no such approval, several
starting with the id given, or bad input (``--data`` that is not JSON).
"""

from __future__ import annotations

import getpass
import json
from typing import Any

import typer

from agentfleet.approvals.filters import status_filter
from agentfleet.cli.approvals_tables import approvals_table, decided_line, standing_line
from agentfleet.cli.connect import require_broker
from agentfleet.cli.output import console, err_console, print_json
from agentfleet.errors import ApprovalAlreadyDecided, ApprovalExpired, ApprovalNotFound, ConfigError
from agentfleet.orchestration import Fleet

__all__ = ["approvals_app"]

approvals_app = typer.Typer(
    help="Decisions items wait for: list them, approve or reject one.",
    no_args_is_help=True,
)

_ID = typer.Argument(
    ..., help="The approval's id, or its first characters (see agentfleet approvals list).", metavar="ID"
)
_COMMENT = typer.Option(None, "--comment", "-m", help="Why: kept with the decision.", metavar="TEXT")
_BY = typer.Option(None, "--by", help="Who decides (default: this account's user name).", metavar="NAME")
_JSON = typer.Option(False, "--json", help="Print one JSON document.")


def _fleet() -> Fleet:
    return Fleet(broker_url=require_broker())


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def _data(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ConfigError(
            f"--data is not JSON ({exc}); give a JSON document, e.g. '{{\"amount\": 5}}'"
        ) from None


@approvals_app.command("list")
def list_approvals(
    run_id: str | None = typer.Option(
        None, "--run", "-r", help="Only this run's approvals.", metavar="RUN_ID"
    ),
    status: str = typer.Option(
        "pending",
        "--status",
        help="Only these: pending, approved, rejected, timed_out, cancelled or all.",
        metavar="STATUS",
    ),
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="At most this many.", metavar="N"),
    as_json: bool = _JSON,
) -> None:
    """Approvals, newest first (the pending ones unless --status says)."""
    chosen = status_filter(status)
    fleet = _fleet()
    found = fleet.approval_store.list(run_id, chosen, limit)
    if as_json:
        print_json([a.model_dump(mode="json") for a in found])
    elif not found:
        console.print(f"no {'' if status == 'all' else status + ' '}approvals")
    else:
        console.print(approvals_table(found))


def full_id(fleet: Fleet, start: str) -> str:
    """The id of the one approval whose id is or begins with ``start``; ``ApprovalNotFound``
    when none does, ``ConfigError`` naming them when several do."""
    store = fleet.approval_store
    if store.find(start) is not None:
        return start
    found = [a.id for a in store.list(None, None, None) if a.id.startswith(start)]
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
        raise ConfigError(f"{start} is the start of several approvals ({shown}); give more of the id")
    if not found:
        raise ApprovalNotFound(f"no approval {start}: see `agentfleet approvals list --status all`")
    return found[0]


def _decide(approval_id: str, *, approved: bool, by: str | None, comment: str | None, data: Any) -> None:
    fleet = _fleet()
    approval_id = full_id(fleet, approval_id)
    try:
        if approved:
            decided = fleet.approve(approval_id, by=_who(by), comment=comment, data=data)
        else:
            decided = fleet.reject(approval_id, by=_who(by), comment=comment)
    except ApprovalAlreadyDecided as exc:
        err_console.print(standing_line(exc.approval), highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except ApprovalExpired as exc:
        err_console.print(f"error: {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(decided_line(decided), highlight=False, soft_wrap=True)


@approvals_app.command("approve")
def approve(
    approval_id: str = _ID,
    comment: str | None = _COMMENT,
    data: str | None = typer.Option(
        None,
        "--data",
        help="A JSON document handed to the item with the decision (edited tool arguments, say).",
        metavar="JSON",
    ),
    by: str | None = _BY,
) -> None:
    """Approve: the item resumes with the decision.

    Deciding twice is refused (exit 1) and prints the decision that stands.
    """
    _decide(approval_id, approved=True, by=by, comment=comment, data=_data(data))


@approvals_app.command("reject")
def reject(approval_id: str = _ID, comment: str | None = _COMMENT, by: str | None = _BY) -> None:
    """Reject: the item resumes with the rejection (and the comment).

    Deciding twice is refused (exit 1) and prints the decision that stands.
    """
    _decide(approval_id, approved=False, by=by, comment=comment, data=None)
