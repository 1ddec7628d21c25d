"""The mock model's prompt cache: which request prefixes it has seen, and when.

The request's prefix up to its last ``cache_control`` mark is ``cache_creation_input_tokens``
the first time an instance sees it and ``cache_read_input_tokens`` when it comes again within
``CACHE_TTL_S`` of its last use; ``input_tokens`` counts the rest.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agentfleet.mock_llm.tokens import input_pieces, tokens_of_chars

__all__ = ["CACHE_TTL_S", "PromptCache"]

CACHE_TTL_S = 300.0
"""A cached prefix is forgotten this many seconds after it was last used, as Anthropic's is."""
_CACHE_PRUNE_AT = 10_000


class PromptCache:
    """Cached prompt prefixes by digest; ``clock`` (seconds) ages them. Thread-safe."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._prefixes: dict[str, float] = {}
        self._lock = threading.Lock()

    def usage(self, request: Mapping[str, Any]) -> dict[str, int]:
        """The input tokens of ``request``: cache creation, cache reads and the rest; notes its
        cached prefix as used now."""
        pieces = input_pieces(request)
        total = max(1, tokens_of_chars(sum(c for _, c, _ in pieces)))
        marks = [i for i, (_, _, cached) in enumerate(pieces) if cached]
        created = read = 0
        if marks:
            prefix = pieces[: marks[-1] + 1]
            prefix_tokens = min(total, tokens_of_chars(sum(c for _, c, _ in prefix)))
            key = hashlib.sha256(
                (str(request.get("model")) + "\n".join(p for p, _, _ in prefix)).encode()
            ).hexdigest()
            now = self._clock()
            with self._lock:
                seen = now - self._prefixes.get(key, -math.inf) < CACHE_TTL_S
                self._prefixes[key] = now
                if len(self._prefixes) > _CACHE_PRUNE_AT:
                    self._prefixes = {k: t for k, t in self._prefixes.items() if now - t < CACHE_TTL_S}
            if seen:
                read = prefix_tokens
            else:
                created = prefix_tokens
        return {
            "input_tokens": max(1, total - created - read),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }
