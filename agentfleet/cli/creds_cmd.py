"""``agentfleet creds``: who used which credential, where and when, and which egress requests
were refused (the audit stream)."""

from __future__ import annotations

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.output import audit_table, console, print_json
from agentfleet.config import get_settings
from agentfleet.dlq import parse_since
from agentfleet.redis_client import state_client
from agentfleet.tools.audit import AuditLog

__all__ = ["creds_app"]

creds_app = typer.Typer(help="Credentials: the audit of every use.", no_args_is_help=True)


@creds_app.command("audit")
def audit(
    limit: int = typer.Option(100, "--limit", "-n", min=1, help="At most this many entries.", metavar="N"),
    since: str | None = typer.Option(
        None,
        "--since",
        "-s",
        help="The first entries from then on: 30m, 6h, 2d or an ISO date.",
        metavar="WHEN",
    ),
    refused: bool = typer.Option(
        False, "--refused", help="Only the egress requests refused (among the entries read)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Uses of credentials and refused egress requests, oldest first.

    The latest --limit, or the first since --since.
    """
    start = parse_since(since) if since is not None else None
    require_broker()
    audit = AuditLog(state_client(get_settings()), get_settings().key_prefix)
    entries = audit.read(count=limit, since=start)
    if refused:
        entries = [entry for entry in entries if entry.event == "refused"]
    if as_json:
        print_json([entry.model_dump(mode="json") for entry in entries])
    elif not entries:
        nothing = "no egress request was refused" if refused else "no credential has been used or refused"
        console.print(nothing + (" since then" if since else ""))
    else:
        console.print(audit_table(entries))
