"""What a bubblewrap sandbox sees of the host's filesystem: the ``bwrap`` arguments for it.

- ``/usr`` read-only, and ``/bin``, ``/sbin``, ``/lib*`` as on the host (links into ``/usr``,
  or read-only directories);
- ``/etc`` a fresh directory holding read-only binds of the host's entries, except the ones
  that hold secrets or the host's identity (``SECRET_ETC``), and with ``/etc/ssl/private``
  hidden; nothing else of the host: not ``/home``, ``/root``, ``/run``, ``/var``, ``/opt``,
  ``/srv`` nor the worker's own directory;
- a new ``/proc`` (of the sandbox's PID namespace), a minimal ``/dev``, a private ``/tmp``
  (tmpfs of ``limits.file_size_mb``);
- the workspace read-write at ``/workspace``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["SECRET_ETC", "system_args"]

#: Entries of the host's ``/etc`` never shown in a sandbox.
SECRET_ETC = frozenset(
    {
        "shadow",
        "shadow-",
        "gshadow",
        "gshadow-",
        "sudoers",
        "sudoers.d",
        "ssh",
        "agentfleet",
        "security",
        "machine-id",
        "credstore",
        "credstore.encrypted",
        "docker",
        "containerd",
        "kubernetes",
        "wireguard",
        "NetworkManager",
        "environment",
        "netrc",
        "npmrc",
        "pip.conf",
    }
)
_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@functools.cache
def _etc_args() -> tuple[str, ...]:
    args: list[str] = ["--dir", "/etc"]
    for entry in sorted(os.listdir("/etc")):
        if entry in SECRET_ETC:
            continue
        host = Path("/etc") / entry
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        else:
            args += ["--ro-bind-try", str(host), str(host)]
    if Path("/etc/ssl/private").is_dir():
        args += ["--tmpfs", "/etc/ssl/private"]
    return tuple(args)


@functools.cache
def _root_args() -> tuple[str, ...]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    return tuple(args)


def system_args(*, tmp_bytes: int) -> list[str]:
    """The ``bwrap`` arguments for the read-only system, ``/proc``, ``/dev`` and ``/tmp``
    (``tmp_bytes``: the size of the private ``/tmp``, bytes)."""
    return [
        *_root_args(),
        *_etc_args(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--dir",
        "/run",
    ]
