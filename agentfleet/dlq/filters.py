"""Which dead letters a listing, stats, requeue, purge or export applies to: one vocabulary.

``DLQFilter`` fields are the filter words everywhere: ``category``, ``downstream``,
``run_id``, ``fingerprint`` and ``since`` (``DeadLetterQueue`` methods take them as keyword
arguments, ``agentfleet dlq`` commands as ``--category``, ``--downstream``, ``--run``,
``--fingerprint`` and ``--since``).
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, field_validator

from agentfleet.errors import ConfigError

__all__ = ["DLQFilter", "FilterFields", "checked_since", "parse_since"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_since(text: str, *, now: float | None = None) -> float:
    """A Unix time from ``"90s"``, ``"30m"``, ``"6h"``, ``"2d"``, ``"1w"`` (ago) or an ISO date.

    An ISO date without a zone is taken as UTC. Raises ``ConfigError`` with the accepted forms,
    and for a time before 1970 (a duration longer than the epoch is old).
    """
    now = time.time() if now is None else now
    match = _DURATION.match(text)
    if match:
        return checked_since(now - float(match.group(1)) * _UNIT_S[match.group(2)], text)
    try:
        when = datetime.fromisoformat(text.strip())
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return checked_since(when.timestamp(), text)
    except (ValueError, OverflowError):
        raise ConfigError(
            f"--since {text!r}: use a duration such as 30m, 6h or 2d, or an ISO date such as 2025-01-31T08:00"
        ) from None


def checked_since(at: float, given: object) -> float:
    """``at`` (a Unix time) when it is a finite time since 1970; else ``ConfigError``."""
    if not math.isfinite(at) or at < 0:
        raise ConfigError(
            f"--since {given!r} reaches back before 1970; give a shorter duration or a later date"
        )
    return at


class FilterFields(TypedDict, total=False):
    """``DLQFilter``'s fields as keyword arguments (``dlq.list(category="timeout", since="6h")``)."""

    category: str | None
    downstream: str | None
    run_id: str | None
    fingerprint: str | None
    since: str | float | None


class DLQFilter(BaseModel):
    """Entries matching every field that is set.

    ``since`` keeps entries dead-lettered at or after it: a Unix time, or text such as
    ``"30m"``, ``"6h"``, ``"2d"`` or an ISO date (``parse_since``), stored as a Unix time.
    """

    model_config = ConfigDict(frozen=True)

    category: str | None = None
    downstream: str | None = None
    run_id: str | None = None
    fingerprint: str | None = None
    since: float | None = None

    @field_validator("since", mode="before")
    @classmethod
    def _since_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_since(value)
        return checked_since(float(value), value) if isinstance(value, int | float) else value

    @classmethod
    def of(cls, flt: DLQFilter | None = None, **fields: Any) -> DLQFilter:
        """``flt`` (default: match everything) with the keyword ``fields`` that are set added."""
        base = flt or cls()
        given = {name: value for name, value in fields.items() if value is not None}
        return cls.model_validate({**base.model_dump(exclude_none=True), **given}) if given else base

    @property
    def indexed(self) -> dict[str, str]:
        """The filters answered by an index: dimension name -> value."""
        found = {
            "category": self.category,
            "downstream": self.downstream,
            "run": self.run_id,
            "fingerprint": self.fingerprint,
        }
        return {dim: value for dim, value in found.items() if value is not None}

    @property
    def empty(self) -> bool:
        return not self.indexed and self.since is None
