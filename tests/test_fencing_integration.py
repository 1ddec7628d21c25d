"""Claims that fence, on a real worker: the test plays the other delivery by taking the item's
claim in Redis while the worker runs the body (as a worker would whose reconciler sent the
item again after this one's claim lapsed). Counted at the far end: the ``paced`` task writes
each body execution's start, end or stop to a file, and Redis holds what was stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import fleet_test_tasks as tt
import pytest
from event_tap import EventTap
from fault_support import Effects, fault_cluster, outcome_events, wait_until

from agentfleet import LocalCluster
from agentfleet.models import TaskOutcome

pytestmark = pytest.mark.slow

# Claims lapse in 3 s (renewed every second); the reconciler stays out of these tests' way.
DELIVERY = {"claim_ttl_s": 3.0, "reconcile_interval_s": 1.0, "reconcile_grace_s": 60.0}
THIEF = "other-node:9:0000"


@pytest.fixture
def effects(tmp_path: Path) -> Effects:
    return Effects(tmp_path / "effects")


@pytest.fixture
def cluster(redis_url: str, effects: Effects) -> Iterator[LocalCluster]:
    with fault_cluster(redis_url, effects, workers=1, concurrency=2, delivery=DELIVERY) as running:
        yield running


def paced_lines(effects: Effects) -> list[list[str]]:
    """Each body execution's events: ``[event, token, node, epoch seconds]``."""
    path = effects.root / "paced"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def events(effects: Effects, event: str, token: str) -> list[list[str]]:
    return [line for line in paced_lines(effects) if line[0] == event and line[1] == token]


def test_an_outcome_is_not_stored_while_another_delivery_holds_the_claim(
    cluster: LocalCluster, effects: Effects
) -> None:
    fleet = cluster.fleet()
    with EventTap(fleet.app) as tap:
        _refused_then_reported(cluster, effects, tap)


def _refused_then_reported(cluster: LocalCluster, effects: Effects, tap: EventTap) -> None:
    fleet = cluster.fleet()
    run = fleet.map(tt.paced, [{"token": "t0", "sleep_s": 3.0}])
    wait_until(lambda: events(effects, "start", "t0"), 60, "the body to start")
    store = fleet.store
    task_id, key, _ = store.items(run.id)[0]
    # Another delivery took the item over: this worker's claim is gone, a live one stands.
    store.client.set(store.claim_key(key), THIEF, px=10_000)
    worker = cluster.workers[0]
    wait_until(lambda: "this outcome was not stored" in worker.log_text(), 30, "the finish to be refused")
    assert store.stored_outcomes([key]) == [None]
    # The copy that handed the item back is off the count towards poison: its worker lives.
    counter = store.keys.deliveries(key, task_id)
    wait_until(lambda: not store.client.exists(counter), 30, "the handed-back delivery to come off the count")
    assert store.get_run(run.id)["done"] == "0"
    # The other delivery ends the item; the refused copy comes back and reports its outcome.
    theirs = TaskOutcome(
        task_id=task_id, run_id=run.id, item_key="0", ok=True, index=0, idempotency_key=key,
        result={"token": "t0", "node": "other"},
    )  # fmt: skip
    assert store.finish(theirs, token=THIEF).recorded
    summary = run.wait(timeout_s=60)
    assert (summary.tasks_total, summary.succeeded) == (1, 1)
    assert outcome_events(run) == {0: 1}
    # What Celery tooling sees: the copy that lost reports the outcome that stands, not its own.
    wait_until(lambda: tap.result_of(task_id) is not None, 60, "the task-succeeded event")
    assert "'node': 'other'" in str(tap.result_of(task_id))
    assert (len(events(effects, "start", "t0")), len(events(effects, "end", "t0"))) == (1, 1)
    assert worker.log_text().count("this outcome was not stored") == 1


def test_the_body_stops_at_its_next_fleet_call_once_its_claim_is_taken(
    cluster: LocalCluster, effects: Effects
) -> None:
    fleet = cluster.fleet()
    run = fleet.map(tt.paced, [{"token": "t1", "sleep_s": 6.0, "check": True}])
    wait_until(lambda: events(effects, "start", "t1"), 60, "the body to start")
    store = fleet.store
    _, key, _ = store.items(run.id)[0]
    taken_at = time.time()
    store.client.set(store.claim_key(key), THIEF, px=4_000)
    wait_until(lambda: events(effects, "stopped", "t1"), 30, "the body to stop")
    stopped_at = float(events(effects, "stopped", "t1")[0][3])
    # The renewer looks every third of the TTL: the body stops within about a second.
    assert stopped_at - taken_at < DELIVERY["claim_ttl_s"]
    assert store.stored_outcomes([key]) == [None]
    # Once the other claim lapsed with no outcome, the item comes back and runs to its end.
    summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.failed, summary.retries) == (1, 0, 0)
    assert outcome_events(run) == {0: 1}
    assert [len(events(effects, e, "t1")) for e in ("start", "stopped", "end")] == [2, 1, 1]
