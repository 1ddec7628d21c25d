"""What a ``--category`` or ``--downstream`` filter word matches among stored dead letters.

A dead letter carries a leaf category (``bad_request``, ``timeout``, ...). A filter may name a
leaf, or a parent: ``permanent`` (every ``PermanentError`` category: not worth retrying) or
``transient`` (alias ``retryable``: every ``RetryableError`` category). The tree is read from
``agentfleet.errors`` when asked, so a category of an error class defined later counts too.

A dead letter's downstream is a host (``vendor-b.example``) or an LLM call's
``<provider>:<model>`` (``anthropic:claude-haiku-4-5``). A filter may name either exactly, a
provider (``anthropic``: every model of it), or a host that serves a provider's API
(``api.anthropic.com``, or the configured base URL's host), given as ``vendor_hosts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agentfleet.errors import AgentfleetError, PermanentError, RetryableError

__all__ = [
    "PARENT_CATEGORIES",
    "dead_letter_categories",
    "downstream_matches",
    "expand_category",
    "unknown_category_error",
]

#: Parent category name -> the error class whose subtree it stands for.
PARENT_CATEGORIES: dict[str, type[AgentfleetError]] = {
    "permanent": PermanentError,
    "transient": RetryableError,
    "retryable": RetryableError,
}


def _categories_under(cls: type[AgentfleetError]) -> set[str]:
    found = {cls.category}
    for sub in cls.__subclasses__():
        found |= _categories_under(sub)
    return found


def dead_letter_categories() -> list[str]:
    """Every leaf category a dead letter can carry (permanent and retryable errors), sorted."""
    return sorted(_categories_under(PermanentError) | _categories_under(RetryableError))


def expand_category(name: str) -> frozenset[str]:
    """The leaf categories ``name`` stands for: its subtree for a parent, else itself."""
    key = name.strip().lower()
    parent = PARENT_CATEGORIES.get(key)
    return frozenset(_categories_under(parent)) if parent else frozenset({key})


def unknown_category_error(name: str, stored: Iterable[str]) -> str | None:
    """Why ``name`` is no category (naming the known ones), or None when it is one."""
    key = name.strip().lower()
    leaves = set(dead_letter_categories()) | set(stored)
    if key in PARENT_CATEGORIES or key in leaves:
        return None
    return (
        f"--category {name!r} is no dead-letter category; use a parent ("
        + ", ".join(p for p in PARENT_CATEGORIES if p != "retryable")
        + ") or one of: "
        + ", ".join(sorted(leaves))
    )


def downstream_matches(pattern: str, name: str, vendor_hosts: Mapping[str, Iterable[str]]) -> bool:
    """Whether the stored downstream ``name`` is what the filter word ``pattern`` names.

    ``vendor_hosts`` maps a provider (``anthropic``) to the hosts that serve its API.
    """
    want, have = pattern.strip().lower(), name.strip().lower()
    if want == have:
        return True
    provider, sep, _model = have.partition(":")
    if not sep:
        return False
    return want == provider or want in {h.lower() for h in vendor_hosts.get(provider, ())}
