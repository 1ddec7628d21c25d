"""The Lua loader every Redis store uses: files in a folder of their package, and a shared library.

A store keeps its scripts as ``.lua`` files in a folder of its own package and describes them
with a ``ScriptSet``::

    CIRCUIT_LUA = ScriptSet("agentfleet.ratelimit", "scripts/circuit", libraries=("window",))
    scripts = CIRCUIT_LUA.register(client, "before", "record", "release")
    state = scripts["record"](keys=[...], args=[...])

Each script is sent as one text: ``agentfleet/lua/shared.lua`` (helpers every store may use,
such as ``now_ms()`` on Redis server time), then the set's ``libraries`` (helper files in the
same folder, without ``.lua``), then the script file itself, leaving out each helper function
(``local function name(``, from its comment to its ``end`` at the start of a line) that neither
the script nor a helper it keeps names. Redis runs the whole text on every call, so each helper
sent is a closure built on every call: for the delivery scripts, the two calls of every item,
that was about a tenth of the Lua they run. ``register`` returns redis-py
``Script`` objects: each call is an ``EVALSHA``, and after a ``NOSCRIPT`` reply (a restarted or
flushed Redis) the script is loaded again and the call repeated, so callers never see it.

Files are read once per process; a missing file is a packaging error and raises at once.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

__all__ = ["ScriptSet", "shared_library"]

_SHARED_PACKAGE = "agentfleet.lua"
_SHARED_FILE = "shared.lua"
_HELPER = re.compile(r"local function ([A-Za-z_][A-Za-z0-9_]*)\(")


@functools.cache
def _read(package: str, path: str) -> str:
    return (resources.files(package) / path).read_text()


def shared_library() -> str:
    """The helpers sent in front of every script (``agentfleet/lua/shared.lua``)."""
    return _read(_SHARED_PACKAGE, _SHARED_FILE)


def _pieces(text: str) -> list[tuple[str | None, str]]:
    """``text`` in top-level pieces, in order: ``(name, text)`` for each helper function with
    the comment lines above it, ``(None, text)`` for everything else."""
    pieces: list[tuple[str | None, str]] = []
    comment: list[str] = []
    lines = text.splitlines(keepends=True)
    at = 0
    while at < len(lines):
        line = lines[at]
        helper = _HELPER.match(line)
        if helper:
            end = at
            while end < len(lines) - 1 and lines[end].rstrip("\n") != "end":
                end += 1
            pieces.append((helper.group(1), "".join([*comment, *lines[at : end + 1]])))
            comment, at = [], end + 1
        elif line.startswith("--"):
            comment.append(line)
            at += 1
        else:
            pieces.append((None, "".join([*comment, line])))
            comment, at = [], at + 1
    pieces.append((None, "".join(comment)))
    return pieces


def _uses(text: str, name: str) -> int:
    """How often ``text`` names ``name`` outside comments."""
    return len(re.findall(rf"\b{name}\b", re.sub(r"--[^\n]*", "", text)))


@functools.cache
def _assemble(libraries: tuple[str, ...], script: str) -> str:
    """``libraries`` then ``script``, without the helpers nothing kept names (see the module)."""
    kept = [piece for text in libraries for piece in _pieces(text)]
    while True:
        whole = "".join(text for _, text in kept) + script
        unused = [(name, text) for name, text in kept if name and _uses(whole, name) == _uses(text, name)]
        if not unused:
            return "\n".join(["".join(text for _, text in kept), script])
        kept = [piece for piece in kept if piece not in unused]


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
        """The whole text sent to Redis for script ``name``: the shared library and the set's
        libraries (the helpers the script uses), then the script."""
        libraries = (shared_library(), *(self._file(lib) for lib in self.libraries))
        return _assemble(libraries, self._file(name))

    def register(self, client: redis.Redis, *names: str) -> dict[str, Script]:
        """``names`` registered on ``client``: name -> ``Script`` (``EVALSHA``, reloaded on ``NOSCRIPT``)."""
        return {name: client.register_script(self.source(name)) for name in names}
