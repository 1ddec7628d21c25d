"""Fleet-wide completion counters: added up in the process, written in one pipeline."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest
import redis

from agentfleet.runs import StatsTally


@pytest.fixture
def client() -> Iterator[fakeredis.FakeRedis]:
    server = fakeredis.FakeRedis(decode_responses=True)
    yield server
    server.close()


def _tally(client: object) -> StatsTally:
    # A long interval: only explicit flushes write in these tests.
    return StatsTally(client, "s:stats", lambda second: f"s:done:{second}", interval_s=3600)


def test_nothing_is_written_before_a_flush(client: fakeredis.FakeRedis) -> None:
    tally = _tally(client)
    tally.add_outcome("succeeded", dead_lettered=False, cost_usd=0.5, seconds=1.0, at=100.2)
    assert client.hgetall("s:stats") == {}


def test_a_flush_writes_the_sums_and_the_per_second_buckets(client: fakeredis.FakeRedis) -> None:
    tally = _tally(client)
    tally.add_outcome("succeeded", dead_lettered=False, cost_usd=0.5, seconds=1.0, at=100.2)
    tally.add_outcome("failed", dead_lettered=True, cost_usd=0.25, seconds=2.0, at=101.7)
    tally.add_count("runs_finished")
    tally.flush()
    stats = client.hgetall("s:stats")
    assert (stats["succeeded"], stats["failed"], stats["dead_lettered"], stats["runs_finished"]) == (
        "1",
        "1",
        "1",
        "1",
    )
    assert float(stats["cost_usd"]) == pytest.approx(0.75)
    assert float(stats["worker_seconds"]) == pytest.approx(3.0)
    assert float(stats["last_done_at"]) == pytest.approx(101.7)
    assert (client.get("s:done:100"), client.get("s:done:101")) == ("1", "1")
    assert 0 < client.ttl("s:done:100") <= 120


def test_a_second_flush_adds_only_what_came_since(client: fakeredis.FakeRedis) -> None:
    tally = _tally(client)
    tally.add_count("runs_finished")
    tally.flush()
    tally.flush()
    assert client.hget("s:stats", "runs_finished") == "1"


def test_a_failed_write_keeps_the_counts_for_the_next(client: fakeredis.FakeRedis) -> None:
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    tally = _tally(down)
    tally.add_outcome("succeeded", dead_lettered=False, cost_usd=0.0, seconds=1.0, at=100.0)
    with pytest.raises(redis.ConnectionError):
        tally.flush()
    tally.client = client
    tally.flush()
    assert client.hget("s:stats", "succeeded") == "1"
