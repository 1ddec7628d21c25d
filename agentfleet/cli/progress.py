"""A live progress bar over a run's outcomes."""

from __future__ import annotations

from collections.abc import Callable

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentfleet.cli.output import console
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Run

__all__ = ["follow"]


def follow(
    run: Run,
    *,
    timeout_s: float | None,
    on_outcome: Callable[[TaskOutcome], None] | None = None,
    label: str = "agents",
) -> list[TaskOutcome]:
    """Show a progress bar until the run ends or ``timeout_s`` passes; return the outcomes seen."""
    seen: list[TaskOutcome] = []
    failed = 0
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(label, total=run.total, status="")
        for outcome in run.as_completed(timeout_s):
            seen.append(outcome)
            failed += 0 if outcome.ok else 1
            status = f"[green]{len(seen) - failed} ok[/green]" + (
                f" [red]{failed} failed[/red]" if failed else ""
            )
            progress.update(bar, advance=1, status=status)
            if on_outcome is not None:
                on_outcome(outcome)
    return seen
