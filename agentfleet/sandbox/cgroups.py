"""Which cgroups a sandbox can have on this host: v2 where delegated, v1 where mounted, or none.

- **cgroup v2**: a ``cgroup2`` file system is mounted, the worker's own cgroup there (from
  ``/proc/self/cgroup``'s ``0::`` line) is writable, offers the ``memory`` and ``pids``
  controllers, and they can be enabled for its children (the worker's cgroup is the root
  of the hierarchy, or holds no process of its own, as a systemd unit with
  ``Delegate=yes`` arranges).
- **cgroup v1**: otherwise, the ``memory`` and ``pids`` controllers are mounted as v1
  hierarchies (a v1 host, or a hybrid one whose cgroup2 holds no controller, as on many CI
  machines and older distributions) and a cgroup can be made under the worker's own in
  both (a root worker, or one given those directories).

Then each sandbox gets a cgroup (``cgroup_scopes``) whose memory limit is the sandbox's whole
memory (``memory_mb``, no swap) and whose process limit is ``processes``; every process of a
run is put in it before it can fork, and it is emptied when the run ends. When neither is
usable, ``find_cgroups`` says why, once, and the rlimits alone apply: memory per process
(``RLIMIT_AS``), processes per sandbox user (``RLIMIT_NPROC``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from agentfleet.sandbox.cgroup_scopes import CgroupScope, V1Scope, V2Scope
from agentfleet.sandbox.uids import if_abandoned

__all__ = ["SCOPE_PREFIX", "CgroupHost", "CgroupScope", "find_cgroups", "sweep_abandoned_cgroups"]

_NEEDED = ("memory", "pids")

#: A sandbox's cgroup is called this, then the number of its host user.
SCOPE_PREFIX = "agentfleet-sandbox-"


@dataclass(frozen=True)
class CgroupHost:
    """Where sandboxes get cgroups of their own: ``version`` 2 with one parent directory, or
    1 with one per controller (``parents`` maps ``memory`` and ``pids`` to it)."""

    version: int
    parents: dict[str, Path]

    def names(self) -> set[str]:
        """The names of the cgroups under the parents (in any of them)."""
        return {path.name for parent in self.parents.values() for path in parent.iterdir() if path.is_dir()}

    def scope(self, name: str, *, memory_bytes: int | None, processes: int = 0) -> CgroupScope:
        """A cgroup called ``name`` for one sandbox, limited to ``memory_bytes`` and ``processes``
        (an existing one as it is, with ``memory_bytes`` None)."""
        if self.version == 2:
            return V2Scope(self.parents["unified"], name, memory_bytes=memory_bytes, processes=processes)
        memory, pids = self.parents["memory"], self.parents["pids"]
        return V1Scope(memory, pids, name, memory_bytes=memory_bytes, processes=processes)


def _mounts(mountinfo: str) -> list[tuple[str, Path, str, set[str]]]:
    """Each cgroup mount: (file system type, where, its root in the hierarchy, its options)."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((tail[0], Path(fields[4]), fields[3], set(tail[2].split(","))))
    return found


def _own(cgroup: str) -> dict[str, str]:
    """The worker's cgroup per controller (``unified`` for v2's ``0::`` line)."""
    own = {}
    for line in cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["unified"]:
            own[name] = path
    return own


def _under(where: Path, root: str, path: str) -> Path:
    # A mount whose root is not the hierarchy's shows the worker's cgroup relative to it.
    relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return where if relative in (".", "") else where / relative


def _probe(parent: Path) -> None:
    probe = parent / f"agentfleet-probe-{os.getpid()}"
    probe.mkdir()
    probe.rmdir()


def _v2(mounts: list[tuple[str, Path, str, set[str]]], own: dict[str, str]) -> tuple[CgroupHost | None, str]:
    found = [(where, root) for kind, where, root, _ in mounts if kind == "cgroup2"]
    if not found:
        return None, "no cgroup2 file system is mounted"
    where, root = found[0]
    parent = _under(where, root, own.get("unified", "/"))
    try:
        offered = set((parent / "cgroup.controllers").read_text().split())
        missing = set(_NEEDED) - offered
        if missing:
            return None, f"the cgroup2 at {parent} offers no {', '.join(sorted(missing))} controller"
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        if set(_NEEDED) - enabled:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _NEEDED))
        _probe(parent)
    except OSError as exc:
        return None, f"the cgroup2 at {parent} cannot be delegated to sandboxes ({exc})"
    return CgroupHost(2, {"unified": parent}), f"cgroup v2 under {parent} (memory.max, pids.max)"


def _v1(mounts: list[tuple[str, Path, str, set[str]]], own: dict[str, str]) -> tuple[CgroupHost | None, str]:
    parents = {}
    for controller in _NEEDED:
        found = [(at, root) for kind, at, root, opts in mounts if kind == "cgroup" and controller in opts]
        if not found:
            return None, f"no cgroup v1 {controller} hierarchy is mounted"
        where, root = found[0]
        parents[controller] = _under(where, root, own.get(controller, "/"))
        try:
            _probe(parents[controller])
        except OSError as exc:
            return None, f"no cgroup can be made under {parents[controller]} ({exc})"
    shown = f"{parents['memory']} and {parents['pids']}"
    return CgroupHost(1, parents), f"cgroup v1 under {shown} (memory.limit_in_bytes, pids.max)"


def read_cgroups(mountinfo: str, cgroup: str) -> tuple[CgroupHost | None, str]:
    """``find_cgroups`` for a given ``/proc/self/mountinfo`` and ``/proc/self/cgroup``."""
    mounts, own = _mounts(mountinfo), _own(cgroup)
    host, why_not_v2 = _v2(mounts, own)
    if host is not None:
        return host, why_not_v2
    host, why_not_v1 = _v1(mounts, own)
    if host is not None:
        return host, f"{why_not_v2}: {why_not_v1}"
    return None, f"{why_not_v2}; {why_not_v1}: rlimits only"


@functools.cache
def find_cgroups() -> tuple[CgroupHost | None, str]:
    """Where sandboxes get cgroups on this host (None when nowhere), and what is used, in
    words (the module docstring says how it is chosen)."""
    with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as cgroup:
        return read_cgroups(mountinfo.read(), cgroup.read())


def sweep_abandoned_cgroups(host: CgroupHost) -> int:
    """Remove the sandbox cgroups a worker that died left (a SIGKILL, a crash): those of host
    users no live process holds, killing what is still in them. How many were removed."""
    removed = 0
    for name in host.names():
        number = name.removeprefix(SCOPE_PREFIX)
        if not name.startswith(SCOPE_PREFIX) or not number.isdigit():
            continue
        with if_abandoned(int(number)) as abandoned:
            if abandoned:
                host.scope(name, memory_bytes=None).remove()
                removed += 1
    return removed
