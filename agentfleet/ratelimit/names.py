"""Downstream names: the key every limit is looked up and stored under.

A downstream is a host name, lowercased (``vendor-a.example``), or ``provider:model`` for an
LLM (``anthropic:claude-haiku-4-5``), whose token limits are per model.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from agentfleet.errors import BadRequest

__all__ = ["FLEET", "POOL_PREFIX", "downstream_for", "llm_downstream", "pool_downstream", "pool_size"]

FLEET = "_fleet"
"""The reserved name of the fleet-wide ceiling (``max_parallelism``); no host can be named so."""

POOL_PREFIX = "pool:"
"""Names of one run's own concurrency cap: ``pool:<run id>:<slots>`` (no host has a colon)."""


def downstream_for(url_or_host: str) -> str:
    """The downstream of a URL, ``host:port`` or bare host: its host name, lowercased.

    The port is dropped (one vendor's limit covers all its ports), as is a trailing dot.
    """
    text = url_or_host.strip()
    try:
        host = urlsplit(text if "://" in text else f"//{text}").hostname
    except ValueError:
        host = None
    host = (host or "").rstrip(".")
    if not host:
        raise BadRequest(f"no host name in {url_or_host!r}")
    return host


def llm_downstream(model: str, provider: str = "anthropic") -> str:
    """The downstream that holds an LLM model's request and token limits: ``provider:model``."""
    return f"{provider.strip().lower()}:{model.strip()}"


def pool_downstream(run_id: str, slots: int) -> str:
    """The name of run ``run_id``'s own cap of ``slots`` items in flight at once."""
    return f"{POOL_PREFIX}{run_id}:{int(slots)}"


def pool_size(name: str) -> int | None:
    """The slots a ``pool_downstream`` name carries, else None."""
    if not name.startswith(POOL_PREFIX):
        return None
    _, _, slots = name.rpartition(":")
    return int(slots) if slots.isdigit() and int(slots) > 0 else None
