"""The vendor adapters a worker uses, from the settings: which hosts speak which API.

Anthropic's Messages API is served by ``api.anthropic.com`` and by ``llm.base_url``'s host
(the mock, a proxy); OpenAI-compatible chat completions by ``api.openai.com`` and by
``llm.openai_base_url``'s host.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentfleet.config import Settings
from agentfleet.errors import AgentfleetError
from agentfleet.llm.anthropic import AnthropicAdapter
from agentfleet.llm.openai import OpenAIAdapter
from agentfleet.llm.vendor import VendorAdapter, host_of

__all__ = ["map_vendor_error", "vendors_for"]


def vendors_for(settings: Settings) -> tuple[VendorAdapter, ...]:
    """Every vendor's adapter, each knowing the hosts configured for it."""
    llm = settings.llm
    anthropic_hosts = [host_of(llm.base_url)] if llm.base_url else []
    openai_hosts = [host_of(llm.openai_base_url)] if llm.openai_base_url else []
    windows = llm.context_windows
    return AnthropicAdapter(anthropic_hosts, windows), OpenAIAdapter(openai_hosts, windows)


def map_vendor_error(exc: BaseException, vendors: Sequence[VendorAdapter]) -> AgentfleetError | None:
    """The fleet error for ``exc`` by the vendor it belongs to; None when it is no vendor's."""
    for vendor in vendors:
        mapped = vendor.map_error(exc)
        if mapped is not None:
            return mapped
    return None
