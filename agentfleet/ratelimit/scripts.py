"""The limiter's Lua scripts, each run by ``EVALSHA`` and reloaded after ``NOSCRIPT``.

Every script file is sent with ``lib.lua`` in front of it, so helpers are written once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

__all__ = ["LimiterScripts", "script_source"]


@functools.cache
def script_source(name: str) -> str:
    """The full text sent to Redis for script ``name`` (``acquire``, ``release``...)."""
    folder = resources.files("agentfleet.ratelimit") / "scripts"
    return (folder / "lib.lua").read_text() + "\n" + (folder / f"{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class LimiterScripts:
    """The scripts registered on one client; redis-py's ``Script`` handles ``NOSCRIPT``."""

    acquire: Script
    release: Script
    renew: Script
    refund: Script
    pause: Script
    status: Script

    @classmethod
    def register(cls, client: redis.Redis) -> LimiterScripts:
        return cls(
            **{
                name: client.register_script(script_source(name))
                for name in ("acquire", "release", "renew", "refund", "pause", "status")
            }
        )
