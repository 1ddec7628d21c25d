"""What a worker's heartbeat says about its load: its pool, slots, busy slots and memory.

Read from Celery's public surfaces: the pool's ``info`` (what ``celery inspect stats``
shows: its implementation, ``max-concurrency`` and, for prefork, its processes) and
``celery.worker.state.active_requests`` (the requests the worker is executing). Memory is
the resident set of the worker's process and its pool processes, from ``/proc`` (None where
there is no ``/proc``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from celery.worker import state

__all__ = ["WorkerLoad", "read_load", "rss_bytes"]

# Celery's pool modules, by the names operators pass to --pool.
_POOL_NAMES = {"thread": "threads"}


@dataclass(frozen=True)
class WorkerLoad:
    """A worker's pool by name, its slots and busy slots, and its memory in bytes (None:
    unknown)."""

    pool: str = ""
    slots: int | None = None
    busy: int | None = None
    rss_bytes: int | None = None


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4096


def rss_bytes(pids: Iterable[int]) -> int | None:
    """The resident memory of processes ``pids`` added up, in bytes; None when ``/proc`` has
    none of them. A process that has just gone is left out."""
    total, found, page = 0, False, _page_size()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * page
                found = True
        except (OSError, ValueError, IndexError):
            continue
    return total if found else None


def _info(pool: Any) -> dict[str, Any]:
    try:
        info = pool.info if pool is not None else {}
    except Exception:
        # A pool starting or stopping: its figures are unknown this time.
        return {}
    return info if isinstance(info, dict) else {}


def read_load(pool: Any) -> WorkerLoad:
    """The load of this worker process, whose Celery pool is ``pool`` (None: unknown)."""
    info = _info(pool)
    implementation = str(info.get("implementation") or "")
    module = implementation.partition(":")[0].rpartition(".")[2]
    slots = info.get("max-concurrency")
    children = [p for p in info.get("processes") or () if isinstance(p, int)]
    return WorkerLoad(
        pool=_POOL_NAMES.get(module, module),
        slots=slots if isinstance(slots, int) and not isinstance(slots, bool) else None,
        busy=len(state.active_requests) if pool is not None else None,
        rss_bytes=rss_bytes([os.getpid(), *children]),
    )
