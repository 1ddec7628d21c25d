"""The Anthropic Messages API as the fleet sees it (``AnthropicAdapter``).

Calls are ``POST .../v1/messages`` naming a ``model``; input is the ``system``, ``messages``
and ``tools`` of the body, output is capped by ``max_tokens``. A reply's ``usage`` holds the
four counts of ``TokenUsage``; a stream reports them in ``message_start`` (its ``message``'s
usage) and as running totals in ``message_delta``. Errors raised by the ``anthropic`` SDK are
mapped by ``agentfleet.llm.anthropic_errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfleet.errors import AgentfleetError
from agentfleet.llm.anthropic_errors import is_anthropic_error, map_anthropic_error
from agentfleet.llm.vendor import VendorAdapter
from agentfleet.models import TokenUsage

__all__ = ["AnthropicAdapter"]


def _usage(found: Any) -> TokenUsage | None:
    return TokenUsage.of(found) if isinstance(found, Mapping) else None


class AnthropicAdapter(VendorAdapter):
    """Anthropic's Messages API (``api.anthropic.com``, or a host given that speaks it)."""

    name = "anthropic"
    api_host = "api.anthropic.com"
    path_suffix = "/messages"

    def prompt_parts(self, body: Mapping[str, Any]) -> list[Any]:
        return [body.get("system"), body.get("messages"), body.get("tools")]

    def max_output_tokens(self, body: Mapping[str, Any]) -> int:
        cap = body.get("max_tokens")
        return cap if isinstance(cap, int) and cap > 0 else 0

    def reply_usage(self, body: Any) -> TokenUsage | None:
        return _usage(body.get("usage")) if isinstance(body, Mapping) else None

    def event_usage(self, event: Any) -> TokenUsage | None:
        if not isinstance(event, Mapping):
            return None
        message = event.get("message")
        if isinstance(message, Mapping) and isinstance(message.get("usage"), Mapping):
            return _usage(message["usage"])
        return _usage(event.get("usage"))

    def map_error(self, exc: BaseException) -> AgentfleetError | None:
        return map_anthropic_error(exc) if is_anthropic_error(exc) else None
