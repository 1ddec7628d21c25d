"""A run's timeline: one short entry per attempt of an item, kept beside the run.

Every counted outcome, failed attempt that is retried, deferral and passed pipeline stage (or
graph step) appends one entry to ``p:run:{<id>}:spans``, in the script that records it (so
an entry is written once, with what it notes); ``p:run:{<id>}:lanes`` numbers the workers
that ran the run's attempts, so an entry names its worker in a digit or two. An entry is
one string of space-separated fields::

    <index> <lane> <end> <duration ms> <kind> [<cost in micro-dollars>]

- ``lane``: the worker's number in the lanes hash, ``-1`` when the outcome was recorded
  without running on a worker (a cancelled item, a graph's item outcome, a reconciler's);
- ``end``: Redis's clock when the entry was written, in epoch milliseconds; for an outcome,
  the id of its event in the run's event stream (``<ms>-<seq>``), which finds that outcome;
- ``duration ms``: the worker's own measure of the attempt, from the moment its delivery
  claimed the item to the moment it recorded the attempt (so the start is ``end - duration``,
  on Redis's clock whatever the worker's clock says);
- ``kind``: ``s`` succeeded, ``f`` failed (final), ``c`` cancelled, ``r`` a failed attempt
  retried, ``d`` deferred (waited for a limit, a circuit or a pool slot), ``p`` a pipeline
  stage or graph step passed on, ``o`` reopened by a requeue (the item's next outcome follows);
- the cost, for an outcome: the item's US dollars over all its attempts, in millionths.

About 30 bytes an entry: a run of 10,000 items keeps some 300 KB here, next to its event
stream's full outcomes. Both expire with the run's other keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["FINAL_KINDS", "AttemptSpan", "Span", "SpanLog", "parse_spans"]

# The kinds of entry that give an item its outcome.
FINAL_KINDS = frozenset("sfc")


@dataclass(frozen=True)
class AttemptSpan:
    """What a worker tells the store about the attempt it ends: its node name and the seconds
    since its delivery claimed the item."""

    worker: str
    duration_s: float

    def args(self) -> tuple[str, int]:
        """The node name and the whole milliseconds the Lua scripts take."""
        return self.worker, max(0, round(self.duration_s * 1000))


@dataclass(frozen=True, slots=True)
class Span:
    """One timeline entry, parsed. Times are epoch milliseconds on Redis's clock."""

    index: int
    lane: int
    start_ms: int
    end_ms: int
    kind: str
    cost_usd: float = 0.0
    event: str = ""

    @property
    def duration_s(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    @property
    def final(self) -> bool:
        return self.kind in FINAL_KINDS


@dataclass(frozen=True)
class SpanLog:
    """A run's timeline: every entry in the order written, the workers by lane number, and
    each item's standing outcome entry (an item reopened since has none). ``entries`` counts
    the list entries read (those that did not parse included): a later read goes on from
    there."""

    spans: list[Span]
    lanes: dict[int, str]
    finals: dict[int, Span]
    entries: int = 0

    def worker(self, lane: int) -> str:
        return self.lanes.get(lane, "") if lane >= 0 else ""


def _span(text: str) -> Span | None:
    parts = text.split(" ")
    if len(parts) < 5:
        return None
    try:
        index, lane, end, duration = int(parts[0]), int(parts[1]), parts[2], int(parts[3])
        end_ms = int(end.partition("-")[0])
        cost = int(parts[5]) / 1_000_000 if len(parts) > 5 else 0.0
    except ValueError:
        return None
    event = end if "-" in end else ""
    return Span(index, lane, end_ms - duration, end_ms, parts[4], cost, event)


def parse_spans(entries: Iterable[str], lanes: Mapping[str, str], *, after: SpanLog | None = None) -> SpanLog:
    """A ``SpanLog`` from the raw list entries and lanes hash (node -> number), going on from
    ``after`` (the log of the entries before these); an entry that does not parse is skipped."""
    spans: list[Span] = list(after.spans) if after is not None else []
    finals: dict[int, Span] = dict(after.finals) if after is not None else {}
    read = after.entries if after is not None else 0
    for text in entries:
        read += 1
        span = _span(text)
        if span is None:
            continue
        if span.kind == "o":
            finals.pop(span.index, None)
        elif span.kind in FINAL_KINDS:
            finals[span.index] = span
        spans.append(span)
    numbered = {}
    for node, number in lanes.items():
        try:
            numbered[int(number)] = node
        except ValueError:
            continue
    return SpanLog(spans=spans, lanes=numbered, finals=finals, entries=read)
