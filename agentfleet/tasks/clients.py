"""The HTTP and Anthropic clients a ``TaskContext`` hands out, both on the fleet transport."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from agentfleet.config import get_settings

if TYPE_CHECKING:
    import anthropic

    from agentfleet.tasks.context import TaskContext

__all__ = ["anthropic_client", "http_client"]


def http_client(ctx: TaskContext) -> httpx.Client:
    """An ``httpx.Client`` for one execution."""
    settings = get_settings()
    return httpx.Client(
        timeout=httpx.Timeout(settings.fetch.timeout_s, connect=settings.llm.connect_timeout_s),
        follow_redirects=False,
    )


def anthropic_client(ctx: TaskContext) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` for one execution, with the fleet owning retries."""
    import anthropic

    settings = get_settings()
    key = settings.llm.api_key.get_secret_value() if settings.llm.api_key else None
    return anthropic.Anthropic(
        api_key=key,
        base_url=settings.llm.base_url,
        max_retries=0,
        timeout=settings.llm.timeout_s,
    )
