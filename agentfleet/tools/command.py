"""The ``run_command`` agent tool: an allowlisted executable, run without a shell.

It is off unless ``command.enabled``. ``argv[0]`` must be allowed by ``command.allow``:

- an entry with a ``/`` is an absolute path and allows exactly that file (``argv[0]`` must be
  that path, after normalisation);
- an entry without one is a basename and allows ``argv[0]`` written as that bare name, found
  on the scrubbed ``PATH`` (never a relative or absolute path whose last part happens to
  match, so a file the task wrote cannot pass for an allowed program).

The program runs in the task's scratch directory, in a new session (its own process group),
with stdin closed and an environment of only ``PATH`` (without relative entries or entries
inside the scratch directory), ``HOME`` (the scratch directory), ``LANG`` and the variables
passed in. On timeout the whole process group is killed. Each of stdout and stderr keeps at
most ``command.max_output_bytes`` bytes: the first and last halves, with a marker between.

This limits what can be started; it is not a sandbox for what the allowed program then does.
In a task declared with a sandbox (``@fleet_task(sandbox=...)``), the tool runs the program in
the item's sandbox instead (``run_sandboxed``): there any program of the system image may run,
since the sandbox, not the allowlist, is the boundary; the tool must still be enabled, and the
timeout and output cap are the same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from pydantic import BaseModel

from agentfleet.config import CommandToolSettings
from agentfleet.errors import ForbiddenDestination, InvalidInput
from agentfleet.tools.capture import CappedOutput, drain, see_through

__all__ = ["RUN_COMMAND_TOOL", "CommandResult", "CommandSandbox", "run_command", "run_sandboxed"]

RUN_COMMAND_TOOL: dict[str, Any] = {
    "name": "run_command",
    "description": (
        "Run one allowed program (no shell) in the task's scratch directory and return its "
        "exit code, stdout and stderr. Output is cut at a size limit; the program is killed "
        "when it runs too long."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": 'The program and its arguments, for example ["pytest", "-q"].',
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Seconds before the program is killed (capped by the settings).",
            },
        },
        "required": ["argv"],
        "additionalProperties": False,
    },
}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables that would change which code runs, or that the tool sets itself.
_RESERVED_ENV = {"PATH", "HOME"}
_RESERVED_PREFIXES = ("LD_", "DYLD_")
_KILL_GRACE_S = 2.0


class CommandResult(BaseModel):
    """What a command did. ``exit_code`` is negative (minus the signal) when it was killed;
    ``duration_s`` is wall-clock seconds; the ``*_truncated`` flags say output was cut;
    ``oom_killed``: in a sandbox with a cgroup, its memory limit had the kernel kill a process."""

    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_s: float
    oom_killed: bool = False


def _safe_path(workdir: Path) -> str:
    entries: list[str] = []
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        resolved = Path(entry).resolve()
        if resolved == workdir or workdir in resolved.parents:
            continue
        entries.append(entry)
    return os.pathsep.join(entries)


def _executable(argv0: str, allow: Sequence[str], search_path: str) -> str:
    paths = {os.path.normpath(entry) for entry in allow if "/" in entry}
    names = {entry for entry in allow if "/" not in entry}
    if "/" in argv0:
        candidate = os.path.normpath(argv0)
        if not os.path.isabs(argv0) or candidate not in paths:
            raise ForbiddenDestination(
                f"run_command: {argv0!r} is not an allowed executable path "
                "(command.allow lists full paths and bare program names)"
            )
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            raise ForbiddenDestination(f"run_command: {candidate} is not an executable file")
        return candidate
    if argv0 not in names:
        raise ForbiddenDestination(
            f"run_command: {argv0!r} is not in command.allow "
            f"(allowed: {', '.join(sorted(allow)) or 'nothing'})"
        )
    found = shutil.which(argv0, path=search_path)
    if found is None:
        raise ForbiddenDestination(f"run_command: {argv0!r} is allowed but not found on PATH")
    return found


def _environment(workdir: Path, search_path: str, extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        "PATH": search_path,
        "HOME": str(workdir),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    for name, value in extra.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidInput(f"run_command: {name!r} is not a valid environment variable name")
        if name.upper() in _RESERVED_ENV or name.upper().startswith(_RESERVED_PREFIXES):
            raise ForbiddenDestination(f"run_command: the environment variable {name} is reserved")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidInput(f"run_command: the value of {name} must be a string without NUL")
        env[name] = value
    return env


def run_command(
    argv: Sequence[str],
    *,
    settings: CommandToolSettings,
    workdir: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> CommandResult:
    """Run ``argv`` in ``workdir`` under the rules in the module docs.

    ``timeout_s`` (seconds) may shorten ``settings.timeout_s``, never lengthen it. Raises
    ``ForbiddenDestination`` when the tool is disabled, the program is not allowed or a
    reserved variable is passed, and ``InvalidInput`` for a malformed ``argv``, variable or
    working directory. A non-zero exit is a result, not an error.
    """
    if not settings.enabled:
        raise ForbiddenDestination("run_command is disabled; set command.enabled to allow it")
    args = _checked_argv(argv)
    directory = _working_directory(workdir)
    search_path = _safe_path(directory)
    executable = _executable(args[0], settings.allow, search_path)
    environment = _environment(directory, search_path, env or {})
    limit = _time_limit(settings.timeout_s, timeout_s)

    out, err = CappedOutput(settings.max_output_bytes), CappedOutput(settings.max_output_bytes)
    started = time.monotonic()
    process = subprocess.Popen(
        args,
        executable=executable,
        cwd=directory,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    assert process.stdout is not None and process.stderr is not None
    readers = _start_readers(process.stdout, out, process.stderr, err)
    fields = see_through(process, readers, out, err, started=started, limit_s=limit, grace_s=_KILL_GRACE_S)
    return CommandResult(argv=args, **fields)


def _checked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list; ``InvalidInput`` unless it is non-empty strings without NUL."""
    args = list(argv) if not isinstance(argv, str | bytes) else []
    if not args or not all(isinstance(arg, str) and "\x00" not in arg for arg in args):
        raise InvalidInput("run_command: argv must be a non-empty list of strings without NUL")
    if not args[0]:
        raise InvalidInput("run_command: argv[0] is empty")
    return args


def _working_directory(workdir: str | os.PathLike[str]) -> Path:
    """``workdir`` resolved; ``InvalidInput`` unless it is a directory."""
    directory = Path(workdir).resolve()
    if not directory.is_dir():
        raise InvalidInput(f"run_command: the working directory {directory} does not exist")
    return directory


def _time_limit(most_s: float, asked_s: float | None) -> float:
    """Seconds the program may run: ``asked_s`` may shorten ``most_s``, never lengthen it."""
    if asked_s is None:
        return most_s
    return min(max(asked_s, 0.0), most_s)


def _start_readers(
    stdout: IO[bytes], out: CappedOutput, stderr: IO[bytes], err: CappedOutput
) -> list[threading.Thread]:
    """Threads draining the two pipes into their capped buffers, started."""
    readers = [
        threading.Thread(target=drain, args=(stdout, out), daemon=True),
        threading.Thread(target=drain, args=(stderr, err), daemon=True),
    ]
    for reader in readers:
        reader.start()
    return readers


class CommandSandbox(Protocol):
    """What ``run_sandboxed`` needs of a sandbox (``ctx.sandbox``)."""

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
    ) -> Any: ...


def run_sandboxed(
    argv: Sequence[str],
    *,
    sandbox: CommandSandbox,
    settings: CommandToolSettings,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> CommandResult:
    """``run_command`` for a task with a sandbox: ``argv`` (any program of the sandbox's system)
    runs in ``sandbox``'s workspace, for at most ``settings.timeout_s`` seconds (``timeout_s``
    may shorten it). Raises ``ForbiddenDestination`` when the tool is disabled."""
    if not settings.enabled:
        raise ForbiddenDestination("run_command is disabled; set command.enabled to allow it")
    limit = _time_limit(settings.timeout_s, timeout_s)
    done = sandbox.run(list(argv), timeout_s=limit, env=env)
    return CommandResult.model_validate(done.model_dump())
