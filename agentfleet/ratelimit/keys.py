"""Where the limiter keeps its state in Redis: every key starts ``{prefix}:rl:``."""

from __future__ import annotations

__all__ = ["KeySpace"]


class KeySpace:
    """Key names for one prefix. Each key expires once idle, so none accumulates."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{prefix}:rl"
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

    def bucket(self, downstream: str, name: str) -> str:
        """String ``tokens:ts`` (ts in server ms); expires when the bucket would be full again."""
        return f"{self.root}:{downstream}:bucket:{name}"
