"""Rich renderings of dead letters, DLQ stats and requeue plans (built here, printed by commands)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentfleet.cli.output import compact_table, shorten, shown
from agentfleet.display import visible
from agentfleet.dlq import DeadLetter, DLQStats
from agentfleet.dlq.stats import format_age
from agentfleet.orchestration.dead_letters import RequeueResult

__all__ = ["entries_table", "entry_view", "requeue_table", "stats_view"]


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _failure(entry: DeadLetter) -> Text:
    stage = f" stage {entry.stage + 1}/{entry.stages}" if entry.stages > 1 else ""
    tries = f"{entry.attempts} {'try' if entry.attempts == 1 else 'tries'}"
    where = f" @ {entry.downstream}" if entry.downstream else ""
    if entry.raw_message:
        # A malformed queue entry: where it was found, not how often it ran (it never did).
        tries = f"taken out of {entry.queue or 'its queue'}"
    item = f" #{entry.item_key}" if entry.item_key else ""
    return Text.assemble(
        (visible(f"{entry.task_name or '(no task named)'}{stage}{item}"), "bold"),
        "\n",
        (visible(f"{entry.category}{where}, {tries}"), "dim"),
        "\n",
        visible(shorten(f"{entry.error_type}: {entry.error}", 240)),
    )


def entries_table(entries: Iterable[DeadLetter], *, title: str = "dead letters") -> Table:
    """One entry a row: its id and age, then what failed, where, and the error, folded between
    words, so 80 columns show all of it."""
    table = compact_table(title)
    # Ids are what every other command takes: never cut them short.
    table.add_column("id", no_wrap=True, min_width=16)
    table.add_column("age", no_wrap=True)
    table.add_column("task #item / category @ downstream / error", overflow="fold", ratio=1)
    now = time.time()
    for e in entries:
        table.add_row(e.id, format_age(e.age_s(now)), _failure(e))
    return table


def entry_view(entry: DeadLetter) -> RenderableType:
    """Everything about one entry: its fields, its input, every attempt, the last traceback."""
    fields = Table(show_header=False, title=f"dead letter {entry.id}")
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    rows = [
        ("task", entry.task_name),
        ("task id", entry.task_id),
        ("run", entry.run_id),
        ("item", f"{entry.item_key} (index {entry.index})"),
        ("idempotency key", entry.idempotency_key),
        (
            "stage",
            f"{entry.stage + 1} of {entry.stages}: {' -> '.join(entry.stage_tasks)}"
            if entry.stages > 1
            else "-",
        ),
        ("error", f"{entry.error_type}: {entry.error}"),
        ("category", entry.category),
        ("fingerprint", entry.fingerprint),
        ("status", str(entry.status_code) if entry.status_code is not None else "-"),
        ("downstream", entry.downstream or "-"),
        ("attempts", str(entry.attempts)),
        ("first failure", _when(entry.first_failure_at)),
        ("last failure", _when(entry.last_failure_at)),
        ("dead-lettered", _when(entry.dead_lettered_at)),
        ("worker", entry.worker or "-"),
        ("queue", entry.queue or "-"),
        ("requeued before", str(entry.requeues)),
        ("redacted input", ", ".join(entry.redacted) or "-"),
        ("requeue", entry.requeue_blocker or "possible"),
    ]
    for name, value in rows:
        fields.add_row(name, shown(value))
    attempts = Table(title="attempts")
    for column in ("#", "at", "type", "status", "downstream", "seconds", "message"):
        attempts.add_column(column, overflow="fold" if column == "message" else "ellipsis")
    for a in entry.errors:
        attempts.add_row(
            str(a.attempt) + (f" (requeue {a.requeues})" if a.requeues else ""),
            _when(a.at),
            a.error_type,
            str(a.status_code) if a.status_code is not None else "-",
            a.downstream or "-",
            f"{a.duration_s:.2f}",
            shown(a.message[:500]),
        )
    if entry.raw_message:
        # A malformed queue entry has no input and never ran: the entry itself is the evidence.
        found = Panel(shown(entry.raw_message), title="the entry as found in its queue (secrets redacted)")
        return Group(fields, found)
    inputs = Panel(shown(json.dumps(entry.inputs, indent=2, default=str)), title="input")
    if entry.artifacts:
        return Group(fields, inputs, attempts, _artifacts(entry), _trace(entry))
    return Group(fields, inputs, attempts, _trace(entry))


def _trace(entry: DeadLetter) -> Panel:
    return Panel(
        shown(entry.traceback.rstrip() or "(no traceback: the task body did not raise)"), title="traceback"
    )


def _artifacts(entry: DeadLetter) -> Table:
    """The files kept with the entry (``agentfleet dlq artifact`` writes one)."""
    table = Table(title=f"artifacts (agentfleet dlq artifact {entry.id} NAME -o FILE)")
    for column in ("name", "type", "bytes kept", "of"):
        table.add_column(column, overflow="fold" if column == "name" else "ellipsis")
    for a in entry.artifacts:
        cut = " (cut)" if a.truncated else ""
        table.add_row(shown(a.name), a.content_type, f"{a.size_bytes:,}{cut}", f"{a.original_bytes:,}")
    return table


def _counts(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title)
    table.add_column(title.split(" ")[-1])
    table.add_column("entries", justify="right")
    for name, count in counts.items():
        table.add_row(shown(name), str(count))
    return table


def stats_view(stats: DLQStats) -> RenderableType:
    head = Text.assemble(
        ("depth ", "bold"),
        str(stats.depth),
        ("   oldest ", "bold"),
        format_age(stats.oldest_age_s),
    )
    parts: list[RenderableType] = [head]
    if stats.by_category:
        parts.append(_counts("by category", stats.by_category))
    if stats.by_downstream:
        parts.append(_counts("by downstream", stats.by_downstream))
    if stats.top_fingerprints:
        fps = Table(title="top fingerprints")
        for column in ("fingerprint", "entries", "type", "message"):
            fps.add_column(column, overflow="fold" if column == "message" else "ellipsis")
        for fp in stats.top_fingerprints:
            fps.add_row(fp.fingerprint, str(fp.count), shown(fp.error_type), shown(fp.message))
        parts.append(fps)
    if stats.vendor_issues:
        issues = Table(title=f"vendor issues (last {stats.window_s:.0f} s)", style="red")
        for column in ("downstream", "failed attempts", "dead letters", "circuit"):
            issues.add_column(column)
        for i in stats.vendor_issues:
            issues.add_row(i.downstream, str(i.failures), str(i.dead_letters), i.circuit or "-")
        parts.append(issues)
    return Group(*parts)


def requeue_table(results: Sequence[RequeueResult], *, dry_run: bool) -> Table:
    table = compact_table("requeue (dry run: nothing sent)" if dry_run else "requeue")
    table.add_column("id", no_wrap=True, min_width=16)
    for column in ("task", "task id", "from stage", "action", "sends / reason"):
        table.add_column(column, overflow="fold")
    for r in results:
        style = {"requeued": "green", "would requeue": "cyan", "skipped": "yellow", "failed": "red"}[r.action]
        table.add_row(
            r.id,
            shown(r.task_name),
            shown(r.task_id),
            str(r.stage + 1),
            f"[{style}]{r.action}[/{style}]",
            shown(r.reason or " -> ".join(r.stages_sent)),
        )
    return table
