"""Helpers shared by the rate-limit tests (plain functions, not fixtures)."""

from __future__ import annotations

from typing import Any

import redis

from agentfleet.config import LimitSpec
from agentfleet.leases import LeaseRenewer
from agentfleet.ratelimit import Limiter


class StoppedRenewer(LeaseRenewer):
    """A renewer that never renews, as in a worker that died holding its leases."""

    def track(self, lease: Any) -> None:
        return None


def make_limiter(
    client: redis.Redis,
    prefix: str,
    limits: dict[str, LimitSpec] | None = None,
    **kwargs: Any,
) -> Limiter:
    """A limiter on ``client`` under ``prefix`` with unlimited defaults."""
    kwargs.setdefault("default", LimitSpec())
    return Limiter(client, prefix=prefix, limits=limits or {}, **kwargs)
