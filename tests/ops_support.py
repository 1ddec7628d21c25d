"""Helpers for the operations tests: service processes stopped by pid, and polling."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
# Where this interpreter's console scripts (agentfleet, celery) are installed.
BIN = Path(sys.executable).parent


class ServiceProcess:
    """A process started in its own session, its output in a log file; ``stop()`` by its pid."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM) without waiting; ``stop()`` then waits and cleans up."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL for its whole process group if it lingers."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL the whole process group at once, as a crash would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float = 0.25,
    what: str = "condition",
    processes: Sequence[ServiceProcess] = (),
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with the logs of ``processes``."""
    deadline = time.monotonic() + timeout_s
    while True:
        for proc in processes:
            if not proc.alive():
                raise AssertionError(f"{proc.name} exited while waiting for {what}:\n{proc.log()[-4000:]}")
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}:\n{p.log()[-2500:]}" for p in processes)
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{logs}")
        time.sleep(interval_s)


def http_status(url: str, **kwargs: object) -> int | None:
    """The status code of a GET, or None when nothing answers."""
    try:
        return httpx.get(url, timeout=5.0, **kwargs).status_code  # type: ignore[arg-type]
    except httpx.HTTPError:
        return None
