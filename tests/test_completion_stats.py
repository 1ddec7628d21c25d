"""Fleet-wide completion counters in the run store: per-second buckets and cumulative totals."""

from __future__ import annotations

import time
from collections.abc import Iterator

import fakeredis
import pytest

from agentfleet.models import TaskOutcome
from agentfleet.runs import RunStore


@pytest.fixture
def store() -> Iterator[RunStore]:
    client = fakeredis.FakeRedis(decode_responses=True)
    yield RunStore(client, prefix="s", ttl_s=3600)
    client.close()


def _outcome(run: str, idx: int, ok: bool = True, **extra: object) -> TaskOutcome:
    return TaskOutcome(
        task_id=f"{run}-{idx}",
        run_id=run,
        item_key=str(idx),
        ok=ok,
        index=idx,
        idempotency_key=f"{run}{idx}",
        **extra,
    )


def _create(store: RunStore, run: str, n: int) -> None:
    store.create_run(
        run, name=run, kind="map", task="t", items=[(f"{run}-{i}", f"{run}{i}", str(i)) for i in range(n)]
    )


def test_nothing_counted_yet(store: RunStore) -> None:
    stats = store.completion_stats()
    assert stats.completed_in_window == 0 and stats.last_done_at is None and stats.totals == {}


def test_each_item_is_counted_once_with_its_outcome_cost_and_time(store: RunStore) -> None:
    _create(store, "a", 3)
    _create(store, "b", 0)
    before = time.time()
    store.finish(_outcome("a", 0, cost_usd=0.5, duration_s=2.0))
    store.finish(_outcome("a", 0, cost_usd=0.5, duration_s=2.0))  # a redelivery: not counted again
    store.finish(_outcome("a", 1, ok=False, dead_lettered=True, cost_usd=0.25))
    store.finish(_outcome("a", 2, ok=False, error_type="Cancelled"))
    stats = store.completion_stats(60)
    assert stats.completed_in_window == 3
    assert stats.last_done_at is not None and before <= stats.last_done_at <= time.time()
    totals = stats.totals
    assert (totals["succeeded"], totals["failed"], totals["cancelled"], totals["dead_lettered"]) == (
        1,
        1,
        1,
        1,
    )
    assert totals["cost_usd"] == pytest.approx(0.75) and totals["worker_seconds"] == pytest.approx(2.0)
    assert totals["runs_started"] == 2 and totals["runs_finished"] == 2, "an empty run is finished at once"


def test_the_window_only_counts_recent_seconds(store: RunStore) -> None:
    _create(store, "a", 2)
    store.finish(_outcome("a", 0))
    store.finish(_outcome("a", 1))
    assert store.completion_stats(60, now=time.time() + 120).completed_in_window == 0
    assert store.completion_stats(60, now=time.time() + 30).completed_in_window == 2
    assert store.completion_stats(1000).window_s == 120, "buckets live 120 s, so no longer window"
