"""Token buckets derived from a downstream's ``LimitSpec``.

A bucket refills at ``rate_per_s`` tokens a second up to ``capacity`` tokens, and one acquire
costs what its ``unit`` says: one request, or the request's input or output tokens.

Capacities: ``rate_per_s`` holds ``burst`` tokens (by default ``max(1, ceil(rate_per_s))``, one
second's worth). A per-minute limit holds one minute's worth. That is how Anthropic describes
its own limits (a bucket refilled continuously up to the per-minute maximum), so a bucket the
size of the provider's admits every burst the provider would, and nothing it would refuse.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from agentfleet.config import LimitSpec

__all__ = ["BucketSpec", "Unit", "buckets_for", "default_burst"]


class Unit(enum.Enum):
    """What one token of a bucket stands for."""

    REQUEST = "request"
    INPUT_TOKEN = "input_token"
    OUTPUT_TOKEN = "output_token"


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """One bucket: ``rate_per_s`` tokens a second, at most ``capacity`` tokens held."""

    name: str
    rate_per_s: float
    capacity: float
    unit: Unit


def default_burst(rate_per_s: float) -> int:
    """The burst (tokens) when none is set: one second's worth, at least one."""
    return max(1, math.ceil(rate_per_s))


def buckets_for(spec: LimitSpec) -> tuple[BucketSpec, ...]:
    """The buckets a spec asks for, in a fixed order; none when it sets no rate."""
    buckets: list[BucketSpec] = []
    if spec.rate_per_s is not None:
        burst = spec.burst if spec.burst is not None else default_burst(spec.rate_per_s)
        buckets.append(BucketSpec("rate", spec.rate_per_s, float(burst), Unit.REQUEST))
    per_minute = (
        ("requests", spec.requests_per_min, Unit.REQUEST),
        ("input_tokens", spec.input_tokens_per_min, Unit.INPUT_TOKEN),
        ("output_tokens", spec.output_tokens_per_min, Unit.OUTPUT_TOKEN),
    )
    for name, per_min, unit in per_minute:
        if per_min is not None:
            buckets.append(BucketSpec(name, per_min / 60.0, float(per_min), unit))
    return tuple(buckets)
