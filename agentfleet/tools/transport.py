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

With tracing on (``agentfleet.tracing``), each request is a client span carrying its trace
context to the downstream (W3C ``traceparent``); an LLM call is also a model-call span around
it, from the limiter's wait to the end of the reply, with the GenAI semantic conventions
(``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``, ...) and its
cost (``agentfleet.cost_usd``, as ``on_usage`` priced it).

Collaborators come in as small protocols, so this module imports neither the limiter, the
circuit breaker nor the vendor adapters (they are its siblings); ``agentfleet.tasks.clients``
wires them together.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from agentfleet import tracing
from agentfleet.errors import (
    AgentfleetError,
    ContextWindowExceeded,
    DownstreamError,
    retry_after_from_headers,
)
from agentfleet.models import TokenUsage

__all__ = [
    "BreakerProtocol",
    "CallInfo",
    "FleetHooks",
    "LLMCallProtocol",
    "LimiterProtocol",
    "PermitProtocol",
    "VendorProtocol",
    "describe_call",
    "fleet_transport",
]


class PermitProtocol(Protocol):
    def release(self) -> None: ...

    def reconcile(
        self, *, actual_input_tokens: int | None = None, actual_output_tokens: int | None = None
    ) -> Any: ...


class LimiterProtocol(Protocol):
    def acquire(
        self, downstream: str, *, also: Iterable[str] = (), input_tokens: int = 0, output_tokens: int = 0
    ) -> PermitProtocol: ...

    def pause(self, downstream: str, seconds: float) -> Any: ...


class BreakerProtocol(Protocol):
    def before(self, downstream: str) -> bool: ...

    def release_probe(self, downstream: str) -> None: ...

    def record_success(self, downstream: str) -> None: ...

    def record_failure(self, downstream: str) -> None: ...


class LLMCallProtocol(Protocol):
    """A call a vendor recognised (``agentfleet.llm.vendor.LLMRequest``)."""

    @property
    def downstream(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...

    @property
    def context_window(self) -> int | None: ...


class VendorProtocol(Protocol):
    """An LLM vendor's adapter (``agentfleet.llm.vendor.VendorAdapter``)."""

    def describe(self, method: str, host: str, path: str, content: bytes) -> LLMCallProtocol | None: ...

    def reply_usage(self, body: Any) -> TokenUsage | None: ...

    def event_usage(self, event: Any) -> TokenUsage | None: ...


@dataclass(frozen=True)
class CallInfo:
    """One outgoing call: its downstream, the extra names it is limited under, and for an LLM
    call its vendor, model, estimated input tokens, most output tokens and context window."""

    downstream: str
    host: str
    also: tuple[str, ...] = ()
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    vendor: VendorProtocol | None = field(default=None, compare=False, repr=False)
    context_window: int | None = None

    @property
    def is_llm(self) -> bool:
        return self.model is not None

    def require_fit(self) -> None:
        """Raise ``ContextWindowExceeded`` when the call's estimated input exceeds its window."""
        if self.context_window is not None and self.input_tokens > self.context_window:
            raise ContextWindowExceeded(
                f"the request's input is about {self.input_tokens:,} tokens (four characters a "
                f"token), more than {self.model}'s context window of {self.context_window:,}; it was "
                "not sent. Shorten the input (or raise llm.context_windows for this model)",
                downstream=self.downstream,
            )


@dataclass
class FleetHooks:
    """What the transport calls out to. Every hook is optional.

    ``gate()`` runs before anything else (the execution's checks: ``ClaimLost`` once its claim
    is gone, ``BudgetExceeded`` once a budget is crossed);
    ``on_call(info)`` notes the downstream a task called; ``on_usage(info, usage)`` prices and
    records an LLM reply's tokens, and returns its price (US dollars) if it has one. ``vendors``
    recognise LLM calls (the first that does names it); ``default_pause_s`` is how long a 429
    or 529 without ``retry-after`` pauses its downstream (seconds).
    """

    limiter: LimiterProtocol | None = None
    breaker: BreakerProtocol | None = None
    gate: Callable[[], None] | None = None
    on_call: Callable[[CallInfo], None] | None = None
    on_usage: Callable[[CallInfo, TokenUsage], float | None] | None = None
    vendors: Sequence[VendorProtocol] = ()
    default_pause_s: float = 1.0


def describe_call(request: Any, vendors: Sequence[VendorProtocol]) -> CallInfo:
    """The downstream of ``request`` (an httpx or httpx2 request), named by the first vendor
    that recognises it as an LLM call, else by its host."""
    host = str(request.url.host).lower().rstrip(".")
    # read(), not .content: a redirect hop's request holds an unread stream (even an empty one).
    content = request.read() if vendors else b""
    for vendor in vendors:
        call = vendor.describe(str(request.method), host, str(request.url.path), content)
        if call is not None:
            return CallInfo(
                downstream=call.downstream,
                host=host,
                also=(host,),
                model=call.model,
                input_tokens=call.input_tokens,
                output_tokens=call.output_tokens,
                vendor=vendor,
                context_window=call.context_window,
            )
    return CallInfo(downstream=host, host=host)


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
                self.span.set_many(
                    {
                        "gen_ai.usage.input_tokens": self.usage.total_input,
                        "gen_ai.usage.output_tokens": self.usage.output_tokens,
                        "agentfleet.cost_usd": cost,
                    }
                )
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
        if not tracing.enabled():
            return self._handle(request, info, tracing.NO_SPAN)
        model_span = tracing.NO_SPAN
        if info.is_llm:
            attributes = _model_attributes(info)
            model_span = tracing.start(f"chat {info.model}", kind="client", attributes=attributes)
        try:
            http_attributes = _http_attributes(request, info)
            with tracing.span(
                str(request.method), kind="client", attributes=http_attributes, under=model_span
            ) as http_span:
                tracing.inject(request.headers)
                response = self._handle(request, info, model_span, http_span)
                http_span.set("http.response.status_code", response.status_code)
                if response.status_code >= 400:
                    http_span.fail(str(response.status_code))
                return response
        except BaseException as exc:
            model_span.fail(type(exc).__name__)
            model_span.end()
            raise

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


def _model_attributes(info: CallInfo) -> dict[str, Any]:
    """A model call's GenAI semantic-convention attributes, as far as its request tells."""
    system = info.downstream.split(":", 1)[0] if ":" in info.downstream else info.host
    return {
        "gen_ai.system": system,
        "gen_ai.provider.name": system,
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": info.model,
        "gen_ai.request.max_tokens": info.output_tokens or None,
        "agentfleet.downstream": info.downstream,
        "agentfleet.estimated_input_tokens": info.input_tokens,
    }


def _http_attributes(request: Any, info: CallInfo) -> dict[str, Any]:
    """An outgoing request's HTTP semantic-convention attributes (no query: it may hold secrets)."""
    url = request.url
    return {
        "http.request.method": str(request.method),
        "url.scheme": str(url.scheme),
        "server.address": info.host,
        "server.port": url.port,
        "url.path": str(url.path),
        "agentfleet.downstream": info.downstream,
    }


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
