"""The approval store on a real Redis: the first decision stands, the timeout decides, events
complete every wait on their key, a cancelled run cancels its pauses, and every decided pause
waits in the outbox until its item is sent again."""

from __future__ import annotations

import time

import pytest
import redis
from celery import Celery

from agentfleet import Approval, ApprovalAlreadyDecided, ApprovalError, ApprovalExpired, ApprovalNotFound
from agentfleet.approvals import ApprovalStore, approval_id
from agentfleet.approvals.resume import sweep


@pytest.fixture
def store(redis_client: redis.Redis, key_prefix: str) -> ApprovalStore:
    return ApprovalStore(redis_client, prefix=key_prefix, keep_s=600)


def _pause(
    store: ApprovalStore,
    n: int = 0,
    *,
    run: str = "r1",
    event: str | None = None,
    timeout_s: float | None = None,
    queue: str = "q",
    **kw: object,
) -> str:
    kind = "event" if event else "approval"
    pid = approval_id(f"{run}:{n}:k", kind, event or "deploy", 0)
    approval = Approval(
        id=pid,
        kind=kind,
        name=None if event else "deploy",
        key=event,
        run_id=run,
        item_key=f"{run}:{n}:k",
        index=n,
        **kw,  # type: ignore[arg-type]
    )
    message = {"task": "t", "args": [], "kwargs": {"n": n}, "options": {"queue": queue}, "subtask_type": None}
    assert store.create(approval, message, timeout_s=timeout_s)
    return pid


def test_ids_are_the_same_for_the_same_call_and_differ_between_calls() -> None:
    assert approval_id("k", "approval", "deploy", 0) == approval_id("k", "approval", "deploy", 0)
    ids = {approval_id("k", "approval", "deploy", n) for n in range(3)}
    ids |= {approval_id("k", "event", "deploy", 0), approval_id("k2", "approval", "deploy", 0)}
    assert len(ids) == 5


def test_a_pause_is_made_once_and_the_first_decision_stands(store: ApprovalStore) -> None:
    pid = _pause(store)
    again = Approval(id=pid, run_id="r1", item_key="r1:0:k", name="other")
    assert not store.create(again, {}), "a copy delivered again finds the pause"
    assert store.get(pid).name == "deploy" and store.get(pid).pending
    decided = store.decide(pid, approved=True, by="alice", comment="ok", data={"v": [1, 2]})
    assert decided.status == "approved"
    assert decided.decision is not None and decided.decision.data == {"v": [1, 2]}
    assert decided.decision.by == "alice" and decided.decision.decided_at > 0
    with pytest.raises(ApprovalAlreadyDecided) as raised:
        store.decide(pid, approved=False, by="bob")
    assert raised.value.approval.decision.by == "alice"
    assert store.get(pid).status == "approved"
    assert store.outbox(time.time() + 1) == [pid], "decided, its item not sent yet (no app)"


def test_unknown_ids_and_data_that_is_not_json_are_refused(store: ApprovalStore) -> None:
    with pytest.raises(ApprovalNotFound):
        store.get("ap_missing")
    with pytest.raises(ApprovalNotFound):
        store.decide("ap_missing", approved=True)
    pid = _pause(store)
    with pytest.raises(ApprovalError, match="data must be JSON"):
        store.decide(pid, approved=True, data={"when": object()})
    assert store.get(pid).pending, "nothing changed"


def test_the_timeout_decides_and_a_decision_after_it_is_refused(store: ApprovalStore) -> None:
    approve = _pause(store, 0, on_timeout="approve", timeout_s=0.2)
    reject = _pause(store, 1, timeout_s=0.2)
    later = _pause(store, 2, timeout_s=600)
    assert store.get(approve).expires_at is not None
    time.sleep(0.3)
    with pytest.raises(ApprovalExpired) as raised:
        store.decide(approve, approved=False, by="late")
    assert raised.value.approval.status == "timed_out"
    decision = raised.value.approval.decision
    assert decision.approved and decision.timed_out and decision.by is None
    assert store.time_out_due() == [reject]
    assert store.get(reject).decision.approved is False
    assert store.get(later).pending
    with pytest.raises(ApprovalExpired):
        store.decide(reject, approved=True)


def test_an_event_completes_every_wait_on_its_key_and_is_not_kept(store: ApprovalStore) -> None:
    waits = [_pause(store, n, event="ci:7") for n in range(2)]
    other = _pause(store, 2, event="ci:8")
    assert store.send_event("ci:7", {"status": "green"}) == 2
    for pid in waits:
        found = store.get(pid)
        assert found.status == "approved" and found.decision.data == {"status": "green"}
    assert store.get(other).pending
    assert store.send_event("ci:7", {}) == 0
    assert store.send_event("ci:9", {}) == 0


def test_cancelling_a_run_cancels_its_pending_pauses_only(store: ApprovalStore) -> None:
    decided, pending = _pause(store, 0), _pause(store, 1)
    elsewhere = _pause(store, 0, run="r2")
    store.decide(decided, approved=True)
    assert store.cancel_run("r1") == 1
    assert store.get(pending).status == "cancelled" and store.get(pending).decision is None
    assert store.get(decided).status == "approved"
    assert store.get(elsewhere).pending


def test_listing_and_the_parked_items_of_a_run(store: ApprovalStore) -> None:
    a, b, c = _pause(store, 0), _pause(store, 1), _pause(store, 2)
    assert [x.id for x in store.list("r1")] == [c, b, a], "newest first"
    store.decide(a, approved=True)
    assert {x.id for x in store.list("r1")} == {b, c}
    assert {x.id for x in store.list("r1", status=None)} == {a, b, c}
    assert [x.id for x in store.list(status="approved")] == [a]
    assert store.parked_indices("r1") == {0, 1, 2}, "a decided item is parked until sent again"
    store.mark_sent([a])
    assert store.parked_indices("r1") == {1, 2}
    assert store.pending_count("r1") == 2


def test_the_sweep_sends_what_a_decider_left_in_the_outbox_once(
    redis_url: str, redis_client: redis.Redis, store: ApprovalStore, key_prefix: str
) -> None:
    app = Celery(broker=redis_url, set_as_current=False)
    queue = f"{key_prefix}.q"
    try:
        pid = _pause(store, queue=queue)
        store.decide(pid, approved=True)
        assert sweep(store, app, time.time(), grace_s=60) == 0, "not yet past the grace"
        assert redis_client.llen(queue) == 0
        assert sweep(store, app, time.time() + 61, grace_s=60) == 1
        assert redis_client.llen(queue) == 1, "the item's message is in its queue"
        assert store.outbox(time.time() + 3600) == []
        assert sweep(store, app, time.time() + 61, grace_s=60) == 0, "sent once"
        assert 0 < redis_client.ttl(store.keys.record(pid)) <= 600, "kept keep_s more"
    finally:
        redis_client.delete(queue)
        app.close()
