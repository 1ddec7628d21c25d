"""``agentfleet dlq``: list, show, stats, requeue, purge and export dead letters; write an artifact."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.dlq_tables import entries_table, entry_view, requeue_table, stats_view
from agentfleet.cli.output import console, err_console, print_json
from agentfleet.dlq import DLQFilter
from agentfleet.dlq.model import MALFORMED_BLOCKER
from agentfleet.errors import ConfigError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.dead_letters import DeadLetterQueue

__all__ = ["dlq_app"]

dlq_app = typer.Typer(
    help="Triage the dead-letter queue: items that failed for good.",
    no_args_is_help=True,
)

_CATEGORY = typer.Option(
    None,
    "--category",
    "-c",
    help="Only this category: a leaf (bad_request, poison, timeout) or a parent (permanent, transient).",
    metavar="CATEGORY",
)
_DOWNSTREAM = typer.Option(
    None,
    "--downstream",
    "-d",
    help="Only entries for this downstream: a host, a provider (anthropic) or provider:model.",
    metavar="DOWNSTREAM",
)
_RUN = typer.Option(None, "--run", "-r", help="Only entries of this run id.", metavar="RUN_ID")
_FINGERPRINT = typer.Option(
    None, "--fingerprint", "-f", help="Only entries with this fingerprint.", metavar="FINGERPRINT"
)
_SINCE = typer.Option(
    None,
    "--since",
    "-s",
    help="Only entries dead-lettered since: 30m, 6h, 2d or an ISO date.",
    metavar="WHEN",
)
_JSON = typer.Option(False, "--json", help="Print one JSON document.")
_ALL = typer.Option(False, "--all", help="Every entry (when no ids and no filters are given).")
_REQUEUE_IDS = typer.Argument(
    None, help="Entry ids (or their first characters) to requeue.", metavar="ENTRY_ID"
)
_PURGE_IDS = typer.Argument(None, help="Entry ids (or their first characters) to delete.", metavar="ENTRY_ID")


def _queue() -> DeadLetterQueue:
    return Fleet(broker_url=require_broker()).dlq


def _filter(
    category: str | None,
    downstream: str | None,
    run_id: str | None,
    fingerprint: str | None,
    since: str | None,
) -> DLQFilter:
    return DLQFilter.of(
        category=category, downstream=downstream, run_id=run_id, fingerprint=fingerprint, since=since
    )


@dlq_app.command("list")
def list_entries(
    category: str | None = _CATEGORY,
    downstream: str | None = _DOWNSTREAM,
    run_id: str | None = _RUN,
    fingerprint: str | None = _FINGERPRINT,
    since: str | None = _SINCE,
    limit: int = typer.Option(
        50, "--limit", "-n", min=1, help="At most this many, newest first.", metavar="N"
    ),
    as_json: bool = _JSON,
) -> None:
    """Dead letters, newest first."""
    flt = _filter(category, downstream, run_id, fingerprint, since)
    entries = _queue().list(flt, limit=limit)
    if as_json:
        print_json([e.model_dump(mode="json") for e in entries])
    elif not entries:
        console.print("the dead-letter queue has no such entries")
    else:
        console.print(entries_table(entries))


@dlq_app.command("show")
def show_entry(
    entry_id: str = typer.Argument(
        ..., help="The entry's id, or its first characters (see agentfleet dlq list).", metavar="ENTRY_ID"
    ),
    as_json: bool = _JSON,
) -> None:
    """One dead letter: its input, each attempt's error, the traceback."""
    entry = _queue().get(entry_id)
    if as_json:
        print_json(entry.model_dump(mode="json"))
    else:
        console.print(entry_view(entry))


@dlq_app.command("stats")
def stats(
    category: str | None = _CATEGORY,
    downstream: str | None = _DOWNSTREAM,
    run_id: str | None = _RUN,
    fingerprint: str | None = _FINGERPRINT,
    since: str | None = _SINCE,
    as_json: bool = _JSON,
) -> None:
    """How many dead letters, of what kinds, from where.

    Depth, breakdowns by category and downstream, top fingerprints, oldest age, vendor issues:
    of the whole queue, or of the entries matching the filters.
    """
    found = _queue().stats(_filter(category, downstream, run_id, fingerprint, since))
    if as_json:
        print_json(found.model_dump(mode="json"))
    else:
        console.print(stats_view(found))


@dlq_app.command("requeue")
def requeue(
    entry_ids: list[str] = _REQUEUE_IDS,
    category: str | None = _CATEGORY,
    downstream: str | None = _DOWNSTREAM,
    run_id: str | None = _RUN,
    fingerprint: str | None = _FINGERPRINT,
    since: str | None = _SINCE,
    everything: bool = _ALL,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be sent; change nothing."),
    as_json: bool = _JSON,
) -> None:
    """Send items again, with a fresh retry budget.

    Each keeps its idempotency key.
    A pipeline item starts again at the stage that failed, with the previous stage's stored
    result, and the later stages follow. An entry leaves the queue once the broker took it.
    """
    flt = _filter(category, downstream, run_id, fingerprint, since)
    results = _queue().requeue(entry_ids or (), flt, everything=everything, dry_run=dry_run)
    if as_json:
        print_json([r.model_dump(mode="json") for r in results])
        return
    if not results:
        console.print("no entries matched; nothing to requeue")
        return
    console.print(requeue_table(results, dry_run=dry_run))
    done = sum(r.action in ("requeued", "would requeue") for r in results)
    verb = "would be requeued" if dry_run else "requeued"
    console.print(f"{done} of {len(results)} entries {verb}.")
    malformed = sum(r.reason == MALFORMED_BLOCKER for r in results)
    if malformed:
        console.print(
            f"{malformed} malformed {'entry' if malformed == 1 else 'entries'} cannot be requeued: a queue "
            "entry no worker could decode or deliver names no task to run; purge it "
            "(agentfleet dlq purge --category malformed)."
        )
    if any(r.action == "failed" for r in results):
        raise typer.Exit(1)


@dlq_app.command("purge")
def purge(
    entry_ids: list[str] = _PURGE_IDS,
    category: str | None = _CATEGORY,
    downstream: str | None = _DOWNSTREAM,
    run_id: str | None = _RUN,
    fingerprint: str | None = _FINGERPRINT,
    since: str | None = _SINCE,
    everything: bool = _ALL,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    """Delete dead letters for good (asks first unless --yes)."""
    queue = _queue()
    flt = _filter(category, downstream, run_id, fingerprint, since)
    chosen = queue.purge(entry_ids or (), flt, everything=everything, dry_run=True)
    if not chosen:
        console.print("no entries matched; nothing to purge")
        return
    if not yes and not typer.confirm(f"Delete {len(chosen)} dead letters for good?", default=False):
        err_console.print("nothing deleted")
        raise typer.Exit(1)
    removed = queue.purge(chosen)
    console.print(f"deleted {len(removed)} dead letters")


@dlq_app.command("export")
def export(
    category: str | None = _CATEGORY,
    downstream: str | None = _DOWNSTREAM,
    run_id: str | None = _RUN,
    fingerprint: str | None = _FINGERPRINT,
    since: str | None = _SINCE,
    fmt: str = typer.Option(
        "jsonl", "--format", help="Output format: jsonl (one entry per line).", metavar="FORMAT"
    ),
    output: str = typer.Option("-", "--output", "-o", help="File to write, or - for stdout.", metavar="FILE"),
) -> None:
    """Write dead letters as JSON Lines, oldest first.

    All of them, or those matching the filters.
    """
    if fmt != "jsonl":
        raise ConfigError(f"--format {fmt}: the only export format is jsonl")
    flt = _filter(category, downstream, run_id, fingerprint, since)
    queue = _queue()
    if output == "-":
        queue.export_jsonl(sys.stdout, flt)
        sys.stdout.flush()
        return
    with Path(output).open("w") as out:
        count = queue.export_jsonl(out, flt)
    err_console.print(f"wrote {count} dead letters to {output}")


@dlq_app.command("artifact")
def artifact(
    entry_id: str = typer.Argument(
        ..., help="The entry's id, or its first characters (see agentfleet dlq list).", metavar="ENTRY_ID"
    ),
    name: str = typer.Argument(..., help="The artifact's name (see agentfleet dlq show).", metavar="NAME"),
    output: str = typer.Option(..., "--output", "-o", help="File to write, or - for stdout.", metavar="FILE"),
    force: bool = typer.Option(False, "--force", help="Overwrite FILE when it exists."),
) -> None:
    """Write one file a failed item left: a screenshot, a log, a report.

    The bytes are those kept with the dead letter: a file over the size caps was cut
    (agentfleet dlq show says which).
    """
    found, data = _queue().artifact(entry_id, name)
    if output == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        with Path(output).open("wb" if force else "xb") as out:
            out.write(data)
    except FileExistsError:
        raise ConfigError(f"{output} exists; give --force to overwrite it") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror or exc}") from None
    cut = f", cut from {found.original_bytes:,}" if found.truncated else ""
    err_console.print(f"wrote {found.name} ({len(data):,} bytes{cut}, {found.content_type}) to {output}")
