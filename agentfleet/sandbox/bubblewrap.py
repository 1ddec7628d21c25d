"""The bubblewrap backend: each program of an item runs in a fresh ``bwrap`` sandbox.

A run starts ``prlimit`` (the resource limits) then ``bwrap`` with an empty environment, as
the sandbox's own host user (``uids``) when the worker is root, in a session of its own.
bwrap makes new user, PID, IPC, UTS, mount, network and (where it can) cgroup namespaces,
shows the filesystem ``layout`` describes, drops every capability, sets ``no_new_privs``,
installs the ``seccomp`` filter and runs the program as an unprivileged user inside, in
``/workspace``, with only the variables given. ``--die-with-parent`` ends it if the worker
goes. When the program ends, its PID namespace ends with it (the kernel kills whatever is
left there); past the wall-clock limit the whole tree is killed. Then every process of the
sandbox's user is killed (``procs.kill_user``; and its cgroup's, ``cgroups``, where the host
offers cgroup v2 or v1 limits), so nothing it started survives the run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from agentfleet.errors import ConfigError
from agentfleet.sandbox import seccomp
from agentfleet.sandbox.backend import WORKSPACE_INSIDE
from agentfleet.sandbox.cgroups import SCOPE_PREFIX, CgroupScope, find_cgroups
from agentfleet.sandbox.layout import system_args
from agentfleet.sandbox.procs import kill_user
from agentfleet.sandbox.runner import check_argv, check_env, collect
from agentfleet.sandbox.spec import SandboxLimits, SandboxResult, SandboxSpec
from agentfleet.sandbox.uids import UidLease, lease_uid

__all__ = ["INSIDE_UID", "BubblewrapBackend", "BubblewrapSandbox", "find_bwrap"]

log = logging.getLogger("agentfleet.sandbox")

#: The user (and group) a sandboxed program runs as, seen from inside.
INSIDE_UID = 65534
_MIB = 1024 * 1024
_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
_NAMESPACES = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]


def find_bwrap(path: str | None = None) -> str:
    """The ``bwrap`` program on ``path`` (default: the worker's ``PATH`` and ``/usr/bin``), or
    the one error that says how to get it."""
    found = shutil.which("bwrap", path=path or f"{os.environ.get('PATH', '')}:/usr/bin")
    if found is None:
        raise ConfigError(
            "sandbox.backend is 'bubblewrap' but bwrap is not installed: apt-get install bubblewrap "
            "(or set AGENTFLEET_SANDBOX__BACKEND=none to run sandboxed tasks without isolation)"
        )
    if not seccomp.supported():
        raise ConfigError(
            "sandbox.backend is 'bubblewrap', whose seccomp filter knows x86_64 only; this machine "
            "is not x86_64 (set AGENTFLEET_SANDBOX__BACKEND=none to run without isolation)"
        )
    return found


def _limit_args(limits: SandboxLimits, *, own_user: bool) -> list[str]:
    args = [
        f"--cpu={limits.cpu_s}",
        f"--as={limits.memory_mb * _MIB}",
        f"--nofile={limits.open_files}",
        f"--fsize={limits.file_size_mb * _MIB}",
        "--core=0",
    ]
    if own_user:
        # RLIMIT_NPROC counts every process of the user: only meaningful for a user of its own.
        args.append(f"--nproc={limits.processes}")
    return args


class BubblewrapSandbox:
    """One item's bubblewrap sandbox over ``workspace`` (see the module docstring).

    ``binds`` are extra ``(host, inside)`` read-only binds, ``env`` extra variables and
    ``wrap`` a function of the program's argv, set while a network plan is attached
    (``agentfleet.sandbox.network``)."""

    def __init__(self, bwrap: str, workspace: Path, spec: SandboxSpec, max_output_bytes: int) -> None:
        assert spec.limits is not None
        self._bwrap = bwrap
        self._workspace = workspace
        self.spec = spec
        self.limits: SandboxLimits = spec.limits
        self.max_output_bytes = max_output_bytes
        self._lease: UidLease = lease_uid()
        self._cgroup: CgroupScope | None = None
        host = find_cgroups()[0]
        if host is not None and not self._lease.shared:
            self._cgroup = host.scope(
                f"{SCOPE_PREFIX}{self.uid}",
                memory_bytes=self.limits.memory_mb * _MIB,
                processes=self.limits.processes,
            )
        self._filter = seccomp.compile_filter()
        self.binds: list[tuple[str, str]] = []
        self.env: dict[str, str] = {}
        self.wrap: Callable[[list[str]], list[str]] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.own_workspace()

    @property
    def workspace(self) -> Path:
        return self._workspace

    @property
    def uid(self) -> int:
        """The host user this sandbox's programs run as."""
        return self._lease.uid

    def configure(
        self,
        spec: SandboxSpec,
        *,
        binds: Sequence[tuple[str, str]] = (),
        env: Mapping[str, str] | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        assert spec.limits is not None
        self.spec, self.limits = spec, spec.limits
        if self._cgroup is not None:
            self._cgroup.limit(memory_bytes=self.limits.memory_mb * _MIB, processes=self.limits.processes)
        if not self._lease.shared:
            for host, _ in binds:
                _check_reachable(Path(host))
        self.binds, self.env, self.wrap = list(binds), dict(env or {}), wrap

    def own_workspace(self) -> None:
        """Give the workspace (and what is in it) to the sandbox's user, so it can write there."""
        if self._lease.shared:
            return
        _check_reachable(self._workspace)
        for root, dirs, files in os.walk(self._workspace):
            for name in (*dirs, *files):
                with contextlib.suppress(FileNotFoundError):
                    os.lchown(os.path.join(root, name), self.uid, self.uid)
        os.chown(self._workspace, self.uid, self.uid)

    def command(self, argv: list[str], env: Mapping[str, str], seccomp_fd: int) -> list[str]:
        """The whole command line of one run (``prlimit`` ... ``bwrap`` ... ``argv``)."""
        tmp_bytes = self.limits.file_size_mb * _MIB
        inside = {"PATH": _PATH, "HOME": WORKSPACE_INSIDE, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
        inside.update(self.env)
        inside.update(env)
        # With a cgroup, the first process stops itself until the worker has put it there.
        cmd = ["/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "sh"] if self._cgroup is not None else []
        cmd += ["prlimit", *_limit_args(self.limits, own_user=not self._lease.shared), "--", self._bwrap]
        cmd += [*_NAMESPACES, "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        cmd += system_args(tmp_bytes=tmp_bytes)
        for host, dest in self.binds:
            cmd += ["--ro-bind", host, dest]
        cmd += ["--bind", str(self._workspace), WORKSPACE_INSIDE, "--chdir", WORKSPACE_INSIDE]
        cmd += ["--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox"]
        cmd += ["--cap-drop", "ALL", "--clearenv"]
        for name, value in inside.items():
            cmd += ["--setenv", name, value]
        cmd += ["--seccomp", str(seccomp_fd), "--"]
        return cmd + (self.wrap(argv) if self.wrap is not None else argv)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
    ) -> SandboxResult:
        if self._closed:
            raise RuntimeError("this sandbox was closed")
        args = check_argv(argv)
        extra = check_env(env or {})
        limit = self.limits.wall_s if timeout_s is None else min(max(timeout_s, 0.0), self.limits.wall_s)
        if cwd is not None:
            args = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', _inside_dir(cwd), *args]
        fd = os.memfd_create("agentfleet-seccomp", os.MFD_CLOEXEC)
        try:
            os.write(fd, self._filter)
            os.lseek(fd, 0, os.SEEK_SET)
            with self._lock:
                oom_before = self._cgroup.oom_kills() if self._cgroup is not None else 0
                result = collect(
                    self.command(args, extra, fd),
                    shown_argv=args,
                    limit_s=limit,
                    stdin=stdin,
                    max_output_bytes=self.max_output_bytes,
                    popen=self._popen_options(fd),
                    after=self.reap,
                    on_start=self._enter_cgroup if self._cgroup is not None else None,
                )
                if self._cgroup is not None and self._cgroup.oom_kills() > oom_before:
                    result = result.model_copy(update={"oom_killed": True})
                return result
        finally:
            os.close(fd)

    def _popen_options(self, fd: int) -> dict[str, object]:
        options: dict[str, object] = {"env": {}, "pass_fds": (fd,), "cwd": "/"}
        if not self._lease.shared:
            options.update(user=self.uid, group=self.uid, extra_groups=[])
        return options

    def _enter_cgroup(self, pid: int) -> None:
        assert self._cgroup is not None
        os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
        self._cgroup.add(pid)
        os.kill(pid, signal.SIGCONT)

    def reap(self) -> int:
        if self._lease.shared:
            return 0
        if self._cgroup is not None:
            self._cgroup.kill()
        return kill_user(self.uid)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.reap()
        if self._cgroup is not None:
            self._cgroup.remove()
        self._lease.release()


def _check_reachable(path: Path) -> None:
    # bwrap runs as the sandbox's user and opens what it binds by its path.
    for parent in path.resolve().parents:
        if not parent.stat().st_mode & 0o001:
            raise ConfigError(
                f"the sandbox's user cannot reach {path}: {parent} is not searchable by others; "
                "chmod o+x it, or keep workspaces (AGENTFLEET_WORKDIR_ROOT) and templates "
                "(AGENTFLEET_SANDBOX__TEMPLATE) under directories that are"
            )


def _inside_dir(cwd: str) -> str:
    parts = Path(cwd).parts
    if Path(cwd).is_absolute() or ".." in parts:
        raise ConfigError(f"sandbox run: cwd {cwd!r} must be a directory relative to the workspace")
    return str(Path(WORKSPACE_INSIDE, *parts))


class BubblewrapBackend:
    """Makes ``BubblewrapSandbox``es; ``bwrap`` is looked for when the backend is made."""

    name = "bubblewrap"

    def __init__(self, max_output_bytes: int) -> None:
        self._bwrap = find_bwrap()
        self._max_output_bytes = max_output_bytes
        log.info("sandbox limits: %s", find_cgroups()[1])

    def prepare(self, workspace: Path, spec: SandboxSpec) -> BubblewrapSandbox:
        return BubblewrapSandbox(self._bwrap, workspace, spec, self._max_output_bytes)
