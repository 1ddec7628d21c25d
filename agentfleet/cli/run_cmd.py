"""``agentfleet run``: fan a registered task out over inputs from a JSON Lines file.

Every run option (``RunOptions``) is a flag of its own (``cli/option_flags.py``). Its exit
status says how the run went, for scripts and CI:

- 0: every item succeeded (or, with ``--no-wait``, the run was dispatched);
- 1: the run finished and some items failed (dead-lettered) or were cancelled;
- 2: nothing ran: a usage or configuration mistake, an unknown task, inputs that do not fit
  it, a broker that does not answer;
- 3: some items had no outcome when ``--timeout-s`` ran out (they go on running; ``agentfleet
  runs show RUN_ID`` follows them). This wins over 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

import typer

from agentfleet.cli.connect import fleet_for_work, importable_module_of
from agentfleet.cli.option_flags import with_run_options
from agentfleet.cli.output import console, err_console, outcomes_table, print_json, summary_table
from agentfleet.cli.progress import follow
from agentfleet.config import RunOptions
from agentfleet.errors import DispatchError
from agentfleet.models import RunSummary
from agentfleet.orchestration.dispatch import DispatchProgress
from agentfleet.orchestration.fleet import Progress
from agentfleet.orchestration.named import iter_jsonl

__all__ = ["ExitCode", "exit_code", "read_inputs", "run"]


class ExitCode(IntEnum):
    """``agentfleet run``'s exit statuses (see the module docstring)."""

    OK = 0
    ITEMS_FAILED = 1
    USAGE = 2
    TIMED_OUT = 3


def exit_code(summary: RunSummary) -> ExitCode:
    """The exit status a finished (or timed-out) wait on a run ends with."""
    if summary.timed_out:
        return ExitCode.TIMED_OUT
    if summary.succeeded < summary.tasks_total:
        return ExitCode.ITEMS_FAILED
    return ExitCode.OK


def read_inputs(path: str) -> Iterator[dict[str, Any]]:
    """Inputs from a JSON Lines file (``-`` for stdin): one JSON object a line, read as the run
    is dispatched (a file of millions of lines is never held whole)."""
    if path == "-":
        return iter_jsonl(sys.stdin, source="stdin")
    file = Path(path)
    if not file.is_file():
        raise DispatchError(f"--inputs {path}: no such file")
    return _lines_of(file, path)


def _lines_of(file: Path, source: str) -> Iterator[dict[str, Any]]:
    with file.open() as lines:
        yield from iter_jsonl(lines, source=source)


def _dispatch_progress(say: Any, every_s: float) -> Progress:
    """Says how far a long dispatch got, at most every ``every_s`` seconds."""
    last = [time.monotonic()]

    def show(progress: DispatchProgress) -> None:
        if time.monotonic() - last[0] < every_s:
            return
        last[0] = time.monotonic()
        waiting = ", waiting for the workers to catch up" if progress.waiting else ""
        say(f"sent {progress.sent} items ({progress.queued} waiting in the queue{waiting})")

    return show


@with_run_options
def run(
    task: str = typer.Argument(..., help="Registered task name, e.g. myapp.tasks.classify."),
    inputs: str = typer.Option(..., "--inputs", "-i", help="JSON Lines file of inputs, or - for stdin."),
    timeout_s: float = typer.Option(600.0, min=0.0, help="How long to wait, seconds."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait for the outcomes."),
    wait_for_workers_s: float | None = typer.Option(
        None,
        "--wait-for-workers",
        min=0.0,
        help="Seconds to wait for workers that are starting before refusing the task "
        "(default dispatch.wait_for_workers_s).",
    ),
    workers: int = typer.Option(2, min=1, help="Workers to start when using an embedded cluster."),
    progress_every_s: float = typer.Option(
        10.0,
        "--progress-every",
        min=0.5,
        help="Seconds between progress lines when not on a terminal, and while a long dispatch sends.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    *,
    options: RunOptions,
) -> None:
    """Dispatch TASK once per input line and (by default) wait for the run.

    Every run option is a flag (--name, --aggregate, --budget-usd, --max-in-flight, ...).
    Exit status: 0 every item succeeded; 1 some failed; 2 nothing ran (a mistake); 3 some
    had no outcome in time.
    """
    items = read_inputs(inputs)
    say = err_console.print if as_json else console.print
    module = importable_module_of(task)
    with fleet_for_work(
        workers=workers, concurrency=None, pool=None, task_modules=[module] if module else [], say=say
    ) as (fleet, cluster):
        if not wait and cluster is not None:
            raise DispatchError("--no-wait needs a running Redis and workers (AGENTFLEET_BROKER_URL)")
        handle = fleet.map(
            task,
            items,
            options=options,
            wait_for_workers_s=wait_for_workers_s,
            progress=_dispatch_progress(say, progress_every_s),
        )
        if not wait:
            if as_json:
                print_json({"run_id": handle.id, "tasks": handle.total})
            else:
                console.print(f"dispatched run {handle.id} ({handle.total} tasks)")
            return
        if as_json:
            summary = handle.wait(timeout_s)
            print_json(
                {
                    "summary": summary.model_dump(mode="json"),
                    "outcomes": [o.model_dump(mode="json") for o in handle.outcomes()],
                }
            )
        else:
            follow(handle, fleet, timeout_s=timeout_s, label=task, plain_every_s=progress_every_s)
            summary = handle.summary(report_timeouts=True)
            console.print(summary_table(summary))
            failed = [o for o in handle.outcomes() if not o.ok]
            if failed:
                console.print(outcomes_table(failed, title="failed items"))
    raise typer.Exit(int(exit_code(summary)))
