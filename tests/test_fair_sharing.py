"""A small run dispatched behind a big one does not wait for the big one to drain."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.config import load_settings

pytestmark = pytest.mark.slow

SLOTS = 2
BIG = 40
ITEM_S = 0.5


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    # Runs of more than 10 items count as big here.
    settings = load_settings(dispatch={"small_run_items": 10})
    with LocalCluster(
        workers=1, concurrency=SLOTS, pool="threads", env=cluster_env(), settings=settings
    ) as running:
        yield running


def test_a_small_run_goes_ahead_of_a_big_runs_waiting_messages(cluster: LocalCluster) -> None:
    fleet = cluster.fleet()
    big = fleet.map("fleet_test_tasks.sleepy", [{"n": n, "sleep_s": ITEM_S} for n in range(BIG)])
    small = fleet.map("fleet_test_tasks.sleepy", [{"n": n, "sleep_s": ITEM_S} for n in range(2)])
    assert small.wait(timeout_s=60).succeeded == 2
    # Behind the big run's queue the small one would wait for 40 x 0.5 s / 2 slots = 10 s.
    assert big.summary().succeeded < BIG // 4, big.summary()
    assert big.wait(timeout_s=120).succeeded == BIG


def test_a_given_priority_orders_runs_of_any_size(cluster: LocalCluster) -> None:
    fleet = cluster.fleet()
    low = fleet.map("fleet_test_tasks.sleepy", [{"n": n, "sleep_s": ITEM_S} for n in range(12)], priority=1)
    time.sleep(0.2)
    high = fleet.map("fleet_test_tasks.sleepy", [{"n": n, "sleep_s": ITEM_S} for n in range(12)], priority=9)
    assert high.wait(timeout_s=60).succeeded == 12
    assert low.summary().succeeded < 12 // 2, low.summary()
    assert low.wait(timeout_s=60).succeeded == 12
