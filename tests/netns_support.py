"""Real network partitions for tests: a namespace of the test's own, joined to the host by a veth
pair that carries the only addresses in it (``10.213.N.1/30`` on the host side, ``.2`` inside).

A process started with ``Link.popen`` lives in the namespace and reaches the host only over
that pair, so ``down()`` (the host end's link set down), ``drop_silently()`` (every packet
discarded by a ``pfifo`` queue of length 0 on both ends: no reset, no refusal, connections
left open) and ``restore()`` cut and mend its link to whatever listens on ``host_ip``.
Names start with ``fencing-`` (namespace) and ``fh``/``fn`` (links) plus a random tag, so
runs never clash; ``delete()`` removes both, and the namespace's processes must be stopped
first (by pid, see ``stop_process``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any


def partition_unavailable() -> str | None:
    """Why partitions cannot be made here (not root, no ``ip netns``), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"ip netns is unavailable: {probe.stderr.strip()}"
    return None


def silent_drop_unavailable() -> str | None:
    """Why packets cannot be dropped silently here (no ``tc``), or None."""
    if shutil.which("tc") is None:
        return "the tc command (iproute2) is not installed"
    return None


def _ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)


class Link:
    """A namespace and its veth link to the host (``host_ip`` on the host end, ``ns_ip`` inside)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.namespace = f"fencing-{tag}"
        self.host_end = f"fh{tag}"
        self.ns_end = f"fn{tag}"
        third, fourth = random.randrange(256), random.randrange(0, 256, 4)
        self.host_ip = f"10.213.{third}.{fourth + 1}"
        self.ns_ip = f"10.213.{third}.{fourth + 2}"
        self._created: list[str] = []

    def create(self) -> Link:
        _ip("ip", "netns", "add", self.namespace)
        self._created.append("namespace")
        _ip("ip", "link", "add", self.host_end, "type", "veth", "peer", "name", self.ns_end)
        self._created.append("link")
        _ip("ip", "link", "set", self.ns_end, "netns", self.namespace)
        _ip("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_end)
        _ip("ip", "link", "set", self.host_end, "up")
        _ip("ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_end, namespace=self.namespace)
        _ip("ip", "link", "set", self.ns_end, "up", namespace=self.namespace)
        _ip("ip", "link", "set", "lo", "up", namespace=self.namespace)
        return self

    def down(self) -> None:
        """Cut the link: the host end goes down, as a pulled cable."""
        _ip("ip", "link", "set", self.host_end, "down")

    def up(self) -> None:
        _ip("ip", "link", "set", self.host_end, "up")

    def drop_silently(self) -> None:
        """Discard every packet both ways, links left up: nothing is refused or reset."""
        _ip("tc", "qdisc", "add", "dev", self.host_end, "root", "pfifo", "limit", "0")
        _ip("tc", "qdisc", "add", "dev", self.ns_end, "root", "pfifo", "limit", "0", namespace=self.namespace)

    def restore(self) -> None:
        """Undo ``drop_silently``."""
        _ip("tc", "qdisc", "del", "dev", self.host_end, "root")
        _ip("tc", "qdisc", "del", "dev", self.ns_end, "root", namespace=self.namespace)

    def popen(
        self, args: Sequence[str], *, env: Mapping[str, str], log: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``args`` inside the namespace, in a session of its own (``ip netns exec`` execs
        the command: the pid is the command's); its output goes to ``log``, else a pipe."""
        out: IO[bytes] | int = open(log, "wb") if log is not None else subprocess.PIPE  # noqa: SIM115
        try:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.namespace, *args],
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if not isinstance(out, int):
                out.close()

    def delete(self) -> None:
        """Remove the link pair and the namespace (safe to call again, and after a failed create)."""
        if "link" in self._created:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("ip", "link", "del", self.host_end)
        if "namespace" in self._created:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("ip", "netns", "del", self.namespace)
        self._created.clear()


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """Stop ``process`` by its pid (SIGTERM), then SIGKILL its whole session if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=timeout_s)
