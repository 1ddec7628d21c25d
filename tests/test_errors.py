"""Classification of failures into retryable and permanent."""

from __future__ import annotations

import httpx
import pytest

from agentfleet.errors import (
    AuthError,
    BadRequest,
    ConnectionFailed,
    DownstreamError,
    InvalidInput,
    Overloaded,
    PermanentError,
    RateLimited,
    RetryableError,
    SpendLimitReached,
    TaskTimeLimit,
    TaskTimeout,
    UnexpectedError,
    classify,
    parse_retry_after,
)


def _status_error(
    status: int, *, headers: dict[str, str] | None = None, body: str = ""
) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://vendor-a.example/x")
    response = httpx.Response(status, headers=headers, text=body, request=request)
    return httpx.HTTPStatusError("failed", request=request, response=response)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, BadRequest),
        (401, AuthError),
        (403, AuthError),
        (404, BadRequest),
        (408, DownstreamError),
        (409, DownstreamError),
        (413, BadRequest),
        (429, RateLimited),
        (500, DownstreamError),
        (503, DownstreamError),
        (529, Overloaded),
    ],
)
def test_http_statuses_map_to_their_class(status: int, kind: type) -> None:
    err = classify(_status_error(status))
    assert type(err) is kind
    assert err.status_code == status
    assert err.downstream == "vendor-a.example"


def test_429_carries_retry_after() -> None:
    err = classify(_status_error(429, headers={"retry-after": "2"}))
    assert isinstance(err, RateLimited) and err.retry_after_s == 2.0


def test_spend_limit_429_is_permanent() -> None:
    err = classify(_status_error(429, body='{"error": {"message": "You have reached your spend limit"}}'))
    assert isinstance(err, SpendLimitReached) and isinstance(err, PermanentError)


def test_transport_errors_are_retryable() -> None:
    request = httpx.Request("GET", "https://x.example")
    assert isinstance(classify(httpx.ConnectTimeout("slow", request=request)), TaskTimeout)
    assert isinstance(classify(httpx.ConnectError("refused", request=request)), ConnectionFailed)
    assert isinstance(classify(ConnectionResetError()), ConnectionFailed)


def test_a_fleet_error_wrapped_by_a_library_is_found_again() -> None:
    try:
        try:
            raise RateLimited("slow down", retry_after_s=3)
        except RateLimited as inner:
            raise RuntimeError("sdk wrapper") from inner
    except RuntimeError as outer:
        err = classify(outer)
    assert isinstance(err, RateLimited) and err.retry_after_s == 3


def test_task_declared_types_win() -> None:
    class VendorHiccup(Exception):
        pass

    class VendorRefusal(Exception):
        pass

    assert isinstance(classify(VendorHiccup(), retryable=[VendorHiccup]), RetryableError)
    assert isinstance(classify(VendorRefusal(), permanent=[VendorRefusal]), PermanentError)


def test_unknown_exceptions_follow_the_setting() -> None:
    assert isinstance(classify(KeyError("x")), UnexpectedError)
    assert isinstance(classify(KeyError("x"), unknown_is_retryable=False), PermanentError)


def test_validation_errors_are_invalid_input() -> None:
    from pydantic import BaseModel

    class Model(BaseModel):
        n: int

    with pytest.raises(Exception) as caught:
        Model.model_validate({"n": "x"})
    assert isinstance(classify(caught.value), InvalidInput)


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert parse_retry_after("1.5") == 1.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_errors_survive_pickling() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(RateLimited("x", retry_after_s=2, status_code=429, downstream="d")))
    assert (err.retry_after_s, err.status_code, err.downstream, str(err)) == (2, 429, "d", "x")


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_retryable_statuses(status: int) -> None:
    assert isinstance(classify(_status_error(status)), RetryableError)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 413, 422])
def test_permanent_statuses(status: int) -> None:
    assert isinstance(classify(_status_error(status)), PermanentError)


def test_a_per_minute_quota_429_is_a_rate_limit_but_insufficient_quota_is_not() -> None:
    per_minute = classify(_status_error(429, body="Quota exceeded for quota metric 'requests' per minute"))
    assert isinstance(per_minute, RateLimited)
    billing = classify(_status_error(429, body='{"error": {"code": "insufficient_quota"}}'))
    assert isinstance(billing, SpendLimitReached)


def test_declared_types_win_over_a_wrapped_fleet_error() -> None:
    class VendorRefusal(Exception):
        pass

    try:
        try:
            raise RateLimited("slow down")
        except RateLimited as inner:
            raise VendorRefusal("refused") from inner
    except VendorRefusal as outer:
        assert isinstance(classify(outer, permanent=[VendorRefusal]), PermanentError)


def test_celery_time_limits_are_task_time_limits_that_do_not_blame_a_downstream() -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    err = classify(SoftTimeLimitExceeded())
    assert isinstance(err, TaskTimeLimit) and isinstance(err, RetryableError)
    assert err.category == "time_limit" and not err.downstream_fault


def test_only_downstream_faults_count_against_a_downstream() -> None:
    faults = {
        type(classify(_status_error(s))).__name__: classify(_status_error(s)).downstream_fault
        for s in (400, 429, 503, 529)
    }
    assert faults == {"BadRequest": False, "RateLimited": False, "DownstreamError": True, "Overloaded": True}
    request = httpx.Request("GET", "https://x.example")
    assert classify(httpx.ConnectError("refused", request=request)).downstream_fault
    assert classify(httpx.ReadTimeout("slow", request=request)).downstream_fault
