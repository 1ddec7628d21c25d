"""The backend interface: what makes one item's sandbox and runs programs in it.

A backend is chosen by name (``[sandbox] backend`` or a task's ``SandboxSpec.backend``):

- ``bubblewrap`` (``agentfleet.sandbox.bubblewrap``): namespaces, a read-only system, rlimits, a
  seccomp filter, no capabilities, loopback only;
- ``none`` (``agentfleet.sandbox.plain``): the program runs as the worker does, in the workspace,
  with no isolation at all. It must be named: a missing ``bwrap`` is an error, never a quiet
  fall back to ``none``.

``Backend.prepare(workspace, spec)`` returns a ``Sandbox``: one item's workspace and the means to
run programs there. ``Sandbox.run`` starts a program, waits for it (at most the wall-clock
limit, then the whole tree is killed) and returns a ``SandboxResult``; ``Sandbox.reap()``
kills every process the sandbox still has (a daemon that double-forked included), and
``Sandbox.close()`` reaps and forgets the sandbox (the workspace is the caller's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from agentfleet.sandbox.spec import SandboxResult, SandboxSpec

__all__ = ["WORKSPACE_INSIDE", "Backend", "Sandbox", "SandboxHandle"]

#: Where the item's workspace is seen from inside a sandbox.
WORKSPACE_INSIDE = "/workspace"


class Sandbox(Protocol):
    """One item's sandbox (see the module docstring)."""

    @property
    def workspace(self) -> Path:
        """The workspace's path on the worker's side."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
    ) -> SandboxResult:
        """Run ``argv`` in the sandbox, in the workspace (``cwd``: a directory inside it,
        relative to it); ``timeout_s`` (seconds) may only lower the spec's ``wall_s``."""
        ...

    def configure(
        self,
        spec: SandboxSpec,
        *,
        binds: Sequence[tuple[str, str]] = (),
        env: Mapping[str, str] | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        """Use ``spec``'s limits from the next run on, with extra read-only ``(host, inside)``
        ``binds``, variables ``env`` and ``wrap`` around each program's argv (the egress)."""
        ...

    def reap(self) -> int:
        """Kill every process left in the sandbox; how many were killed."""
        ...

    def close(self) -> None:
        """Reap, and release what the sandbox holds (cgroups, the egress proxy)."""
        ...


class Backend(Protocol):
    """Makes sandboxes of one kind."""

    name: str

    def prepare(self, workspace: Path, spec: SandboxSpec) -> Sandbox:
        """A sandbox over ``workspace`` (an existing directory the caller owns) for ``spec``
        (resolved: its limits and backend are set)."""
        ...


class SandboxHandle:
    """``ctx.sandbox``: the item's sandbox as a task sees it, ``run`` and ``workspace`` only
    (the fleet makes, resets and destroys the sandbox itself)."""

    __slots__ = ("_sandbox",)

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def __repr__(self) -> str:
        return f"SandboxHandle(workspace={str(self.workspace)!r})"

    @property
    def workspace(self) -> Path:
        """The workspace's path on the worker's side (``/workspace`` inside the sandbox)."""
        return self._sandbox.workspace

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
    ) -> SandboxResult:
        """Run ``argv`` (no shell: ``["sh", "-c", "..."]`` for one) in the sandbox, in the
        workspace or its subdirectory ``cwd``, with the variables ``env`` and ``stdin`` fed to
        it; at most ``timeout_s`` seconds (and never past the sandbox's ``limits.wall_s``),
        then its whole process tree is killed and ``timed_out`` is True. A non-zero exit is a
        result, not an error. Nothing the program started outlives the call."""
        return self._sandbox.run(argv, timeout_s=timeout_s, env=env, stdin=stdin, cwd=cwd)
