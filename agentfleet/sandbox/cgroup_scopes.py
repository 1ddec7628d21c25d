"""The cgroup of one sandbox, on a cgroup v2 or a cgroup v1 hierarchy.

Both kinds do the same four things: limit the sandbox's whole memory (bytes, swap included
where the kernel accounts it) and its number of processes, take in a process (stopped
before it forks, so all it starts is counted), kill every process in it, and say how many
times the kernel's OOM killer ended one of its processes because the memory limit was
reached. ``cgroups.find_cgroups`` says which kind the host offers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Protocol

__all__ = ["CgroupScope", "V1Scope", "V2Scope"]

#: How long ``kill`` on cgroup v1 keeps sweeping before it gives up, in seconds.
_V1_KILL_S = 5.0


class CgroupScope(Protocol):
    """What a sandbox asks of its cgroup."""

    def limit(self, *, memory_bytes: int, processes: int) -> None:
        """Set the sandbox's whole memory (bytes) and its number of processes."""

    def add(self, pid: int) -> None:
        """Put process ``pid`` (stopped before it forks) in the cgroup."""

    def kill(self) -> None:
        """SIGKILL every process in the cgroup."""

    def oom_kills(self) -> int:
        """How many processes the memory limit's OOM killer ended so far."""

    def remove(self) -> None:
        """Kill what is left and remove the cgroup."""


def _counter(path: Path, name: str) -> int:
    """The value of ``name`` in a flat-keyed cgroup file (``memory.events``, ``memory.oom_control``)."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _rmdir(path: Path) -> None:
    # A cgroup whose last process just died can stay busy for a moment.
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


class V2Scope:
    """A child cgroup on a delegated cgroup v2: ``memory.max``, ``memory.swap.max`` 0,
    ``pids.max``, and ``cgroup.kill`` (Linux 5.14 and later) to end them all at once."""

    def __init__(self, parent: Path, name: str, *, memory_bytes: int | None, processes: int) -> None:
        self.path = parent / name
        self.path.mkdir(exist_ok=True)
        if memory_bytes is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.path / "memory.swap.max").write_text("0")
            self.limit(memory_bytes=memory_bytes, processes=processes)

    def limit(self, *, memory_bytes: int, processes: int) -> None:
        (self.path / "memory.max").write_text(str(memory_bytes))
        (self.path / "pids.max").write_text(str(processes))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def kill(self) -> None:
        with contextlib.suppress(FileNotFoundError, OSError):
            (self.path / "cgroup.kill").write_text("1")

    def oom_kills(self) -> int:
        return _counter(self.path / "memory.events", "oom_kill")

    def remove(self) -> None:
        self.kill()
        _rmdir(self.path)


class V1Scope:
    """A cgroup of the same name in the v1 ``memory`` and ``pids`` hierarchies:
    ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, memory and swap together,
    where swap is accounted), ``pids.max``. v1 has no ``cgroup.kill``: ``kill`` sweeps the
    cgroup's processes with SIGKILL until none is left; ``pids.max`` bounds how many a fork
    bomb can start between two sweeps."""

    def __init__(
        self, memory: Path, pids: Path, name: str, *, memory_bytes: int | None, processes: int
    ) -> None:
        self.memory, self.pids = memory / name, pids / name
        self.memory.mkdir(exist_ok=True)
        self.pids.mkdir(exist_ok=True)
        if memory_bytes is not None:
            self.limit(memory_bytes=memory_bytes, processes=processes)

    def limit(self, *, memory_bytes: int, processes: int) -> None:
        memory, both = self.memory / "memory.limit_in_bytes", self.memory / "memory.memsw.limit_in_bytes"
        if both.exists():
            # memsw may never be below the memory limit: raise it first, lower it last.
            current = int(memory.read_text())
            first, second = (both, memory) if memory_bytes > current else (memory, both)
            first.write_text(str(memory_bytes))
            second.write_text(str(memory_bytes))
        else:
            memory.write_text(str(memory_bytes))
        (self.pids / "pids.max").write_text(str(processes))

    def add(self, pid: int) -> None:
        (self.memory / "cgroup.procs").write_text(str(pid))
        (self.pids / "cgroup.procs").write_text(str(pid))

    def _members(self) -> set[int]:
        found: set[int] = set()
        for group in (self.pids, self.memory):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(pid) for pid in (group / "cgroup.procs").read_text().split())
        return found

    def kill(self) -> None:
        give_up = time.monotonic() + _V1_KILL_S
        while (members := self._members()) and time.monotonic() < give_up:
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def oom_kills(self) -> int:
        return _counter(self.memory / "memory.oom_control", "oom_kill")

    def remove(self) -> None:
        self.kill()
        _rmdir(self.memory)
        _rmdir(self.pids)
