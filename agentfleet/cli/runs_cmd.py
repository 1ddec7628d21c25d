"""``agentfleet runs``: list runs and show one."""

from __future__ import annotations

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.output import console, outcomes_table, print_json, runs_table, steps_table, summary_table
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.ratelimit import Limiter
from agentfleet.service.health import pause_reason

__all__ = ["runs_app"]

runs_app = typer.Typer(help="List runs and show one run's summary and outcomes.", no_args_is_help=True)


@runs_app.command("list")
def list_runs(
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="How many of the newest runs."),
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
        ..., help="The run's id, or its first characters (see `agentfleet runs list`)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    failures_only: bool = typer.Option(False, "--failures", help="List only failed items."),
    limit: int = typer.Option(50, "--limit", "-n", min=1, help="How many outcomes to list."),
) -> None:
    """A run's summary, the downstreams every worker is paused on, and its items' outcomes."""
    fleet = Fleet(broker_url=require_broker())
    try:
        run = fleet.get_run(run_id)
    except DispatchError as exc:
        raise DispatchError(f"{exc}; see `agentfleet runs list`") from None
    summary = run.summary()
    outcomes = [o for o in run.outcomes() if not (failures_only and o.ok)]
    paused = Limiter.from_settings(fleet.settings, fleet.store.client).paused(
        fleet.settings.limiter.pause_notice_s
    )
    if as_json:
        print_json(
            {
                "summary": summary.model_dump(mode="json"),
                "paused_downstreams": paused,
                "outcomes": [o.model_dump(mode="json") for o in outcomes[:limit]],
            }
        )
        return
    console.print(summary_table(summary))
    for downstream, left_s in paused.items():
        console.print(f"[yellow]{pause_reason(downstream, left_s)}[/yellow]", highlight=False)
    if summary.steps:
        console.print(steps_table(summary))
    if outcomes:
        console.print(outcomes_table(outcomes, limit=limit))


@runs_app.command("cancel")
def cancel_run(
    run_id: str = typer.Argument(..., help="The run's id, or its first characters."),
    compensate: bool = typer.Option(
        True,
        "--compensate/--no-compensate",
        help="Undo the succeeded items whose tasks declare a compensation.",
    ),
) -> None:
    """Cancel a run: items that have not started do not run; succeeded ones are compensated."""
    fleet = Fleet(broker_url=require_broker())
    run = fleet.get_run(run_id)
    run.cancel(compensate=compensate)
    console.print(f"cancelled run {run.id}")


@runs_app.command("compensate")
def compensate_run(run_id: str = typer.Argument(..., help="The run's id, or its first characters.")) -> None:
    """Undo a run's succeeded items whose tasks declare a compensation, newest first."""
    fleet = Fleet(broker_url=require_broker())
    run = fleet.get_run(run_id)
    if run.compensate():
        console.print(
            f"run {run.id} compensates once its items have ended; see `agentfleet runs show {run.id}`"
        )
    else:
        console.print(f"run {run.id} was told to compensate before, or has nothing to undo")
