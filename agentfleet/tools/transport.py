"""The fleet transport: every request a task makes passes through it.

Layered over the guard (SSRF check, address pinning, credentials), it adds what has to hold
across the whole cluster, for ``httpx`` (``ctx.http``) and ``httpx2`` (the Anthropic SDK)
alike::

    FleetTransport -> GuardTransport -> HTTPTransport

For each request it:

1. names the downstream: the host, or ``anthropic:<model>`` for a Messages API call (whose
   host is then limited too);
2. asks the circuit breaker (an open circuit raises ``Deferred``), then the limiter for a
   bucket token and a concurrency lease; a Messages call also charges its estimated input
   tokens and its ``max_tokens`` (waiting too long raises ``Deferred``: the task is
   rescheduled, not retried);
3. after the response: a 429 or 529 pauses the downstream for every worker for its
   ``retry-after``; 5xx and 529 count against the circuit, anything else for it; a Messages
   reply's ``usage`` reconciles the token charge (unused tokens go back) and is priced;
4. releases the lease when the response is closed (at once for a Messages reply, which is
   read here to find its usage).

Collaborators come in as small protocols, so this module imports neither the limiter nor
the pricing (they are its siblings); ``agentfleet.tasks.clients`` wires them together.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from agentfleet.errors import AgentfleetError, retry_after_from_headers

__all__ = [
    "Breaker",
    "CallInfo",
    "FleetHooks",
    "Limiter",
    "Permit",
    "Usage",
    "estimate_tokens",
    "fleet_transport",
]


class Permit(Protocol):
    def release(self) -> None: ...

    def reconcile(
        self, *, actual_input_tokens: int | None = None, actual_output_tokens: int | None = None
    ) -> Any: ...


class Limiter(Protocol):
    def acquire(
        self, downstream: str, *, also: Iterable[str] = (), input_tokens: int = 0, output_tokens: int = 0
    ) -> Permit: ...

    def pause(self, downstream: str, seconds: float) -> Any: ...


class Breaker(Protocol):
    def before(self, downstream: str) -> bool: ...

    def release_probe(self, downstream: str) -> None: ...

    def record_success(self, downstream: str) -> None: ...

    def record_failure(self, downstream: str) -> None: ...


@dataclass(frozen=True)
class CallInfo:
    """One outgoing call: its downstream, the extra names it is limited under, and for a
    Messages API call its model, estimated input tokens and ``max_tokens``."""

    downstream: str
    host: str
    also: tuple[str, ...] = ()
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def is_llm(self) -> bool:
        return self.model is not None


@dataclass
class Usage:
    """Tokens a Messages reply reports (``usage`` of the response or of its stream events)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def add(self, data: dict[str, Any]) -> None:
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            if isinstance(data.get(name), int) and data[name]:
                setattr(self, name, data[name])
        if isinstance(data.get("output_tokens"), int):
            self.output_tokens = data["output_tokens"]

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class FleetHooks:
    """What the transport calls out to. Every hook is optional.

    ``gate()`` runs before anything else (a budget check that raises ``BudgetExceeded``);
    ``on_call(info)`` notes the downstream a task called; ``on_usage(info, usage)`` prices and
    records a Messages reply's tokens. ``llm_hosts`` are the hosts whose ``/v1/messages``
    calls are LLM calls; ``default_pause_s`` is how long a 429 or 529 without ``retry-after``
    pauses its downstream (seconds).
    """

    limiter: Limiter | None = None
    breaker: Breaker | None = None
    gate: Callable[[], None] | None = None
    on_call: Callable[[CallInfo], None] | None = None
    on_usage: Callable[[CallInfo, Usage], None] | None = None
    llm_hosts: frozenset[str] = field(default_factory=lambda: frozenset({"api.anthropic.com"}))
    default_pause_s: float = 1.0
    provider: str = "anthropic"


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by the usual rule of thumb: about four characters a token."""
    return math.ceil(len(text) / 4)


def _describe(request: Any, hooks: FleetHooks) -> CallInfo:
    host = str(request.url.host).lower().rstrip(".")
    path = str(request.url.path)
    if request.method == "POST" and host in hooks.llm_hosts and path.rstrip("/").endswith("/messages"):
        try:
            body = json.loads(request.content or b"{}")
        except (ValueError, UnicodeDecodeError):
            body = {}
        model = body.get("model") if isinstance(body, dict) else None
        if isinstance(model, str) and model:
            prompt = json.dumps(
                [body.get("system"), body.get("messages"), body.get("tools")], ensure_ascii=False
            )
            max_tokens = body.get("max_tokens")
            return CallInfo(
                downstream=f"{hooks.provider}:{model}",
                host=host,
                also=(host,),
                model=model,
                input_tokens=estimate_tokens(prompt),
                output_tokens=max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 0,
            )
    return CallInfo(downstream=host, host=host)


def _pause_for(response: Any, default_s: float) -> float:
    hinted = retry_after_from_headers(response.headers)
    return hinted if hinted is not None else default_s


class _Settlement:
    """Ends one call exactly once: reconcile tokens, record usage, release the lease."""

    def __init__(self, info: CallInfo, permit: Permit | None, hooks: FleetHooks) -> None:
        self.info = info
        self.permit = permit
        self.hooks = hooks
        self.usage: Usage | None = Usage() if info.is_llm else None
        self.done = False

    def settle(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            if self.usage is not None and (self.usage.input_tokens or self.usage.output_tokens):
                if self.permit is not None:
                    self.permit.reconcile(
                        actual_input_tokens=self.usage.input_tokens
                        + self.usage.cache_creation_input_tokens
                        + self.usage.cache_read_input_tokens,
                        actual_output_tokens=self.usage.output_tokens,
                    )
                if self.hooks.on_usage is not None:
                    self.hooks.on_usage(self.info, self.usage)
        finally:
            if self.permit is not None:
                self.permit.release()


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
            if not isinstance(event, dict) or self._settlement.usage is None:
                continue
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                self._settlement.usage.add(message["usage"])
            if isinstance(event.get("usage"), dict):
                self._settlement.usage.add(event["usage"])

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
        info = _describe(request, hooks)
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
        settlement = _Settlement(info, permit, hooks)
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
        if response.status_code == 200 and settlement.usage is not None:
            try:
                body = json.loads(content)
            except ValueError:
                body = None
            if isinstance(body, dict) and isinstance(body.get("usage"), dict):
                settlement.usage.add(body["usage"])
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
