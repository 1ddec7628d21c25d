"""``agentfleet run``: fan a registered task out over inputs from a JSON Lines file.

Every run option (``RunOptions``) is a flag of its own (``cli/option_flags.py``). Its exit
status says how the run went, for scripts and CI:

- 0: every item succeeded (or, with ``--no-wait``, the run was dispatched);
- 1: the run finished and some items failed (dead-lettered) or were cancelled;
- 2: nothing ran: a usage or configuration mistake, an unknown task, inputs that do not fit
  it, a broker that does not answer;
- 3: some items had no outcome when ``--timeout-s`` ran out (they go on running; ``agentfleet
  runs show RUN_ID`` follows them). This wins over 1;
- 130: interrupted (Ctrl-C): the run goes on in the workers unless ``--cancel-on-interrupt``.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

import typer

from agentfleet.cli.connect import fleet_for_work, importable_module_of, local_task
from agentfleet.cli.option_flags import with_run_options
from agentfleet.cli.output import console, err_console, outcomes_table, print_json, summary_table
from agentfleet.cli.progress import follow
from agentfleet.cli.run_where import OutcomeFile, dispatched_line, interrupted_line
from agentfleet.config import RunOptions
from agentfleet.errors import DispatchError
from agentfleet.local import LocalCluster
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.orchestration import Fleet, Run
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
    INTERRUPTED = 130


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


def _first_and_rest(items: Iterator[dict[str, Any]], source: str) -> Iterator[dict[str, Any]]:
    """``items`` again once it is known to hold one; ``DispatchError`` for an empty file."""
    first = next(items, None)
    if first is None:
        raise DispatchError(f"--inputs {source} holds no inputs (one JSON object a line); nothing was sent")
    return itertools.chain([first], items)


# The command's flags, in the order ``--help`` lists them.
_TASK = typer.Argument(..., metavar="TASK", help="Registered task name, e.g. myapp.tasks.classify.")
_INPUTS = typer.Option(
    ..., "--inputs", "-i", metavar="FILE", help="JSON Lines file of inputs, or - for stdin."
)
_TIMEOUT = typer.Option(600.0, min=0.0, metavar="SECONDS", help="How long to wait.")
_WAIT = typer.Option(True, "--wait/--no-wait", help="Wait for the outcomes (the default).")
_WAIT_FOR_WORKERS = typer.Option(
    None,
    "--wait-for-workers",
    min=0.0,
    metavar="SECONDS",
    help="How long to wait for workers that are starting before refusing the task "
    "(default dispatch.wait_for_workers_s).",
)
_WORKERS = typer.Option(2, min=1, metavar="N", help="Workers to start when using an embedded cluster.")
_PROGRESS_EVERY = typer.Option(
    10.0,
    "--progress-every",
    min=0.5,
    metavar="SECONDS",
    help="Time between progress lines when not on a terminal, and while a long dispatch sends.",
)
_OUTPUT = typer.Option(
    None,
    "--output",
    "-o",
    metavar="FILE",
    help="Write one JSON line per outcome to FILE as each arrives.",
)
_CANCEL_ON_INTERRUPT = typer.Option(
    False,
    "--cancel-on-interrupt",
    help="Cancel the run on Ctrl-C (without it, the run goes on in the workers).",
)
_JSON = typer.Option(False, "--json", help="Print one JSON document.")


@with_run_options
def run(
    task: str = _TASK,
    inputs: str = _INPUTS,
    timeout_s: float = _TIMEOUT,
    wait: bool = _WAIT,
    wait_for_workers_s: float | None = _WAIT_FOR_WORKERS,
    workers: int = _WORKERS,
    progress_every_s: float = _PROGRESS_EVERY,
    output: str | None = _OUTPUT,
    cancel_on_interrupt: bool = _CANCEL_ON_INTERRUPT,
    as_json: bool = _JSON,
    *,
    options: RunOptions,
) -> None:
    """Fan TASK out over the inputs and wait for the run.

    Dispatches TASK once per input line and (unless --no-wait) waits for the outcomes.

    Prints the run's id (and its console page) once it is dispatched. On Ctrl-C the run goes
    on in the workers, unless --cancel-on-interrupt.

    Every run option is a flag: --name, --aggregate, --budget-usd and the others below.
    Exit status: 0 every item succeeded; 1 some failed; 2 nothing ran (a mistake); 3 some
    had no outcome in time; 130 interrupted.
    """
    if output is not None and not wait:
        raise DispatchError(
            "--output needs the outcomes: drop --no-wait, or use `agentfleet runs show --json`"
        )
    items = _first_and_rest(read_inputs(inputs), inputs)
    say = err_console.print if as_json else console.print
    with _outcome_file(output) as sink, _fleet_for(task, workers, say) as (fleet, cluster):
        if not wait and cluster is not None:
            raise DispatchError("--no-wait needs a running Redis and workers (AGENTFLEET_BROKER_URL)")
        handle = fleet.map(
            local_task(task, err_console.print),
            items,
            options=options,
            wait_for_workers_s=wait_for_workers_s,
            progress=_dispatch_progress(say, progress_every_s),
        )
        if not wait:
            _print_dispatched(handle, as_json=as_json)
            return
        summary = _wait_for(
            handle,
            fleet,
            task,
            sink.write if sink is not None else None,
            say,
            timeout_s=timeout_s,
            every_s=progress_every_s,
            cancel_on_interrupt=cancel_on_interrupt,
            embedded=cluster is not None,
            as_json=as_json,
        )
    raise typer.Exit(int(exit_code(summary)))


def _outcome_file(output: str | None) -> contextlib.AbstractContextManager[OutcomeFile | None]:
    return OutcomeFile(output) if output is not None else contextlib.nullcontext()


def _fleet_for(
    task: str, workers: int, say: Callable[[str], object]
) -> contextlib.AbstractContextManager[tuple[Fleet, LocalCluster | None]]:
    """``fleet_for_work`` for TASK: its module imported by embedded workers."""
    module = importable_module_of(task)
    return fleet_for_work(
        workers=workers,
        concurrency=None,
        pool=None,
        task_modules=[module] if module else [],
        say=say,
    )


def _print_dispatched(handle: Run, *, as_json: bool) -> None:
    if as_json:
        print_json({"run_id": handle.id, "tasks": handle.total})
    else:
        console.print(f"dispatched run {handle.id} ({handle.total} tasks)")


def _wait_for(
    handle: Run,
    fleet: Fleet,
    label: str,
    on_outcome: Callable[[TaskOutcome], None] | None,
    say: Any,
    *,
    timeout_s: float,
    every_s: float,
    cancel_on_interrupt: bool,
    embedded: bool,
    as_json: bool,
) -> RunSummary:
    """The dispatched run's summary once it ended (or ``timeout_s`` ran out); Ctrl-C exits with
    ``ExitCode.INTERRUPTED``, cancelling the run with ``cancel_on_interrupt``."""
    try:
        # Inside the try: a Ctrl-C that lands while the line is written is this run's too.
        say(
            dispatched_line(fleet.settings, handle.id, handle.total),
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
        return _follow(handle, fleet, label, timeout_s, every_s, on_outcome, as_json=as_json)
    except KeyboardInterrupt:
        if cancel_on_interrupt:
            handle.cancel(compensate=False)
        line = interrupted_line(handle.id, cancelled=cancel_on_interrupt, embedded=embedded)
        err_console.print(line, highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


def _follow(
    handle: Run,
    fleet: Fleet,
    label: str,
    timeout_s: float,
    every_s: float,
    on_outcome: Callable[[TaskOutcome], None] | None,
    *,
    as_json: bool,
) -> RunSummary:
    """Wait for the run, showing its progress (or, with ``as_json``, printing one document at
    the end); ``on_outcome`` hears each outcome as it arrives."""
    if as_json:
        for outcome in handle.as_completed(timeout_s):
            if on_outcome is not None:
                on_outcome(outcome)
        summary = handle.summary(report_timeouts=True)
        print_json(
            {
                "summary": summary.model_dump(mode="json"),
                "outcomes": [o.model_dump(mode="json") for o in handle.outcomes()],
            }
        )
        return summary
    follow(handle, fleet, timeout_s=timeout_s, label=label, plain_every_s=every_s, on_outcome=on_outcome)
    summary = handle.summary(report_timeouts=True)
    console.print(summary_table(summary))
    failed = [o for o in handle.outcomes() if not o.ok]
    if failed:
        console.print(outcomes_table(failed, title="failed items"))
    return summary
