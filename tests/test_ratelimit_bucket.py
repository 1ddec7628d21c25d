"""Token buckets: burst, rate, exact waits, several buckets at once, refunds."""

from __future__ import annotations

import time
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from ratelimit_support import make_limiter

from agentfleet.config import LimitSpec
from agentfleet.errors import Deferred
from agentfleet.ratelimit import Unit, buckets_for, default_burst


@pytest.fixture(params=["redis", "fakeredis"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    """A real Redis, and fakeredis running the same Lua."""
    if request.param == "redis":
        real = redis.Redis.from_url(redis_url, decode_responses=True)
        yield real
        real.close()
    else:
        yield fakeredis.FakeRedis(decode_responses=True)


def test_burst_defaults_to_one_second_of_rate() -> None:
    assert default_burst(0.5) == 1
    assert default_burst(10) == 10
    assert default_burst(2.5) == 3
    (bucket,) = buckets_for(LimitSpec(rate_per_s=7))
    assert bucket.capacity == 7


def test_per_minute_limits_hold_one_minute_and_refill_per_second() -> None:
    spec = LimitSpec(requests_per_min=600, input_tokens_per_min=6000, output_tokens_per_min=1200)
    by_name = {b.name: b for b in buckets_for(spec)}
    assert by_name["requests"].capacity == 600
    assert by_name["requests"].rate_per_s == pytest.approx(10)
    assert by_name["input_tokens"].unit is Unit.INPUT_TOKEN
    assert by_name["output_tokens"].rate_per_s == pytest.approx(20)


def test_grants_at_most_burst_at_once(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"v.example": LimitSpec(rate_per_s=2, burst=5)})
    for _ in range(5):
        limiter.acquire("v.example", max_wait_s=0)
    with pytest.raises(Deferred):
        limiter.acquire("v.example", max_wait_s=0)


def test_after_the_burst_grants_follow_the_rate(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"v.example": LimitSpec(rate_per_s=20, burst=5)})
    start = time.monotonic()
    grants = []
    for n in range(15):
        # The burst is granted at once: with no wait allowed, however slow the machine.
        limiter.acquire("v.example", max_wait_s=0 if n < 5 else 1)
        grants.append(time.monotonic() - start)
    # The n-th grant after the burst needs n / rate seconds of refill, never less.
    for n, at in enumerate(grants[5:], start=1):
        assert at >= n / 20 - 0.005
    assert grants[-1] < 10 / 20 + 0.3


def test_a_bucket_refills_no_further_than_its_burst(client: redis.Redis, key_prefix: str) -> None:
    # The slow output bucket keeps the downstream's record alive while the fast one refills.
    spec = LimitSpec(rate_per_s=10, burst=2, output_tokens_per_min=6)
    limiter = make_limiter(client, key_prefix, {"anthropic:m": spec})
    limiter.acquire("anthropic:m", output_tokens=1, max_wait_s=0)
    limiter.acquire("anthropic:m", output_tokens=1, max_wait_s=0)
    time.sleep(0.5)
    limiter.acquire("anthropic:m", max_wait_s=0)
    limiter.acquire("anthropic:m", max_wait_s=0)
    with pytest.raises(Deferred):
        limiter.acquire("anthropic:m", max_wait_s=0)


def test_wait_is_right_to_10_ms(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"v.example": LimitSpec(rate_per_s=10, burst=1)})
    started = time.monotonic()
    limiter.acquire("v.example", max_wait_s=0)
    asked = time.monotonic()
    with pytest.raises(Deferred) as first:
        limiter.acquire("v.example", max_wait_s=0)
    answered = time.monotonic()
    wait_s = first.value.wait_s
    # The next token is due 0.1 s after the first grant, less the time the calls took.
    assert 0.1 - (answered - started) - 0.001 <= wait_s <= 0.1 + 0.001
    time.sleep(wait_s - 0.01)
    probed = time.monotonic()
    try:
        limiter.acquire("v.example", max_wait_s=0)
    except Deferred as again:
        # 10 ms early is too early, and the two answers agree on when the token comes.
        after = time.monotonic()
        assert wait_s - (after - asked) - 0.001 <= again.wait_s
        assert again.wait_s <= wait_s - (probed - answered) + 0.001
        time.sleep(again.wait_s)
        limiter.acquire("v.example", max_wait_s=0)
    else:
        # Granted only because the sleep overran: the probe really came after the wait.
        assert time.monotonic() - asked >= wait_s - 0.001


def test_a_failing_bucket_takes_nothing_from_the_others(client: redis.Redis, key_prefix: str) -> None:
    spec = LimitSpec(requests_per_min=60, input_tokens_per_min=6000, output_tokens_per_min=100)
    limiter = make_limiter(client, key_prefix, {"anthropic:m": spec})
    limiter.acquire("anthropic:m", input_tokens=1000, output_tokens=80, max_wait_s=0)
    with pytest.raises(Deferred) as refused:
        limiter.acquire("anthropic:m", input_tokens=1000, output_tokens=80, max_wait_s=0)
    # 20 output tokens left, 60 missing, refilled at 100/60 tokens a second.
    assert refused.value.wait_s == pytest.approx(60 / (100 / 60), abs=0.2)
    tokens = {b.name: b.tokens for b in limiter.status("anthropic:m").buckets}
    assert tokens["requests"] == pytest.approx(59, abs=0.5)
    assert tokens["input_tokens"] == pytest.approx(5000, abs=50)
    assert tokens["output_tokens"] == pytest.approx(20, abs=1)


def test_reconcile_returns_unused_output_tokens(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"anthropic:m": LimitSpec(output_tokens_per_min=60)})
    permit = limiter.acquire("anthropic:m", output_tokens=50, max_wait_s=0)
    permit.reconcile(actual_output_tokens=10)
    (bucket,) = limiter.status("anthropic:m").buckets
    assert bucket.tokens == pytest.approx(50, abs=0.5)
    limiter.acquire("anthropic:m", output_tokens=45, max_wait_s=0)


def test_refund_never_exceeds_capacity(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"anthropic:m": LimitSpec(output_tokens_per_min=60)})
    permit = limiter.acquire("anthropic:m", output_tokens=5, max_wait_s=0)
    permit.output_tokens = 500  # an estimate far above what was charged
    permit.reconcile(actual_output_tokens=0)
    (bucket,) = limiter.status("anthropic:m").buckets
    assert bucket.tokens == pytest.approx(60)


def test_usage_above_the_estimate_is_charged(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"anthropic:m": LimitSpec(input_tokens_per_min=600)})
    permit = limiter.acquire("anthropic:m", input_tokens=100, max_wait_s=0)
    permit.reconcile(actual_input_tokens=400)
    (bucket,) = limiter.status("anthropic:m").buckets
    assert bucket.tokens == pytest.approx(200, abs=1)


def test_a_cost_above_capacity_is_granted_from_a_full_bucket_and_owed(
    client: redis.Redis, key_prefix: str
) -> None:
    limiter = make_limiter(client, key_prefix, {"anthropic:m": LimitSpec(output_tokens_per_min=60)})
    limiter.acquire("anthropic:m", output_tokens=90, max_wait_s=0)
    with pytest.raises(Deferred) as refused:
        limiter.acquire("anthropic:m", output_tokens=1, max_wait_s=0)
    # 30 tokens owed plus the 1 asked for, at one token a second.
    assert refused.value.wait_s == pytest.approx(31, abs=0.1)
