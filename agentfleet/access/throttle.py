"""Failed sign-ins and bearer checks, counted per client address in Redis.

Every process that checks credentials (each ``agentfleet serve``, an ``agentfleet mcp`` over
HTTP) reads and counts through the same keys, so they agree on who is locked out. A client
has ``free`` failures; the next one locks it out for ``lockout_s`` seconds, each further one
for twice as long as the last, up to ``max_lockout_s``. A client's count is forgotten
``forget_s`` seconds after its last failure, and at once when it passes a check. Counting and
locking is one Lua script (``scripts/fail.lua``), so concurrent guesses cannot slip between a
read and a write.

Only the address counts: an operator elsewhere is never locked out by someone else's
guesses. IPv6 addresses count by their /64, the block one host is usually given.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Any

import redis

from agentfleet.config import Settings
from agentfleet.keys import AccessKeys
from agentfleet.lua import ScriptSet

__all__ = ["ACCESS_LUA", "AuthThrottle", "Failure", "client_key", "retry_after"]

ACCESS_LUA = ScriptSet("agentfleet.access", "scripts")


def client_key(address: str | None) -> str:
    """The name a client's failures count under: its IPv4 address, its IPv6 /64, or the
    text itself when it is not an address (a test client, a Unix socket)."""
    if not address:
        return "unknown"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:100]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


@dataclass(frozen=True)
class Failure:
    """One failed check counted: the client's failures so far and the lockout it now serves
    (seconds; 0 for none)."""

    count: int
    lockout_s: float


class AuthThrottle:
    """Counts failed checks and says who must wait (see the module docstring).

    ``free`` failures are allowed; then lockouts start at ``lockout_s`` seconds and double up
    to ``max_lockout_s``; a count is forgotten ``forget_s`` seconds after its last failure.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "af",
        free: int = 5,
        lockout_s: float = 1.0,
        max_lockout_s: float = 900.0,
        forget_s: float = 3600.0,
    ) -> None:
        # redis-py's reply types are unions of every RESP shape; this store knows each reply.
        self.client: Any = client
        self.keys = AccessKeys(prefix)
        self.free = free
        self.lockout_ms = int(lockout_s * 1000)
        self.max_lockout_ms = int(max_lockout_s * 1000)
        self.forget_ms = int(forget_s * 1000)
        scripts = ACCESS_LUA.register(client, "fail", "check")
        self._fail, self._check = scripts["fail"], scripts["check"]

    @classmethod
    def from_settings(cls, settings: Settings, client: redis.Redis) -> AuthThrottle:
        service = settings.service
        return cls(
            client,
            prefix=settings.key_prefix,
            free=service.auth_free_failures,
            lockout_s=service.auth_lockout_s,
            max_lockout_s=service.auth_max_lockout_s,
            forget_s=service.auth_forget_s,
        )

    def wait_s(self, who: str) -> float:
        """Seconds ``who`` must still wait before its credentials are checked (0: now)."""
        return int(self._check(keys=[self.keys.failures(who)])) / 1000.0

    def failed(self, who: str) -> Failure:
        """Count one failed check of ``who``."""
        count, lock_ms = self._fail(
            keys=[self.keys.failures(who)],
            args=[self.free, self.lockout_ms, self.max_lockout_ms, self.forget_ms],
        )
        return Failure(int(count), int(lock_ms) / 1000.0)

    def passed(self, who: str) -> None:
        """``who`` showed the right credentials: forget its failures."""
        self.client.delete(self.keys.failures(who))


def retry_after(wait_s: float) -> str:
    """A ``Retry-After`` header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))
