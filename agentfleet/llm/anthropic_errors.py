"""Anthropic SDK errors mapped into the fleet's exception tree.

``agentfleet.errors.classify`` already maps any exception that carries an HTTP response by its
status (the SDK's ``APIStatusError`` family does), and the SDK's timeout and connection errors
by their class names. This module adds what only an Anthropic error can tell:

- the downstream is ``anthropic:<model>`` (the model named by the caller, else read back from
  the request body), not the host name ``classify`` would give;
- a spend limit is permanent: an ``error.details.error_code`` naming a spend limit (the SDK's
  ``EnforcedSpendLimitReachedError``, ``ContractSpendLimitReachedError``...), an error of type
  ``billing_error``, or a 402 all become ``SpendLimitReached``;
- an error event inside a streamed response arrives with status 200, so its ``error.type``
  decides (``overloaded_error`` is ``Overloaded``, ``rate_limit_error`` is ``RateLimited``...).

Resulting mapping: 429 is ``RateLimited`` with ``retry_after_s`` from ``retry-after-ms`` or
``retry-after``; 529 ``Overloaded``; other 5xx, 408 and 409 ``DownstreamError``; 400, 404, 413
and 422 ``BadRequest``; 401 and 403 ``AuthError``; ``APITimeoutError`` ``TaskTimeout``;
``APIConnectionError`` ``ConnectionFailed``. A fleet error raised inside the transport and
wrapped by the SDK is returned as it was raised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfleet.errors import (
    AgentfleetError,
    SpendLimitReached,
    classify,
    error_for_status,
    fleet_error_in_chain,
)

__all__ = ["anthropic_downstream", "is_anthropic_error", "map_anthropic_error"]

# The status an error type stands for, for errors that arrive inside a 200 stream.
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def is_anthropic_error(exc: BaseException) -> bool:
    """True for an exception the ``anthropic`` SDK raised (its ``APIError`` family and kin)."""
    return any(cls.__module__.split(".", 1)[0] == "anthropic" for cls in type(exc).__mro__)


def anthropic_downstream(model: str) -> str:
    """The downstream name of an Anthropic model, as used by the limits table."""
    return f"anthropic:{model}"


def _error_object(exc: BaseException) -> Mapping[str, Any]:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):
            return error
    return {}


def _api_message(status: int | None, error_type: str, error: Mapping[str, Any]) -> str:
    """The API's own words: ``400 invalid_request_error: <its message>`` (not the SDK's repr of
    the whole body); empty when the error carries no message."""
    message = error.get("message")
    if not isinstance(message, str) or not message.strip():
        return ""
    head = " ".join(part for part in (str(status) if status else "", error_type) if part)
    return f"{head}: {message.strip()}" if head else message.strip()


def _error_code(exc: BaseException, error: Mapping[str, Any]) -> str:
    code = getattr(exc, "error_code", None)
    if isinstance(code, str):
        return code
    details = error.get("details")
    if isinstance(details, Mapping) and isinstance(details.get("error_code"), str):
        return str(details["error_code"])
    return ""


def _response_status(exc: BaseException) -> int | None:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _headers(exc: BaseException) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in exc.response.headers.items()}  # type: ignore[attr-defined]
    except Exception:
        return {}


def _model_of_request(exc: BaseException) -> str | None:
    """The ``model`` field of the request body, when the error still holds the request."""
    try:
        body = json.loads(exc.request.content)  # type: ignore[attr-defined]
    except Exception:
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) and model else None


def map_anthropic_error(exc: BaseException, *, model: str | None = None) -> AgentfleetError:
    """The fleet error for an exception raised by an ``anthropic`` client call.

    ``model`` names the downstream (``anthropic:<model>``); without it the model is read from
    the failed request's body when possible. Exceptions that are not the SDK's still get
    ``classify``'s mapping.
    """
    model = model or _model_of_request(exc)
    raised = fleet_error_in_chain(exc)
    if raised is not None:
        # The transport already named the downstream it limited; keep its word.
        if raised.downstream is None and model:
            raised.downstream = anthropic_downstream(model)
        return raised

    mapped = classify(exc)
    error = _error_object(exc)
    error_type = str(error.get("type") or "")
    status = _response_status(exc)
    text = _api_message(status, error_type, error) or mapped.message
    mapped.message = text
    mapped.args = (text,)
    if "spend_limit" in _error_code(exc, error) or error_type == "billing_error" or status == 402:
        mapped = SpendLimitReached(text, status_code=status)
    elif status is not None and status < 400 and error_type in _STATUS_OF_TYPE:
        streamed = error_for_status(
            _STATUS_OF_TYPE[error_type],
            message=text,
            headers=_headers(exc),
            body=json.dumps(dict(error), default=str),
        )
        if streamed is not None:
            mapped = streamed

    if model:
        mapped.downstream = anthropic_downstream(model)
    return mapped
