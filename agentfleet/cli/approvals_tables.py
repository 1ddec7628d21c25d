"""Renderings of approvals for the CLI (built here, printed by ``approvals_cmd``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text

from agentfleet.approvals.model import Approval
from agentfleet.cli.output import compact_table, shorten, shown
from agentfleet.display import visible
from agentfleet.dlq.stats import format_age

__all__ = ["approvals_table", "decided_line", "standing_line", "when"]


def when(ts: float | None) -> str:
    """A Unix time (seconds) as UTC text, ``-`` for none."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _expiry(approval: Approval, now: float) -> str:
    if approval.expires_at is None:
        return "never"
    left = approval.expires_at - now
    return f"in {format_age(left)}" if left > 0 else "expired"


def _verdict(approval: Approval) -> str:
    decision = approval.decision
    if decision is None:
        return approval.status
    by = f" by {decision.by}" if decision.by else ""
    return f"{approval.status}{by}"


def approvals_table(approvals: Iterable[Approval]) -> Table:
    """One approval a row: its id; what is asked, for which run and item, with the details;
    its age; when it expires (pending) or who decided (decided). Fits 80 columns."""
    now = time.time()
    table = compact_table("approvals")
    table.add_column("id", no_wrap=True)
    table.add_column("what (run #item; details)", overflow="fold", ratio=1)
    table.add_column("age", justify="right", no_wrap=True)
    table.add_column("expires / status", overflow="fold", max_width=14)
    for a in approvals:
        details = json.dumps(a.details, ensure_ascii=False, default=str) if a.details else ""
        what = f"{a.label}\nrun {a.run_id} #{a.index}" + (f"\n{shorten(details, 200)}" if details else "")
        table.add_row(
            a.id,
            shown(what),
            format_age(max(0.0, now - a.created_at)),
            shown(_expiry(a, now) if a.status == "pending" else _verdict(a)),
        )
    return table


def _what(approval: Approval) -> str:
    decision = approval.decision
    if approval.status == "timed_out" or (decision is not None and decision.timed_out):
        return "timed out"
    return approval.status


def decided_line(approval: Approval) -> Text:
    """``approved a1b2 (deploy) by alice at ...``: the decision just made."""
    decision = approval.decision
    at = when(decision.decided_at) if decision else "-"
    by = f" by {decision.by}" if decision and decision.by else ""
    return Text(visible(f"{_what(approval)} {approval.id} ({approval.label}){by} at {at}"))


def standing_line(approval: Approval) -> Text:
    """Why a second decision is refused: the decision that stands, who made it and when."""
    decision = approval.decision
    if decision is None:
        return Text(visible(f"error: approval {approval.id} is {approval.status}; it takes no decision"))
    by = f" by {decision.by}" if decision.by else ""
    comment = f' ("{decision.comment}")' if decision.comment else ""
    return Text(
        visible(
            f"error: approval {approval.id} ({approval.label}) was already {_what(approval)}{by} "
            f"at {when(decision.decided_at)}{comment}; the first decision stands"
        )
    )
