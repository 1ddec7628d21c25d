"""The dead-letter store in Redis: a stream for order, a hash per entry, indexes and counts.

Layout under the key prefix ``p`` (names from ``agentfleet.keys``; nothing here expires:
entries stay until requeued or purged; the braces are a Redis Cluster hash tag, so that one
script can write an entry and every index of it, all the dead-letter keys live in one slot):

- ``{p:dlq}:stream``                 stream: one ``id`` per entry, in the order they arrived
- ``{p:dlq}:e:<id>``                 hash: ``data`` (the entry as JSON) and the indexed fields
- ``{p:dlq}:a:<id>``                 hash: the entry's artifacts, name -> bytes as base64; written
  and deleted with the entry by the same scripts, so it lives exactly as long
- ``{p:dlq}:abytes``                 string: the bytes every entry's artifacts take, as stored
  (the entry's own share is its field ``abytes``); moved by the same scripts
- ``{p:dlq}:i:<dimension>:<value>``  set of ids, for ``category``, ``downstream``, ``run``,
  ``fingerprint`` (an empty value: the entries without one)
- ``{p:dlq}:n:<dimension>``          hash: value -> entry count, for ``category``,
  ``downstream``, ``fingerprint``
- ``{p:dlq}:fp``                     hash: fingerprint -> a sample ``[error type, normalised
  message]``
- ``{p:dlq}:malformed``              hash: ``dead_lettered`` and ``dropped`` -> how many malformed
  queue entries workers kept as dead letters and dropped (counters, never reset)

Every write and removal is one Lua script (``scripts/add.lua``, ``scripts/remove.lua``), so a
worker that dies mid-write leaves either the whole entry or nothing; writing an id again (a
redelivery) updates it in place.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from agentfleet.config import Settings
from agentfleet.dlq.filters import DLQFilter
from agentfleet.dlq.fingerprint import normalise_message
from agentfleet.dlq.matching import downstream_matches, expand_category
from agentfleet.dlq.model import DeadLetter
from agentfleet.dlq.stats import NO_DOWNSTREAM, DLQStats, FingerprintCount, stats_of_entries
from agentfleet.keys import DeadLetterKeys
from agentfleet.lua import ScriptSet
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis

__all__ = ["DLQ_LUA", "NO_DOWNSTREAM", "DLQStore"]

log = logging.getLogger("agentfleet.dlq")
DLQ_LUA = ScriptSet("agentfleet.dlq", "scripts", libraries=("indexes",))
_PAGE = 500
# The characters an entry id is made of (a hex digest); a start with others matches nothing.
_ID_CHARS = re.compile(r"^[0-9A-Za-z_-]+$")


def _without_bytes(entry: DeadLetter) -> DeadLetter:
    """``entry`` listing its artifacts as kept with no bytes (the queue's room for them is full)."""
    kept = [a.model_copy(update={"size_bytes": 0, "truncated": True}) for a in entry.artifacts]
    return entry.model_copy(update={"artifacts": kept})


def _stream_ms(entry_id: str) -> float:
    return int(entry_id.split("-", 1)[0]) / 1000.0


class DLQStore:
    """Dead letters in Redis. Safe to share between threads; every change is atomic.

    A filter's category may be a parent (``permanent``, ``transient``) and its downstream a
    provider or a host (``matching.py``); ``vendor_hosts`` (provider -> the hosts serving its
    API) lets a host name match the ``<provider>:<model>`` entries of the calls it served.
    """

    def __init__(
        self,
        client: StateRedis,
        *,
        prefix: str = "af",
        vendor_hosts: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        # redis-py's reply types are unions of every RESP shape; this store knows each reply.
        self.client: Any = client
        self.keys = DeadLetterKeys(prefix)
        self.vendor_hosts = {name: frozenset(hosts) for name, hosts in (vendor_hosts or {}).items()}
        scripts = DLQ_LUA.register(client, "add", "remove")
        self._add, self._remove = scripts["add"], scripts["remove"]

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> DLQStore:
        return cls(client or state_client(settings), prefix=settings.key_prefix)

    # Keys ----------------------------------------------------------------------------------

    def entry_key(self, entry_id: str) -> str:
        return self.keys.entry(entry_id)

    @property
    def stream_key(self) -> str:
        return self.keys.stream

    # Writing -------------------------------------------------------------------------------

    def add(
        self,
        entry: DeadLetter,
        artifacts: Mapping[str, bytes] | None = None,
        *,
        max_stored_bytes: int | None = None,
    ) -> bool:
        """Store ``entry`` (or update the entry of the same id); True when it is new.

        ``artifacts`` are the bytes of each of ``entry.artifacts`` by name (exactly those: a
        ``ValueError`` otherwise); they replace what the entry had. With ``max_stored_bytes``,
        when the queue's artifacts would take more than that (as stored, base64), the entry
        keeps its list with no bytes (``truncated``, size 0). Like the malformed cap, it is
        checked before the write: workers writing at once may pass it by a few entries.
        """
        sample = json.dumps([entry.error_type, normalise_message(entry.error)])
        artifacts = artifacts or {}
        listed = [a.name for a in entry.artifacts]
        if sorted(listed) != sorted(artifacts) or len(set(listed)) != len(listed):
            raise ValueError("a dead letter's artifacts must be listed once each and given with their bytes")
        encoded = {name: base64.b64encode(artifacts[name]).decode() for name in listed}
        if max_stored_bytes is not None and encoded:
            adding = sum(len(v) for v in encoded.values())
            if self.stored_artifact_bytes() + adding > max_stored_bytes:
                log.warning(
                    "dead letter %s keeps its %d artifacts without their bytes: the queue's artifacts "
                    "would pass dlq.artifact_max_stored_bytes (%d)",
                    entry.id,
                    len(listed),
                    max_stored_bytes,
                )
                entry = _without_bytes(entry)
                encoded = dict.fromkeys(listed, "")
        pairs = [part for name in listed for part in (name, encoded[name])]
        _, created = self._add(
            # The stream key routes the script to the slot every dead-letter key shares.
            keys=[self.stream_key],
            args=[
                self.keys.root,
                entry.id,
                entry.model_dump_json(),
                entry.category,
                entry.downstream or NO_DOWNSTREAM,
                entry.run_id,
                entry.fingerprint,
                entry.requeues,
                repr(entry.dead_lettered_at),
                sample,
                *pairs,
            ],
        )
        return bool(created)

    def remove(self, ids: Iterable[str], *, generation: int | None = None) -> list[str]:
        """Delete entries and their index entries; returns the ids that were there.

        With ``generation``, an entry is deleted only if it is still that generation (its
        ``requeues``): a requeued item that already failed again keeps its new dead letter.
        """
        ids = list(ids)
        removed: list[str] = []
        for start in range(0, len(ids), _PAGE):
            chunk = ids[start : start + _PAGE]
            gen = "" if generation is None else str(generation)
            removed.extend(self._remove(keys=[self.stream_key], args=[self.keys.root, gen, *chunk]))
        return removed

    # Malformed queue entries ---------------------------------------------------------------

    @property
    def malformed_key(self) -> str:
        return self.keys.malformed

    def keep_malformed(self, entry: DeadLetter, *, max_entries: int) -> bool:
        """Store the dead letter of a malformed queue entry and count it, unless ``max_entries``
        entries of its category wait already: then count it as dropped. True when stored.

        The cap is checked before the write, not with it: workers writing at once may pass it
        by a few entries.
        """
        waiting = int(self.client.hget(self.keys.counts("category"), entry.category) or 0)
        if waiting >= max_entries:
            self.count_malformed("dropped")
            return False
        self.add(entry)
        self.count_malformed("dead_lettered")
        return True

    def count_malformed(self, outcome: str) -> None:
        """Count one malformed queue entry as ``dead_lettered`` or ``dropped``."""
        self.client.hincrby(self.malformed_key, outcome, 1)

    def malformed_counts(self) -> dict[str, int]:
        """Malformed queue entries kept as dead letters and dropped, since the counters began."""
        found = self.client.hgetall(self.malformed_key)
        return {outcome: int(found.get(outcome, 0)) for outcome in ("dead_lettered", "dropped")}

    # Reading -------------------------------------------------------------------------------

    def get(self, entry_id: str) -> DeadLetter | None:
        raw = self.client.hget(self.entry_key(entry_id), "data")
        return DeadLetter.model_validate_json(raw) if raw else None

    def stored_artifact_bytes(self) -> int:
        """Bytes every entry's artifacts take in Redis, as stored (base64)."""
        return int(self.client.get(self.keys.artifact_bytes) or 0)

    def artifact(self, entry_id: str, name: str) -> bytes | None:
        """The kept bytes of artifact ``name`` of entry ``entry_id``; None when there are none."""
        raw = self.client.hget(self.keys.artifacts(entry_id), name)
        return None if raw is None else base64.b64decode(raw)

    def ids_starting_with(self, start: str, *, limit: int = 6) -> list[str]:
        """Up to ``limit`` entry ids that begin with ``start`` (a SCAN of the entry keys)."""
        if not _ID_CHARS.match(start):
            return []
        head = self.entry_key("")
        found: list[str] = []
        for key in self.client.scan_iter(match=f"{head}{start}*", count=1000):
            found.append((key.decode() if isinstance(key, bytes) else key).removeprefix(head))
            if len(found) >= limit:
                break
        return sorted(found)

    def get_many(self, ids: Sequence[str]) -> list[DeadLetter]:
        """The entries that exist among ``ids``, in the order given."""
        found: list[DeadLetter] = []
        for start in range(0, len(ids), _PAGE):
            pipe = self.client.pipeline(transaction=False)
            for entry_id in ids[start : start + _PAGE]:
                pipe.hget(self.entry_key(entry_id), "data")
            found.extend(DeadLetter.model_validate_json(raw) for raw in pipe.execute() if raw)
        return found

    def depth(self) -> int:
        return int(self.client.xlen(self.stream_key))

    def find(self, flt: DLQFilter | None = None, *, limit: int | None = 50) -> list[DeadLetter]:
        """Entries matching ``flt``, newest first, at most ``limit`` (None: all)."""
        flt = flt or DLQFilter()
        if not flt.indexed:
            ids = self._stream_ids(since=flt.since, newest_first=True, limit=limit)
            return self.get_many(ids)
        entries = [e for e in self.get_many(self._indexed_ids(flt)) if self._since_ok(e, flt)]
        entries.sort(key=lambda e: e.dead_lettered_at, reverse=True)
        return entries if limit is None else entries[:limit]

    def scan(self, flt: DLQFilter | None = None) -> Iterator[DeadLetter]:
        """Every entry matching ``flt``, oldest first, read a page at a time."""
        flt = flt or DLQFilter()
        if flt.indexed:
            yield from reversed(self.find(flt, limit=None))
            return
        start = "-" if flt.since is None else f"{int(flt.since * 1000)}-0"
        while True:
            page = self.client.xrange(self.stream_key, start, "+", count=_PAGE)
            if not page:
                return
            yield from self.get_many([fields["id"] for _, fields in page])
            start = "(" + page[-1][0]

    def ids(self, flt: DLQFilter | None = None) -> list[str]:
        """The ids of every entry matching ``flt``, oldest first."""
        flt = flt or DLQFilter()
        if flt.indexed:
            return [e.id for e in self.scan(flt)]
        return self._stream_ids(since=flt.since, newest_first=False, limit=None)

    def stats(
        self, *, window_s: float, top: int = 10, now: float | None = None, flt: DLQFilter | None = None
    ) -> DLQStats:
        """Depth, counts by category and downstream, the ``top`` fingerprints, the oldest
        entry's age, and what was dead-lettered per downstream in the last ``window_s`` seconds.

        Of the whole queue (from the counters), or of the entries matching ``flt``.
        """
        now = time.time() if now is None else now
        if flt is not None and not flt.empty:
            return stats_of_entries(list(self.scan(flt)), window_s=window_s, top=top, now=now)
        pipe = self.client.pipeline(transaction=False)
        pipe.xlen(self.stream_key)
        pipe.hgetall(self.keys.counts("category"))
        pipe.hgetall(self.keys.counts("downstream"))
        pipe.hgetall(self.keys.counts("fingerprint"))
        pipe.xrange(self.stream_key, "-", "+", count=1)
        depth, categories, downstreams, fingerprints, oldest = pipe.execute()
        top_fps = sorted(((int(n), fp) for fp, n in fingerprints.items()), key=lambda x: (-x[0], x[1]))[:top]
        samples = self.client.hmget(self.keys.fingerprints, [fp for _, fp in top_fps]) if top_fps else []
        fingerprint_counts = []
        for (count, fp), sample in zip(top_fps, samples, strict=True):
            error_type, message = json.loads(sample) if sample else ("", "")
            fingerprint_counts.append(
                FingerprintCount(fingerprint=fp, count=count, error_type=error_type, message=message)
            )
        oldest_age = None
        if oldest:
            at = self.client.hget(self.entry_key(oldest[0][1]["id"]), "at")
            oldest_age = round(max(0.0, now - (float(at) if at else _stream_ms(oldest[0][0]))), 3)
        return DLQStats(
            depth=int(depth),
            by_category={k: int(v) for k, v in sorted(categories.items(), key=lambda kv: -int(kv[1]))},
            by_downstream={k: int(v) for k, v in sorted(downstreams.items(), key=lambda kv: -int(kv[1]))},
            top_fingerprints=fingerprint_counts,
            oldest_age_s=oldest_age,
            window_s=window_s,
            recent_by_downstream=self._recent_by_downstream(now - window_s),
            generated_at=now,
        )

    # Internals -----------------------------------------------------------------------------

    @staticmethod
    def _since_ok(entry: DeadLetter, flt: DLQFilter) -> bool:
        return flt.since is None or entry.dead_lettered_at >= flt.since

    def counted(self, dim: str) -> dict[str, int]:
        """The values of ``dim`` (``category``, ``downstream``, ``fingerprint``) stored entries
        carry, with how many carry each."""
        return {k: int(v) for k, v in self.client.hgetall(self.keys.counts(dim)).items()}

    def _values(self, dim: str, value: str) -> list[str]:
        """The stored values of ``dim`` a filter word stands for."""
        if dim == "category":
            return sorted(expand_category(value))
        if dim == "downstream":
            return [
                name
                for name in self.counted("downstream")
                if downstream_matches(value, name, self.vendor_hosts)
            ]
        return [value]

    def _indexed_ids(self, flt: DLQFilter) -> list[str]:
        found: set[str] | None = None
        for dim, value in flt.indexed.items():
            keys = [self.keys.index(dim, v) for v in self._values(dim, value)]
            ids = set(self.client.sunion(keys)) if keys else set()
            found = ids if found is None else found & ids
            if not found:
                return []
        return sorted(found or ())

    def _stream_ids(self, *, since: float | None, newest_first: bool, limit: int | None) -> list[str]:
        low = "-" if since is None else f"{int(since * 1000)}-0"
        if newest_first and limit is not None:
            page = self.client.xrevrange(self.stream_key, "+", low, count=limit)
            return [fields["id"] for _, fields in page]
        ids: list[str] = []
        start = low
        while True:
            page = self.client.xrange(self.stream_key, start, "+", count=_PAGE)
            if not page:
                break
            ids.extend(fields["id"] for _, fields in page)
            start = "(" + page[-1][0]
        ids = ids[::-1] if newest_first else ids
        return ids if limit is None else ids[:limit]

    def _recent_by_downstream(self, since: float) -> dict[str, int]:
        counts: dict[str, int] = {}
        ids = self._stream_ids(since=since, newest_first=False, limit=None)
        for start in range(0, len(ids), _PAGE):
            pipe = self.client.pipeline(transaction=False)
            for entry_id in ids[start : start + _PAGE]:
                pipe.hget(self.entry_key(entry_id), "downstream")
            for name in pipe.execute():
                if name and name != NO_DOWNSTREAM:
                    counts[name] = counts.get(name, 0) + 1
        return counts
