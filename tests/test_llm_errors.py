"""Anthropic SDK exceptions mapped into the fleet's exception tree.

The SDK raises them itself here: a real client over an ``httpx2.MockTransport`` that answers
each request with a canned response (or raises a transport error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import pytest

from agentfleet.errors import (
    AgentfleetError,
    AuthError,
    BadRequest,
    ConnectionFailed,
    DownstreamError,
    Overloaded,
    RateLimited,
    SpendLimitReached,
    TaskTimeout,
    UnexpectedError,
)
from agentfleet.llm.anthropic_errors import anthropic_downstream, is_anthropic_error, map_anthropic_error

MODEL = "claude-haiku-4-5"


def raised(handler: Callable[[httpx2.Request], httpx2.Response]) -> anthropic.APIError:
    transport = httpx2.MockTransport(handler)
    with anthropic.Anthropic(
        api_key="k",
        base_url="http://anthropic.mock",
        max_retries=0,
        http_client=httpx2.Client(transport=transport),
    ) as client:
        try:
            client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        except anthropic.APIError as exc:
            return exc
    raise AssertionError("the call did not fail")


def answered(
    status: int, *, error_type: str = "api_error", code: str | None = None, **headers: str
) -> anthropic.APIError:
    error: dict[str, Any] = {"type": error_type, "message": f"status {status}"}
    if code:
        error["details"] = {"error_code": code}
    body = {"type": "error", "error": error}
    names = {k.replace("_", "-"): v for k, v in headers.items()}
    return raised(lambda _: httpx2.Response(status, json=body, headers=names))


@pytest.mark.parametrize(
    ("status", "sdk_error", "fleet_error"),
    [
        (400, anthropic.BadRequestError, BadRequest),
        (401, anthropic.AuthenticationError, AuthError),
        (403, anthropic.PermissionDeniedError, AuthError),
        (404, anthropic.NotFoundError, BadRequest),
        (413, anthropic.RequestTooLargeError, BadRequest),
        (429, anthropic.RateLimitError, RateLimited),
        (500, anthropic.InternalServerError, DownstreamError),
        (503, anthropic.InternalServerError, DownstreamError),
        (529, anthropic.APIStatusError, Overloaded),
    ],
)
def test_status_errors_map_by_status(
    status: int, sdk_error: type[Exception], fleet_error: type[AgentfleetError]
) -> None:
    exc = answered(status)
    assert isinstance(exc, sdk_error)

    mapped = map_anthropic_error(exc)

    assert type(mapped) is fleet_error
    assert mapped.status_code == status
    assert mapped.downstream == f"anthropic:{MODEL}"


@pytest.mark.parametrize(
    ("headers", "wait_s"),
    [({"retry_after": "2"}, 2.0), ({"retry_after_ms": "1500"}, 1.5), ({}, None)],
)
def test_rate_limited_carries_the_wait(headers: dict[str, str], wait_s: float | None) -> None:
    mapped = map_anthropic_error(answered(429, error_type="rate_limit_error", **headers))
    assert isinstance(mapped, RateLimited)
    assert mapped.retry_after_s == wait_s


@pytest.mark.parametrize(
    "exc_factory",
    [
        lambda: answered(429, error_type="rate_limit_error", code="enforced_spend_limit_reached"),
        lambda: answered(429, error_type="rate_limit_error", code="contract_spend_limit_reached"),
        lambda: answered(402, error_type="billing_error"),
        lambda: answered(400, error_type="billing_error"),
    ],
    ids=["enforced", "contract", "402", "billing-400"],
)
def test_spend_limits_are_permanent(exc_factory: Callable[[], anthropic.APIError]) -> None:
    assert isinstance(map_anthropic_error(exc_factory()), SpendLimitReached)


def test_a_ramp_limit_429_stays_retryable() -> None:
    exc = answered(429, error_type="rate_limit_error", code="ramp_limit_exceeded", retry_after="7")
    mapped = map_anthropic_error(exc)
    assert isinstance(mapped, RateLimited)
    assert mapped.retry_after_s == 7


def test_a_timeout_is_task_timeout() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("slow", request=request)

    exc = raised(handler)
    assert isinstance(exc, anthropic.APITimeoutError)
    mapped = map_anthropic_error(exc)
    assert isinstance(mapped, TaskTimeout)
    assert mapped.downstream == f"anthropic:{MODEL}"


def test_a_connection_error_is_connection_failed() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    exc = raised(handler)
    assert type(exc) is anthropic.APIConnectionError
    assert isinstance(map_anthropic_error(exc), ConnectionFailed)


def test_a_fleet_error_raised_in_the_transport_comes_back_as_raised() -> None:
    limited = RateLimited("bucket empty", retry_after_s=3, downstream="anthropic:custom")

    def handler(request: httpx2.Request) -> httpx2.Response:
        raise limited

    exc = raised(handler)
    assert isinstance(exc, anthropic.APIConnectionError)
    assert map_anthropic_error(exc) is limited
    assert limited.downstream == "anthropic:custom"


def test_the_callers_model_names_the_downstream() -> None:
    mapped = map_anthropic_error(answered(500), model="claude-opus-4-7")
    assert mapped.downstream == anthropic_downstream("claude-opus-4-7")


def test_other_exceptions_fall_back_on_classify() -> None:
    mapped = map_anthropic_error(ValueError("odd"))
    assert isinstance(mapped, UnexpectedError)
    assert mapped.downstream is None


def test_only_the_sdks_own_errors_are_anthropic_errors() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    assert is_anthropic_error(answered(429))
    assert is_anthropic_error(raised(refuse))
    assert not is_anthropic_error(ValueError("odd"))
    assert not is_anthropic_error(RateLimited("bucket empty"))
