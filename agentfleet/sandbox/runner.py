"""Running one sandboxed command line and collecting what it did, for every backend.

``collect`` starts the command in a session of its own, feeds it ``stdin``, keeps at most
``max_output_bytes`` of each of stdout and stderr (``tools.capture``), kills its process
group past ``limit_s`` seconds of wall clock, and always calls ``after`` (the backend's
``reap``) before it returns, so nothing of the run is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from agentfleet.errors import InvalidInput
from agentfleet.sandbox.spec import SandboxResult
from agentfleet.tools.capture import CappedOutput, drain, see_through

__all__ = ["check_argv", "check_env", "collect"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GRACE_S = 2.0


def check_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list, or ``InvalidInput``: a non-empty list of strings without NUL."""
    args = list(argv) if not isinstance(argv, str | bytes) else []
    if not args or not all(isinstance(a, str) and "\x00" not in a for a in args) or not args[0]:
        raise InvalidInput("sandbox run: argv must be a non-empty list of strings without NUL")
    return args


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` checked: names of letters, digits and ``_``, string values without NUL."""
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidInput(f"sandbox run: {name!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidInput(f"sandbox run: the value of {name} must be a string without NUL")
    return dict(env)


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        stream.write(data)
    with contextlib.suppress(OSError, ValueError):
        stream.close()


def _started(
    process: subprocess.Popen[bytes], on_start: Callable[[int], object], after: Callable[[], object]
) -> None:
    try:
        on_start(process.pid)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        after()
        process.wait()
        raise


def collect(
    cmd: list[str],
    *,
    shown_argv: list[str],
    limit_s: float,
    stdin: bytes | str | None,
    max_output_bytes: int,
    popen: Mapping[str, Any],
    after: Callable[[], object],
    on_start: Callable[[int], object] | None = None,
) -> SandboxResult:
    """Run ``cmd`` (see the module docstring); ``shown_argv`` is the argv the result names;
    ``on_start(pid)`` is called once the process is there, before anything is read or fed."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out, err = CappedOutput(max_output_bytes), CappedOutput(max_output_bytes)
    started = time.monotonic()
    process = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        **popen,
    )
    assert process.stdout is not None and process.stderr is not None
    if on_start is not None:
        _started(process, on_start, after)
    threads = [
        threading.Thread(target=drain, args=(process.stdout, out), daemon=True),
        threading.Thread(target=drain, args=(process.stderr, err), daemon=True),
    ]
    if data is not None and process.stdin is not None:
        threads.append(threading.Thread(target=_feed, args=(process.stdin, data), daemon=True))
    for thread in threads:
        thread.start()
    fields = see_through(
        process, threads, out, err, started=started, limit_s=limit_s, grace_s=_GRACE_S, after=after
    )
    return SandboxResult(argv=shown_argv, **fields)
