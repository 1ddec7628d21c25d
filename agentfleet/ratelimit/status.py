"""What ``agentfleet limits show`` reports for a downstream."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["BucketStatus", "LimitStatus"]


@dataclass(frozen=True, slots=True)
class BucketStatus:
    """A bucket now: ``tokens`` left of ``capacity``, refilled at ``rate_per_s`` tokens a second.

    ``unit`` says what a token is (``request``, ``input_token``, ``output_token``); tokens may
    be negative after a request cost more than the bucket holds.
    """

    name: str
    unit: str
    tokens: float
    capacity: float
    rate_per_s: float


@dataclass(frozen=True, slots=True)
class LimitStatus:
    """A downstream now, as every worker sees it.

    ``limits`` holds the limits that apply (the ``LimitSpec`` fields that are set: rates per
    second or per minute as named, counts of requests or tokens); ``configured`` is False
    when they are the default's. ``slots_in_use`` counts unexpired leases, ``max_slots`` is
    its ``max_concurrency`` (None when uncapped), ``paused_until`` is epoch seconds (None
    when not paused) and ``paused_for_s`` the seconds of pause left. ``leases_reclaimed``
    counts leases that ran out while held and whose slot an acquire took back, over the last
    idle TTL: a holder that died, or one that went without renewing for ``lease_ttl_s`` (a
    starved worker), in which case the cap was passed while its call went on.
    """

    downstream: str
    configured: bool
    buckets: tuple[BucketStatus, ...]
    slots_in_use: int
    max_slots: int | None
    paused_until: float | None
    paused_for_s: float
    limits: dict[str, float] = dataclasses.field(default_factory=dict)
    leases_reclaimed: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return dataclasses.asdict(self)
