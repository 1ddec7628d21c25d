"""Backoff with full jitter, retry-after floors and countdown caps."""

from __future__ import annotations

import random

from agentfleet.protocol.messages import cap_countdown
from agentfleet.tasks.retry_policy import backoff_s, deferral_s


def test_full_jitter_stays_under_the_exponential_ceiling() -> None:
    rng = random.Random(1)
    for attempt, ceiling in [(0, 1.0), (1, 2.0), (2, 4.0), (10, 30.0)]:
        draws = [backoff_s(attempt, base_s=1.0, cap_s=30.0, rng=rng) for _ in range(500)]
        assert max(draws) <= ceiling
        assert max(draws) > ceiling * 0.9, "the draws cover the whole range"
        assert min(draws) < ceiling * 0.1


def test_retry_after_is_a_floor_with_a_little_jitter() -> None:
    rng = random.Random(2)
    draws = [backoff_s(0, base_s=1.0, cap_s=30.0, retry_after_s=2.0, rng=rng) for _ in range(200)]
    assert min(draws) >= 2.0
    assert max(draws) <= 2.2


def test_countdowns_never_exceed_the_cap() -> None:
    assert cap_countdown(5000.0, 3240.0) == 3240.0
    assert cap_countdown(-1.0, 3240.0) == 0.0


def test_a_deferral_never_returns_early_and_spreads_a_crowd() -> None:
    rng = random.Random(3)
    draws = [deferral_s(2.0, rng=rng) for _ in range(200)]
    assert min(draws) >= 2.0
    assert max(draws) <= 2.2
    assert max(draws) - min(draws) > 0.15, "tasks deferred by one pause come back apart"
    assert max(deferral_s(60.0, rng=rng) for _ in range(200)) <= 61.0
    assert deferral_s(-1.0, rng=rng) == 0.0
