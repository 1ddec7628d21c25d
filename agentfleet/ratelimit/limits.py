"""The limits table: each downstream's ``LimitSpec`` turned into buckets and a slot count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agentfleet.config import LimitSpec
from agentfleet.ratelimit.bucket import BucketSpec, buckets_for
from agentfleet.ratelimit.names import pool_size

__all__ = ["DownstreamLimits", "LimitsTable"]


@dataclass(frozen=True, slots=True)
class DownstreamLimits:
    """One downstream's limits. ``configured`` is False when they are the default's."""

    name: str
    spec: LimitSpec
    configured: bool
    buckets: tuple[BucketSpec, ...]
    max_concurrency: int | None

    @property
    def unlimited(self) -> bool:
        """True when no bucket and no concurrency cap applies."""
        return not self.buckets and self.max_concurrency is None


class LimitsTable:
    """Limits per downstream, falling back to ``default`` for a downstream not listed."""

    def __init__(self, limits: Mapping[str, LimitSpec], default: LimitSpec) -> None:
        self._specs = dict(limits)
        self._default = default
        self._resolved: dict[str, DownstreamLimits] = {}

    def get(self, downstream: str) -> DownstreamLimits:
        """The limits of ``downstream``, resolved once and kept."""
        found = self._resolved.get(downstream)
        if found is None:
            spec = self._specs.get(downstream)
            configured = spec is not None
            slots = pool_size(downstream)
            if spec is None and slots is not None:
                # A run's own cap travels in its name, so every worker knows it unconfigured.
                spec, configured = LimitSpec(max_concurrency=slots), True
            spec = spec if spec is not None else self._default
            found = DownstreamLimits(
                name=downstream,
                spec=spec,
                configured=configured,
                buckets=buckets_for(spec),
                max_concurrency=spec.max_concurrency,
            )
            if len(self._resolved) >= _MAX_RESOLVED:
                # A crawl can touch unboundedly many hosts; forgetting is cheaper than growing.
                self._resolved.clear()
            self._resolved[downstream] = found
        return found

    def configured(self) -> list[str]:
        """The downstreams listed in the table, sorted."""
        return sorted(self._specs)


_MAX_RESOLVED = 10_000
