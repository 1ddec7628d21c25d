"""cgroup v2 limits for a sandbox, where the host offers a delegated cgroup2 it can use.

Usable when a ``cgroup2`` file system is mounted, the worker's own cgroup there (from
``/proc/self/cgroup``) is writable, offers the ``memory`` and ``pids`` controllers, and they
can be enabled for its children (the worker's cgroup is the root of the hierarchy, or holds
no process of its own, as a systemd unit with ``Delegate=yes`` arranges). Then each sandbox
gets a child cgroup with ``memory.max`` (the sandbox's whole memory, ``memory_mb``),
``memory.swap.max`` 0 and ``pids.max`` (``processes``); every process of a run is put in it
before it can fork, and ``cgroup.kill`` ends them all at once.

When not usable (a cgroup v1 host, a hybrid one whose cgroup2 has no memory controller,
an unprivileged worker outside a delegated unit), ``find_parent`` says why, once, and the
rlimits alone apply: memory per process (``RLIMIT_AS``), processes per sandbox user
(``RLIMIT_NPROC``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from pathlib import Path

__all__ = ["CgroupScope", "find_parent"]

log = logging.getLogger("agentfleet.sandbox")

_NEEDED = {"memory", "pids"}


def _cgroup2_mount() -> Path | None:
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return Path(left.split()[4])
    return None


def _own_path() -> str:
    with open("/proc/self/cgroup") as own:
        for line in own:
            if line.startswith("0::"):
                return line.strip()[3:]
    return "/"


@functools.cache
def find_parent() -> tuple[Path | None, str]:
    """The cgroup under which sandboxes get cgroups of their own (None when unusable), and
    what is used, in words."""
    mount = _cgroup2_mount()
    if mount is None:
        return None, "no cgroup2 file system is mounted: rlimits only"
    parent = mount / _own_path().lstrip("/")
    try:
        offered = set((parent / "cgroup.controllers").read_text().split())
        missing = _NEEDED - offered
        if missing:
            lacking = ", ".join(sorted(missing))
            return None, f"the cgroup2 at {parent} offers no {lacking} controller: rlimits only"
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        if _NEEDED - enabled:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(_NEEDED)))
        probe = parent / f"agentfleet-probe-{os.getpid()}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return None, f"the cgroup2 at {parent} cannot be delegated to sandboxes ({exc}): rlimits only"
    return parent, f"cgroup v2 under {parent} (memory.max, pids.max) and rlimits"


class CgroupScope:
    """The cgroup of one sandbox (see the module docstring)."""

    def __init__(self, parent: Path, name: str, *, memory_bytes: int, processes: int) -> None:
        self.path = parent / name
        self.path.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (self.path / "memory.swap.max").write_text("0")
        self.limit(memory_bytes=memory_bytes, processes=processes)

    def limit(self, *, memory_bytes: int, processes: int) -> None:
        """Set the sandbox's whole memory (bytes) and its number of processes."""
        (self.path / "memory.max").write_text(str(memory_bytes))
        (self.path / "pids.max").write_text(str(processes))

    def add(self, pid: int) -> None:
        """Put process ``pid`` (stopped before it forks) in the cgroup."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (``cgroup.kill``, Linux 5.14 and later)."""
        with contextlib.suppress(FileNotFoundError, OSError):
            (self.path / "cgroup.kill").write_text("1")

    def remove(self) -> None:
        """Kill what is left and remove the cgroup."""
        self.kill()
        with contextlib.suppress(OSError):
            self.path.rmdir()
