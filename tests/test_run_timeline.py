"""A run's timeline and the fleet's minutes in the run store, on a real Redis (no workers).

The entries are written by the same scripts that record outcomes and attempts, so each is
written once with what it notes; these tests call the store as a worker's delivery does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from agentfleet.config import Settings, load_settings
from agentfleet.models import TaskOutcome
from agentfleet.runs import AttemptSpan, FleetHistory, RunStore

RUN = "5a5a5a5a5a5a5a5a"


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(broker_url=redis_url, key_prefix=key_prefix)


@pytest.fixture
def store(settings: Settings) -> RunStore:
    return RunStore.from_settings(settings)


def _items(n: int) -> list[tuple[str, str, str]]:
    return [(f"{RUN}-{i}", f"{RUN}:{i}:ab", str(i)) for i in range(n)]


def _outcome(i: int, *, ok: bool = True, cost: float = 0.0) -> TaskOutcome:
    return TaskOutcome(
        task_id=f"{RUN}-{i}",
        run_id=RUN,
        item_key=str(i),
        ok=ok,
        index=i,
        idempotency_key=f"{RUN}:{i}:ab",
        cost_usd=cost,
    )


def test_an_outcome_sent_twice_is_one_entry_timed_on_redis_clock(store: RunStore) -> None:
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(2))
    before_ms = time.time() * 1000
    store.finish(_outcome(0, cost=0.0025), span=AttemptSpan("w1@h", 1.5))
    store.finish(_outcome(0, cost=0.0025), span=AttemptSpan("w1@h", 1.5))
    log = store.spans(RUN)
    assert len(log.spans) == 1
    span = log.finals[0]
    assert (span.kind, log.worker(span.lane), span.cost_usd) == ("s", "w1@h", 0.0025)
    assert span.end_ms - span.start_ms == 1500 and span.end_ms >= before_ms - 1000
    assert store.events_at(RUN, [span.event])[span.event]["idx"] == "0"


def test_a_retry_counted_twice_is_one_entry(store: RunStore) -> None:
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(1))
    for _ in range(2):
        store.count_attempt(RUN, "retries", event="t 0:0:0", index=0, span=AttemptSpan("w2@h", 0.25))
    store.count_attempt(RUN, "deferrals", event="t 0:1:0", index=0, span=AttemptSpan("w1@h", 0.01))
    log = store.spans(RUN)
    assert [(s.kind, log.worker(s.lane)) for s in log.spans] == [("r", "w2@h"), ("d", "w1@h")]
    assert log.lanes == {0: "w2@h", 1: "w1@h"}
    summary = store.summary(RUN)
    assert (summary.retries, summary.deferrals) == (1, 1)


def test_a_requeued_item_has_no_standing_outcome_until_its_next(store: RunStore) -> None:
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(1))
    store.finish(_outcome(0, ok=False), span=AttemptSpan("w1@h", 0.1))
    store.reopen(RUN, 0, f"{RUN}:0:ab", was_ok=False, was_dead=False)
    assert store.spans(RUN).finals == {}
    store.finish(_outcome(0), span=AttemptSpan("w2@h", 0.1))
    log = store.spans(RUN)
    assert log.finals[0].kind == "s" and [s.kind for s in log.spans] == ["f", "o", "s"]


def test_a_later_read_fetches_only_the_entries_written_since(store: RunStore) -> None:
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(3))
    store.finish(_outcome(0), span=AttemptSpan("w1@h", 0.1))
    first = store.spans(RUN)
    store.finish(_outcome(1), span=AttemptSpan("w1@h", 0.1))
    store.client.lset(store.run_key(RUN, "spans"), 0, "garbled")
    later = store.spans(RUN, after=first)
    assert [s.index for s in later.spans] == [0, 1], "the first entry was not read again"
    assert later.entries == 2
    store.client.delete(store.run_key(RUN, "spans"))
    assert store.spans(RUN, after=later).spans == [], "a list gone is read whole, not from where it was"


def test_outcomes_without_a_worker_still_have_their_entry(store: RunStore) -> None:
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(1))
    cancelled = _outcome(0, ok=False).model_copy(update={"error_type": "Cancelled"})
    store.finish(cancelled, store=False)
    span = store.spans(RUN).finals[0]
    assert (span.kind, span.lane, span.duration_s) == ("c", -1, 0)


def _lane_lookups(client: redis.Redis, run: str, finish: Callable[[], object]) -> int:
    """How often ``finish`` made Redis read the run's lanes hash (the slowlog at 0 us lists
    every command, those a script runs included)."""
    slower = client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    try:
        finish()
        entries = client.slowlog_get(100_000)
    finally:
        client.config_set("slowlog-log-slower-than", slower)
    lanes = f":run:{{{run}}}:lanes"
    words = [_words(entry["command"]) for entry in entries]
    return sum(1 for w in words if len(w) > 1 and w[0].upper() == "HGET" and w[1].endswith(lanes))


def _words(command: bytes | str) -> list[str]:
    text = command.decode("utf-8", "replace") if isinstance(command, bytes) else command
    return text.split()


def test_a_worker_keeps_its_lane_and_looks_it_up_once_a_run(
    store: RunStore, settings: Settings, redis_client: redis.Redis
) -> None:
    other = RunStore.from_settings(settings)  # another worker process: a cache of its own
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(60))
    store.finish(_outcome(0), span=AttemptSpan("w1@h", 0.1))
    other.finish(_outcome(1), span=AttemptSpan("w2@h", 0.1))

    def fifty() -> None:
        for i in range(2, 52):
            store.finish(_outcome(i), span=AttemptSpan("w1@h", 0.1))

    # Without the lane it learnt from its first outcome, each of these 50 would read the hash.
    assert _lane_lookups(redis_client, RUN, fifty) == 0
    store.count_attempt(RUN, "retries", event="e-52", index=52, span=AttemptSpan("w1@h", 0.1))
    other.finish(_outcome(53), span=AttemptSpan("w2@h", 0.1))
    log = store.spans(RUN)
    workers = {span.index: log.worker(span.lane) for span in log.spans}
    assert workers == {i: "w2@h" if i in (1, 53) else "w1@h" for i in range(54)}


def test_ten_thousand_entries_stay_small(store: RunStore, redis_client: redis.Redis) -> None:
    key = store.run_key(RUN, "spans")
    entries = [f"{i} {i % 8} 1800000000{i % 1000:03d}-{i % 3} {i % 90000} s 1234" for i in range(10_000)]
    for start in range(0, len(entries), 1000):
        redis_client.rpush(key, *entries[start : start + 1000])
    assert (redis_client.memory_usage(key) or 0) / 10_000 < 40, "bytes an item"
    assert len(store.spans(RUN).spans) == 10_000


def test_the_fleets_minute_adds_up_outcomes_and_each_workers_gauges(
    store: RunStore, settings: Settings
) -> None:
    store.create_run(RUN, name="r", kind="map", task="t", items=_items(3))
    store.finish(_outcome(0, cost=0.5), span=AttemptSpan("w1@h", 0.1))
    store.finish(_outcome(1, ok=False), span=AttemptSpan("w1@h", 0.1))
    store.count_attempt(RUN, "retries", event="e", index=2, span=AttemptSpan("w1@h", 0.1))
    store.tally.flush()
    history = FleetHistory(store.client, prefix=settings.key_prefix)
    history.record_gauges(node="w1@h", busy=3, slots=8, queued=40, unacked=5)
    history.record_gauges(node="w2@h", busy=1, slots=8, queued=42, unacked=6)
    now = history.minutes(1)[0]
    assert (now.count("succeeded"), now.count("failed"), now.count("retries")) == (1, 1, 1)
    assert now.cost_usd == pytest.approx(0.5) and sum(now.item_times) == 2
    assert (now.busy, now.slots, now.queued, now.unacked) == (4, 16, 42, 6)
    ttl = store.client.ttl(store.keys.minute(int(time.time() // 60)))
    assert 0 < ttl <= 2 * 3600
