"""Printing for the CLI: tables, JSON documents and one-line errors. The only place that prints.

Text someone else chose (run names, item keys, results, errors) goes into tables as ``shown``
text: never read as rich markup, its control and direction characters written as ``\\uXXXX``
(``display.visible``), so a name cannot restyle, clear or reorder the terminal.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

from agentfleet.display import visible
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.tools.audit import AuditEntry

if TYPE_CHECKING:
    from agentfleet.approvals import Approval

__all__ = [
    "audit_table",
    "compact_table",
    "console",
    "err_console",
    "outcomes_table",
    "print_json",
    "runs_table",
    "shorten",
    "shown",
    "summary_table",
    "waiting_table",
]


class _SizedWhenPrinting(Console):
    """rich's console, measured at each print rather than once when it is made.

    Width in columns: one set on the console (``console.width = 100``), else ``COLUMNS`` when it
    is a number, else the width of the first of stdin, stdout and stderr that is a terminal, else
    80. Height in lines likewise (``LINES``, 25). So a resized terminal, or an environment changed
    after this module was imported, sets the width.
    """

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr)
        self._set_columns: int | None = None
        self._set_lines: int | None = None

    @property
    def size(self) -> ConsoleDimensions:
        width, height = _terminal_size()
        columns, lines = os.environ.get("COLUMNS", ""), os.environ.get("LINES", "")
        if columns.isdigit():
            width = int(columns)
        if lines.isdigit():
            height = int(lines)
        width = self._set_columns or width - self.legacy_windows
        return ConsoleDimensions(width, self._set_lines or height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._set_columns, self._set_lines = new_size

    @property
    def width(self) -> int:
        return self.size.width

    @width.setter
    def width(self, width: int) -> None:
        self._set_columns = width

    @property
    def height(self) -> int:
        return self.size.height

    @height.setter
    def height(self, height: int) -> None:
        self._set_lines = height


def _terminal_size() -> tuple[int, int]:
    """Columns and lines of the first standard stream that is a terminal; (80, 25) if none is."""
    for descriptor in (0, 1, 2):
        try:
            size = os.get_terminal_size(descriptor)
        except (ValueError, OSError):
            continue
        if size.columns and size.lines:
            return size.columns, size.lines
    return 80, 25


console = _SizedWhenPrinting()
err_console = _SizedWhenPrinting(stderr=True)


def print_json(document: Any) -> None:
    """One JSON document on stdout, for scripts."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def shown(text: str) -> Text:
    """``text`` as a table cell: not markup, control and direction characters escaped."""
    return Text(visible(text))


def summary_table(summary: RunSummary, *, title: str | None = None) -> Table:
    table = Table(title=shown(title or f"run {summary.run_id} ({summary.name})"), show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", justify="right")
    rows: Sequence[tuple[str, Any]] = [
        ("tasks", summary.tasks_total),
        ("succeeded", summary.succeeded),
        ("failed", summary.failed),
        ("dead-lettered", summary.dead_lettered),
        ("timed out", summary.timed_out),
        ("cancelled", summary.cancelled),
        ("retries", summary.retries),
        ("deferrals (waits for limits)", summary.deferrals),
        ("redelivered from the DLQ", summary.redelivered),
        ("success rate", f"{summary.success_rate:.1%}"),
        ("wall clock", f"{summary.wall_clock_s:.2f} s"),
        ("worker seconds", f"{summary.worker_seconds:.2f} s"),
        ("cost", f"${summary.cost_usd:.4f}"),
        ("status", summary.status),
    ]
    if summary.tenant:
        rows = [*rows, ("tenant", summary.tenant)]
    if summary.aggregate:
        failed = f": {summary.aggregate_error}" if summary.aggregate_error else ""
        rows = [*rows, ("aggregate", f"{summary.aggregate}{failed}")]
    if summary.compensation:
        undone = f"{summary.compensation}: {summary.compensated} done, {summary.compensations_failed} failed"
        rows = [*rows, ("compensation", undone)]
    if summary.waiting_approval:
        rows = [*rows, ("waiting for a decision", summary.waiting_approval)]
    for field, value in rows:
        table.add_row(field, shown(str(value)))
    return table


def compact_table(title: str) -> Table:
    """A table with one space between columns and a rule under the header: the most room for
    its text in 80 columns."""
    return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False)


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut between words (ending in ``...``)."""
    return textwrap.shorten(text, width=limit, placeholder=" ...") if len(text) > limit else text


def steps_table(summary: RunSummary) -> Table:
    """A dependency graph's steps: items succeeded, failed and skipped at each."""
    table = Table(title="steps")
    for column in ("step", "succeeded", "failed", "skipped"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for name, counts in summary.steps.items():
        table.add_row(shown(name), *(str(counts.get(k, 0)) for k in ("succeeded", "failed", "skipped")))
    return table


def runs_table(summaries: Iterable[RunSummary]) -> Table:
    """One run a row; fits 80 columns with full run ids (every command takes an id's prefix)."""
    table = compact_table("runs")
    table.add_column("run", no_wrap=True, min_width=16)
    table.add_column("name", overflow="fold", ratio=1)
    table.add_column("status", no_wrap=True)
    summaries = list(summaries)
    deciding = any(s.waiting_approval for s in summaries)
    decide_column = ("to decide",) if deciding else ()
    for column in ("tasks", "ok/failed", *decide_column, "wall s", "cost $"):
        table.add_column(column, justify="right", no_wrap=True)
    for s in summaries:
        decide = (str(s.waiting_approval),) if deciding else ()
        table.add_row(
            s.run_id,
            shown(s.name),
            s.status,
            str(s.tasks_total),
            f"{s.succeeded}/{s.failed}",
            *decide,
            f"{s.wall_clock_s:.1f}",
            f"{s.cost_usd:.4f}",
        )
    return table


def waiting_table(waiting: Iterable[Approval]) -> Table:
    """A run's items waiting for a decision: index, item, what is asked, approval id, age."""
    table = compact_table("waiting for a decision")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("item", overflow="fold", max_width=24)
    table.add_column("asks", overflow="fold", ratio=1)
    table.add_column("approval", no_wrap=True)
    table.add_column("age s", justify="right", no_wrap=True)
    now = time.time()
    for a in waiting:
        age = f"{max(0.0, now - a.created_at):.0f}"
        table.add_row(str(a.index), shown(a.item_key), shown(a.label), a.id, age)
    return table


def outcomes_table(outcomes: Iterable[TaskOutcome], *, title: str = "outcomes", limit: int = 50) -> Table:
    """Outcomes, the result or error folded between words (at most 300 characters each)."""
    table = compact_table(title)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("item", overflow="fold", max_width=24)
    table.add_column("ok", no_wrap=True)
    table.add_column("tries", justify="right", no_wrap=True)
    table.add_column("s", justify="right", no_wrap=True)
    table.add_column("result or error", overflow="fold", ratio=1)
    for n, outcome in enumerate(outcomes):
        if n >= limit:
            break
        text = (
            json.dumps(outcome.result, default=str)
            if outcome.ok
            else f"{outcome.error_type}: {outcome.error}"
        )
        table.add_row(
            str(outcome.index),
            shown(outcome.item_key),
            "yes" if outcome.ok else "[red]no[/red]",
            str(outcome.attempts),
            f"{outcome.duration_s:.2f}",
            shown(shorten(text, 300)),
        )
    return table


def _event(entry: AuditEntry) -> str:
    if entry.event != "refused":
        return "use"
    return "[red]refused[/red]" + (f" x{entry.repeats}" if entry.repeats > 1 else "")


def audit_table(entries: Iterable[AuditEntry]) -> Table:
    """Credential uses and egress refusals: when (UTC), what happened, which credential, where
    (a use's domain, a refusal's destination), by which task (a refusal: and run) and why; an
    entry that stands for several refusals of one kind shows how many (``refused x40``)."""
    table = Table(title="credential uses and egress refusals")
    for column in ("time (UTC)", "event", "credential", "where", "task"):
        table.add_column(column, overflow="fold")
    table.add_column("why", overflow="fold", ratio=1)
    for entry in entries:
        when = datetime.fromtimestamp(entry.time, UTC).strftime("%Y-%m-%d %H:%M:%S")
        refused = entry.event == "refused"
        where = entry.destination if refused else entry.domain
        task = f"{entry.task or entry.task_id} (run {entry.run_id})" if refused else entry.task_id
        table.add_row(
            when,
            _event(entry),
            shown(entry.credential or "-"),
            shown(where),
            shown(task),
            shown(entry.reason),
        )
    return table
