"""``agentfleet runs``: list runs and show one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.output import (
    console,
    outcomes_table,
    print_json,
    runs_table,
    steps_table,
    summary_table,
    waiting_table,
)
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.ratelimit import Limiter
from agentfleet.service.health import pause_reason

if TYPE_CHECKING:
    from agentfleet.approvals import Approval

__all__ = ["runs_app"]

runs_app = typer.Typer(help="List runs and show one run's summary and outcomes.", no_args_is_help=True)


@runs_app.command("list")
def list_runs(
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="How many of the newest runs.", metavar="N"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """The newest runs, newest first."""
    fleet = Fleet(broker_url=require_broker())
    summaries = fleet.runs(limit)
    if as_json:
        print_json([s.model_dump(mode="json") for s in summaries])
    elif not summaries:
        console.print("no runs yet")
    else:
        console.print(runs_table(summaries))


@runs_app.command("show")
def show_run(
    run_id: str = typer.Argument(
        ..., metavar="RUN_ID", help="The run's id, or its first characters (see agentfleet runs list)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    failures_only: bool = typer.Option(False, "--failures", help="List only failed items."),
    limit: int = typer.Option(50, "--limit", "-n", min=1, metavar="N", help="How many outcomes to list."),
    offset: int = typer.Option(0, "--offset", min=0, metavar="N", help="Skip this many outcomes first."),
    every: bool = typer.Option(False, "--all", help="List every outcome (no --limit)."),
) -> None:
    """A run's summary, paused downstreams and its items' outcomes.

    Lists --limit outcomes in input order and says how many there are: page with --offset,
    or list them all with --all.
    """
    fleet = Fleet(broker_url=require_broker())
    try:
        run = fleet.get_run(run_id)
    except DispatchError as exc:
        raise DispatchError(f"{exc}; see `agentfleet runs list`") from None
    summary = run.summary()
    waiting = run.waiting_approval()
    outcomes = [o for o in run.outcomes() if not (failures_only and o.ok)]
    page = outcomes[offset:] if every else outcomes[offset : offset + limit]
    paused = Limiter.from_settings(fleet.settings, fleet.store.client).paused(
        fleet.settings.limiter.pause_notice_s
    )
    if as_json:
        print_json(
            {
                "summary": summary.model_dump(mode="json"),
                "paused_downstreams": paused,
                "waiting_approval": [_waiting(a) for a in waiting],
                "outcomes_total": len(outcomes),
                "offset": offset,
                "outcomes": [o.model_dump(mode="json") for o in page],
            }
        )
        return
    console.print(summary_table(summary))
    for downstream, left_s in paused.items():
        console.print(f"[yellow]{pause_reason(downstream, left_s)}[/yellow]", highlight=False)
    if waiting:
        console.print(waiting_table(waiting))
        hint = f"decide with: agentfleet approvals list --run {run.id}"
        console.print(hint, highlight=False, soft_wrap=True)
    if summary.steps:
        console.print(steps_table(summary))
    if page:
        console.print(outcomes_table(page, limit=len(page)))
    if len(page) < len(outcomes):
        console.print(page_note(len(page), len(outcomes), offset, run.id), highlight=False, soft_wrap=True)


def _waiting(approval: Approval) -> dict[str, Any]:
    """One item waiting for a decision, as ``runs show --json`` lists it."""
    return {
        "index": approval.index,
        "item_key": approval.item_key,
        "task_id": approval.task_id,
        "approval_id": approval.id,
        "kind": approval.kind,
        "asks": approval.label,
        "created_at": approval.created_at,
        "expires_at": approval.expires_at,
    }


def page_note(shown: int, total: int, offset: int, run_id: str) -> str:
    """How many of a run's outcomes a page shows, and how to see the others."""
    first = f"{offset + 1}-{offset + shown}" if shown else "none"
    more = f"--offset {offset + shown} for the next, " if offset + shown < total else ""
    return (
        f"{shown} of {total} outcomes shown ({first}); "
        f"{more}--all for every one (agentfleet runs show {run_id} --all)"
    )


@runs_app.command("cancel")
def cancel_run(
    run_id: str = typer.Argument(..., help="The run's id, or its first characters.", metavar="RUN_ID"),
    compensate: bool = typer.Option(
        True,
        "--compensate/--no-compensate",
        help="Undo the succeeded items whose tasks declare a compensation.",
    ),
) -> None:
    """Cancel a run: its items that have not started never run.

    Succeeded ones are compensated (unless --no-compensate).
    """
    fleet = Fleet(broker_url=require_broker())
    run = fleet.get_run(run_id)
    run.cancel(compensate=compensate)
    console.print(f"cancelled run {run.id}")


@runs_app.command("compensate")
def compensate_run(
    run_id: str = typer.Argument(..., help="The run's id, or its first characters.", metavar="RUN_ID"),
) -> None:
    """Undo a run's succeeded items that declare a compensation.

    Newest first.
    """
    fleet = Fleet(broker_url=require_broker())
    run = fleet.get_run(run_id)
    if run.compensate():
        console.print(
            f"run {run.id} compensates once its items have ended; see `agentfleet runs show {run.id}`"
        )
    else:
        console.print(f"run {run.id} was told to compensate before, or has nothing to undo")
