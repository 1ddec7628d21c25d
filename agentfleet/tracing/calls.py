"""Traces of the calls a task makes: a client span per request, a model-call span per LLM call.

The fleet transport (``agentfleet.tools.transport``) runs each request inside ``traced_call``:
with tracing on, the request is a client span carrying its trace context to the downstream
(W3C ``traceparent``), with the HTTP semantic conventions (no query string: it may hold
secrets); an LLM call is also a model-call span around it, from the limiter's wait to the end
of the reply, with the GenAI semantic conventions (``gen_ai.system``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens``, ...) and its cost
(``agentfleet.cost_usd``). With tracing off, both spans are ``NO_SPAN``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentfleet import tracing

__all__ = ["http_attributes", "model_attributes", "traced_call", "usage_attributes"]


def traced_call(
    request: Any,
    handle: Callable[[Any, Any], Any],
    *,
    downstream: str,
    host: str,
    model: str | None = None,
    input_tokens: int = 0,
    max_tokens: int = 0,
) -> Any:
    """``handle(model_span, http_span)``'s response to ``request`` (an httpx or httpx2
    request), sent inside its spans. The model-call span (for a call naming a ``model``) is
    ended by whoever settles the call, or here when ``handle`` raises."""
    if not tracing.enabled():
        return handle(tracing.NO_SPAN, tracing.NO_SPAN)
    model_span = tracing.NO_SPAN
    if model is not None:
        attributes = model_attributes(downstream, host, model, input_tokens, max_tokens)
        model_span = tracing.start(f"chat {model}", kind="client", attributes=attributes)
    try:
        with tracing.span(
            str(request.method),
            kind="client",
            attributes=http_attributes(request, host, downstream),
            under=model_span,
        ) as http_span:
            tracing.inject(request.headers)
            response = handle(model_span, http_span)
            http_span.set("http.response.status_code", response.status_code)
            if response.status_code >= 400:
                http_span.fail(str(response.status_code))
            return response
    except BaseException as exc:
        model_span.fail(type(exc).__name__)
        model_span.end()
        raise


def model_attributes(
    downstream: str, host: str, model: str, input_tokens: int, max_tokens: int
) -> dict[str, Any]:
    """A model call's GenAI semantic-convention attributes, as far as its request tells."""
    system = downstream.split(":", 1)[0] if ":" in downstream else host
    return {
        "gen_ai.system": system,
        "gen_ai.provider.name": system,
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens or None,
        "agentfleet.downstream": downstream,
        "agentfleet.estimated_input_tokens": input_tokens,
    }


def http_attributes(request: Any, host: str, downstream: str) -> dict[str, Any]:
    """An outgoing request's HTTP semantic-convention attributes (no query: it may hold secrets)."""
    url = request.url
    return {
        "http.request.method": str(request.method),
        "url.scheme": str(url.scheme),
        "server.address": host,
        "server.port": url.port,
        "url.path": str(url.path),
        "agentfleet.downstream": downstream,
    }


def usage_attributes(input_tokens: int, output_tokens: int, cost_usd: float | None) -> dict[str, Any]:
    """A model call's usage, as it ends: tokens and its cost in US dollars (None: unpriced)."""
    return {
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "agentfleet.cost_usd": cost_usd,
    }
