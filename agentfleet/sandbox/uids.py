"""The host user each sandbox runs as, one of its own while it lives.

A worker running as root starts each sandbox as a user of its own, taken from
``UID_BASE .. UID_BASE + UID_COUNT`` (users no file on the host belongs to): the sandbox then
reads nothing that only root (or the worker's user) may read, its process limit
(``RLIMIT_NPROC`` counts per user) is its own, so a fork bomb in one sandbox starves no other,
and every process of that user is the sandbox's, which is how ``reap`` finds what is left.
A user is held with an ``flock`` on a file of ``LOCK_DIR`` (root's only), so the workers of
one host never hand the same one out twice; the lock goes with the process that held it.

A worker that is not root runs its sandboxes as its own user (``UidLease.shared`` is True):
the namespaces still hide the host, but the process limit and ``reap``'s scan are then
per sandbox process tree rather than per user.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOCK_DIR", "UID_BASE", "UID_COUNT", "UidLease", "lease_uid"]

UID_BASE = 200_000
UID_COUNT = 4096
LOCK_DIR = Path(tempfile.gettempdir()) / "agentfleet-sandbox-uids"


@dataclass
class UidLease:
    """A user (``uid``, with the group of the same number) held for one sandbox."""

    uid: int
    shared: bool
    _fd: int | None = None

    def release(self) -> None:
        """Hand the user back (its processes must be gone)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def lease_uid() -> UidLease:
    """A user of its own for a new sandbox (see the module docstring)."""
    if os.geteuid() != 0:
        return UidLease(uid=os.geteuid(), shared=True)
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    os.chmod(LOCK_DIR, 0o700)
    start = random.randrange(UID_COUNT)
    for step in range(UID_COUNT):
        uid = UID_BASE + (start + step) % UID_COUNT
        fd = os.open(LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid=uid, shared=False, _fd=fd)
    raise RuntimeError(f"all {UID_COUNT} sandbox users are in use on this host")
