"""A module whose import is itself the side effect: a test checks it never enters sys.modules."""

from __future__ import annotations

IMPORTED = True


def anything(results: list[object]) -> int:
    return len(results)
