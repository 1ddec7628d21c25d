"""Pauses for a decision on real workers: an item parks without holding a slot, and resumes
where it stopped once a person (or an event, or the timeout) decides.

The oracle for "resumes where it stopped" is what the task counted in Redis: its step before
the pause ran once, its body ran twice (parked, then resumed), its step after ran once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import approval_test_tasks as at
import pytest
import redis
from fault_support import FAST_DELIVERY, delivery_env, wait_until

from agentfleet import ApprovalAlreadyDecided, ApprovalExpired, LocalCluster
from agentfleet.config import load_settings
from agentfleet.orchestration import Fleet, Run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(redis_url: str) -> Iterator[LocalCluster]:
    tag = uuid.uuid4().hex[:8]
    queues = {"agents": f"a{tag}.agents", "fanin": f"a{tag}.fanin", "maintenance": f"a{tag}.maint"}
    env = {"AGENTFLEET_TASK_MODULES": "approval_test_tasks", **delivery_env(FAST_DELIVERY)}
    with LocalCluster(
        workers=1,
        concurrency=2,
        pool="threads",
        broker_url=redis_url,
        env={"PYTHONPATH": __import__("os").path.dirname(__file__), **env},
        settings=load_settings(queues=queues, key_prefix=f"a{tag}", delivery=FAST_DELIVERY),
        startup_timeout_s=120,
    ) as running:
        yield running


@pytest.fixture
def fleet(cluster: LocalCluster) -> Fleet:
    return cluster.fleet()


def _count(client: redis.Redis, marker: str, what: str) -> int:
    return int(client.get(f"test:appr:{marker}:{what}") or 0)


def _parked(fleet: Fleet, run: Run, n: int = 1, timeout_s: float = 60) -> list[str]:
    wait_until(lambda: len(fleet.approvals(run=run.id)) >= n, timeout_s, f"{n} items to park")
    return [a.id for a in fleet.approvals(run=run.id)]


def _result(run: Run, timeout_s: float = 60) -> dict[str, object]:
    summary = run.wait(timeout_s=timeout_s)
    assert summary.timed_out == 0, summary
    (outcome,) = run.outcomes()
    assert outcome.ok, outcome
    return outcome.result  # type: ignore[no-any-return]


def test_an_approved_item_resumes_after_its_steps_with_the_decision(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    marker = uuid.uuid4().hex
    run = fleet.map(at.gated, [{"marker": marker}])
    (pid,) = _parked(fleet, run)
    approval = fleet.approval_store.get(pid)
    assert approval.name == "deploy" and approval.run_id == run.id and approval.index == 0
    assert approval.task_name == at.gated.name
    assert approval.details["plan"] == "deploy v2" and approval.details["api_key"] == "[REDACTED]"
    assert run.summary().waiting_approval == 1
    assert {s.run_id: s.waiting_approval for s in fleet.runs(50)}[run.id] == 1, "parked by a real worker"
    decided = fleet.approve(pid, by="alice", comment="ship it", data={"version": 3})
    assert decided.status == "approved" and decided.decision is not None
    result = _result(run)
    assert result["approved"] is True and result["by"] == "alice" and result["comment"] == "ship it"
    assert result["data"] == {"version": 3} and result["timed_out"] is False
    assert _count(redis_client, marker, "before") == 1, "the step before the pause ran once"
    assert _count(redis_client, marker, "body") == 2, "parked once, resumed once"
    assert _count(redis_client, marker, "after") == 1
    assert run.summary().waiting_approval == 0
    assert {s.run_id: s.waiting_approval for s in fleet.runs(50)}[run.id] == 0


def test_a_rejection_comes_back_and_a_second_decision_is_refused(fleet: Fleet) -> None:
    run = fleet.map(at.gated, [{"marker": uuid.uuid4().hex}])
    (pid,) = _parked(fleet, run)
    fleet.reject(pid, by="bob", comment="not today")
    with pytest.raises(ApprovalAlreadyDecided) as raised:
        fleet.approve(pid, by="carol")
    assert raised.value.approval.status == "rejected"
    assert raised.value.approval.decision.by == "bob"
    result = _result(run)
    assert result["approved"] is False and result["by"] == "bob" and result["comment"] == "not today"


def test_the_timeout_decides_and_a_later_decision_is_refused(fleet: Fleet) -> None:
    run = fleet.map(at.gated, [{"marker": uuid.uuid4().hex, "timeout_s": 1.0, "on_timeout": "approve"}])
    (pid,) = _parked(fleet, run)
    result = _result(run)
    assert result["timed_out"] is True and result["approved"] is True
    with pytest.raises(ApprovalExpired) as raised:
        fleet.reject(pid, by="late")
    assert raised.value.approval.status == "timed_out"


def test_an_event_completes_every_item_waiting_on_its_key(fleet: Fleet) -> None:
    key = f"ci-{uuid.uuid4().hex}"
    marker = uuid.uuid4().hex
    run = fleet.map(at.waiter, [{"marker": marker, "key": key}, {"marker": marker, "key": key}])
    _parked(fleet, run, 2)
    assert fleet.send_event(key, {"status": "green"}) == 2
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 2, summary
    for outcome in run.outcomes():
        assert outcome.result["approved"] is True and outcome.result["data"] == {"status": "green"}
    assert fleet.send_event(key, {"status": "again"}) == 0, "nobody waits any more"


def test_two_pauses_of_one_name_are_two_approvals(fleet: Fleet) -> None:
    run = fleet.map(at.twice, [{"marker": "x"}])
    (first,) = _parked(fleet, run)
    fleet.approve(first, comment="one")
    wait_until(
        lambda: len(fleet.approvals(run=run.id)) == 1 and fleet.approvals(run=run.id)[0].id != first,
        60,
        "the second pause",
    )
    (second,) = [a.id for a in fleet.approvals(run=run.id)]
    fleet.reject(second, comment="two")
    result = _result(run)
    assert result["first"]["comment"] == "one" and result["first"]["approved"] is True
    assert result["second"]["comment"] == "two" and result["second"]["approved"] is False


def test_cancelling_the_run_cancels_its_approvals_and_ends_its_items(fleet: Fleet) -> None:
    run = fleet.map(at.gated, [{"marker": uuid.uuid4().hex}, {"marker": uuid.uuid4().hex}])
    ids = _parked(fleet, run, 2)
    run.cancel()
    assert {fleet.approval_store.get(i).status for i in ids} == {"cancelled"}
    summary = run.wait(timeout_s=60)
    assert summary.cancelled == 2, summary


def test_a_parked_item_survives_a_killed_worker_and_a_decision_made_while_none_runs(
    fleet: Fleet, cluster: LocalCluster, redis_client: redis.Redis
) -> None:
    marker = uuid.uuid4().hex
    run = fleet.map(at.gated, [{"marker": marker}])
    (pid,) = _parked(fleet, run)
    cluster.kill_worker(cluster.workers[0])
    fleet.approve(pid, by="night-shift")
    assert run.outcomes() == [], "no worker runs: the item waits in the queue"
    cluster.add_worker()
    result = _result(run, timeout_s=120)
    assert result["approved"] is True and result["by"] == "night-shift"
    assert _count(redis_client, marker, "before") == 1


def test_a_wall_budget_does_not_tick_while_the_item_is_parked(fleet: Fleet) -> None:
    run = fleet.map(at.budgeted, [{}])
    (pid,) = _parked(fleet, run)
    time.sleep(4.0)  # longer than the task's whole wall budget
    fleet.approve(pid)
    result = _result(run)
    assert result["approved"] is True
    (outcome,) = run.outcomes()
    assert outcome.duration_s < 3.0, "the item's time counts only what its body ran"


def test_items_of_a_batch_park_and_resume_each_on_their_own(fleet: Fleet, redis_client: redis.Redis) -> None:
    markers = [uuid.uuid4().hex for _ in range(3)]
    run = fleet.map(at.gated, [{"marker": m} for m in markers], batch_size=3)
    ids = _parked(fleet, run, 3)
    for pid in ids:
        fleet.approve(pid, by="batch")
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 3, summary
    assert {o.result["by"] for o in run.outcomes()} == {"batch"}
    assert [_count(redis_client, m, "before") for m in markers] == [1, 1, 1]
