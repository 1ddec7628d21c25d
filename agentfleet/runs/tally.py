"""Fleet-wide completion counters, added up in each process and written about once a second.

Every counted outcome moves the fleet-wide counters (``p:stats``), the per-second
completion buckets (``p:stats:done:<second>``, kept 120 s) and, given ``minute_key``, the
fleet's minute (``p:stats:min:<minute>``: counts, cost and item-time histogram, see
``runs/history.py``). Writing them inside each
outcome's script would add six commands to every item, on keys every item shares (so a Redis
Cluster could not place them beside the run's own). Instead the process that counted the
outcome adds it here, and a daemon thread writes the sums in one pipeline every
``interval_s`` seconds; ``flush()`` writes at once (at exit, and before this process reads
the counters itself).

A process killed with SIGKILL loses at most its last ``interval_s`` of counts, and a flush
whose reply was lost after Redis applied it (a dropped connection) is written again, counting
that ``interval_s`` twice: these are the fleet's metrics, not its outcomes, which the run store
keeps exactly. A forked child starts each tally afresh at its first use (the pid tells it
apart): nothing pending of its parent's, no thread, a lock of its own.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from agentfleet.runs.history import HISTORY_TTL_S, item_time_bucket

__all__ = ["StatsTally", "flush_tallies"]

log = logging.getLogger("agentfleet.runs")

_BUCKET_TTL_S = 120
_tallies: weakref.WeakSet[StatsTally] = weakref.WeakSet()


class StatsTally:
    """Pending additions to ``stats_key`` and to the per-second buckets named by ``bucket_key``."""

    def __init__(
        self,
        client: Any,
        stats_key: str,
        bucket_key: Callable[[int], str],
        *,
        interval_s: float = 1.0,
        minute_key: Callable[[int], str] | None = None,
    ) -> None:
        self.client = client
        self.stats_key = stats_key
        self.bucket_key = bucket_key
        self.minute_key = minute_key
        self.interval_s = interval_s
        self._reset()
        _tallies.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._counts: defaultdict[str, int] = defaultdict(int)
        self._amounts: defaultdict[str, float] = defaultdict(float)
        self._per_second: defaultdict[int, int] = defaultdict(int)
        # (epoch minute, field) -> amount, for the minute hashes.
        self._per_minute: defaultdict[tuple[int, str], float] = defaultdict(float)
        self._last_done_at = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add_outcome(
        self, kind: str, *, dead_lettered: bool, cost_usd: float, seconds: float, at: float
    ) -> None:
        """Count one outcome of ``kind`` (``succeeded``, ``failed``, ``cancelled``) recorded at
        ``at`` (epoch seconds), with its cost in US dollars and its worker seconds."""
        self._own()
        with self._lock:
            self._counts[kind] += 1
            if dead_lettered:
                self._counts["dead_lettered"] += 1
            self._amounts["cost_usd"] += cost_usd
            self._amounts["worker_seconds"] += seconds
            self._per_second[int(at)] += 1
            self._last_done_at = max(self._last_done_at, at)
            if self.minute_key is not None:
                minute = int(at // 60)
                self._per_minute[(minute, kind)] += 1
                self._per_minute[(minute, f"t{item_time_bucket(seconds)}")] += 1
                if dead_lettered:
                    self._per_minute[(minute, "dead_lettered")] += 1
                if cost_usd:
                    self._per_minute[(minute, "cost_usd")] += cost_usd
            self._ensure_thread()

    def add_count(self, field: str, amount: int = 1, *, at: float | None = None) -> None:
        """Add ``amount`` to the counter ``field`` (``runs_finished``...); with ``at`` (epoch
        seconds), to that minute's ``field`` as well."""
        self._own()
        with self._lock:
            self._counts[field] += amount
            if at is not None and self.minute_key is not None:
                self._per_minute[(int(at // 60), field)] += amount
            self._ensure_thread()

    def _own(self) -> None:
        if self._pid != os.getpid():
            # Made before a fork: what is pending is the parent's to write.
            self._reset()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="agentfleet-stats", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:
                # Redis away: the sums stay pending and go with the next write.
                log.warning("could not write the completion counters: %s", exc)

    def flush(self) -> None:
        """Write every pending addition now, in one pipeline."""
        self._own()
        with self._lock:
            counts, amounts, per_second = self._counts, self._amounts, self._per_second
            per_minute, last = self._per_minute, self._last_done_at
            if not (counts or per_second):
                return
            self._counts, self._amounts = defaultdict(int), defaultdict(float)
            self._per_second, self._last_done_at = defaultdict(int), 0.0
            self._per_minute = defaultdict(float)
        try:
            pipe = self.client.pipeline(transaction=False)
            for field, n in counts.items():
                pipe.hincrby(self.stats_key, field, n)
            for field, value in amounts.items():
                if value:
                    pipe.hincrbyfloat(self.stats_key, field, value)
            if last:
                pipe.hset(self.stats_key, "last_done_at", repr(last))
            for second, n in per_second.items():
                pipe.incrby(self.bucket_key(second), n)
                pipe.expire(self.bucket_key(second), _BUCKET_TTL_S)
            self._write_minutes(pipe, per_minute)
            pipe.execute()
        except Exception:
            self._restore(counts, amounts, per_second, last, per_minute)
            raise

    def _write_minutes(self, pipe: Any, per_minute: dict[tuple[int, str], float]) -> None:
        if self.minute_key is None:
            return
        for (minute, field), amount in per_minute.items():
            if field == "cost_usd":
                pipe.hincrbyfloat(self.minute_key(minute), field, amount)
            else:
                pipe.hincrby(self.minute_key(minute), field, int(amount))
        for minute in {m for m, _ in per_minute}:
            pipe.expire(self.minute_key(minute), HISTORY_TTL_S)

    def _restore(
        self,
        counts: dict[str, int],
        amounts: dict[str, float],
        per_second: dict[int, int],
        last: float,
        per_minute: dict[tuple[int, str], float],
    ) -> None:
        with self._lock:
            for key, amount in per_minute.items():
                self._per_minute[key] += amount
            for field, n in counts.items():
                self._counts[field] += n
            for field, value in amounts.items():
                self._amounts[field] += value
            for second, n in per_second.items():
                self._per_second[second] += n
            self._last_done_at = max(self._last_done_at, last)


def flush_tallies(*, quiet: bool = False) -> None:
    """Write what every tally of this process holds (a worker process's shutdown; at exit,
    ``quiet``: a process leaving after its Redis has gone has nobody left to tell)."""
    for tally in list(_tallies):
        try:
            tally.flush()
        except Exception as exc:
            (log.debug if quiet else log.warning)("could not write the completion counters: %s", exc)


atexit.register(flush_tallies, quiet=True)
