"""Console sessions the server can end: each one signed in is listed in Redis until it expires.

The session cookie is signed with a key derived from the service token (``service/console/
auth.py``), so a forged cookie is refused without asking Redis. A genuine one is honoured
only while its id is listed here: signing out removes it, "sign out everywhere" removes
every one, and a copied cookie is worth nothing after either.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from agentfleet.config import Settings
from agentfleet.keys import AccessKeys

__all__ = ["SessionStore"]


class SessionStore:
    """The live console sessions of one fleet (every ``serve`` process shares them)."""

    def __init__(self, client: redis.Redis, *, prefix: str = "af") -> None:
        # redis-py's reply types are unions of every RESP shape; this store knows each reply.
        self.client: Any = client
        self.key = AccessKeys(prefix).sessions

    @classmethod
    def from_settings(cls, settings: Settings, client: redis.Redis) -> SessionStore:
        return cls(client, prefix=settings.key_prefix)

    def start(self, session_id: str, expires_at: float) -> None:
        """List a new session until ``expires_at`` (epoch seconds); drop the expired ones."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zremrangebyscore(self.key, "-inf", time.time())
        pipe.zadd(self.key, {session_id: expires_at})
        # Every session lasts as long, so the newest one is the last to expire.
        pipe.expireat(self.key, int(expires_at) + 1)
        pipe.execute()

    def alive(self, session_id: str, now: float | None = None) -> bool:
        """Whether ``session_id`` is listed and unexpired."""
        expires = self.client.zscore(self.key, session_id)
        return expires is not None and float(expires) > (time.time() if now is None else now)

    def end(self, session_id: str) -> None:
        """Sign one session out."""
        self.client.zrem(self.key, session_id)

    def end_all(self) -> int:
        """Sign every session out; how many there were."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zcard(self.key)
        pipe.delete(self.key)
        count, _ = pipe.execute()
        return int(count)
