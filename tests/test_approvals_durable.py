"""Parked items under faults and load: a Redis restart from its append-only file, and a
thousand items parked on a worker of two slots while another run flows through."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import approval_test_tasks as at
import pytest
from fault_support import FAST_DELIVERY, delivery_env, wait_until

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.orchestration import Fleet

pytestmark = pytest.mark.slow


def _cluster(redis_url: str, concurrency: int) -> LocalCluster:
    tag = uuid.uuid4().hex[:8]
    queues = {"agents": f"a{tag}.agents", "fanin": f"a{tag}.fanin", "maintenance": f"a{tag}.maint"}
    env = {
        "AGENTFLEET_TASK_MODULES": "approval_test_tasks",
        "PYTHONPATH": os.path.dirname(os.path.abspath(__file__)),
        **delivery_env(FAST_DELIVERY),
    }
    return LocalCluster(
        workers=1,
        concurrency=concurrency,
        pool="threads",
        broker_url=redis_url,
        env=env,
        settings=load_settings(queues=queues, key_prefix=f"a{tag}", delivery=FAST_DELIVERY),
        startup_timeout_s=120,
    )


@pytest.fixture
def private_redis() -> Iterator[EmbeddedRedis]:
    """A Redis for this test alone, with the append-only file on, as production runs it."""
    server = EmbeddedRedis(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


def _pending(fleet: Fleet, run_id: str) -> int:
    return len(fleet.approvals(run=run_id))


def test_a_parked_item_survives_a_redis_restart_from_its_append_only_file(
    private_redis: EmbeddedRedis,
) -> None:
    with _cluster(private_redis.url, 2) as cluster:
        fleet = cluster.fleet()
        run = fleet.map(at.gated, [{"marker": uuid.uuid4().hex} for _ in range(3)])
        wait_until(lambda: _pending(fleet, run.id) == 3, 60, "three items to park")
        time.sleep(1.5)  # past the append-only file's one-second sync
        private_redis.kill()
        time.sleep(1.0)
        private_redis.start()
        wait_until(lambda: _pending(fleet, run.id) == 3, 60, "the pauses to be read back")
        time.sleep(4 * FAST_DELIVERY["reconcile_grace_s"])
        assert _pending(fleet, run.id) == 3, "the reconciler sent no parked item again"
        assert run.outcomes() == []
        for approval in fleet.approvals(run=run.id):
            fleet.approve(approval.id, by="after-restart")
        summary = run.wait(timeout_s=120)
    assert (summary.succeeded, summary.recovered) == (3, 0), summary
    assert {o.result["by"] for o in run.outcomes()} == {"after-restart"}


def test_a_thousand_parked_items_leave_two_slots_free_for_another_run(redis_url: str) -> None:
    with _cluster(redis_url, 2) as cluster:
        fleet = cluster.fleet()
        parked = fleet.map(at.stamped, [{"token": f"k{n}"} for n in range(1000)])
        wait_until(lambda: _pending(fleet, parked.id) == 1000, 300, "a thousand items to park")
        assert parked.summary().waiting_approval == 1000
        other = fleet.map(at.work, [{"n": n, "sleep_s": 0.01} for n in range(100)])
        summary = other.wait(timeout_s=120)
        assert summary.succeeded == 100, summary
        assert _pending(fleet, parked.id) == 1000, "nothing parked ran meanwhile"
        for approval in fleet.approvals(run=parked.id)[:20]:
            fleet.approve(approval.id)
        wait_until(lambda: len(parked.outcomes()) == 20, 120, "the twenty approved items to end")
        parked.cancel(compensate=False)
        summary = parked.wait(timeout_s=300)
    assert (summary.succeeded, summary.cancelled) == (20, 980), summary
