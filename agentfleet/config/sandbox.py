"""The ``[sandbox]`` settings section: the defaults every sandboxed task starts from.

A task declares its own sandbox with ``@fleet_task(sandbox=...)`` (``agentfleet.sandbox.spec``);
what it leaves out comes from here. Sizes are in mebibytes, times in seconds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SandboxLimits", "SandboxSettings"]


class SandboxLimits(BaseModel):
    """Resource limits of one sandboxed program (each applies to every ``run`` of the item).

    - ``cpu_s``: CPU seconds per process (``RLIMIT_CPU``; the kernel sends SIGXCPU, then SIGKILL).
    - ``memory_mb``: address space per process in MiB (``RLIMIT_AS``), and the memory of the whole
      sandbox when the host gives sandboxes cgroups (v2 ``memory.max`` or v1
      ``memory.limit_in_bytes``; ``sandbox.cgroups``).
    - ``processes``: processes and threads of the sandbox's user (``RLIMIT_NPROC``; ``pids.max``
      with a cgroup).
    - ``open_files``: open file descriptors per process (``RLIMIT_NOFILE``).
    - ``file_size_mb``: the largest file a process may write, in MiB (``RLIMIT_FSIZE``); also the
      size of the sandbox's private ``/tmp``.
    - ``wall_s``: wall-clock seconds one ``run`` may take before its whole tree is killed (a
      ``run``'s own ``timeout_s`` may only lower it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_s: int = Field(default=300, ge=1)
    memory_mb: int = Field(default=2048, ge=16)
    processes: int = Field(default=256, ge=4)
    open_files: int = Field(default=1024, ge=16)
    file_size_mb: int = Field(default=1024, ge=1)
    wall_s: float = Field(default=600.0, gt=0)


class SandboxSettings(BaseModel):
    """``[sandbox]``: how sandboxes are made (``backend``: ``bubblewrap``, or ``none`` chosen
    by name for a trusted program that needs no isolation), how many a worker process keeps
    ready (``warm``) from the ``template`` (a directory copied, or a git repository checked out
    as a worktree, per item), the default ``limits``, and the size cap on each of a run's
    stdout and stderr (``max_output_bytes``, bytes: the first and last halves are kept)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["bubblewrap", "none"] = "bubblewrap"
    warm: int = Field(default=0, ge=0, le=64)
    template: str | None = None
    limits: SandboxLimits = SandboxLimits()
    max_output_bytes: int = Field(default=200_000, ge=1)
