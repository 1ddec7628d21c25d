"""How docs/keys.md writes a kind of Redis key, and what names of that kind look like
(``agentfleet.keys.KEYS`` is the table of them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KeyPattern", "kinds"]


@dataclass(frozen=True)
class KeyPattern:
    """One kind of key: ``pattern`` as docs/keys.md writes it (``p`` the key prefix, ``<name>``
    a variable part of at least one character, ``<name?>`` one that may be empty, ``...`` the
    rest of an item's idempotency key) and its Redis type."""

    pattern: str
    type: str

    def regex(self, prefix: str) -> re.Pattern[str]:
        """What the names of this kind look like under ``prefix``."""
        parts = re.split(r"(<[^>]+>|\.\.\.|(?:^|(?<=\{))p(?=:))", self.pattern)
        spelled = {"...": ".*", "p": re.escape(prefix)}
        body = "".join(
            _variable(part) if part.startswith("<") else spelled.get(part, re.escape(part)) for part in parts
        )
        return re.compile(body, re.DOTALL)

    def matches(self, key: str, prefix: str) -> bool:
        return self.regex(prefix).fullmatch(key) is not None


def _variable(part: str) -> str:
    return ".*" if part.endswith("?>") else ".+"


def kinds(rows: str) -> tuple[KeyPattern, ...]:
    """One ``KeyPattern`` per line of ``rows``: a pattern and its Redis type."""
    return tuple(KeyPattern(*line.split()) for line in rows.strip().splitlines())
