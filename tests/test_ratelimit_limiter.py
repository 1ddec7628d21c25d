"""The Limiter: waiting inline or deferring, pauses, script reloads, idle keys, status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from ratelimit_support import StoppedRenewer, make_limiter

from agentfleet.config import LimitSpec, load_settings
from agentfleet.errors import Deferred
from agentfleet.ratelimit import FLEET, Limiter, llm_downstream
from agentfleet.ratelimit.scripts import LIMITER_LUA

SLOW = {"v.example": LimitSpec(rate_per_s=1, burst=1)}


class CountingRedis(redis.Redis):
    """A client that counts the commands it sends."""

    commands = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands += 1
        return super().execute_command(*args, **options)


@pytest.fixture
def counting_client(redis_url: str) -> Iterator[CountingRedis]:
    client = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))
    yield client
    client.close()


def test_deferred_carries_the_wait_and_is_raised_at_once(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, SLOW)
    limiter.acquire("v.example")
    started = time.monotonic()
    with pytest.raises(Deferred) as refused:
        limiter.acquire("v.example", max_wait_s=0.3)
    assert time.monotonic() - started < 0.1, "no point sleeping for a wait that is too long"
    assert refused.value.wait_s == pytest.approx(1.0, abs=0.01)
    assert refused.value.downstream == "v.example"


def test_a_short_wait_is_slept_inline(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, {"v.example": LimitSpec(rate_per_s=5)})
    for _ in range(5):
        limiter.acquire("v.example", max_wait_s=0)
    permit = limiter.acquire("v.example")
    assert 0.19 <= permit.waited_s <= 0.3


def test_an_inline_wait_sleeps_rather_than_polls(counting_client: CountingRedis, key_prefix: str) -> None:
    limiter = make_limiter(counting_client, key_prefix, {"v.example": LimitSpec(rate_per_s=5)})
    for _ in range(5):
        limiter.acquire("v.example", max_wait_s=0)
    before = counting_client.commands
    limiter.acquire("v.example", max_wait_s=1)
    assert counting_client.commands - before <= 3


def test_short_wait_s_is_the_default_budget(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, SLOW, short_wait_s=0.5)
    limiter.acquire("v.example")
    with pytest.raises(Deferred):
        limiter.acquire("v.example")
    patient = make_limiter(redis_client, key_prefix, SLOW, short_wait_s=1.5)
    assert patient.acquire("v.example").waited_s > 0.5


def test_a_pause_makes_every_worker_wait(redis_url: str, key_prefix: str) -> None:
    workers = [redis.Redis.from_url(redis_url, decode_responses=True) for _ in range(3)]
    limits = {"v.example": LimitSpec(rate_per_s=100)}
    limiters = [make_limiter(client, key_prefix, limits) for client in workers]
    paused_at = time.monotonic()
    limiters[0].pause("v.example", 0.5)
    for limiter in limiters:
        with pytest.raises(Deferred) as refused:
            limiter.acquire("v.example", max_wait_s=0)
        since_s = time.monotonic() - paused_at
        assert 0.5 - since_s - 0.001 <= refused.value.wait_s <= 0.5 + 0.001
        assert "paused" in str(refused.value)
    permit = limiters[2].acquire("v.example", max_wait_s=1)
    assert time.monotonic() - paused_at >= 0.5 - 0.001
    assert permit.waited_s > 0
    for client in workers:
        client.close()


def test_a_pause_expires(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, {"v.example": LimitSpec(rate_per_s=100)})
    limiter.pause("v.example", 0.2)
    assert limiter.status("v.example").paused_for_s == pytest.approx(0.2, abs=0.05)
    time.sleep(0.25)
    limiter.acquire("v.example", max_wait_s=0)
    status = limiter.status("v.example")
    assert status.paused_until is None
    assert redis_client.exists(f"{{{key_prefix}:rl}}:v.example:pause") == 0


def test_a_pause_only_ever_lengthens(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, {"v.example": LimitSpec(rate_per_s=100)})
    long_until = limiter.pause("v.example", 5)
    assert limiter.pause("v.example", 1) == pytest.approx(long_until)
    assert limiter.status("v.example").paused_for_s > 4


def test_a_pause_of_an_unlimited_downstream_reaches_every_worker(redis_url: str, key_prefix: str) -> None:
    workers = [redis.Redis.from_url(redis_url, decode_responses=True) for _ in range(2)]
    first, second = (make_limiter(c, key_prefix) for c in workers)
    paused_at = time.monotonic()
    first.pause("free.example", 0.5)
    with pytest.raises(Deferred) as refused:
        second.acquire("free.example", max_wait_s=0)
    since_s = time.monotonic() - paused_at
    assert refused.value.downstream == "free.example"
    assert 0.5 - since_s - 0.001 <= refused.value.wait_s <= 0.5 + 0.001
    assert "free.example" in second.known_downstreams()
    second.acquire("free.example", max_wait_s=1).release()
    assert time.monotonic() - paused_at >= 0.5 - 0.001
    for client in workers:
        client.close()


def test_with_a_fleet_ceiling_a_pause_of_an_unlimited_downstream_reaches_every_worker(
    redis_url: str, key_prefix: str
) -> None:
    workers = [redis.Redis.from_url(redis_url, decode_responses=True) for _ in range(2)]
    first, second = (make_limiter(c, key_prefix, max_parallelism=10) for c in workers)
    first.pause("free.example", 0.5)
    with pytest.raises(Deferred) as refused:
        second.acquire("free.example", max_wait_s=0)
    assert refused.value.downstream == "free.example"
    for client in workers:
        client.close()


def test_deferred_names_the_downstream_that_said_wait(redis_client: redis.Redis, key_prefix: str) -> None:
    limits = {
        "api.anthropic.com": LimitSpec(max_concurrency=5),
        "anthropic:m": LimitSpec(requests_per_min=1),
    }
    limiter = make_limiter(redis_client, key_prefix, limits, max_parallelism=1)
    limiter.acquire("anthropic:m", also=["api.anthropic.com"], max_wait_s=0).release()
    with pytest.raises(Deferred) as by_bucket:
        limiter.acquire("api.anthropic.com", also=["anthropic:m"], max_wait_s=0)
    assert by_bucket.value.downstream == "anthropic:m"
    limiter.acquire("other.example", max_wait_s=0)
    with pytest.raises(Deferred) as by_ceiling:
        limiter.acquire("api.anthropic.com", max_wait_s=0)
    assert by_ceiling.value.downstream == FLEET


def test_acquire_survives_a_script_flush(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, {"v.example": LimitSpec(rate_per_s=100)})
    limiter.acquire("v.example", max_wait_s=0)
    sha = limiter.store.scripts.acquire.sha
    redis_client.script_flush()
    assert redis_client.script_exists(sha) == [False]
    limiter.acquire("v.example", max_wait_s=0)
    assert redis_client.script_exists(sha) == [True]


def test_an_unlimited_downstream_costs_one_round_trip_and_holds_nothing(
    counting_client: CountingRedis, key_prefix: str
) -> None:
    limiter = make_limiter(counting_client, key_prefix, {"capped.example": LimitSpec(max_concurrency=1)})
    limiter.acquire("free.example").release()  # loads the script, whatever Redis had cached
    counting_client.commands = 0
    for _ in range(100):
        with limiter.acquire("free.example", input_tokens=10, output_tokens=10) as permit:
            assert not permit.holds_lease
            permit.reconcile(actual_input_tokens=3, actual_output_tokens=4)
    assert counting_client.commands == 100
    assert limiter.status("free.example").slots_in_use == 0


def test_the_default_limits_apply_to_unknown_downstreams(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, default=LimitSpec(rate_per_s=1, burst=2))
    limiter.acquire("any.example", max_wait_s=0)
    limiter.acquire("any.example", max_wait_s=0)
    with pytest.raises(Deferred):
        limiter.acquire("any.example", max_wait_s=0)
    limiter.acquire("other.example", max_wait_s=0)
    assert limiter.status("any.example").configured is False


def test_also_acquires_several_downstreams_at_once(redis_client: redis.Redis, key_prefix: str) -> None:
    model = llm_downstream("claude-haiku-4-5")
    limits = {
        "api.anthropic.com": LimitSpec(max_concurrency=1),
        model: LimitSpec(requests_per_min=60, output_tokens_per_min=600),
    }
    limiter = make_limiter(redis_client, key_prefix, limits)
    with limiter.acquire(model, also=["api.anthropic.com"], output_tokens=100, max_wait_s=0):
        assert limiter.status("api.anthropic.com").slots_in_use == 1
        with pytest.raises(Deferred):
            limiter.acquire(model, also=["api.anthropic.com"], output_tokens=100, max_wait_s=0)
    tokens = {b.name: b.tokens for b in limiter.status(model).buckets}
    assert tokens["output_tokens"] == pytest.approx(500, abs=1)
    assert tokens["requests"] == pytest.approx(59, abs=0.1)


def test_every_key_expires_when_idle(redis_client: redis.Redis, key_prefix: str) -> None:
    limits = {
        "v.example": LimitSpec(rate_per_s=1000, burst=3, max_concurrency=2),
        "anthropic:m": LimitSpec(input_tokens_per_min=60_000, output_tokens_per_min=60_000),
    }
    limiter = make_limiter(
        redis_client,
        key_prefix,
        limits,
        max_parallelism=5,
        lease_ttl_s=0.2,
        renewer=StoppedRenewer(),
    )
    limiter.acquire("v.example").release()
    limiter.acquire("v.example")  # never released
    limiter.acquire("anthropic:m", input_tokens=50, output_tokens=50).reconcile(actual_output_tokens=10)
    limiter.pause("v.example", 0.1)
    keys = redis_client.keys(f"{{{key_prefix}:rl}}:*")
    assert keys
    # -1 would be a key with no expiry; -2 is one that has already expired.
    assert all(redis_client.pttl(key) != -1 for key in keys), keys
    time.sleep(0.3)
    left = redis_client.keys(f"{{{key_prefix}:rl}}:*")
    # Only the hold-time statistics, the registry and the lease sets (where a lease that ran
    # out waits for the next acquire to take it back and count it) outlive the work, and they
    # expire too.
    kept = ("known", "v.example:hold", "_fleet:hold", "v.example:holders", "_fleet:holders")
    assert sorted(left) == sorted(f"{{{key_prefix}:rl}}:{name}" for name in kept)


def test_status_reports_tokens_slots_and_pause(redis_client: redis.Redis, key_prefix: str) -> None:
    limits = {"v.example": LimitSpec(rate_per_s=0.1, burst=4, max_concurrency=3)}
    limiter = make_limiter(redis_client, key_prefix, limits)
    limiter.acquire("v.example")
    limiter.pause("v.example", 10)
    status = limiter.status("v.example")
    (bucket,) = status.buckets
    assert (bucket.name, bucket.capacity) == ("rate", 4)
    assert bucket.tokens == pytest.approx(3, abs=0.01)
    assert (status.slots_in_use, status.max_slots) == (1, 3)
    assert status.paused_until == pytest.approx(time.time() + 10, abs=1)
    assert status.as_dict()["buckets"][0]["name"] == "rate"


def test_known_downstreams_lists_configured_and_seen(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(
        redis_client,
        key_prefix,
        {"conf.example": LimitSpec(rate_per_s=1)},
        default=LimitSpec(rate_per_s=50),
        max_parallelism=10,
    )
    limiter.acquire("seen.example")
    other_worker = make_limiter(redis_client, key_prefix)
    other_worker.pause("paused.example", 1)
    assert limiter.known_downstreams() == ["conf.example", "paused.example", "seen.example"]


def test_from_settings_reads_the_limits_table(
    redis_client: redis.Redis, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    monkeypatch.setenv("AGENTFLEET_LIMITER__SHORT_WAIT_S", "0")
    monkeypatch.setenv("AGENTFLEET_LIMITS", '{"v.example": {"rate_per_s": 1, "burst": 1}}')
    limiter = Limiter.from_settings(load_settings(), redis_client)
    assert limiter.short_wait_s == 0
    limiter.acquire("v.example")
    with pytest.raises(Deferred):
        limiter.acquire("v.example")
    assert redis_client.exists(f"{{{key_prefix}:rl}}:v.example:buckets:rate")


def test_scripts_ship_with_the_package() -> None:
    source = LIMITER_LUA.source("acquire")
    assert "redis.call('TIME')" in source
    assert "local function bucket_level" in source
