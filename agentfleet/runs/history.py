"""The fleet's last two hours, minute by minute: what the console's fleet charts draw.

One hash per epoch minute ``m`` (``p:stats:min:<m>``, ``RunKeys.minute``), kept
``HISTORY_TTL_S`` after its last write. Its fields:

- ``succeeded``, ``failed``, ``cancelled``, ``dead_lettered``: outcomes counted that minute;
  ``cost_usd``: their US dollars; ``retries``, ``deferrals``: attempts retried or deferred;
- ``t<b>``: outcomes whose item time (seconds executing, over every attempt) fell in bucket
  ``b`` of ``ITEM_TIME_BOUNDS_S`` (the last bucket holds everything longer), from which the
  percentiles are read;
- ``queued``, ``unacked``: messages waiting in the fleet's queues and taken but not
  acknowledged, as the last worker heartbeat of that minute saw them;
- ``busy:<node>``, ``slots:<node>``: each worker's busy and total slots at its last heartbeat
  that minute.

Outcome counts and the histogram are added up per process and written about once a second
(``runs/tally.py``); the gauges come from the workers' heartbeats (``tasks/heartbeat.py``).
Times come from the writing processes' clocks.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfleet.keys import RunKeys

__all__ = [
    "HISTORY_TTL_S",
    "ITEM_TIME_BOUNDS_S",
    "FleetHistory",
    "Minute",
    "item_time_bucket",
    "percentile",
]

HISTORY_TTL_S = 2 * 3600
# Upper bounds, in seconds, of the item-time histogram's buckets (a last one holds the rest).
ITEM_TIME_BOUNDS_S: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600, 1800)
_COUNTS = ("succeeded", "failed", "cancelled", "dead_lettered", "retries", "deferrals")


def item_time_bucket(seconds: float) -> int:
    """The histogram bucket of an item that spent ``seconds`` executing."""
    return bisect.bisect_left(ITEM_TIME_BOUNDS_S, seconds)


def percentile(buckets: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a histogram over ``ITEM_TIME_BOUNDS_S``, in seconds,
    interpolated inside its bucket; None for an empty histogram. The open last bucket reads
    as its lower bound."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for b, n in enumerate(buckets):
        if n and seen + n >= rank:
            low = ITEM_TIME_BOUNDS_S[b - 1] if b > 0 else 0.0
            if b >= len(ITEM_TIME_BOUNDS_S):
                return low
            return low + (ITEM_TIME_BOUNDS_S[b] - low) * max(0.0, rank - seen) / n
        seen += n
    return ITEM_TIME_BOUNDS_S[-1]


@dataclass(frozen=True)
class Minute:
    """The fleet's figures of one minute (``at``: its first second, epoch seconds). Gauges a
    heartbeat did not write that minute are None."""

    at: float
    counts: Mapping[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    item_times: tuple[int, ...] = ()
    queued: int | None = None
    unacked: int | None = None
    busy: int | None = None
    slots: int | None = None

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)

    @property
    def finished(self) -> int:
        return self.count("succeeded") + self.count("failed") + self.count("cancelled")

    def item_time(self, q: float) -> float | None:
        """The ``q`` quantile of the item times of this minute's outcomes, in seconds."""
        return percentile(self.item_times, q)


def _minute(at: float, raw: Mapping[str, str]) -> Minute:
    buckets = [0] * (len(ITEM_TIME_BOUNDS_S) + 1)
    busy: int | None = None
    slots: int | None = None
    for name, value in raw.items():
        if name.startswith("t") and name[1:].isdigit() and int(name[1:]) < len(buckets):
            buckets[int(name[1:])] = int(float(value))
        elif name.startswith("busy:"):
            busy = (busy or 0) + int(float(value))
        elif name.startswith("slots:"):
            slots = (slots or 0) + int(float(value))

    def gauge(name: str) -> int | None:
        return int(float(raw[name])) if name in raw else None

    return Minute(
        at=at,
        counts={name: int(float(raw[name])) for name in _COUNTS if name in raw},
        cost_usd=float(raw.get("cost_usd") or 0.0),
        item_times=tuple(buckets),
        queued=gauge("queued"),
        unacked=gauge("unacked"),
        busy=busy,
        slots=slots,
    )


class FleetHistory:
    """Reads the fleet's minutes and writes the heartbeat's gauges into them."""

    def __init__(self, client: Any, *, prefix: str = "af") -> None:
        self.client = client
        self.keys = RunKeys(prefix)

    def record_gauges(
        self,
        *,
        node: str,
        busy: int | None,
        slots: int | None,
        queued: int,
        unacked: int,
        at: float | None = None,
    ) -> None:
        """Note what a worker's heartbeat saw: the fleet's queues and its own slots."""
        key = self.keys.minute(int((time.time() if at is None else at) // 60))
        values: dict[str, int] = {"queued": queued, "unacked": unacked}
        if busy is not None:
            values[f"busy:{node}"] = busy
        if slots is not None:
            values[f"slots:{node}"] = slots
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, mapping=values)
        pipe.expire(key, HISTORY_TTL_S)
        pipe.execute()

    def minutes(self, count: int = 60, *, now: float | None = None) -> list[Minute]:
        """The last ``count`` minutes (at most 120), oldest first, this one included."""
        count = max(1, min(int(count), HISTORY_TTL_S // 60))
        current = int((time.time() if now is None else now) // 60)
        numbers = range(current - count + 1, current + 1)
        pipe = self.client.pipeline(transaction=False)
        for m in numbers:
            pipe.hgetall(self.keys.minute(m))
        return [_minute(m * 60.0, raw or {}) for m, raw in zip(numbers, pipe.execute(), strict=True)]
