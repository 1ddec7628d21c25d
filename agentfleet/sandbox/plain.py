"""The ``none`` backend: no isolation at all, chosen by name only.

A program runs as the worker's own user, in the workspace, with the worker's filesystem and
network, an environment of only ``PATH``, ``HOME`` (the workspace), ``TMPDIR``, ``LANG`` and
the variables given, in a session of its own whose process group is killed when the run ends
or passes its wall-clock limit. The resource limits and the network rules do not apply. It
is for trusted programs on hosts without bubblewrap, and for comparing costs; it is never
what a missing ``bwrap`` quietly turns into.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from agentfleet.errors import ConfigError, InvalidInput
from agentfleet.sandbox.runner import check_argv, check_env, collect
from agentfleet.sandbox.spec import SandboxResult, SandboxSpec

__all__ = ["PlainBackend", "PlainSandbox"]

_PATH = "/usr/local/bin:/usr/bin:/bin"


class PlainSandbox:
    """A workspace and a way to run programs there, without isolation."""

    def __init__(self, workspace: Path, spec: SandboxSpec, max_output_bytes: int) -> None:
        assert spec.limits is not None
        if spec.network:
            raise ConfigError(
                "sandbox backend 'none' cannot hold a program to its declared network destinations; "
                "use backend 'bubblewrap' (AGENTFLEET_SANDBOX__BACKEND) for a task with network=[...]"
            )
        self._workspace = workspace
        self.spec = spec
        self.wall_s = spec.limits.wall_s
        self.max_output_bytes = max_output_bytes

    @property
    def workspace(self) -> Path:
        return self._workspace

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
    ) -> SandboxResult:
        args = check_argv(argv)
        inside = {
            "PATH": _PATH,
            "HOME": str(self._workspace),
            "TMPDIR": str(self._workspace),
            "LANG": "C.UTF-8",
        }
        inside.update(check_env(env or {}))
        directory = self._workspace if cwd is None else (self._workspace / cwd).resolve()
        if directory != self._workspace and self._workspace not in directory.parents:
            raise InvalidInput(f"sandbox run: cwd {cwd!r} must be a directory inside the workspace")
        limit = self.wall_s if timeout_s is None else min(max(timeout_s, 0.0), self.wall_s)
        return collect(
            args,
            shown_argv=args,
            limit_s=limit,
            stdin=stdin,
            max_output_bytes=self.max_output_bytes,
            popen={"env": inside, "cwd": directory, "close_fds": True},
            after=self.reap,
        )

    def configure(
        self,
        spec: SandboxSpec,
        *,
        binds: Sequence[tuple[str, str]] = (),
        env: Mapping[str, str] | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> None:
        assert spec.limits is not None
        self.spec, self.wall_s = spec, spec.limits.wall_s

    def reap(self) -> int:
        return 0

    def close(self) -> None:
        return None


class PlainBackend:
    """Makes ``PlainSandbox``es."""

    name = "none"

    def __init__(self, max_output_bytes: int) -> None:
        self._max_output_bytes = max_output_bytes

    def prepare(self, workspace: Path, spec: SandboxSpec) -> PlainSandbox:
        return PlainSandbox(workspace, spec, self._max_output_bytes)
