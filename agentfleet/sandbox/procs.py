"""Finding and killing what a sandbox left running, by the host user it ran as."""

from __future__ import annotations

import contextlib
import os
import signal
import time

__all__ = ["kill_user", "processes_of"]


def processes_of(uid: int) -> list[int]:
    """The pids of every live process whose real user is ``uid`` (a zombie, already dead and
    waiting for its parent to reap it, is not counted)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status if b":" in line)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        uid_field, state = fields.get(b"Uid", b""), fields.get(b"State", b"")
        if uid_field.split()[:1] == [str(uid).encode()] and not state.strip().startswith(b"Z"):
            found.append(int(entry))
    return found


def kill_user(uid: int, *, deadline_s: float = 5.0) -> int:
    """SIGKILL every process of ``uid`` until none is left (a fork bomb keeps forking while it
    dies), for at most ``deadline_s`` seconds; how many were killed. Never called with the
    worker's own user."""
    if uid == os.geteuid() or uid == 0:
        raise ValueError("kill_user: refusing to kill the worker's own user")
    killed = 0
    give_up = time.monotonic() + deadline_s
    while True:
        pids = processes_of(uid)
        if not pids or time.monotonic() > give_up:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.005)
