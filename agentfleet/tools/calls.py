"""What the fleet transport knows of a call, and the collaborators it asks about it.

``describe_call`` names a request's downstream (``CallInfo``: the host, or ``<vendor>:<model>``
for an LLM call a vendor adapter recognises); ``FleetHooks`` holds the limiter, the circuit
breaker, the vendors and the callbacks the transport (``agentfleet.tools.transport``) calls.
Each collaborator is a small protocol, so nothing here imports the limiter, the breaker or the
vendor adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentfleet.errors import ContextWindowExceeded
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
