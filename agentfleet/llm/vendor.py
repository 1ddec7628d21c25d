"""What the fleet knows of an LLM vendor, in one object: ``VendorAdapter``.

An adapter recognises the vendor's calls among outgoing requests (``describe``: model,
estimated input tokens, most output tokens), reads token usage from a reply and from each
event of a streamed one, maps the vendor's errors into the fleet's tree, and prices usage from
``llm.prices``. The fleet transport (``agentfleet.tools.transport``) asks adapters through a
protocol (``VendorProtocol``, ``agentfleet.tools.calls``); ``agentfleet.llm.vendors`` makes the
configured ones. A new vendor is one new subclass in its own module.

A recognised call is limited as ``<vendor>:<model>`` (the limits table's key) and as its host.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from agentfleet.config import ModelPrice
from agentfleet.errors import AgentfleetError, error_for_status
from agentfleet.llm.pricing import cost_usd
from agentfleet.models import TokenUsage

__all__ = ["LLMRequest", "VendorAdapter", "estimate_tokens", "host_of"]


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by the usual rule of thumb: about four characters a token."""
    return math.ceil(len(text) / 4)


def host_of(url: str) -> str:
    """The lowercased host name of ``url`` (no port): how requests are matched to vendors."""
    return (urlsplit(url).hostname or "").lower()


@dataclass(frozen=True)
class LLMRequest:
    """A recognised LLM call: its model, estimated input tokens, most output tokens, and the
    model's context window in tokens (None when not known)."""

    downstream: str
    model: str
    input_tokens: int
    output_tokens: int
    context_window: int | None = None


class VendorAdapter(ABC):
    """One LLM vendor's API as the fleet sees it. Subclasses set the class variables.

    ``hosts`` are extra host names that speak this API (a proxy, a compatible server, the
    mock), besides ``api_host``; ``context_windows`` the input tokens each model takes.
    """

    name: ClassVar[str]
    api_host: ClassVar[str]
    path_suffix: ClassVar[str]

    def __init__(self, hosts: Iterable[str] = (), context_windows: Mapping[str, int] | None = None) -> None:
        self.hosts = frozenset({self.api_host, *(h.lower() for h in hosts if h)})
        self.context_windows = dict(context_windows or {})

    @classmethod
    def api_url(cls) -> str:
        return f"https://{cls.api_host}"

    def downstream(self, model: str) -> str:
        """The limits table's name for ``model`` of this vendor: ``<vendor>:<model>``."""
        return f"{self.name}:{model}"

    # Requests ------------------------------------------------------------------------------

    def describe(self, method: str, host: str, path: str, content: bytes) -> LLMRequest | None:
        """The call, when this is a request to this vendor's completion endpoint naming a model."""
        if method != "POST" or host not in self.hosts or not path.rstrip("/").endswith(self.path_suffix):
            return None
        try:
            body = json.loads(content or b"{}")
        except (ValueError, UnicodeDecodeError):
            return None
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str) or not model:
            return None
        return LLMRequest(
            downstream=self.downstream(model),
            model=model,
            input_tokens=estimate_tokens(json.dumps(self.prompt_parts(body), ensure_ascii=False)),
            output_tokens=self.max_output_tokens(body),
            context_window=self.context_windows.get(model),
        )

    @abstractmethod
    def prompt_parts(self, body: Mapping[str, Any]) -> list[Any]:
        """The parts of a request body that count as input (messages, system, tools)."""

    @abstractmethod
    def max_output_tokens(self, body: Mapping[str, Any]) -> int:
        """The most output tokens a request asks for (0 when it names no cap)."""

    # Replies -------------------------------------------------------------------------------

    @abstractmethod
    def reply_usage(self, body: Any) -> TokenUsage | None:
        """The usage a whole (not streamed) reply body reports, if any."""

    @abstractmethod
    def event_usage(self, event: Any) -> TokenUsage | None:
        """The usage one event of a streamed reply reports, if any (running totals)."""

    def cost_usd(self, model: str, usage: TokenUsage, prices: Mapping[str, ModelPrice]) -> float:
        """US dollars for ``usage`` on ``model``, from the price table (``llm.prices``)."""
        return cost_usd(model, usage, prices)

    # Errors --------------------------------------------------------------------------------

    @abstractmethod
    def map_error(self, exc: BaseException) -> AgentfleetError | None:
        """The fleet error for ``exc`` when it is this vendor's (its SDK's, or an HTTP error of
        one of its calls); None otherwise."""

    def error_for_response(
        self, status: int, headers: Mapping[str, str], body: str, model: str | None
    ) -> AgentfleetError | None:
        """The fleet error for an error reply of one of this vendor's calls (None below 400)."""
        detail = _error_detail(body)
        message = f"HTTP {status} from {self.name}" + (f": {detail}" if detail else "")
        err = error_for_status(status, message=message, headers=headers, body=body)
        if err is not None and model:
            err.downstream = self.downstream(model)
        return err


def _error_detail(body: str) -> str:
    """The ``error.message`` of an error body (both vendors send ``{"error": {"message"}}``)."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return ""
    return str(error.get("message") or "")[:300] if isinstance(error, Mapping) else ""
