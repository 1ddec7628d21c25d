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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LOCK_DIR", "UID_BASE", "UID_COUNT", "UidLease", "if_abandoned", "lease_uid", "try_lease"]

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


def try_lease(uid: int) -> UidLease | None:
    """The sandbox user ``uid`` when no live process holds it (it is then ours), else None."""
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return UidLease(uid=uid, shared=False, _fd=fd)


@contextlib.contextmanager
def if_abandoned(uid: int) -> Iterator[bool]:
    """Whether no live process holds sandbox user ``uid``: if so it is held for the block (to
    clear what a dead worker left under it) and handed back after."""
    if not UID_BASE <= uid < UID_BASE + UID_COUNT:
        yield False
        return
    lease = try_lease(uid)
    try:
        yield lease is not None
    finally:
        if lease is not None:
            lease.release()


def lease_uid() -> UidLease:
    """A user of its own for a new sandbox (see the module docstring)."""
    if os.geteuid() != 0:
        return UidLease(uid=os.geteuid(), shared=True)
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    os.chmod(LOCK_DIR, 0o700)
    start = random.randrange(UID_COUNT)
    for step in range(UID_COUNT):
        lease = try_lease(UID_BASE + (start + step) % UID_COUNT)
        if lease is not None:
            return lease
    raise RuntimeError(f"all {UID_COUNT} sandbox users are in use on this host")
