"""The run store's counters and guards (fakeredis with Lua: one process, no workers)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import fakeredis
import pytest

from agentfleet.models import TaskOutcome
from agentfleet.runs import RunStore


@pytest.fixture
def store() -> Iterator[RunStore]:
    client = fakeredis.FakeRedis(decode_responses=True)
    yield RunStore(client, prefix="t", ttl_s=3600)
    client.close()


def _outcome(idx: int, ok: bool = True, **extra: object) -> TaskOutcome:
    return TaskOutcome(
        task_id=f"r-{idx}",
        run_id="r",
        item_key=str(idx),
        ok=ok,
        index=idx,
        idempotency_key=f"k{idx}",
        **extra,
    )


def _create(store: RunStore, n: int) -> None:
    store.create_run(
        "r", name="test", kind="map", task="t", items=[(f"r-{i}", f"k{i}", str(i)) for i in range(n)]
    )


def test_counters_add_up_and_the_run_ends_once(store: RunStore) -> None:
    _create(store, 3)
    assert not store.finish(_outcome(0, cost_usd=0.25, duration_s=1.0)).run_ended
    assert not store.finish(_outcome(1, ok=False, dead_lettered=True)).run_ended
    assert store.finish(_outcome(2, cost_usd=0.5, duration_s=2.0)).run_ended
    summary = store.summary("r")
    assert (summary.succeeded, summary.failed, summary.dead_lettered) == (2, 1, 1)
    assert summary.cost_usd == 0.75 and summary.worker_seconds == 3.0
    assert summary.status == "finished" and summary.ended_at is not None
    assert summary.success_rate == round(2 / 3, 4)


def test_an_item_is_counted_once_however_often_it_is_recorded(store: RunStore) -> None:
    _create(store, 2)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: store.finish(_outcome(0)).recorded, range(20)))
    assert results.count(True) == 1
    assert store.summary("r").succeeded == 1


def test_the_first_stored_outcome_wins(store: RunStore) -> None:
    _create(store, 1)
    store.finish(_outcome(0, result={"v": 1}), record=False)
    store.finish(_outcome(0, result={"v": 2}), record=True)
    assert store.begin("r", "k0", "r-0", deliveries_ttl_s=60).stored.result == {"v": 1}
    assert store.outcomes("r")[0].result == {"v": 1}


def test_begin_counts_unfinished_deliveries_and_finish_clears_them(store: RunStore) -> None:
    _create(store, 1)
    assert [store.begin("r", "k0", "r-0", deliveries_ttl_s=60).deliveries for _ in range(3)] == [1, 2, 3]
    store.finish(_outcome(0), store=False)
    assert store.begin("r", "k0", "r-0", deliveries_ttl_s=60).deliveries == 1


def test_cancel_is_seen_by_the_next_delivery(store: RunStore) -> None:
    _create(store, 1)
    store.cancel("r")
    state = store.begin("r", "k0", "r-0", deliveries_ttl_s=60)
    assert state.cancelled and state.deliveries == 0


def test_reopen_uncounts_a_dead_letter_so_a_requeue_can_record_again(store: RunStore) -> None:
    _create(store, 1)
    store.finish(_outcome(0, ok=False, dead_lettered=True))
    assert store.reopen("r", 0, "k0", was_ok=False, was_dead=True)
    assert store.summary("r").status == "running"
    store.finish(_outcome(0))
    summary = store.summary("r")
    assert (summary.succeeded, summary.failed, summary.dead_lettered, summary.redelivered) == (1, 0, 0, 1)
    assert summary.status == "finished"


def test_runs_are_listed_newest_first(store: RunStore) -> None:
    for i, run_id in enumerate(["a", "b", "c"]):
        store.create_run(run_id, name=run_id, kind="map", task="t", items=[], created_at=100.0 + i)
    assert [s.run_id for s in store.list_runs(2)] == ["c", "b"]
