"""Fan-in helpers: concatenate, structured merge with de-duplication, reduce.

Each takes the list of successful items' results (failed items never reach an aggregate) and
can be named directly as an aggregate, as a function (``aggregate=merge.concat``) or by the
name workers import (``aggregate="agentfleet.merge:merge_findings"``, as ``[fanouts]`` do).
``successful_results`` picks those results out of outcomes (``Run.outcomes()``) on the client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from agentfleet.idempotency import stable_hash
from agentfleet.models import TaskOutcome

__all__ = [
    "DEFAULT_SEVERITY_ORDER",
    "concat",
    "item_fingerprint",
    "merge_findings",
    "merge_structured",
    "reduce_results",
    "successful_results",
]

T = TypeVar("T")

DEFAULT_SEVERITY_ORDER: tuple[str, ...] = ("critical", "high", "medium", "low", "info")


def successful_results(outcomes: Iterable[TaskOutcome | Mapping[str, Any]]) -> list[Any]:
    """The results of the successful outcomes, in the order given."""
    found = []
    for outcome in outcomes:
        data = outcome.model_dump() if isinstance(outcome, TaskOutcome) else outcome
        if data.get("ok"):
            found.append(data.get("result"))
    return found


def concat(results: Sequence[Any]) -> list[Any]:
    """One list: list results are spliced in, any other result is appended as it is."""
    merged: list[Any] = []
    for result in results:
        if isinstance(result, list):
            merged.extend(result)
        else:
            merged.append(result)
    return merged


def item_fingerprint(item: Any, fields: Sequence[str] | None = None) -> str:
    """A stable content hash of ``item`` (of just ``fields`` when given and it is a mapping)."""
    if fields and isinstance(item, Mapping):
        item = {name: item.get(name) for name in fields}
    return stable_hash(item)


def merge_structured(
    results: Sequence[Any],
    *,
    items_field: str = "findings",
    sort_by: str | None = "severity",
    order: Sequence[str] = DEFAULT_SEVERITY_ORDER,
    fingerprint_fields: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Merge the ``items_field`` lists of every result, dropping duplicates, sorted.

    Two items are duplicates when their fingerprints (over ``fingerprint_fields``, or the
    whole item) match; the first one seen is kept. Items sort by their ``sort_by`` value's
    rank in ``order`` (unknown values last), then by their fingerprint for a stable order.
    """
    seen: dict[str, Any] = {}
    total = 0
    for result in results:
        items = result.get(items_field, []) if isinstance(result, Mapping) else result
        for item in items or []:
            total += 1
            seen.setdefault(item_fingerprint(item, fingerprint_fields), item)
    rank = {value: i for i, value in enumerate(order)}

    def sort_key(entry: tuple[str, Any]) -> tuple[int, str]:
        fp, item = entry
        value = item.get(sort_by) if sort_by and isinstance(item, Mapping) else None
        return (rank.get(str(value).lower(), len(rank)) if sort_by else 0, fp)

    merged = [item for _, item in sorted(seen.items(), key=sort_key)]
    return {items_field: merged, "sources": len(results), "duplicates_removed": total - len(merged)}


def merge_findings(results: Sequence[Any]) -> dict[str, Any]:
    """``merge_structured`` with its defaults: ``findings`` lists, by severity."""
    return merge_structured(results)


def reduce_results(fn: Callable[[T, Any], T], results: Sequence[Any], initial: T) -> T:
    """Fold ``fn`` over the results, left to right, starting from ``initial``."""
    return functools.reduce(fn, results, initial)
