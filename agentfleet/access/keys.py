"""Where the service keeps who may sign in: every key starts ``{<prefix>:auth}:``.

- ``{p:auth}:fail:<client>``  hash: ``n`` failed credential checks from one client address
                              (an IPv6 address counts by its /64), ``until`` the server time
                              (ms) its lockout ends; expires ``service.auth_forget_s`` after
                              its last failure (or when its lockout ends, if later)
- ``{p:auth}:sessions``       sorted set: console session id -> the epoch second it expires;
                              members past their time are dropped at each sign-in, and the key
                              expires with the longest session

The braces are a Redis Cluster hash tag: all of it lives in one slot.
"""

from __future__ import annotations

__all__ = ["AccessKeys"]


class AccessKeys:
    """Key names for one prefix."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{{{prefix}:auth}}"

    def failures(self, client: str) -> str:
        """Hash: failed checks and lockout of ``client`` (an address, or an IPv6 /64)."""
        return f"{self.root}:fail:{client}"

    @property
    def sessions(self) -> str:
        """Sorted set: console session id -> expiry (epoch seconds)."""
        return f"{self.root}:sessions"
