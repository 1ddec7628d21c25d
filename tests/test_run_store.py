"""The run store's counters and guards (fakeredis with Lua: one process, no workers)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import fakeredis
import pytest

from agentfleet.models import TaskOutcome
from agentfleet.runs import BeginState, RunStore
from agentfleet.runs.lanes import LaneCache


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


def test_the_worker_time_stays_a_whole_number_past_what_lua_prints_plainly(store: RunStore) -> None:
    _create(store, 2)
    store.finish(_outcome(0, duration_s=400_000_000.0))  # 4e14 us: Lua would print 4e+14
    store.finish(_outcome(1, duration_s=1.5))
    assert store.client.hget("t:run:{r}", "worker_us") == "400000001500000"
    store.client.hincrby("t:run:{r}", "worker_us", 1)  # still an integer to Redis
    assert store.summary("r").worker_seconds == 400_000_001.5


def test_an_item_is_counted_once_however_often_it_is_recorded(store: RunStore) -> None:
    _create(store, 2)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: store.finish(_outcome(0)).recorded, range(20)))
    assert results.count(True) == 1
    assert store.summary("r").succeeded == 1


def _begin(store: RunStore, token: str = "w:1:a", ttl_s: float = 20.0) -> BeginState:
    return store.begin("r", "k0", "r-0", deliveries_ttl_s=60, token=token, claim_ttl_s=ttl_s)


def test_the_first_stored_outcome_wins(store: RunStore) -> None:
    _create(store, 1)
    store.finish(_outcome(0, result={"v": 1}), record=False)
    store.finish(_outcome(0, result={"v": 2}), record=True)
    state = _begin(store)
    assert state.verdict == "stored"
    assert state.stored is not None and state.stored.result == {"v": 1}
    assert store.outcomes("r")[0].result == {"v": 1}


def test_begin_counts_deliveries_whose_claim_lapsed_and_finish_clears_them(store: RunStore) -> None:
    _create(store, 1)
    counts = []
    for n in range(3):
        counts.append(_begin(store, token=f"w:1:{n}").deliveries)
        store.client.delete(store.claim_key("k0"))  # the worker died: its claim lapsed
    assert counts == [1, 2, 3]
    store.finish(_outcome(0), store=False)
    assert _begin(store).deliveries == 1


def test_a_start_sent_again_counts_its_delivery_once_with_its_own_token_or_a_batchs(
    store: RunStore,
) -> None:
    _create(store, 1)
    assert [_begin(store, token="w:1:own").deliveries for _ in range(3)] == [1, 1, 1]
    assert store.client.keys("t:deliv:*:w:1:own") == []  # the claim itself says it was counted
    store.client.delete(store.claim_key("k0"))  # the worker died: its claim lapsed
    # A batch claims its items up front: the first start under its token counts, once.
    store.client.set(store.claim_key("k0"), "w:2:batch", px=20_000)
    again = [
        store.begin("r", "k0", "r-0", deliveries_ttl_s=60, token="w:2:batch", claim_ttl_s=20, preclaimed=True)
        for _ in range(3)
    ]
    assert [(s.verdict, s.deliveries) for s in again] == [("claimed", 2)] * 3


def test_cancel_is_seen_by_the_next_delivery(store: RunStore) -> None:
    _create(store, 1)
    store.cancel("r")
    state = _begin(store)
    assert state.cancelled and state.deliveries == 0
    assert not store.live_claims(["k0"])[0]


def test_a_second_delivery_finds_the_live_claim_and_does_not_claim(store: RunStore) -> None:
    _create(store, 1)
    assert _begin(store, token="w:1:first").verdict == "claimed"
    second = _begin(store, token="w:2:second")
    assert second.verdict == "busy"
    assert 0 < second.claim_left_s <= 20
    assert second.deliveries == 0
    assert store.client.get(store.claim_key("k0")) == "w:1:first"


def test_finish_releases_only_its_own_claim_and_stores_nothing_under_another(store: RunStore) -> None:
    _create(store, 1)
    _begin(store, token="w:1:first")
    assert store.finish(_outcome(0), token="w:2:other").fenced
    assert store.live_claims(["k0"]) == [True]
    assert store.stored_outcomes(["k0"]) == [None]
    assert store.finish(_outcome(0), token="w:1:first").recorded
    assert store.live_claims(["k0"]) == [False]


def test_renewal_keeps_held_claims_and_reports_lost_ones(store: RunStore) -> None:
    _create(store, 2)
    store.begin("r", "k0", "r-0", deliveries_ttl_s=60, token="w:1:a", claim_ttl_s=5)
    store.begin("r", "k1", "r-1", deliveries_ttl_s=60, token="w:1:b", claim_ttl_s=5)
    store.client.set(store.claim_key("k1"), "w:9:thief")
    kept = store.renew_claims({"k0": "w:1:a", "k1": "w:1:b"}, ttl_s=60)
    assert kept == {"k0": True, "k1": False}
    assert store.client.pttl(store.claim_key("k0")) > 5000
    assert store.client.get(store.claim_key("k1")) == "w:9:thief"


def test_a_dead_pool_process_claim_is_released_by_its_prefix(store: RunStore) -> None:
    _create(store, 1)
    _begin(store, token="node@host:4242:abc")
    assert not store.release_claim_of("k0", "node@host:4243:")
    assert store.release_claim_of("k0", "node@host:4242:")
    assert _begin(store, token="node@host:5000:def").verdict == "claimed"


def test_an_item_input_is_kept_until_its_outcome(store: RunStore) -> None:
    store.create_run(
        "r",
        name="test",
        kind="map",
        task="t",
        items=[(f"r-{i}", f"k{i}", str(i)) for i in range(2)],
        inputs=[{"n": 0}, {"n": 1}],
        queues=["agents"],
    )
    assert store.active_runs() == ["r"]
    store.finish(_outcome(0))
    assert store.item_inputs("r", [0, 1]) == {1: {"n": 1}}
    store.finish(_outcome(1))
    assert store.active_runs() == []


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


def test_the_lane_cache_keeps_the_most_recent_runs_and_no_lane_of_none() -> None:
    lanes = LaneCache(size=2)
    lanes.note("r1", "w@h", 0)
    lanes.note("r2", "w@h", "3")
    lanes.note("r2", "", "1")  # no worker: nothing to remember
    lanes.note("r3", "w@h", -1)  # recorded without a worker's lane
    assert (lanes.get("r1", "w@h"), lanes.get("r2", "w@h"), lanes.get("r3", "w@h")) == ("0", "3", "")
    lanes.note("r1", "w@h", b"0")  # an outcome of r1 used its lane again
    lanes.note("r4", "w@h", "1")  # r2 was used least recently: forgotten
    assert (lanes.get("r1", "w@h"), lanes.get("r2", "w@h"), lanes.get("r4", "w@h")) == ("0", "", "1")


def test_each_item_is_counted_once_in_the_runs_bitmap_and_read_back_from_it(store: RunStore) -> None:
    _create(store, 20)
    for idx in (0, 3, 7, 8, 15, 19):
        assert store.finish(_outcome(idx)).recorded
        assert not store.finish(_outcome(idx)).recorded
    assert store.done_indices("r") == {0, 3, 7, 8, 15, 19}
    # Bit i of the bitmap is item i (bit 0 the high bit of the first byte), no hash beside it.
    bitmap = "t:run:{r}:recorded"
    assert store.client.getbit(bitmap, 7) == 1 and store.client.getbit(bitmap, 6) == 0
    assert not store.client.exists("t:run:{r}:done")
    assert store.summary("r").succeeded == 6


def test_a_reopened_item_is_uncounted_and_counted_again(store: RunStore) -> None:
    _create(store, 3)
    store.finish(_outcome(1))
    assert store.reopen("r", 1, key="k1", was_ok=True, was_dead=False)
    assert not store.reopen("r", 1, key="k1", was_ok=True, was_dead=False)
    assert store.done_indices("r") == set()
    assert store.summary("r").succeeded == 0
    assert store.finish(_outcome(1)).recorded
    assert store.done_indices("r") == {1}


def test_a_run_an_earlier_version_began_counting_in_its_hash_is_counted_once_across_both(
    store: RunStore,
) -> None:
    # Items 0 and 1 counted by a worker of an earlier version: in the hash, the counters moved.
    _create(store, 4)
    store.client.hset("t:run:{r}:done", mapping={"0": "1", "1": "1"})
    store.client.hset("t:run:{r}", mapping={"done": 2, "succeeded": 2})
    assert not store.finish(_outcome(1)).recorded
    assert store.finish(_outcome(2)).recorded
    assert store.done_indices("r") == {0, 1, 2}
    assert store.reopen("r", 0, key="k0", was_ok=True, was_dead=False)
    assert store.done_indices("r") == {1, 2}
    assert store.finish(_outcome(0)).recorded
    assert store.finish(_outcome(3)).run_ended
    assert store.summary("r").succeeded == 4


def test_an_index_no_bit_stands_for_is_counted_in_the_hash(store: RunStore) -> None:
    _create(store, 1)
    far = 2**32
    assert store.finish(_outcome(far)).recorded
    assert not store.finish(_outcome(far)).recorded
    assert store.client.hkeys("t:run:{r}:done") == [str(far)]
    assert store.done_indices("r") == {far}
    assert store.reopen("r", far, key=f"k{far}", was_ok=True, was_dead=False)
    assert store.done_indices("r") == set()


def test_the_bitmap_reads_back_on_a_real_redis(redis_client: object, key_prefix: str) -> None:
    # Every byte value a bitmap may hold, read by Redis's own Lua (not fakeredis's).
    real = RunStore(redis_client, prefix=key_prefix, ttl_s=3600)  # type: ignore[arg-type]
    _create(real, 600)
    counted = {i for i in range(600) if i % 3 == 0 or i % 7 == 0 or 200 <= i < 264}
    for idx in sorted(counted):
        assert real.finish(_outcome(idx)).recorded
    assert real.done_indices("r") == counted
    assert real.summary("r").succeeded == len(counted)
