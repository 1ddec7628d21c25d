"""The run store's Lua scripts, each run by ``EVALSHA`` and reloaded after ``NOSCRIPT``."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

__all__ = ["RunScripts", "script_source"]

_NAMES = ("begin", "finish", "reopen", "release", "renew")


@functools.cache
def script_source(name: str) -> str:
    """The text of script ``name`` (``begin``, ``finish``...)."""
    return (resources.files("agentfleet.runs") / "scripts" / f"{name}.lua").read_text()


@dataclass(frozen=True, slots=True)
class RunScripts:
    """The scripts registered on one client; redis-py's ``Script`` handles ``NOSCRIPT``."""

    begin: Script
    finish: Script
    reopen: Script
    release: Script
    renew: Script

    @classmethod
    def register(cls, client: redis.Redis) -> RunScripts:
        return cls(**{name: client.register_script(script_source(name)) for name in _NAMES})
