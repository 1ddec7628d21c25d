"""The mock Messages API's request log: what it learns of one request, and the record it keeps.

``Call`` is filled in while a request is answered (``mock_llm/endpoint.py``); ``record_of``
turns it into the ``RequestRecord`` logged when its response is sent.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from agentfleet.mock_llm.http_server import Exchange

__all__ = ["Call", "RequestRecord", "record_of", "who_asks"]


@dataclass(frozen=True)
class RequestRecord:
    """One request to ``/v1/...``, logged when its response was sent.

    ``arrived_at`` is a Unix time in seconds; ``duration_s`` runs from arrival to response.
    ``sdk_retry_count`` is the SDK's ``x-stainless-retry-count`` header, if sent. ``prompt`` is
    the first user message's text (its first 200 characters), which tells whose conversation a
    request belongs to; ``conversation`` is a digest of the whole request's messages, so the
    same conversation sent twice (a repeated model call) has the same one.
    """

    arrived_at: float
    path: str
    status: int
    request_id: str
    model: str | None = None
    api_key: str | None = None
    stream: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    error_type: str | None = None
    scripted: bool = False
    sdk_retry_count: int | None = None
    prompt: str | None = None
    conversation: str | None = None


@dataclass
class Call:
    """What the server learns about one request while answering it."""

    exchange: Exchange
    arrived_at: float
    started: float
    request_id: str
    headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    api_key: str | None = None
    stream: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    error_type: str | None = None
    scripted: bool = False
    finished: bool = False
    prompt: str | None = None
    conversation: str | None = None


def who_asks(messages: Any) -> tuple[str | None, str | None]:
    """The first user message's text (cut at 200 characters) and a digest of ``messages``."""
    if not isinstance(messages, list) or not messages:
        return None, None
    first = messages[0].get("content") if isinstance(messages[0], dict) else None
    if isinstance(first, list):
        first = " ".join(b.get("text", "") for b in first if isinstance(b, dict))
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return (str(first)[:200] if first is not None else None), digest


def record_of(call: Call) -> RequestRecord:
    """The log record of ``call``, its duration measured up to now."""
    retry_count = call.exchange.header("x-stainless-retry-count")
    return RequestRecord(
        arrived_at=call.arrived_at,
        path=call.exchange.path,
        status=call.exchange.status or 0,
        request_id=call.request_id,
        model=call.model,
        api_key=call.api_key,
        stream=call.stream,
        input_tokens=call.input_tokens,
        output_tokens=call.output_tokens,
        duration_s=time.monotonic() - call.started,
        error_type=call.error_type,
        scripted=call.scripted,
        sdk_retry_count=int(retry_count) if retry_count and retry_count.isdigit() else None,
        prompt=call.prompt,
        conversation=call.conversation,
    )
