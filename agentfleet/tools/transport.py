"""The fleet transport: every request a task makes passes through it.

Layered over the guard (SSRF check, address pinning, credentials), it adds what has to hold
across the whole cluster, for ``httpx`` (``ctx.http``) and ``httpx2`` (the Anthropic SDK)
alike::

    FleetTransport -> GuardTransport -> HTTPTransport

For each request it:

1. names the downstream: the host, or ``<vendor>:<model>`` for a call a vendor adapter
   recognises (``anthropic:<model>``, ``openai:<model>``), whose host is then limited too;
   an LLM call estimated larger than its model's context window fails here, unsent
   (``ContextWindowExceeded``, permanent);
2. asks the circuit breaker (an open circuit raises ``Deferred``), then the limiter for a
   bucket token and a concurrency lease; an LLM call also charges its estimated input
   tokens and its most output tokens (waiting too long raises ``Deferred``: the task is
   rescheduled, not retried);
3. after the response: a 429 or 529 pauses the downstream for every worker for its
   ``retry-after``; 5xx and 529 count against the circuit, anything else for it; an LLM
   reply's usage (read by its vendor's adapter, from the body or the stream's events)
   reconciles the token charge (unused tokens go back) and is priced;
4. releases the lease when the response is closed (at once for a whole LLM reply, which is
   read here to find its usage).

With tracing on (``agentfleet.tracing``; ``agentfleet.tracing.calls`` makes the spans), each
request is a client span carrying its trace context to the downstream (W3C ``traceparent``);
an LLM call is also a model-call span around it, from the limiter's wait to the end of the
reply, with the GenAI semantic conventions (``gen_ai.system``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``, ...) and its cost (``agentfleet.cost_usd``, as ``on_usage``
priced it).

Collaborators come in as small protocols (``agentfleet.tools.calls``, with what the transport
knows of a call), so this module imports neither the limiter, the circuit breaker nor the
vendor adapters (they are its siblings); ``agentfleet.tasks.clients`` wires them together.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from agentfleet import tracing
from agentfleet.errors import AgentfleetError, DownstreamError, retry_after_from_headers
from agentfleet.models import TokenUsage
from agentfleet.tools.calls import CallInfo, FleetHooks, PermitProtocol, describe_call
from agentfleet.tracing.calls import traced_call, usage_attributes

# What the transport is given and builds on (``tools/calls.py``) is imported from here too.
__all__ = ["CallInfo", "FleetHooks", "describe_call", "fleet_transport"]


def _pause_for(response: Any, default_s: float) -> float:
    hinted = retry_after_from_headers(response.headers)
    return hinted if hinted is not None else default_s


class _Settlement:
    """Ends one call exactly once: reconcile tokens, record usage, release the lease."""

    def __init__(
        self, info: CallInfo, permit: PermitProtocol | None, hooks: FleetHooks, span: Any = tracing.NO_SPAN
    ) -> None:
        self.info = info
        self.permit = permit
        self.hooks = hooks
        self.usage: TokenUsage | None = TokenUsage() if info.is_llm else None
        self.done = False
        # The model call's span (ended here), or a no-op one.
        self.span = span

    def report(self, usage: TokenUsage | None) -> None:
        """Take a usage report of the reply (the body's, or a stream event's running totals)."""
        if usage is not None and self.usage is not None:
            self.usage = self.usage.latest(usage)

    def settle(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            if self.usage is not None and self.usage.total:
                if self.permit is not None:
                    self.permit.reconcile(
                        actual_input_tokens=self.usage.total_input,
                        actual_output_tokens=self.usage.output_tokens,
                    )
                cost = self.hooks.on_usage(self.info, self.usage) if self.hooks.on_usage is not None else None
                self.span.set_many(usage_attributes(self.usage.total_input, self.usage.output_tokens, cost))
        finally:
            try:
                if self.permit is not None:
                    self.permit.release()
            finally:
                self.span.end()


class _SettlingStreamCore:
    """A response body that settles its call when closed, reading SSE usage as it passes."""

    def __init__(self, inner: Any, settlement: _Settlement) -> None:
        self._inner = inner
        self._settlement = settlement
        self._pending = b""

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if self._settlement.usage is not None:
                self._scan(chunk)
            yield chunk

    def _scan(self, chunk: bytes) -> None:
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            vendor = self._settlement.info.vendor
            if vendor is None:
                continue
            try:
                self._settlement.report(vendor.event_usage(event))
            except DownstreamError:
                # A malformed count in one event must not break the caller's stream.
                continue

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._settlement.settle()


class _FleetCore:
    """The transport's logic, shared by the httpx and httpx2 classes made below."""

    _module: ModuleType
    _stream_cls: type[Any]

    def __init__(self, inner: Any, hooks: FleetHooks) -> None:
        self.inner = inner
        self.hooks = hooks

    def handle_request(self, request: Any) -> Any:
        hooks = self.hooks
        if hooks.gate is not None:
            hooks.gate()
        info = describe_call(request, hooks.vendors)
        info.require_fit()
        return traced_call(
            request,
            lambda model_span, http_span: self._handle(request, info, model_span, http_span),
            downstream=info.downstream,
            host=info.host,
            model=info.model,
            input_tokens=info.input_tokens,
            max_tokens=info.output_tokens,
        )

    def _handle(self, request: Any, info: CallInfo, model_span: Any, http_span: Any = tracing.NO_SPAN) -> Any:
        hooks = self.hooks
        probe = hooks.breaker.before(info.downstream) if hooks.breaker is not None else False
        permit = None
        if hooks.limiter is not None:
            try:
                permit = hooks.limiter.acquire(
                    info.downstream,
                    also=info.also,
                    input_tokens=info.input_tokens,
                    output_tokens=info.output_tokens,
                )
            except BaseException:
                if probe and hooks.breaker is not None:
                    hooks.breaker.release_probe(info.downstream)
                raise
        if hooks.on_call is not None:
            hooks.on_call(info)
        settlement = _Settlement(info, permit, hooks, model_span)
        try:
            response = self.inner.handle_request(request)
        except BaseException as exc:
            settlement.settle()
            if hooks.breaker is not None:
                if isinstance(exc, AgentfleetError) and not getattr(exc, "downstream_fault", False):
                    if probe:
                        hooks.breaker.release_probe(info.downstream)
                else:
                    hooks.breaker.record_failure(info.downstream)
            raise
        if response.status_code >= 400:
            model_span.fail(str(response.status_code))
        try:
            self._after(info, response)
            if info.is_llm and not _is_event_stream(response):
                return self._read_llm_reply(response, settlement, request)
        except BaseException:
            response.close()
            settlement.settle()
            raise
        return self._module.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=self._stream_cls(response.stream, settlement),
            extensions=response.extensions,
            request=request,
        )

    def _after(self, info: CallInfo, response: Any) -> None:
        status = response.status_code
        if status in (429, 529) and self.hooks.limiter is not None:
            self.hooks.limiter.pause(info.downstream, _pause_for(response, self.hooks.default_pause_s))
        if self.hooks.breaker is not None:
            if status >= 500:
                self.hooks.breaker.record_failure(info.downstream)
            elif status != 429:
                self.hooks.breaker.record_success(info.downstream)

    def _read_llm_reply(self, response: Any, settlement: _Settlement, request: Any) -> Any:
        try:
            content = response.read()
        finally:
            response.close()
        if response.status_code == 200 and settlement.info.vendor is not None:
            try:
                body = json.loads(content)
            except ValueError:
                body = None
            settlement.report(settlement.info.vendor.reply_usage(body))
        settlement.settle()
        # The body is already decoded, so its encoding and length headers no longer apply.
        headers = [
            (k, v)
            for k, v in response.headers.items()
            if k.lower() not in ("content-encoding", "content-length")
        ]
        return self._module.Response(
            status_code=response.status_code,
            headers=headers,
            content=content,
            extensions={k: v for k, v in response.extensions.items() if k != "network_stream"},
            request=request,
        )

    def close(self) -> None:
        self.inner.close()


def _is_event_stream(response: Any) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


@functools.cache
def _classes(module: ModuleType) -> tuple[type[Any], type[Any]]:
    stream = type("SettlingStream", (_SettlingStreamCore, module.SyncByteStream), {"__module__": __name__})
    transport = type(
        "FleetTransport",
        (_FleetCore, module.BaseTransport),
        {"_module": module, "_stream_cls": stream, "__module__": __name__, "__doc__": __doc__},
    )
    return transport, stream


def fleet_transport(module: ModuleType, inner: Any, hooks: FleetHooks) -> Any:
    """A fleet transport for ``module`` (``httpx`` or ``httpx2``) over ``inner`` (the guard)."""
    return _classes(module)[0](inner, hooks)
