"""Sandbox cgroups: which kind a host offers, and what a real one does to a real sandbox.

The discovery is checked on written ``mountinfo``/``cgroup`` texts over directories in a temporary
tree (a cgroup v2 with delegated controllers is not offered by every host this suite runs
on); the v1 or v2 hierarchy this host offers is then used for real: limits written, a
process tree put in and killed, and a sandbox whose processes together exceed its memory
ended by the kernel with ``oom_killed`` set.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import bwrap_sandbox

from agentfleet.sandbox.cgroup_scopes import CgroupScope, V1Scope, V2Scope
from agentfleet.sandbox.cgroups import (
    SCOPE_PREFIX,
    CgroupHost,
    find_cgroups,
    read_cgroups,
    sweep_abandoned_cgroups,
)
from agentfleet.sandbox.uids import lease_uid
from agentfleet.sandbox.workspace import Workspace

_MIB = 1024 * 1024


def _mountinfo(*mounts: tuple[str, Path, str, str]) -> str:
    lines = ["31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755"]
    for n, (kind, where, root, options) in enumerate(mounts):
        lines.append(f"{40 + n} 31 0:{40 + n} {root} {where} rw,relatime - {kind} {kind} {options}")
    return "\n".join(lines) + "\n"


def _v2_tree(tmp_path: Path, controllers: str) -> Path:
    own = tmp_path / "unified" / "system.slice" / "worker.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text(controllers + "\n")
    (own / "cgroup.subtree_control").write_text("\n")
    return own


def test_a_delegated_cgroup2_is_chosen_and_its_controllers_enabled_for_children(tmp_path: Path) -> None:
    own = _v2_tree(tmp_path, "cpu memory pids")
    mountinfo = _mountinfo(("cgroup2", tmp_path / "unified", "/", "rw"))
    host, said = read_cgroups(mountinfo, "0::/system.slice/worker.service\n")
    assert host == CgroupHost(2, {"unified": own})
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert said.startswith("cgroup v2 under")


def test_a_cgroup2_mounted_at_the_workers_own_cgroup_is_used_where_it_is_mounted(tmp_path: Path) -> None:
    # A container's cgroup namespace: the mount's root is the worker's cgroup itself.
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "cg" / "cgroup.subtree_control").write_text("memory pids\n")
    mountinfo = _mountinfo(("cgroup2", tmp_path / "cg", "/kubepods/pod1", "rw"))
    host, _ = read_cgroups(mountinfo, "0::/kubepods/pod1\n")
    assert host == CgroupHost(2, {"unified": tmp_path / "cg"})


def test_a_hybrid_host_whose_cgroup2_has_no_memory_controller_uses_v1(tmp_path: Path) -> None:
    _v2_tree(tmp_path, "hugetlb")
    (tmp_path / "memory" / "process_api" / "w1").mkdir(parents=True)
    (tmp_path / "pids").mkdir()
    mountinfo = _mountinfo(
        ("cgroup", tmp_path / "memory", "/", "rw,memory"),
        ("cgroup", tmp_path / "pids", "/", "rw,pids"),
        ("cgroup2", tmp_path / "unified", "/", "rw"),
    )
    own = "8:pids:/\n4:memory:/process_api/w1\n0::/system.slice/worker.service\n"
    host, said = read_cgroups(mountinfo, own)
    memory = tmp_path / "memory" / "process_api" / "w1"
    assert host == CgroupHost(1, {"memory": memory, "pids": tmp_path / "pids"})
    assert "offers no memory, pids controller" in said and "cgroup v1 under" in said


def test_with_neither_the_reason_is_given_and_rlimits_alone_apply(tmp_path: Path) -> None:
    _v2_tree(tmp_path, "cpu")
    mountinfo = _mountinfo(("cgroup2", tmp_path / "unified", "/", "rw"))
    host, said = read_cgroups(mountinfo, "0::/system.slice/worker.service\n")
    assert host is None
    assert said.endswith("no cgroup v1 memory hierarchy is mounted: rlimits only")


def test_an_unwritable_cgroup_is_refused_with_the_error(tmp_path: Path) -> None:
    absent = ("cgroup", tmp_path / "absent", "/", "rw,memory")
    mountinfo = _mountinfo(absent, ("cgroup", tmp_path, "/", "rw,pids"))
    host, said = read_cgroups(mountinfo, "4:memory:/\n8:pids:/\n")
    assert host is None
    assert f"no cgroup can be made under {tmp_path / 'absent'}" in said


def test_a_v2_scope_writes_its_limits_and_reads_its_oom_kills(tmp_path: Path) -> None:
    scope = V2Scope(tmp_path, "agentfleet-sandbox-1", memory_bytes=64 * _MIB, processes=32)
    assert (scope.path / "memory.max").read_text() == str(64 * _MIB)
    assert (scope.path / "pids.max").read_text() == "32"
    assert scope.oom_kills() == 0
    (scope.path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
    assert scope.oom_kills() == 2


# -- this host's own cgroups, for real ---------------------------------------------------------


def _host_offers_cgroups() -> bool:
    """Whether this host should give sandboxes cgroups: v1 memory and pids hierarchies (or a
    cgroup2 with both controllers) mounted writable and this process running as root."""
    if os.geteuid() != 0:
        return False
    with open("/proc/self/mountinfo") as mountinfo:
        text = mountinfo.read()
    v1 = all(f"cgroup cgroup rw,{name}" in text or f",{name}\n" in text for name in ("memory", "pids"))
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists() and {"memory", "pids"} <= set(
        Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    )
    return v1 or v2


@pytest.fixture
def host() -> CgroupHost:
    found, said = find_cgroups()
    if found is None:
        assert not _host_offers_cgroups(), f"this host offers cgroups, yet none was found: {said}"
        pytest.skip(f"this host gives sandboxes no cgroup: {said}")
    return found


@pytest.fixture
def scope(host: CgroupHost) -> Iterator[CgroupScope]:
    made = host.scope(f"agentfleet-test-{uuid.uuid4().hex[:8]}", memory_bytes=256 * _MIB, processes=64)
    yield made
    made.remove()


def _directories(scope: CgroupScope) -> list[Path]:
    return [scope.memory, scope.pids] if isinstance(scope, V1Scope) else [scope.path]  # type: ignore[attr-defined]


def test_this_hosts_scope_holds_its_limits_and_can_lower_and_raise_them(scope: CgroupScope) -> None:
    scope.limit(memory_bytes=64 * _MIB, processes=8)
    scope.limit(memory_bytes=512 * _MIB, processes=128)
    if isinstance(scope, V1Scope):
        assert int((scope.memory / "memory.limit_in_bytes").read_text()) == 512 * _MIB
        memsw = scope.memory / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            assert int(memsw.read_text()) == 512 * _MIB, "swap counted in: no more than the memory"
        assert (scope.pids / "pids.max").read_text().strip() == "128"
    else:
        assert (scope.path / "memory.max").read_text().strip() == str(512 * _MIB)  # type: ignore[attr-defined]


def test_a_process_tree_put_in_the_scope_is_killed_whole_and_the_scope_removed(scope: CgroupScope) -> None:
    # Stopped before it forks, put in, then let go: its children are born inside.
    tree = subprocess.Popen(["/bin/sh", "-c", "kill -STOP $$; sleep 60 & sleep 60 & (sleep 60 &) ; wait"])
    os.waitid(os.P_PID, tree.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
    scope.add(tree.pid)
    os.kill(tree.pid, signal.SIGCONT)
    members = Path(_directories(scope)[-1] / "cgroup.procs")
    give_up = time.monotonic() + 30
    while len(members.read_text().split()) < 4 and time.monotonic() < give_up:
        time.sleep(0.02)
    inside = [int(pid) for pid in members.read_text().split()]
    assert len(inside) >= 4, "the shell and its three sleeps are in the scope"
    scope.kill()
    assert tree.wait(timeout=30) == -signal.SIGKILL
    assert members.read_text().split() == []
    for pid in inside:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    scope.remove()
    assert not any(path.exists() for path in _directories(scope))


def test_processes_that_together_pass_the_memory_limit_are_ended_by_it(host: CgroupHost) -> None:
    # Each process stays far under its own address-space limit; together they pass the
    # sandbox's memory, which only a cgroup bounds.
    hold = "import time; b = b'x' * (48 << 20); time.sleep(8)"
    script = f'for i in 1 2 3 4 5 6; do python3 -c "{hold}" & done; wait; echo done'
    made = Workspace(None, None)
    try:
        with bwrap_sandbox(made.path, limits={"memory_mb": 160, "wall_s": 60}) as sandbox:
            result = sandbox.run(["sh", "-c", script])
            fine = sandbox.run(["sh", "-c", "echo still-here"])
    finally:
        made.remove()
    assert result.oom_killed, result
    assert not result.timed_out
    assert fine.stdout.strip() == "still-here" and not fine.oom_killed, "the next run starts clean"


def test_cgroups_a_dead_worker_left_are_swept_and_held_ones_kept(host: CgroupHost) -> None:
    free, held = lease_uid(), lease_uid()
    left = host.scope(f"{SCOPE_PREFIX}{free.uid}", memory_bytes=64 * _MIB, processes=8)
    kept = host.scope(f"{SCOPE_PREFIX}{held.uid}", memory_bytes=64 * _MIB, processes=8)
    free.release()  # its worker is gone: nothing holds the user any more
    try:
        assert sweep_abandoned_cgroups(host) >= 1
        assert not any(path.exists() for path in _directories(left)), "the dead worker's cgroup is gone"
        assert all(path.exists() for path in _directories(kept)), "a held user's cgroup stays"
    finally:
        kept.remove()
        held.release()
