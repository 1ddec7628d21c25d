"""Connection pools under the guard: made once per host, shared by guards, closed by their owner."""

from __future__ import annotations

from typing import Any

import httpx

from agentfleet.tools.guard import guard_transport, shared_pools
from agentfleet.tools.pools import TransportPools


class _Transport:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_one_transport_per_key_the_least_recently_used_closed_past_the_cap() -> None:
    made: list[_Transport] = []
    pools = TransportPools(lambda: made.append(_Transport()) or made[-1], max_pools=2)
    a = pools.get(("https", "a.example", 443))
    assert pools.get(("https", "a.example", 443)) is a
    b = pools.get(("https", "b.example", 443))
    pools.get(("https", "a.example", 443))  # a is now the most recent
    pools.get(("https", "c.example", 443))
    assert b.closed and not a.closed and len(pools) == 2


def test_closing_a_guard_leaves_shared_pools_open_and_closes_its_own() -> None:
    made: list[_Transport] = []
    shared = TransportPools(lambda: made.append(_Transport()) or made[-1])
    guard = guard_transport(httpx, pools=shared)
    pool = shared.get(("https", "a.example", 443))
    guard.close()
    assert not pool.closed
    own: list[Any] = []
    alone = guard_transport(httpx, transport_factory=lambda: own.append(_Transport()) or own[-1])
    alone._pool_for(type("T", (), {"scheme": "https", "host": "a.example", "port": 443})())
    alone.close()
    assert own[0].closed


def test_two_guards_on_shared_pools_send_through_the_same_transport() -> None:
    shared = shared_pools(httpx, keepalive_s=5.0)
    target = type("T", (), {"scheme": "https", "host": "api.example", "port": 443})()
    first, second = guard_transport(httpx, pools=shared), guard_transport(httpx, pools=shared)
    assert first._pool_for(target) is second._pool_for(target)
    shared.close()
