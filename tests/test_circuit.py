"""The circuit breaker's states on a real Redis: closed, open, half-open with one probe."""

from __future__ import annotations

import time

import pytest
import redis

from agentfleet.config import DLQSettings, load_settings
from agentfleet.errors import BadRequest, Deferred, DownstreamError, UnexpectedError
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.tasks.circuit_guard import CircuitGuard

VENDOR = "vendor-b.example"


def _breaker(client: redis.Redis, prefix: str, **settings: float) -> CircuitBreaker:
    defaults: dict[str, float] = {
        "vendor_issue_failures": 3,
        "circuit_cooldown_s": 0.5,
        "circuit_probe_ttl_s": 0.5,
    }
    return CircuitBreaker(client, prefix=prefix, settings=DLQSettings(**{**defaults, **settings}))


@pytest.fixture
def breaker(redis_client: redis.Redis, key_prefix: str) -> CircuitBreaker:
    return _breaker(redis_client, key_prefix)


def _open(breaker: CircuitBreaker) -> None:
    for _ in range(3):
        breaker.record_failure(VENDOR)


def test_a_closed_circuit_lets_calls_through(breaker: CircuitBreaker) -> None:
    assert breaker.before(VENDOR) is False
    assert breaker.state(VENDOR).state == "closed"


def test_n_failures_in_the_window_open_it_and_callers_are_deferred(breaker: CircuitBreaker) -> None:
    assert [breaker.record_failure(VENDOR) for _ in range(3)] == ["closed", "closed", "open"]
    with pytest.raises(Deferred) as deferred:
        breaker.before(VENDOR)
    assert 0 < deferred.value.wait_s <= 0.5 + 0.05
    assert deferred.value.downstream == VENDOR
    assert [c.downstream for c in breaker.open_circuits()] == [VENDOR]


def test_failures_among_many_successes_do_not_open_it(breaker: CircuitBreaker) -> None:
    for _ in range(10):
        breaker.record_success(VENDOR)
    assert [breaker.record_failure(VENDOR) for _ in range(4)][-1] == "closed"
    status = breaker.state(VENDOR)
    assert (status.failures, status.successes) == (4, 10)
    assert breaker.vendor_issues() == []


def test_a_bursts_first_fast_failures_are_weighed_against_every_call_started(
    breaker: CircuitBreaker,
) -> None:
    # 32 calls go out at once; 3 fail fast while the other 29 are still on their way.
    for _ in range(32):
        assert breaker.before(VENDOR, count_attempt=True) is False
    assert [breaker.record_failure(VENDOR) for _ in range(3)] == ["closed"] * 3
    status = breaker.state(VENDOR)
    assert (status.failures, status.successes, status.started) == (3, 0, 32)
    assert breaker.vendor_issues() == []


def test_a_downstream_failing_every_call_it_was_sent_still_opens(breaker: CircuitBreaker) -> None:
    for _ in range(3):
        breaker.before(VENDOR, count_attempt=True)
    assert [breaker.record_failure(VENDOR) for _ in range(3)] == ["closed", "closed", "open"]
    assert breaker.state(VENDOR).failure_ratio == 1.0


def test_after_the_cooldown_one_probe_goes_and_its_success_closes_it(breaker: CircuitBreaker) -> None:
    _open(breaker)
    time.sleep(0.55)
    assert breaker.before(VENDOR) is True
    with pytest.raises(Deferred):
        breaker.before(VENDOR)
    assert breaker.record_success(VENDOR) == "closed"
    assert breaker.before(VENDOR) is False
    assert breaker.state(VENDOR).failures == 0


def test_a_failed_probe_opens_it_again(breaker: CircuitBreaker) -> None:
    _open(breaker)
    time.sleep(0.55)
    assert breaker.before(VENDOR) is True
    assert breaker.record_failure(VENDOR) == "open"
    with pytest.raises(Deferred):
        breaker.before(VENDOR)


def test_a_released_or_expired_probe_is_given_to_the_next_caller(breaker: CircuitBreaker) -> None:
    _open(breaker)
    time.sleep(0.55)
    assert breaker.before(VENDOR) is True
    breaker.release_probe(VENDOR)
    assert breaker.before(VENDOR) is True
    time.sleep(0.55)
    assert breaker.before(VENDOR) is True, "the silent probe's hold ran out"


def test_a_success_reported_while_open_does_not_close_it(breaker: CircuitBreaker) -> None:
    _open(breaker)
    assert breaker.record_success(VENDOR) == "open"


def test_vendor_issues_and_reset(breaker: CircuitBreaker) -> None:
    _open(breaker)
    [issue] = breaker.vendor_issues()
    assert (issue.downstream, issue.state, issue.failures) == (VENDOR, "open", 3)
    breaker.reset(VENDOR)
    assert breaker.before(VENDOR) is False
    assert breaker.statuses() == []


def test_failures_older_than_the_window_are_forgotten(redis_client: redis.Redis, key_prefix: str) -> None:
    breaker = _breaker(redis_client, key_prefix, vendor_issue_window_s=1.0)
    breaker.record_failure(VENDOR)
    breaker.record_failure(VENDOR)
    time.sleep(1.2)
    assert breaker.record_failure(VENDOR) == "closed"
    assert breaker.state(VENDOR).failures == 1


def _guard(redis_client: redis.Redis, key_prefix: str) -> CircuitGuard:
    settings = load_settings(
        key_prefix=key_prefix,
        dlq={"vendor_issue_failures": 3, "circuit_cooldown_s": 0.5, "circuit_probe_ttl_s": 30},
    )
    return CircuitGuard(CircuitBreaker.from_settings(settings, redis_client), VENDOR)


def test_a_probe_answered_with_a_4xx_closes_the_circuit(redis_client: redis.Redis, key_prefix: str) -> None:
    guard = _guard(redis_client, key_prefix)
    _open(guard.breaker)
    time.sleep(0.55)
    guard.enter()
    assert guard.probe
    guard.failed(BadRequest("no such item", status_code=404), VENDOR)
    assert guard.breaker.state(VENDOR).state == "closed"


def test_a_probe_that_never_reached_the_downstream_is_given_back(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    guard = _guard(redis_client, key_prefix)
    _open(guard.breaker)
    time.sleep(0.55)
    guard.enter()
    guard.failed(UnexpectedError("KeyError: 'x'"), VENDOR)
    assert guard.breaker.state(VENDOR).state == "half_open"
    assert guard.breaker.before(VENDOR) is True, "the next caller gets the probe at once"


def test_a_fault_is_counted_once_against_the_downstream_that_failed(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    guard = _guard(redis_client, key_prefix)
    err = DownstreamError("HTTP 503", status_code=503, downstream="other.example")
    guard.failed(err, "other.example")
    guard.failed(err, "other.example")
    assert guard.breaker.state("other.example").failures == 1
    assert guard.breaker.state(VENDOR).failures == 0
