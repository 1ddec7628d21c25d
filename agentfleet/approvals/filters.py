"""The status words every surface filters approvals by (``all`` for any status)."""

from __future__ import annotations

from typing import cast

from agentfleet.approvals.model import ApprovalStatus
from agentfleet.errors import ConfigError

__all__ = ["STATUS_WORDS", "status_filter"]

STATUS_WORDS = ("pending", "approved", "rejected", "timed_out", "cancelled", "all")


def status_filter(word: str) -> ApprovalStatus | None:
    """The status ``word`` names (None for ``all``); ``ConfigError`` naming the known words."""
    if word not in STATUS_WORDS:
        raise ConfigError(f"status {word!r} is not one of {', '.join(STATUS_WORDS)}")
    return None if word == "all" else cast(ApprovalStatus, word)
