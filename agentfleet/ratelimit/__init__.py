"""Cluster-wide flow control in Redis: token buckets, lease-based concurrency caps, pauses and circuits.

``Limiter.acquire(downstream, ...)`` returns a ``Permit`` or raises ``agentfleet.errors.Deferred``
with the wait; every check runs as one atomic Lua script on Redis server time.
"""

from agentfleet.ratelimit.bucket import BucketSpec, Unit, buckets_for, default_burst
from agentfleet.ratelimit.limiter import Limiter
from agentfleet.ratelimit.limits import DownstreamLimits, LimitsTable
from agentfleet.ratelimit.names import FLEET, downstream_for, llm_downstream
from agentfleet.ratelimit.permit import Permit
from agentfleet.ratelimit.plan import ConcurrencyPlan, concurrency_plan, plan_concurrency
from agentfleet.ratelimit.status import BucketStatus, LimitStatus

__all__ = [
    "FLEET",
    "BucketSpec",
    "BucketStatus",
    "ConcurrencyPlan",
    "DownstreamLimits",
    "LimitStatus",
    "Limiter",
    "LimitsTable",
    "Permit",
    "Unit",
    "buckets_for",
    "concurrency_plan",
    "default_burst",
    "downstream_for",
    "llm_downstream",
    "plan_concurrency",
]
