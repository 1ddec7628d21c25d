"""Where the limiter keeps its state in Redis: every key starts ``{<prefix>:rl}:``.

The braces are a Redis Cluster hash tag: one acquire checks the pauses, buckets and
semaphores of several downstreams (and the fleet ceiling) at once, so all of the limiter's
keys live in one slot.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["KeySpace"]


class KeySpace:
    """Key names for one prefix. Each key expires once idle, so none accumulates."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{{{prefix}:rl}}"
        # Sorted set of the downstreams seen, scored by when (server ms).
        self.registry = f"{self.root}:known"

    def pause(self, downstream: str) -> str:
        """Paused-until (server ms); expires when the pause ends."""
        return f"{self.root}:{downstream}:pause"

    def holders(self, downstream: str) -> str:
        """Sorted set of lease ids scored by lease expiry (server ms)."""
        return f"{self.root}:{downstream}:holders"

    def hold_time(self, downstream: str) -> str:
        """Moving average of how long a lease is held (ms), for wait hints."""
        return f"{self.root}:{downstream}:hold"

    def buckets(self, downstream: str, names: Iterable[str]) -> str:
        """JSON ``[tokens of each bucket..., server ms]``; expires when all would be full.

        The bucket names are part of the key, so a record is never read with another layout.
        """
        return f"{self.root}:{downstream}:buckets:{'+'.join(names)}"
