"""Run ids by their first characters, so people can type ``a3f9`` for ``a3f9c02e41b7d8e5``.

Reads the run index ``p:runs`` (the run store's sorted set of run ids by creation time) with
``ZSCAN ... MATCH``: Redis filters, one page of the index at a time.
"""

from __future__ import annotations

import re
from typing import Any

from agentfleet.redis_handles import StateRedis

__all__ = ["runs_starting_with"]

# Run ids are hex (and "direct-..." for tasks called outside a run): nothing a glob reads.
_ID_CHARS = re.compile(r"^[A-Za-z0-9_.:-]+$")


def runs_starting_with(client: StateRedis, index_key: str, start: str, *, limit: int = 10) -> list[str]:
    """Up to ``limit`` run ids in ``index_key`` that begin with ``start``, newest first.

    ``start`` with characters no run id has matches nothing.
    """
    if not _ID_CHARS.match(start):
        return []
    scan: Any = client.zscan_iter(index_key, match=f"{start}*", count=1000)
    found = dict(scan)
    newest = sorted(found, key=lambda run_id: -float(found[run_id]))
    return newest[:limit]
