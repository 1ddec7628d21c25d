"""The limiter's Lua scripts (``scripts/*.lua``), each sent with ``scripts/lib.lua`` in front.

Loaded by the shared loader (``agentfleet.lua``): ``EVALSHA``, reloaded after ``NOSCRIPT``.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.commands.core import Script

from agentfleet.lua import ScriptSet

__all__ = ["LIMITER_LUA", "LimiterScripts"]

LIMITER_LUA = ScriptSet("agentfleet.ratelimit", "scripts", libraries=("lib",))


@dataclass(frozen=True, slots=True)
class LimiterScripts:
    """The scripts registered on one client."""

    acquire: Script
    release: Script
    renew: Script
    refund: Script
    pause: Script
    status: Script

    @classmethod
    def register(cls, client: redis.Redis) -> LimiterScripts:
        return cls(**LIMITER_LUA.register(client, "acquire", "release", "renew", "refund", "pause", "status"))
