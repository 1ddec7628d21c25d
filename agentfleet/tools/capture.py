"""Reading a child's output without blocking it, keeping at most a size cap of it, and seeing
the child through to its end under a time limit (``run_command`` and the sandbox's runs)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

__all__ = ["CappedOutput", "drain", "exited", "see_through"]

_READ_SIZE = 65536


class CappedOutput:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data
            if len(self._tail) > self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self._head_limit + self._tail_limit

    def text(self) -> str:
        """What was kept, as text (a marker names how many bytes were left out)."""
        if not self.truncated:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", "replace")
        omitted = self.total - len(self._head) - len(self._tail)
        return (
            bytes(self._head).decode("utf-8", "replace")
            + f"\n[... {omitted} bytes omitted ...]\n"
            + bytes(self._tail).decode("utf-8", "replace")
        )


def drain(stream: IO[bytes], sink: CappedOutput) -> None:
    """Read ``stream`` to its end into ``sink`` (run it in a thread of its own)."""
    # Keep reading past the cap so the program never blocks on a full pipe.
    try:
        while True:
            data = stream.read1(_READ_SIZE) if hasattr(stream, "read1") else stream.read(_READ_SIZE)
            if not data:
                return
            sink.add(data)
    except (OSError, ValueError):
        # The pipe was closed under us after the grace period; what was read is kept.
        return


def exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, leaving it unreaped (``WNOWAIT``), so its pid and
    process group id cannot be reused before the group is killed."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        # SIGCHLD is ignored in this process, so the kernel reaped the child already.
        return True


def see_through(
    process: subprocess.Popen[bytes],
    readers: Sequence[threading.Thread],
    out: CappedOutput,
    err: CappedOutput,
    *,
    started: float,
    limit_s: float,
    grace_s: float,
    after: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Wait for ``process`` (started at ``started``, ``time.monotonic`` seconds, in a session
    of its own) to exit, at most ``limit_s`` seconds from its start; then kill its whole
    process group (helpers it left behind would hold the pipes), call ``after``, reap it, give
    the ``readers`` ``grace_s`` seconds to finish and close its pipes. Returns the result's
    fields: exit_code, stdout, stderr, their truncation, timed_out, duration_s."""
    timed_out = False
    try:
        while not exited(process.pid):
            if time.monotonic() - started >= limit_s:
                timed_out = True
                break
            time.sleep(0.005)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if after is not None:
            after()
        exit_code = process.wait()
    duration = time.monotonic() - started
    for reader in readers:
        reader.join(grace_s)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    return {
        "exit_code": exit_code,
        "stdout": out.text(),
        "stderr": err.text(),
        "stdout_truncated": out.truncated,
        "stderr_truncated": err.truncated,
        "timed_out": timed_out,
        "duration_s": round(duration, 6),
    }
