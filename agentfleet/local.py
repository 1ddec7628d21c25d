"""``LocalCluster``: a Redis and real Celery worker processes on this machine.

It uses the configured broker (``AGENTFLEET_BROKER_URL``, ``broker_url`` in
``agentfleet.toml``, or its own ``broker_url=``) and fails if that does not answer; only when
none is configured does it start the embedded Redis. Every worker is a ``celery worker``
subprocess in a session of its own; on exit (including an exception or Ctrl-C in the body)
each is stopped by its pid, then its whole process group is killed, then the embedded Redis
is stopped. Nothing is left running. The workers' logs are removed after a clean exit and
kept (and named) after a failed one.

The workers import the modules in ``AGENTFLEET_TASK_MODULES`` and ``task_modules=``; a task
object handed to ``cluster.fleet()`` whose module they lack is added to them (the workers are
restarted once to import it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from agentfleet.broker_check import check_broker
from agentfleet.config import Settings, get_settings
from agentfleet.config.redis_url import check_redis_url
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.errors import ConfigError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.admission import Stage
from agentfleet.protocol.task import FleetTask
from agentfleet.registry import TaskInfo, WorkerRegistry
from agentfleet.tasks.lifecycle import PARENT_PID_ENV

__all__ = ["LocalCluster", "WorkerProcess"]

log = logging.getLogger("agentfleet.local")


def _split(modules: str) -> list[str]:
    return [m.strip() for m in modules.split(",") if m.strip()]


@dataclass
class WorkerProcess:
    """One ``celery worker`` subprocess: its node name, process and log file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class _ClusterFleet(Fleet):
    """The cluster's ``Fleet``: a task object whose module the workers lack is added to them."""

    def __init__(self, cluster: LocalCluster, settings: Settings, broker_url: str) -> None:
        super().__init__(settings, broker_url=broker_url)
        self._cluster = cluster

    def _admit_stages(self, stages: Sequence[Stage], wait_s: float | None) -> dict[str, TaskInfo]:
        self._cluster.serve([stage.task for stage in stages if stage.task is not None])
        return super()._admit_stages(stages, wait_s)


class LocalCluster:
    """An embedded Redis (unless one is configured) and ``workers`` real worker processes.

    ``concurrency`` and ``pool`` default to the settings' worker section. ``env`` adds
    environment variables for the workers (for example ``AGENTFLEET_CONFIG``); the caller's
    ``PYTHONPATH`` and current directory are passed on so user task modules import in the
    workers. ``task_modules`` adds modules to those in ``AGENTFLEET_TASK_MODULES``.
    """

    def __init__(
        self,
        workers: int = 2,
        concurrency: int | None = None,
        pool: str | None = None,
        *,
        queues: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        broker_url: str | None = None,
        autoscale: str | None = None,
        loglevel: str = "INFO",
        startup_timeout_s: float = 60.0,
        stop_timeout_s: float = 10.0,
        settings: Settings | None = None,
        task_modules: Sequence[str] = (),
    ) -> None:
        if workers < 0:
            raise ConfigError("LocalCluster(workers=...) must be 0 or more")
        self.settings = settings or get_settings()
        self.workers_wanted = workers
        self.concurrency = concurrency or self.settings.worker.concurrency
        self.pool = pool or self.settings.worker.pool
        self.autoscale = autoscale
        self.queues = (
            list(queues)
            if queues
            else [self.settings.queues.agents, self.settings.queues.fanin, self.settings.queues.maintenance]
        )
        self.extra_env = dict(env or {})
        named = self.extra_env.get("AGENTFLEET_TASK_MODULES", os.environ.get("AGENTFLEET_TASK_MODULES", ""))
        self.task_modules = list(dict.fromkeys([*_split(named), *task_modules]))
        self.loglevel = loglevel
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._requested_url = broker_url
        self._redis: EmbeddedRedis | None = None
        self._broker_url: str | None = None
        self._fleet: Fleet | None = None
        self.workers: list[WorkerProcess] = []
        self._log_dir = Path(tempfile.mkdtemp(prefix="agentfleet-cluster-"))
        self.embedded = False

    # Properties ----------------------------------------------------------------------------

    @property
    def broker_url(self) -> str:
        if self._broker_url is None:
            raise ConfigError("the cluster is not started; use it as a context manager")
        return self._broker_url

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    def fleet(self) -> Fleet:
        """A ``Fleet`` connected to this cluster's broker; a task object it is handed whose
        module the workers lack is added to them."""
        if self._fleet is None:
            self._fleet = _ClusterFleet(self, self.settings, self.broker_url)
        return self._fleet

    def registry(self) -> WorkerRegistry:
        """The worker registry on this cluster's Redis."""
        return WorkerRegistry.from_settings(self.settings, self.fleet().store.client)

    def worker_env(self) -> dict[str, str]:
        """The environment every worker process gets.

        The workers use this cluster's queue names and key prefix (from its settings), so a
        cluster with queues of its own shares a Redis with others without taking their tasks.
        """
        env = dict(os.environ)
        for name, queue in self.settings.queues.model_dump().items():
            env[f"AGENTFLEET_QUEUES__{name.upper()}"] = queue
        env["AGENTFLEET_KEY_PREFIX"] = self.settings.key_prefix
        env.update(self.extra_env)
        if self.task_modules:
            env["AGENTFLEET_TASK_MODULES"] = ",".join(self.task_modules)
        paths = [os.getcwd(), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        extra = self.extra_env.get("PYTHONPATH")
        if extra:
            paths = [*extra.split(os.pathsep), *paths]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env["AGENTFLEET_BROKER_URL"] = self.broker_url
        if self.settings.state_url:
            env["AGENTFLEET_STATE_URL"] = self.settings.state_url
        if self.settings.sentinel_master:
            env["AGENTFLEET_SENTINEL_MASTER"] = self.settings.sentinel_master
        if self.settings.sentinel_password is not None:
            env["AGENTFLEET_SENTINEL_PASSWORD"] = self.settings.sentinel_password.get_secret_value()
        env.pop("AGENTFLEET_RESULT_BACKEND", None)
        env[PARENT_PID_ENV] = str(os.getpid())
        return env

    # Lifecycle -----------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        try:
            self._start_broker()
            for _ in range(self.workers_wanted):
                self.add_worker(wait=False)
            self.wait_ready()
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def _start_broker(self) -> None:
        """The configured broker, which must answer; the embedded Redis only when none is."""
        if self._requested_url:
            try:
                check_redis_url(self._requested_url)
            except ValueError as exc:
                raise ConfigError(f"LocalCluster(broker_url=...): {exc}") from None
            target = self.settings.model_copy(update={"broker_url": self._requested_url}).redis_target()
            check_broker(target, setting="LocalCluster(broker_url=...)")
            self._broker_url = self._requested_url
            return
        if "broker_url" in self.settings.model_fields_set:
            check_broker(self.settings.redis_target())
            self._broker_url = self.settings.broker_url
            return
        self._redis = EmbeddedRedis().start()
        self.embedded = True
        self._broker_url = self._redis.url
        log.info("no broker configured: started the embedded Redis at %s", self._broker_url)

    def add_worker(self, *, wait: bool = True, concurrency: int | None = None) -> WorkerProcess:
        """Start one more worker process; with ``wait``, until it answers a ping."""
        name = f"af{len(self.workers) + 1}-{uuid.uuid4().hex[:6]}@{os.uname().nodename}"
        log_path = self._log_dir / f"{name.split('@')[0]}.log"
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentfleet.celery_app",
            "worker",
            "--hostname",
            name,
            "--pool",
            self.pool,
            "--queues",
            ",".join(self.queues),
            "--loglevel",
            self.loglevel,
            "--without-gossip",
            "--without-mingle",
            "--task-events",
        ]
        if self.autoscale:
            args += ["--autoscale", self.autoscale]
        else:
            args += ["--concurrency", str(concurrency or self.concurrency)]
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(
                args,
                env=self.worker_env(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(name=name, process=process, log_path=log_path)
        self.workers.append(worker)
        if wait:
            self.wait_ready([worker])
        return worker

    def wait_ready(self, workers: Sequence[WorkerProcess] | None = None) -> None:
        """Block until every worker answers a ping and is in the worker registry (so work for
        its tasks is admitted); raise with its log if one dies or stalls."""
        pending = {w.name: w for w in (workers if workers is not None else self.workers)}
        deadline = time.monotonic() + self.startup_timeout_s
        app = self.fleet().app
        registry = self.registry()
        answered: set[str] = set()
        while pending:
            for worker in pending.values():
                if not worker.alive():
                    raise ConfigError(f"worker {worker.name} exited at start:\n{worker.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                names = ", ".join(pending)
                raise ConfigError(f"workers did not answer a ping in {self.startup_timeout_s} s: {names}")
            replies = app.control.ping(destination=list(pending), timeout=0.5) or []
            answered.update(name for reply in replies for name in reply)
            listed = {record.node for record in registry.live()}
            for name in answered & listed:
                pending.pop(name, None)

    def serve(self, tasks: Sequence[FleetTask]) -> None:
        """Make every worker serve ``tasks``: the modules of those some worker lacks are added
        to the workers' task modules, and the workers restarted to import them."""
        if not tasks or not self.workers:
            return
        ours = {w.name for w in self.workers}
        records = [r for r in self.registry().live() if r.node in ours]
        everywhere = len(records) == len(ours)
        served = {t.name for t in tasks if everywhere and all(t.name in r.tasks for r in records)}
        wanted = dict.fromkeys(type(t).__module__ for t in tasks if t.name not in served)
        modules = [m for m in wanted if m not in self.task_modules]
        if not modules:
            return
        self.task_modules += modules
        log.warning(
            "LocalCluster: restarting %d workers to import %s (pass task_modules= to start with it)",
            len(self.workers),
            ", ".join(modules),
        )
        old, self.workers = self.workers, []
        for worker in old:
            self.stop_worker(worker)
        for _ in old:
            self.add_worker(wait=False)
        self.wait_ready()

    def stop_worker(self, worker: WorkerProcess, *, sig: int = signal.SIGTERM) -> None:
        """Stop one worker by its pid: ``sig``, then SIGKILL for its whole group if it lingers."""
        if worker.alive():
            try:
                worker.process.send_signal(sig)
                worker.process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("worker %s did not stop in %s s; killing it", worker.name, self.stop_timeout_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)
        try:
            worker.process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            log.error("worker %s (pid %d) survived SIGKILL", worker.name, worker.pid)

    def kill_worker(self, worker: WorkerProcess) -> None:
        """SIGKILL a worker's whole process group at once, as a crash would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.process.wait(timeout=self.stop_timeout_s)

    def pids(self) -> list[int]:
        """The pids of everything this cluster started (workers, and the embedded Redis)."""
        found = [w.pid for w in self.workers]
        if self._redis is not None and self._redis.pid is not None:
            found.append(self._redis.pid)
        return found

    def stop(self, *, keep_logs: bool = False) -> None:
        """Stop every worker, then the embedded Redis, then remove the workers' logs unless
        ``keep_logs``. Safe to call more than once."""
        workers, self.workers = self.workers, []
        for worker in workers:
            if worker.alive():
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGTERM)
        for worker in workers:
            self.stop_worker(worker)
        if self._fleet is not None:
            self._fleet.close()
            self._fleet = None
        if self._redis is not None:
            self._redis.stop()
            self._redis = None
        if keep_logs and self._log_dir.is_dir() and any(self._log_dir.iterdir()):
            log.warning("LocalCluster: the workers' logs are kept in %s", self._log_dir)
        else:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Ctrl-C during shutdown must not leave processes behind: finish stopping first.
        previous = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread
            previous = None
        try:
            self.stop(keep_logs=exc_type is not None)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
