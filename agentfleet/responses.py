"""What an HTTP error response says, for the error classifier (``agentfleet.errors``): how long
it asks to wait (``retry-after`` headers, in seconds), and its status, host and body."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["body_of", "host_of", "mro_names", "parse_retry_after", "response_of", "retry_after_from_headers"]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``retry-after`` header: delta-seconds or an HTTP date, else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from response headers: ``retry-after-ms``, else ``retry-after``, else None."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return parse_retry_after(lowered.get("retry-after"))


def mro_names(exc: BaseException) -> set[str]:
    """The names of ``exc``'s class and its bases."""
    return {cls.__name__ for cls in type(exc).__mro__}


def response_of(exc: BaseException) -> Any:
    """The HTTP response ``exc`` carries (httpx, the Anthropic SDK), else None."""
    response = getattr(exc, "response", None)
    if response is not None and isinstance(getattr(response, "status_code", None), int):
        return response
    return None


def host_of(response: Any) -> str | None:
    """The host the response came from, else None."""
    try:
        return str(response.request.url.host) or None
    except Exception:
        return None


def body_of(response: Any) -> str:
    """The response's text, at most 2,000 characters ('' when unreadable)."""
    try:
        return str(response.text)[:2000]
    except Exception:
        return ""
