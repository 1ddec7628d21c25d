"""How foreign errors and HTTP statuses become errors of the tree (``agentfleet.errors``).

``error_for_status`` maps an HTTP status (with its headers and body) to a fleet error;
``fleet_error_in_chain`` finds a fleet error a library wrapped; ``classify`` maps any exception:
the task's own retryable and permanent types first, then a wrapped fleet error, an HTTP
response's status, pydantic validation, Celery's time limits, timeouts and broken connections.
All three are re-exported by ``agentfleet.errors``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentfleet import responses
from agentfleet.errors import (
    AgentfleetError,
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
)
from agentfleet.responses import retry_after_from_headers

__all__ = ["classify", "error_for_status", "fleet_error_in_chain"]

_RETRYABLE_STATUS = {408, 409, 425, 429, 529}
# Phrases of a 429 that will not clear by waiting. A bare "quota" is not one of them: many APIs
# answer "quota exceeded for ... per minute", which is an ordinary rate limit.
_SPEND_LIMIT_MARKERS = (
    "spend limit",
    "spending limit",
    "usage limit",
    "credit balance",
    "insufficient_quota",
    "billing",
)


def error_for_status(
    status: int,
    *,
    message: str = "",
    headers: Mapping[str, str] | None = None,
    body: str = "",
    downstream: str | None = None,
) -> AgentfleetError | None:
    """The fleet error for an HTTP status, or None for a 1xx, 2xx or 3xx.

    Retryable: 408, 409, 425, 429, 5xx and 529. Permanent: 401 and 403 (``AuthError``), every
    other 4xx (``BadRequest``: 400, 404, 413, 422...), and a 429 whose body speaks of a spend
    limit or credit balance. A retryable error carries the ``retry-after`` (or
    ``retry-after-ms``) wait in ``retry_after_s``.
    """
    if status < 400:
        return None
    text = message or f"HTTP {status}"
    retry_after = retry_after_from_headers(headers)
    kw: dict[str, Any] = {"status_code": status, "downstream": downstream}
    if status == 429:
        if any(marker in body.lower() for marker in _SPEND_LIMIT_MARKERS):
            return SpendLimitReached(text, **kw)
        return RateLimited(text, retry_after_s=retry_after, **kw)
    if status == 529:
        return Overloaded(text, retry_after_s=retry_after, **kw)
    if status in (401, 403):
        return AuthError(text, **kw)
    if status in _RETRYABLE_STATUS or status >= 500:
        return DownstreamError(text, retry_after_s=retry_after, **kw)
    return BadRequest(text, **kw)


_TIME_LIMIT_NAMES = {"SoftTimeLimitExceeded", "TimeLimitExceeded"}
_TIMEOUT_NAMES = {"TimeoutException", "APITimeoutError", "TimeoutError"}
_CONNECTION_NAMES = {
    "ConnectError",
    "NetworkError",
    "RemoteProtocolError",
    "APIConnectionError",
    "ConnectionError",
}


def fleet_error_in_chain(exc: BaseException) -> AgentfleetError | None:
    """The first fleet error in ``exc`` or its causes (a library may wrap ours), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, AgentfleetError):
            return current
        current = current.__cause__ or current.__context__
    return None


def classify(
    exc: BaseException,
    *,
    retryable: Iterable[type[BaseException]] = (),
    permanent: Iterable[type[BaseException]] = (),
    unknown_is_retryable: bool = True,
) -> AgentfleetError:
    """Map any exception into the fleet's tree.

    A fleet error is returned as it is. Then the task's own ``permanent`` and ``retryable``
    exception types are checked, before anything else. Causes are followed, so a fleet error
    wrapped by a library is found again. HTTP errors from httpx or the Anthropic SDK are mapped
    by status (``error_for_status``); timeouts and connection errors are retryable; Celery's
    time limits are ``TaskTimeLimit``; a pydantic ``ValidationError`` is ``InvalidInput``.
    """
    if isinstance(exc, AgentfleetError):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    permanent = tuple(permanent)
    retryable = tuple(retryable)
    if permanent and isinstance(exc, permanent):
        return PermanentError(text)
    if retryable and isinstance(exc, retryable):
        return RetryableError(text)
    found = fleet_error_in_chain(exc)
    if found is not None:
        return found

    names = responses.mro_names(exc)
    response = responses.response_of(exc)
    if response is not None:
        mapped = error_for_status(
            response.status_code,
            message=text,
            headers=dict(response.headers),
            body=responses.body_of(response),
            downstream=responses.host_of(response),
        )
        if mapped is not None:
            return mapped
    if "ValidationError" in names:
        return InvalidInput(text)
    if names & _TIME_LIMIT_NAMES:
        return TaskTimeLimit(text)
    if names & _TIMEOUT_NAMES:
        return TaskTimeout(text)
    if names & _CONNECTION_NAMES:
        return ConnectionFailed(text)
    if unknown_is_retryable:
        return UnexpectedError(text)
    return PermanentError(text)
