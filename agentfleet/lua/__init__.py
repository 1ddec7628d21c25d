"""One way to keep Lua: script files beside their package, sent by ``EVALSHA``.

See ``agentfleet.lua.scripts`` for the layout and the loader.
"""

from agentfleet.lua.scripts import ScriptSet, shared_library

__all__ = ["ScriptSet", "shared_library"]
