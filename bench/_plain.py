"""Plain Celery worker processes (``plain_app``), started and stopped like ``LocalCluster``'s."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from celery import Celery

HERE = Path(__file__).resolve().parent


class PlainWorkers:
    """``count`` plain Celery workers on ``broker_url`` with ``pool`` of ``concurrency`` slots."""

    def __init__(
        self,
        broker_url: str,
        *,
        count: int = 1,
        pool: str = "threads",
        concurrency: int = 8,
        prefetch: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.broker_url = broker_url
        self.count = count
        self.pool = pool
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.env = env or {}
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs = Path(tempfile.mkdtemp(prefix="plain-celery-"))

    @property
    def app(self) -> Celery:
        """A client app on the same broker (the tasks by name)."""
        os.environ["PLAIN_BROKER_URL"] = self.broker_url
        sys.path.insert(0, str(HERE))
        import plain_app

        return plain_app.app

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def __enter__(self) -> PlainWorkers:
        env = {
            **os.environ,
            **self.env,
            "PLAIN_BROKER_URL": self.broker_url,
            "PLAIN_PREFETCH": str(self.prefetch),
        }
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
        names = []
        for n in range(self.count):
            name = f"plain{n}-{os.getpid()}@localhost"
            names.append(name)
            args = [sys.executable, "-m", "celery", "-A", "plain_app", "worker", "--pool", self.pool]
            args += ["--concurrency", str(self.concurrency), "--hostname", name, "--loglevel", "WARNING"]
            args += ["--without-gossip", "--without-mingle", "--task-events"]
            with open(self._logs / f"{n}.log", "wb") as log:
                self.processes.append(
                    subprocess.Popen(
                        args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        deadline = time.monotonic() + 120
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for reply in self.app.control.ping(destination=list(pending), timeout=0.5) or []:
                pending -= set(reply)
        if pending:
            self.__exit__(None, None, None)
            raise RuntimeError(f"plain Celery workers did not start: {pending}")
        return self

    def kill(self) -> None:
        """SIGKILL every worker's whole process group at once, as a crash would."""
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        self.processes = []
        if exc_type is None:
            shutil.rmtree(self._logs, ignore_errors=True)
