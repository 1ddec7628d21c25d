"""The Lua loader every Redis store uses: files in a folder of their package, and a shared library.

A store keeps its scripts as ``.lua`` files in a folder of its own package and describes them
with a ``ScriptSet``::

    CIRCUIT_LUA = ScriptSet("agentfleet.ratelimit", "scripts/circuit", libraries=("window",))
    scripts = CIRCUIT_LUA.register(client, "before", "record", "release")
    state = scripts["record"](keys=[...], args=[...])

Each script is sent as one text: ``agentfleet/lua/shared.lua`` (helpers every store may use,
such as ``now_ms()`` on Redis server time), then the set's ``libraries`` (helper files in the
same folder, without ``.lua``), then the script file itself. ``register`` returns redis-py
``Script`` objects: each call is an ``EVALSHA``, and after a ``NOSCRIPT`` reply (a restarted or
flushed Redis) the script is loaded again and the call repeated, so callers never see it.

Files are read once per process; a missing file is a packaging error and raises at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

__all__ = ["ScriptSet", "shared_library"]

_SHARED_PACKAGE = "agentfleet.lua"
_SHARED_FILE = "shared.lua"


@functools.cache
def _read(package: str, path: str) -> str:
    return (resources.files(package) / path).read_text()


def shared_library() -> str:
    """The helpers sent in front of every script (``agentfleet/lua/shared.lua``)."""
    return _read(_SHARED_PACKAGE, _SHARED_FILE)


@dataclass(frozen=True)
class ScriptSet:
    """The Lua scripts in folder ``folder`` of package ``package``.

    ``libraries`` name helper files in that folder (without ``.lua``) sent, in order, in
    front of every script of the set, after the shared library.
    """

    package: str
    folder: str
    libraries: tuple[str, ...] = ()

    def _file(self, name: str) -> str:
        return _read(self.package, f"{self.folder}/{name}.lua")

    def source(self, name: str) -> str:
        """The whole text sent to Redis for script ``name``: shared library, libraries, script."""
        parts = [shared_library(), *(self._file(lib) for lib in self.libraries), self._file(name)]
        return "\n".join(parts)

    def register(self, client: redis.Redis, *names: str) -> dict[str, Script]:
        """``names`` registered on ``client``: name -> ``Script`` (``EVALSHA``, reloaded on ``NOSCRIPT``)."""
        return {name: client.register_script(self.source(name)) for name in names}
