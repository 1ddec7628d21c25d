"""``DeadLetterQueue``: the triage API, in Python what ``agentfleet dlq`` is on the command line.

::

    dlq = Fleet().dlq
    for entry in dlq.list(category="bad_request", since="6h"):
        print(entry.id, entry.error)
    dlq.requeue(downstream="vendor-b.example", dry_run=True)   # what would be sent
    dlq.requeue(downstream="vendor-b.example")                 # send them again
    dlq.purge(ids=["3f2a..."])
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TextIO

from celery import Celery

from agentfleet.config import Settings
from agentfleet.dlq import DeadLetter, DLQFilter, DLQStats, DLQStore, parse_since
from agentfleet.errors import ConfigError, DeadLetterNotFound
from agentfleet.orchestration.requeue import RequeueResult, requeue_entry
from agentfleet.runs import RunStore
from agentfleet.tasks.maintenance import dlq_stats

__all__ = ["DeadLetterQueue", "RequeueResult", "make_filter"]

# Aliases: inside DeadLetterQueue the name ``list`` is its method.
Entries = list[DeadLetter]
Ids = list[str]
Results = list[RequeueResult]


def make_filter(
    *,
    category: str | None = None,
    downstream: str | None = None,
    run_id: str | None = None,
    fingerprint: str | None = None,
    since: str | float | None = None,
) -> DLQFilter:
    """A ``DLQFilter``; ``since`` is a Unix time, or text such as ``"6h"`` or an ISO date."""
    when = parse_since(since) if isinstance(since, str) else since
    return DLQFilter(
        category=category, downstream=downstream, run_id=run_id, fingerprint=fingerprint, since=when
    )


class DeadLetterQueue:
    """List, inspect, count, requeue, purge and export dead letters.

    Selecting commands (``requeue``, ``purge``) take ``ids``, or filter fields, or
    ``everything=True``; with none of them they refuse, so nothing is touched by accident.
    """

    def __init__(self, settings: Settings, *, app: Celery, runs: RunStore) -> None:
        self.settings = settings
        self.app = app
        self.runs = runs
        self.store = DLQStore.from_settings(settings, runs.client)

    # Reading -------------------------------------------------------------------------------

    def list(
        self,
        *,
        category: str | None = None,
        downstream: str | None = None,
        run_id: str | None = None,
        fingerprint: str | None = None,
        since: str | float | None = None,
        limit: int | None = 50,
    ) -> Entries:
        """Entries matching every filter given, newest first, at most ``limit`` (None: all).

        ``since`` is a Unix time, or text such as ``"30m"``, ``"6h"``, ``"2d"`` or an ISO date.
        """
        flt = make_filter(
            category=category, downstream=downstream, run_id=run_id, fingerprint=fingerprint, since=since
        )
        return self.store.find(flt, limit=limit)

    def get(self, entry_id: str) -> DeadLetter:
        """One entry; raises ``DeadLetterNotFound`` when there is none with that id."""
        entry = self.store.get(entry_id)
        if entry is None:
            raise DeadLetterNotFound(
                f"no dead letter {entry_id}: it may have been requeued or purged; see `agentfleet dlq list`"
            )
        return entry

    def stats(self) -> DLQStats:
        """Depth, breakdowns by category and downstream, top fingerprints, oldest age, vendor issues."""
        return dlq_stats(self.settings, self.runs.client)

    def entries(self, flt: DLQFilter | None = None) -> Iterator[DeadLetter]:
        """Every entry matching ``flt``, oldest first."""
        return self.store.scan(flt)

    def export_jsonl(self, out: TextIO, flt: DLQFilter | None = None) -> int:
        """Write matching entries to ``out`` as JSON Lines, oldest first; returns how many."""
        count = 0
        for entry in self.store.scan(flt):
            out.write(json.dumps(entry.model_dump(mode="json"), sort_keys=True) + "\n")
            count += 1
        return count

    # Changing ------------------------------------------------------------------------------

    def select(
        self, ids: Sequence[str] = (), flt: DLQFilter | None = None, *, everything: bool = False
    ) -> Entries:
        """The entries named by ``ids``, else matching ``flt``, else all of them with ``everything``."""
        flt = flt or DLQFilter()
        if ids:
            if not flt.empty or everything:
                raise ConfigError("name entries by id, or by filters, or --all: not several at once")
            entries = self.store.get_many(list(ids))
            missing = set(ids) - {e.id for e in entries}
            if missing:
                raise DeadLetterNotFound(
                    f"no dead letter {', '.join(sorted(missing))}; see `agentfleet dlq list`"
                )
            return entries
        if flt.empty and not everything:
            raise ConfigError(
                "say which entries: give ids, a filter (--category, --downstream, ...) or --all"
            )
        return [*self.store.scan(flt)]

    def requeue(
        self,
        ids: Sequence[str] = (),
        flt: DLQFilter | None = None,
        *,
        everything: bool = False,
        dry_run: bool = False,
    ) -> Results:
        """Send the selected entries' items again (same idempotency key, a fresh retry budget).

        An entry is deleted only once the broker took its message. ``dry_run`` says what would
        be sent and changes nothing.
        """
        return [
            requeue_entry(
                entry, app=self.app, runs=self.runs, dlq=self.store, settings=self.settings, dry_run=dry_run
            )
            for entry in self.select(ids, flt, everything=everything)
        ]

    def purge(
        self, ids: Sequence[str] = (), flt: DLQFilter | None = None, *, everything: bool = False
    ) -> Ids:
        """Delete the selected entries for good; returns the ids deleted."""
        return self.store.remove([e.id for e in self.select(ids, flt, everything=everything)])
