"""Sizing a concurrency cap with Little's law: calls in flight = arrival rate x latency."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from agentfleet.errors import ConfigError

__all__ = ["ConcurrencyPlan", "concurrency_plan"]


@dataclass(frozen=True, slots=True)
class ConcurrencyPlan:
    """The arithmetic behind a ``max_concurrency``, for people to check.

    ``in_flight`` is the mean number of calls open at ``rps`` requests a second that take
    ``latency_s`` seconds each. ``concurrency`` adds ``headroom`` (a fraction) on top, for use
    with a ``rate_per_s`` bucket that holds the rate: slower calls then still find a slot.
    ``cap_only_concurrency`` takes headroom off instead, for a downstream whose only limit is the
    cap, so that faster calls do not push the rate over ``rps``.
    """

    rps: float
    latency_s: float
    headroom: float
    in_flight: float
    concurrency: int
    cap_only_concurrency: int

    def explain(self) -> str:
        """The plan in two sentences."""
        pct = round(self.headroom * 100)
        return (
            f"{self.rps:g} requests/s x {self.latency_s:g} s per call = {self.in_flight:g} calls "
            f"in flight on average (Little's law). With rate_per_s = {self.rps:g}, set "
            f"max_concurrency = {self.concurrency} ({pct}% headroom for slow calls); with no "
            f"rate limit, set max_concurrency = {self.cap_only_concurrency} so fast calls stay "
            f"under {self.rps:g} requests/s."
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data, with the explanation."""
        return {**dataclasses.asdict(self), "explanation": self.explain()}


def concurrency_plan(rps: float, latency_s: float, headroom: float = 0.2) -> ConcurrencyPlan:
    """Plan a cap for ``rps`` requests a second of ``latency_s`` seconds each.

    ``headroom`` is a fraction (0.2 is 20%).
    """
    for name, value in (("rps", rps), ("latency_s", latency_s)):
        if not value > 0 or math.isinf(value):
            raise ConfigError(f"{name} must be a number above 0 (got {value})")
    if not headroom >= 0 or math.isinf(headroom):
        raise ConfigError(f"headroom must be a fraction of 0 or more, such as 0.2 (got {headroom})")
    in_flight = rps * latency_s
    # Rounding guards against float noise (10 x 0.3 is 3.0000000000000004, not above 3).
    with_headroom = round(in_flight * (1 + headroom), 9)
    without = round(in_flight / (1 + headroom), 9)
    return ConcurrencyPlan(
        rps=rps,
        latency_s=latency_s,
        headroom=headroom,
        in_flight=round(in_flight, 9),
        concurrency=max(1, math.ceil(with_headroom)),
        cap_only_concurrency=max(1, math.floor(without)),
    )
