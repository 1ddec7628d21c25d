"""``DeadLetterQueue``: the triage API, in Python what ``agentfleet dlq`` is on the command line.

Every call that selects entries takes the same filter words, as keyword arguments or as a
``DLQFilter`` (``category``, ``downstream``, ``run_id``, ``fingerprint``, ``since``);
``requeue`` and ``purge`` also take entry ids (a list, or one id) in the filter's place::

    dlq = Fleet().dlq
    for entry in dlq.list(category="bad_request", since="6h"):
        print(entry.id, entry.error)
    dlq.stats(downstream="vendor-b.example")                   # its depth, fingerprints, circuit
    dlq.requeue(downstream="vendor-b.example", dry_run=True)   # what would be sent
    dlq.requeue(downstream="anthropic")                        # every Anthropic model's entries
    dlq.list(category="permanent")                             # a parent: every permanent leaf
    dlq.purge(ids=["3f2a..."])

``category`` is a leaf (``bad_request``) or a parent (``permanent``, ``transient``); an unknown
one is a ``ConfigError`` naming the known ones. ``downstream`` is a host, a provider
(``anthropic``), a ``provider:model``, or a host serving a provider's API
(``api.anthropic.com``, the configured base URL's host). A requeue selected by downstream skips
``invalid_input`` entries: the downstream never saw them, and sending them again fails again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TextIO, Unpack

from celery import Celery

from agentfleet.config import Settings
from agentfleet.dlq import DeadLetter, DLQFilter, DLQStats, DLQStore, FilterFields, queue_stats
from agentfleet.dlq.artifacts import Artifact
from agentfleet.dlq.matching import unknown_category_error
from agentfleet.errors import ConfigError, DeadLetterNotFound, InvalidInput
from agentfleet.llm.vendors import vendors_for
from agentfleet.orchestration.requeue import RequeueResult, requeue_entry
from agentfleet.orchestration.requeue_guard import live_workers
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.runs import RunStore

__all__ = ["DeadLetterQueue", "RequeueResult"]

# Aliases: inside DeadLetterQueue the name ``list`` is its method.
Entries = list[DeadLetter]
Ids = list[str]
Results = list[RequeueResult]
# What requeue and purge act on: entry ids (or one id), or a filter in their place.
Selection = Sequence[str] | str | DLQFilter
# Why a requeue selected by downstream leaves an invalid_input entry where it is.
NOT_SEEN_BY_DOWNSTREAM = "its input was invalid: the downstream never saw it, and it would fail again"


class DeadLetterQueue:
    """List, inspect, count, requeue, purge and export dead letters.

    Selecting commands (``requeue``, ``purge``) take ``ids``, or filter words, or
    ``everything=True``; with none of them they refuse, so nothing is touched by accident.
    """

    def __init__(self, settings: Settings, *, app: Celery, runs: RunStore) -> None:
        self.settings = settings
        self.app = app
        self.runs = runs
        self.store = DLQStore(
            runs.client,
            prefix=settings.key_prefix,
            vendor_hosts={vendor.name: vendor.hosts for vendor in vendors_for(settings)},
        )

    def _checked(self, flt: DLQFilter) -> DLQFilter:
        """``flt``, once its category is known (a leaf, a parent, or one stored entries carry)."""
        if flt.category is not None:
            problem = unknown_category_error(flt.category, self.store.counted("category"))
            if problem is not None:
                raise ConfigError(problem)
        return flt

    # Reading -------------------------------------------------------------------------------

    def list(
        self, flt: DLQFilter | None = None, *, limit: int | None = 50, **filters: Unpack[FilterFields]
    ) -> Entries:
        """Entries matching every filter given, newest first, at most ``limit`` (None: all).

        ``since`` is a Unix time, or text such as ``"30m"``, ``"6h"``, ``"2d"`` or an ISO date.
        """
        return self.store.find(self._checked(DLQFilter.of(flt, **filters)), limit=limit)

    def get(self, entry_id: str) -> DeadLetter:
        """One entry, by its id or the id's first characters; raises ``DeadLetterNotFound``
        when none has it, ``ConfigError`` when several start with it."""
        entry = self.store.get(self.full_id(entry_id))
        if entry is None:
            raise DeadLetterNotFound(
                f"no dead letter {entry_id}: it may have been requeued or purged; see `agentfleet dlq list`"
            )
        return entry

    def artifact(self, entry_id: str, name: str) -> tuple[Artifact, bytes]:
        """Artifact ``name`` of an entry (by its id or the id's first characters) and its kept
        bytes; raises ``DeadLetterNotFound`` when the entry or the artifact is not there."""
        entry = self.get(entry_id)
        found = entry.artifact_named(name)
        data = self.store.artifact(entry.id, name) if found is not None else None
        if found is None or data is None:
            kept = ", ".join(a.name for a in entry.artifacts) or "none"
            raise DeadLetterNotFound(f"dead letter {entry.id} has no artifact {name!r} (it has: {kept})")
        return found, data

    def full_id(self, start: str) -> str:
        """The id of the one entry whose id is or begins with ``start`` (``start`` itself when
        none does); ``ConfigError`` naming them when several do."""
        if self.store.get(start) is not None:
            return start
        found = self.store.ids_starting_with(start)
        if len(found) > 1:
            shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
            raise ConfigError(f"{start} is the start of several dead letters ({shown}); give more of the id")
        return found[0] if found else start

    def stats(self, flt: DLQFilter | None = None, **filters: Unpack[FilterFields]) -> DLQStats:
        """Depth, breakdowns by category and downstream, top fingerprints, oldest age and vendor
        issues: of the whole queue, or of the entries matching the filters."""
        circuits = CircuitBreaker.from_settings(self.settings, self.runs.client)
        chosen = self._checked(DLQFilter.of(flt, **filters))
        return queue_stats(self.store, circuits, self.settings.dlq, chosen)

    def entries(self, flt: DLQFilter | None = None, **filters: Unpack[FilterFields]) -> Iterator[DeadLetter]:
        """Every entry matching the filters, oldest first."""
        return self.store.scan(self._checked(DLQFilter.of(flt, **filters)))

    def export_jsonl(self, out: TextIO, flt: DLQFilter | None = None, **filters: Unpack[FilterFields]) -> int:
        """Write matching entries to ``out`` as JSON Lines, oldest first; returns how many."""
        count = 0
        for entry in self.entries(flt, **filters):
            out.write(json.dumps(entry.model_dump(mode="json"), sort_keys=True) + "\n")
            count += 1
        return count

    # Changing ------------------------------------------------------------------------------

    def select(
        self,
        ids: Selection = (),
        flt: DLQFilter | None = None,
        *,
        everything: bool = False,
        **filters: Unpack[FilterFields],
    ) -> Entries:
        """The entries named by ``ids``, else matching the filters, else all with ``everything``.

        ``ids`` may be one id, a list of them, or a ``DLQFilter`` given in their place.
        """
        if isinstance(ids, DLQFilter):
            if flt is not None:
                raise ConfigError("give one DLQFilter, not two")
            flt, named = ids, []
        else:
            named = [ids] if isinstance(ids, str) else list(ids)
        flt = self._checked(DLQFilter.of(flt, **filters))
        if named:
            if not flt.empty or everything:
                raise ConfigError("name entries by id, or by filters, or --all: not several at once")
            named = [self.full_id(entry_id) for entry_id in named]
            entries = self.store.get_many(named)
            missing = set(named) - {e.id for e in entries}
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
        ids: Selection = (),
        flt: DLQFilter | None = None,
        *,
        everything: bool = False,
        dry_run: bool = False,
        **filters: Unpack[FilterFields],
    ) -> Results:
        """Send the selected entries' items again (same idempotency key, a fresh retry budget).

        An entry is deleted only once the broker took its message. Only fleet tasks the live
        workers register are sent (``requeue_guard.py``). ``dry_run`` says what would be sent
        and changes nothing. Selected by downstream, ``invalid_input`` entries are skipped.
        """
        entries = self.select(ids, flt, everything=everything, **filters)
        by_downstream = _by_downstream(ids, flt, filters)
        workers = live_workers(self.settings, self.runs) if entries else None
        return [
            _not_seen(entry)
            if by_downstream and entry.category == InvalidInput.category
            else requeue_entry(
                entry,
                app=self.app,
                runs=self.runs,
                dlq=self.store,
                settings=self.settings,
                workers=workers,
                dry_run=dry_run,
            )
            for entry in entries
        ]

    def purge(
        self,
        ids: Selection = (),
        flt: DLQFilter | None = None,
        *,
        everything: bool = False,
        dry_run: bool = False,
        **filters: Unpack[FilterFields],
    ) -> Ids:
        """Delete the selected entries for good; returns the ids deleted (with ``dry_run``, the
        ids that would be, deleting nothing)."""
        chosen = [e.id for e in self.select(ids, flt, everything=everything, **filters)]
        return chosen if dry_run else self.store.remove(chosen)


def _by_downstream(ids: Selection, flt: DLQFilter | None, filters: FilterFields) -> bool:
    """Whether a selection names a downstream (in a filter given as ``ids`` or ``flt``, or a word)."""
    given = [f for f in (ids, flt) if isinstance(f, DLQFilter)]
    return any(f.downstream is not None for f in given) or filters.get("downstream") is not None


def _not_seen(entry: DeadLetter) -> RequeueResult:
    return RequeueResult(
        id=entry.id,
        task_name=entry.task_name,
        task_id=entry.task_id,
        run_id=entry.run_id,
        stage=entry.stage,
        action="skipped",
        reason=NOT_SEEN_BY_DOWNSTREAM,
    )
