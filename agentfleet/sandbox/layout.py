"""What a bubblewrap sandbox sees of the host's filesystem: the ``bwrap`` arguments for it.

- ``/usr`` read-only, and ``/bin``, ``/sbin``, ``/lib*`` as on the host (links into ``/usr``,
  or read-only directories);
- ``/etc`` read-only, with the entries that hold secrets or the host's identity
  (``SECRET_ETC``, and ``/etc/ssl/private``) hidden: a file under an empty one, a directory
  under an empty read-only tmpfs (one bind of ``/etc`` and a mount per hidden entry cost a
  fraction of a bind per entry); nothing else of the host: not ``/home``, ``/root``,
  ``/run``, ``/var``, ``/opt``, ``/srv`` nor the worker's own directory;
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
    args: list[str] = ["--ro-bind", "/etc", "/etc"]
    hidden = [Path("/etc") / name for name in sorted(SECRET_ETC)] + [Path("/etc/ssl/private")]
    for host in hidden:
        if host.is_symlink() or not host.exists():
            continue
        if host.is_dir():
            args += ["--tmpfs", str(host), "--remount-ro", str(host)]
        else:
            args += ["--ro-bind", "/dev/null", str(host)]
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
