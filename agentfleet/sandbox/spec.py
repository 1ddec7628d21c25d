"""What a task declares of its sandbox (``@fleet_task(sandbox=...)``), and the result of a run.

A ``SandboxSpec`` given as an object or a dict is merged over the ``[sandbox]`` settings
(``agentfleet.config.sandbox``): a field the task leaves out takes the settings' value, and
``limits`` merge field by field.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentfleet.config import SandboxLimits, SandboxSettings
from agentfleet.errors import ConfigError

__all__ = ["SandboxLimits", "SandboxResult", "SandboxSpec", "parse_spec", "resolve_spec", "task_sandbox"]

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"^((\*\.)?{_LABEL}(\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(:\d{{1,5}})?$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SandboxSpec(BaseModel):
    """A task's sandbox.

    - ``network``: the destinations a sandboxed program may reach through the fleet's egress
      proxy: ``"host"``, ``"*.domain"`` (any subdomain) or ``"host:port"``. Empty (the
      default): loopback only, nothing outside.
    - ``credentials``: names of ``[credentials]`` entries the proxy may inject (``$CRED{name}`` in
      a request header), to that credential's own domains only; the value never enters the
      sandbox.
    - ``artifacts``: glob patterns, relative to the workspace, of files kept with a failed item's
      dead letter (``"report.xml"``, ``"screens/*.png"``).
    - ``limits``: ``SandboxLimits`` (or a dict of some of its fields) over the settings' limits.
    - ``template``: a directory copied, or a git repository checked out as a worktree, into the
      workspace before the body runs (None: an empty workspace).
    - ``backend``: ``"bubblewrap"`` or ``"none"`` (None: the settings' ``sandbox.backend``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    network: list[str] = Field(default_factory=list)
    credentials: list[str] = Field(default_factory=list)
    artifacts: list[str] = Field(default_factory=list)
    limits: SandboxLimits | None = None
    template: str | None = None
    backend: str | None = None

    @field_validator("network")
    @classmethod
    def _destinations(cls, value: list[str]) -> list[str]:
        for dest in value:
            if not _HOST.match(dest):
                raise ValueError(f"{dest!r} is not a destination: write 'host', '*.domain' or 'host:port'")
        return value

    @field_validator("credentials")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _NAME.match(name):
                raise ValueError(f"{name!r} is not a credential name (a [credentials] key)")
        return value

    @field_validator("artifacts")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if pattern.startswith("/") or ".." in pattern.split("/"):
                raise ValueError(f"artifact pattern {pattern!r} must be relative to the workspace, no '..'")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str | None) -> str | None:
        if value is not None and value not in ("bubblewrap", "none"):
            raise ValueError(f"backend {value!r} is not one of 'bubblewrap', 'none'")
        return value


class SandboxResult(BaseModel):
    """What one ``ctx.sandbox.run`` did. ``exit_code`` is negative (minus the signal) when the
    program was killed; ``duration_s`` is wall-clock seconds; ``stdout`` and ``stderr`` keep at
    most ``sandbox.max_output_bytes`` bytes each (first and last halves, a marker between),
    the ``*_truncated`` flags say so; ``timed_out``: the wall-clock limit killed the tree;
    ``oom_killed``: the sandbox's cgroup memory limit made the kernel kill a process of the
    run (only where the host gives sandboxes cgroups; else memory is bounded per process and
    an allocation past it fails instead)."""

    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0


def parse_spec(value: SandboxSpec | dict[str, Any], *, task_name: str) -> SandboxSpec:
    """``value`` as a ``SandboxSpec``; one ``ConfigError`` naming the task when it is wrong."""
    if isinstance(value, SandboxSpec):
        return value
    try:
        return SandboxSpec.model_validate(value)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(f"{task_name}: sandbox=... is wrong: " + "; ".join(lines)) from None


def resolve_spec(spec: SandboxSpec, settings: SandboxSettings) -> SandboxSpec:
    """``spec`` with what it leaves out taken from the ``[sandbox]`` settings."""
    limits = settings.limits
    if spec.limits is not None:
        limits = limits.model_copy(update=spec.limits.model_dump(exclude_unset=True))
    return spec.model_copy(
        update={
            "limits": limits,
            "template": spec.template if spec.template is not None else settings.template,
            "backend": spec.backend or settings.backend,
        }
    )


def task_sandbox(
    value: SandboxSpec | dict[str, Any] | None, settings: Any, task_name: str
) -> SandboxSpec | None:
    """The resolved sandbox of a task declared with ``sandbox=value`` (None: no sandbox);
    ``settings`` is the process's ``Settings``. Every credential named must be configured."""
    if value is None:
        return None
    spec = resolve_spec(parse_spec(value, task_name=task_name), settings.sandbox)
    unknown = [name for name in spec.credentials if name not in settings.credentials]
    if unknown:
        raise ConfigError(
            f"{task_name}: sandbox credentials {', '.join(unknown)} are not configured; "
            "add them under [credentials] (AGENTFLEET_CREDENTIALS__<NAME>__ENV)"
        )
    return spec
