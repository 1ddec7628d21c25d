"""OpenAI-compatible chat completions as the fleet sees them (``OpenAIAdapter``).

Calls are ``POST .../chat/completions`` naming a ``model`` (OpenAI's API, or any server that
speaks it: a proxy, vLLM, a local model server). Input is the ``messages`` and ``tools``;
output is capped by ``max_completion_tokens`` (or the older ``max_tokens``). A reply's
``usage`` gives ``prompt_tokens`` (of which ``prompt_tokens_details.cached_tokens`` were read
from the prompt cache) and ``completion_tokens``. A stream reports usage only when asked
(``"stream_options": {"include_usage": true}``), in its last chunk; a stream without it keeps
its estimated token charge and is not priced.

Errors: a 429 is ``RateLimited`` waiting ``retry-after`` (or ``retry-after-ms``), else the
``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens`` of the limit that ran out
(durations such as ``1s``, ``6m0s``, ``20ms``); a 429 of ``insufficient_quota`` is
``SpendLimitReached``; other statuses map as for any downstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentfleet.errors import AgentfleetError, RateLimited
from agentfleet.llm.vendor import VendorAdapter
from agentfleet.models import TokenUsage

__all__ = ["OpenAIAdapter", "parse_reset"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_reset(value: str | None) -> float | None:
    """Seconds from an ``x-ratelimit-reset-*`` duration (``1s``, ``6m0s``, ``20ms``); None if not one."""
    if not value:
        return None
    parts = _DURATION_PART.findall(value.strip())
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _reset_wait(headers: Mapping[str, str]) -> float | None:
    """The wait until the limit that ran out resets (both, if both did: the longer)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    waits = [
        parse_reset(lowered.get(f"x-ratelimit-reset-{kind}"))
        for kind in ("requests", "tokens")
        if lowered.get(f"x-ratelimit-remaining-{kind}") == "0"
    ]
    found = [w for w in waits if w is not None]
    return max(found) if found else None


class OpenAIAdapter(VendorAdapter):
    """OpenAI's chat completions API (``api.openai.com``, or a host given that speaks it)."""

    name = "openai"
    api_host = "api.openai.com"
    path_suffix = "/chat/completions"

    def prompt_parts(self, body: Mapping[str, Any]) -> list[Any]:
        return [body.get("messages"), body.get("tools")]

    def max_output_tokens(self, body: Mapping[str, Any]) -> int:
        for name in ("max_completion_tokens", "max_tokens"):
            cap = body.get(name)
            if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
                return cap
        return 0

    def reply_usage(self, body: Any) -> TokenUsage | None:
        usage = body.get("usage") if isinstance(body, Mapping) else None
        if not isinstance(usage, Mapping):
            return None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        counts = TokenUsage.of(
            {
                "input_tokens": usage.get("prompt_tokens"),
                "output_tokens": usage.get("completion_tokens"),
                "cache_read_input_tokens": cached,
            }
        )
        # prompt_tokens counts the cached ones too; TokenUsage keeps them apart.
        uncached = counts.input_tokens - counts.cache_read_input_tokens
        return TokenUsage(max(0, uncached), counts.output_tokens, 0, counts.cache_read_input_tokens)

    def event_usage(self, event: Any) -> TokenUsage | None:
        # A chunk's usage is null until the last chunk of a stream that asked for it.
        return self.reply_usage(event)

    def map_error(self, exc: BaseException) -> AgentfleetError | None:
        response = getattr(exc, "response", None)
        request = getattr(response, "request", None)
        status = getattr(response, "status_code", None)
        if request is None or not isinstance(status, int):
            return None
        host, path = str(request.url.host).lower(), str(request.url.path)
        call = self.describe(str(request.method), host, path, request.content)
        if call is None:
            return None
        try:
            text = response.text  # type: ignore[union-attr]
        except Exception:  # a streamed body not read: map by status and headers alone
            text = ""
        return self.error_for_response(status, dict(response.headers), text, call.model)  # type: ignore[union-attr]

    def error_for_response(
        self, status: int, headers: Mapping[str, str], body: str, model: str | None
    ) -> AgentfleetError | None:
        err = super().error_for_response(status, headers, body, model)
        if isinstance(err, RateLimited) and err.retry_after_s is None:
            err.retry_after_s = _reset_wait(headers)
        return err
