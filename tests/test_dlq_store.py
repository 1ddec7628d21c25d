"""The dead-letter store on a real Redis: one atomic write per entry, indexes, counts, stats."""

from __future__ import annotations

import base64
import time

import pytest
import redis
from dlq_samples import sample_entry

from agentfleet.dlq import (
    DeadLetter,
    DLQFilter,
    DLQStore,
    dead_letter_id,
    error_fingerprint,
    normalise_message,
    parse_since,
)
from agentfleet.dlq.artifacts import Artifact
from agentfleet.errors import ConfigError


@pytest.fixture
def store(redis_client: redis.Redis, key_prefix: str) -> DLQStore:
    return DLQStore(redis_client, prefix=key_prefix)


def test_an_entry_round_trips(store: DLQStore) -> None:
    entry = sample_entry()
    assert store.add(entry)
    assert store.get(entry.id) == entry
    assert store.depth() == 1


def test_writing_the_same_failure_again_updates_it_in_place(store: DLQStore) -> None:
    entry = sample_entry()
    store.add(entry)
    again = entry.model_copy(update={"category": "timeout", "attempts": 2})
    assert not store.add(again)
    assert store.depth() == 1
    assert store.get(entry.id) == again
    stats = store.stats(window_s=60)
    assert stats.by_category == {"timeout": 1}
    assert store.find(DLQFilter(category="downstream_error")) == []
    assert store.find(DLQFilter(category="timeout")) == [again]


def test_ids_are_deterministic_per_key_and_stage() -> None:
    assert dead_letter_id("run:1:abc", 0) == dead_letter_id("run:1:abc", 0)
    assert dead_letter_id("run:1:abc", 0) != dead_letter_id("run:1:abc", 1)


def test_filters_combine_and_listing_is_newest_first(store: DLQStore) -> None:
    now = time.time()
    a = sample_entry(run_id="r1", dead_lettered_at=now - 30)
    b = sample_entry(run_id="r1", index=1, downstream="vendor-b.example", dead_lettered_at=now - 20)
    c = sample_entry(run_id="r2", category="bad_request", dead_lettered_at=now - 10)
    for entry in (a, b, c):
        store.add(entry)
    assert [e.id for e in store.find()] == [c.id, b.id, a.id]
    assert [e.id for e in store.find(DLQFilter(run_id="r1"))] == [b.id, a.id]
    assert [e.id for e in store.find(DLQFilter(run_id="r1", downstream="vendor-a.example"))] == [a.id]
    assert [e.id for e in store.find(DLQFilter(category="bad_request"))] == [c.id]
    assert [e.id for e in store.find(DLQFilter(run_id="r1", since=now - 25))] == [b.id]
    assert [e.id for e in store.find(limit=2)] == [c.id, b.id]


def test_removal_respects_the_generation(store: DLQStore) -> None:
    entry = sample_entry(requeues=1)
    store.add(entry)
    assert store.remove([entry.id], generation=0) == []
    assert store.remove([entry.id], generation=1) == [entry.id]
    assert store.get(entry.id) is None
    assert store.depth() == 0
    stats = store.stats(window_s=60)
    assert (stats.by_category, stats.by_downstream, stats.top_fingerprints) == ({}, {}, [])


def test_stats_count_by_category_downstream_and_fingerprint(store: DLQStore) -> None:
    now = time.time()
    store.add(sample_entry(dead_lettered_at=now - 7200, error="HTTP 503 for /items/1"))
    store.add(sample_entry(error="HTTP 503 for /items/2"))
    store.add(sample_entry(category="poison", downstream=None, error_type="PoisonMessage", error="died"))
    stats = store.stats(window_s=600, now=now)
    assert stats.depth == 3
    assert stats.by_category == {"downstream_error": 2, "poison": 1}
    assert stats.by_downstream == {"vendor-a.example": 2, "-": 1}
    top = stats.top_fingerprints[0]
    assert (top.count, top.error_type, top.message) == (2, "DownstreamError", "HTTP <n> for /items/<n>")
    assert stats.oldest_age_s is not None and 7199 <= stats.oldest_age_s <= 7300
    assert stats.recent_by_downstream == {"vendor-a.example": 2}


def test_scanning_pages_through_every_entry_oldest_first(store: DLQStore) -> None:
    entries = [sample_entry(index=i) for i in range(1100)]
    for entry in entries:
        store.add(entry)
    assert [e.id for e in store.scan()] == [e.id for e in entries]
    assert len(store.ids()) == 1100


def test_fingerprints_ignore_ids_numbers_and_queries() -> None:
    assert normalise_message("GET /items/8f3a9c2e1b?page=2 returned 503\nbody...") == (
        "GET /items/<hex>?<query> returned <n>"
    )
    assert error_fingerprint(
        "DownstreamError", "job 6f1e2d3c-0000-4000-8000-123456789abc: 503"
    ) == error_fingerprint("DownstreamError", "job 0d1e2d3c-1111-4000-8000-abcdefabcdef: 502")
    assert error_fingerprint("DownstreamError", "x") != error_fingerprint("BadRequest", "x")


def test_since_accepts_durations_and_dates() -> None:
    assert parse_since("30m", now=10_000.0) == 8_200.0
    assert parse_since("2d", now=200_000.0) == 27_200.0
    assert parse_since("2025-01-31T08:00") == parse_since("2025-01-31T08:00+00:00")
    with pytest.raises(ConfigError, match="30m, 6h or 2d"):
        parse_since("yesterday")


def _with_artifacts(**overrides: object) -> tuple[DeadLetter, dict[str, bytes]]:
    data = {"shot.png": b"\x89PNG\r\n\x1a\n\x00\xff", "run.log": b"failed\n"}
    listed = [
        Artifact(name="shot.png", size_bytes=10, content_type="image/png"),
        Artifact(name="run.log", size_bytes=7, content_type="text/plain"),
    ]
    return sample_entry(artifacts=listed, **overrides), data


def test_artifacts_round_trip_as_bytes_beside_their_entry(store: DLQStore) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data)
    assert store.get(entry.id) == entry
    assert store.artifact(entry.id, "shot.png") == data["shot.png"]
    assert store.artifact(entry.id, "run.log") == data["run.log"]
    assert store.artifact(entry.id, "other.log") is None


def test_artifacts_go_with_their_entry(store: DLQStore, redis_client: redis.Redis) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data)
    assert redis_client.exists(store.keys.artifacts(entry.id))
    assert store.remove([entry.id]) == [entry.id]
    assert not redis_client.exists(store.keys.artifacts(entry.id))


def test_writing_an_entry_again_replaces_its_artifacts(store: DLQStore) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data)
    store.add(entry.model_copy(update={"artifacts": []}))
    assert store.artifact(entry.id, "shot.png") is None
    assert store.get(entry.id).artifacts == []  # type: ignore[union-attr]


def test_artifacts_must_match_what_the_entry_lists(store: DLQStore) -> None:
    entry, data = _with_artifacts()
    with pytest.raises(ValueError, match="listed once each"):
        store.add(entry, {"shot.png": data["shot.png"]})
    assert store.get(entry.id) is None


def test_writing_an_entry_with_artifacts_twice_changes_nothing(
    store: DLQStore, redis_client: redis.Redis
) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data)
    before = redis_client.hgetall(store.keys.artifacts(entry.id))
    store.add(entry, data)  # a write sent again after a dropped connection
    assert redis_client.hgetall(store.keys.artifacts(entry.id)) == before
    assert store.depth() == 1


def test_a_newer_generations_artifacts_stay_when_the_older_one_is_removed(store: DLQStore) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data)
    store.add(entry.model_copy(update={"requeues": 1}), data)
    assert store.remove([entry.id], generation=0) == []
    assert store.artifact(entry.id, "run.log") == data["run.log"]


def test_the_queues_artifact_bytes_are_counted_in_and_out(store: DLQStore) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data)
    stored = store.stored_artifact_bytes()
    assert stored == sum(len(base64.b64encode(v)) for v in data.values())
    other, more = _with_artifacts()
    store.add(other, more)
    assert store.stored_artifact_bytes() == 2 * stored
    store.add(entry.model_copy(update={"artifacts": []}))
    assert store.stored_artifact_bytes() == stored
    store.remove([other.id])
    assert store.stored_artifact_bytes() == 0


def test_past_the_queues_artifact_room_an_entry_keeps_its_list_without_bytes(store: DLQStore) -> None:
    entry, data = _with_artifacts()
    store.add(entry, data, max_stored_bytes=10)
    kept = store.get(entry.id)
    assert kept is not None
    assert [(a.name, a.size_bytes, a.truncated) for a in kept.artifacts] == [
        ("shot.png", 0, True),
        ("run.log", 0, True),
    ]
    assert store.artifact(entry.id, "run.log") == b""
    assert store.stored_artifact_bytes() == 0
