"""A run's own concurrency cap travels in its downstream name, so no worker needs it configured."""

from __future__ import annotations

from agentfleet.config import LimitSpec
from agentfleet.ratelimit.limits import LimitsTable
from agentfleet.ratelimit.names import pool_downstream, pool_size


def test_a_pool_name_carries_its_slots() -> None:
    name = pool_downstream("run42", 3)
    assert name == "pool:run42:3"
    assert pool_size(name) == 3
    assert pool_size("vendor-a.example") is None
    assert pool_size("pool:run42:zero") is None
    assert pool_size("pool:run42:0") is None


def test_the_limits_table_caps_a_pool_at_its_slots_and_nothing_else() -> None:
    table = LimitsTable({}, LimitSpec(rate_per_s=5))
    limits = table.get(pool_downstream("r", 4))
    assert limits.max_concurrency == 4
    assert limits.buckets == (), "the default rate applies to downstreams, not to a run's pool"
    assert table.get("other.example").buckets, "any other name still gets the default"
