"""What the benchmarks read off processes and Redis: CPU seconds, memory, open files, commands.

Process figures come from /proc and cover a process and every descendant of it (a worker's
pool processes included). Redis figures come from ``INFO``: its own CPU seconds and the calls
of each command (commands a script runs count too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

_CLK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant of it, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of ``pid``'s process tree (living members only)."""
    ticks = 0
    for member in tree(pid):
        try:
            with open(f"/proc/{member}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return ticks / _CLK


def pss_mib(pid: int) -> float:
    """The summed proportional set size of ``pid``'s process tree, in MiB (a page shared by n
    processes counts 1/n to each)."""
    total_kib = 0
    for member in tree(pid):
        try:
            with open(f"/proc/{member}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total_kib += int(line.split()[1])
                        break
        except OSError:
            continue
    return total_kib / 1024


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` alone, in MiB."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE / 2**20


def peak_rss_mib(pid: int | str = "self") -> float:
    """The highest resident memory ``pid`` ever had (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    """Open file descriptors of ``pid``'s process tree."""
    total = 0
    for member in tree(pid):
        try:
            total += len(os.listdir(f"/proc/{member}/fd"))
        except OSError:
            continue
    return total


@dataclass(frozen=True)
class RedisUse:
    """Redis's CPU seconds, command calls and command microseconds (by name) at one moment."""

    cpu_s: float
    calls: dict[str, int]
    usec: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(cls, client: Any) -> RedisUse:
        cpu = client.info("cpu")
        stats = client.info("commandstats")
        return cls(
            float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()},
            {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in stats.items()},
        )

    def since(self, earlier: RedisUse) -> RedisUse:
        calls = {k: n - earlier.calls.get(k, 0) for k, n in self.calls.items()}
        usec = {k: n - earlier.usec.get(k, 0) for k, n in self.usec.items()}
        return RedisUse(
            self.cpu_s - earlier.cpu_s,
            {k: n for k, n in calls.items() if n},
            {k: n for k, n in usec.items() if calls.get(k)},
        )
