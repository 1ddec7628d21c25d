"""Cluster-wide flow control in Redis: token buckets, lease-based concurrency caps, pauses and circuits.

Every check runs as one atomic Lua script on Redis server time, so every worker on every host
sees the same limits. A call is admitted like this::

    limiter = Limiter.from_settings(get_settings())
    try:
        permit = limiter.acquire(downstream_for(url))      # waits up to short_wait_s inline
    except Deferred as deferred:
        ...                                                # reschedule in deferred.wait_s
    with permit:
        response = send()
    if response.status_code == 429:
        limiter.pause(permit.downstream, retry_after_s)    # every worker holds off

An LLM call charges its token estimates against ``provider:model`` and settles afterwards::

    permit = limiter.acquire(llm_downstream(model), also=["api.anthropic.com"],
                             input_tokens=estimate, output_tokens=max_tokens)
    permit.reconcile(actual_input_tokens=usage.input_tokens,
                     actual_output_tokens=usage.output_tokens)
"""

from agentfleet.ratelimit.bucket import BucketSpec, Unit, buckets_for, default_burst
from agentfleet.ratelimit.limiter import Limiter
from agentfleet.ratelimit.limits import DownstreamLimits, LimitsTable
from agentfleet.ratelimit.names import FLEET, downstream_for, llm_downstream
from agentfleet.ratelimit.permit import Permit
from agentfleet.ratelimit.plan import ConcurrencyPlan, concurrency_plan
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
]
