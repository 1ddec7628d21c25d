"""The two upstream suites and how one run of either goes: its own copy of the sdist's tests,
a Redis to run against, pytest in a process of its own with the ``transport_swap`` plugin, a
timeout per test and one for the whole run, JUnit XML and a log beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from upstream.transport_swap import AGENTFLEET_REDIS

HERE = Path(__file__).resolve().parent
TRANSPORTS = ("stock", "agentfleet")
# The pytest processes under way, so an interrupted runner stops them (and starts no more).
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


@dataclass(frozen=True)
class Suite:
    """One upstream suite: the distribution whose sdist holds it, the test files it runs, the
    pytest plugins it needs, the per-test timeout (s, pytest-timeout), the whole run's budget
    (s; past it the run is stopped and counts as broken), the environment variables its own
    tests read Redis's port and URL from, further variables as the suite's own CI sets them,
    and for Celery the file whose JSON its conftest merges into the test app's configuration."""

    name: str
    dist: str
    paths: tuple[str, ...]
    plugins: tuple[str, ...]
    test_timeout_s: int
    budget_s: int
    port_variable: str
    url_variables: tuple[str, ...] = ()
    settings: tuple[tuple[str, str], ...] = ()
    app_overrides: str | None = None

    def environment(self, host: str, port: int, transport: str) -> dict[str, str]:
        """The variables the suite's tests read to find Redis, and the plugin's switch."""
        env = {"AGENTFLEET_UPSTREAM_TRANSPORT": transport, "REDIS_HOST": host, self.port_variable: str(port)}
        env.update({name: f"redis://{host}:{port}/0" for name in self.url_variables})
        env.update(dict(self.settings))
        return env

    def configure(self, tree: Path, transport: str) -> None:
        """Celery's test app and its session worker get the transport through the app's own
        ``broker_transport`` setting, as agentfleet's ``celery_config`` sets it."""
        if self.app_overrides:
            chosen = AGENTFLEET_REDIS if transport == "agentfleet" else None
            (tree / self.app_overrides).write_text(json.dumps({"broker_transport": chosen}))


SUITES = {
    "kombu": Suite(
        name="kombu",
        dist="kombu",
        paths=("t/integration/test_redis.py", "t/integration/test_redis_brpop_qos.py"),
        plugins=(),
        test_timeout_s=120,
        budget_s=30 * 60,
        port_variable="REDIS_6379_TCP",
    ),
    "celery": Suite(
        name="celery",
        dist="celery",
        paths=(
            "t/integration/test_tasks.py",
            "t/integration/test_canvas.py",
            "t/integration/test_inspect.py",
            "t/integration/test_connection_recovery.py",
        ),
        plugins=("celery.contrib.pytest",),
        test_timeout_s=300,
        budget_s=60 * 60,
        port_variable="REDIS_PORT",
        url_variables=("TEST_BROKER", "TEST_BACKEND"),
        # As Celery's tox.ini sets it: the session worker logs at INFO, which test_tasks.py's
        # test_trace_log_arguments reads back.
        settings=(("WORKER_LOGLEVEL", "INFO"),),
        # Celery's integration conftest reads it from pytest's rootdir (its documented override).
        app_overrides="integration-tests-config.json",
    ),
}


@dataclass(frozen=True)
class RunOutcome:
    """How one run ended: pytest's exit code (None: stopped at the budget), its wall time (s),
    and where its JUnit XML and log are."""

    suite: str
    transport: str
    exit_code: int | None
    wall_s: float
    junit: Path
    log: Path

    @property
    def completed(self) -> bool:
        """pytest ran every test and wrote its report (0: all passed, 1: some failed)."""
        return self.exit_code in (0, 1) and self.junit.is_file()


def run(suite: Suite, transport: str, tree: Path, results: Path, host: str, port: int) -> RunOutcome:
    """Run ``suite`` from ``tree`` against the Redis at ``host:port`` with ``transport``."""
    suite.configure(tree, transport)
    results.mkdir(parents=True, exist_ok=True)
    junit = results / f"{suite.name}-{transport}.xml"
    log = results / f"{suite.name}-{transport}.log"
    junit.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-p", "transport_swap", "-p", "no:cacheprovider"]
    for plugin in suite.plugins:
        command += ["-p", plugin]
    command += [
        "-q",
        "-rfE",
        "--durations=15",
        f"--timeout={suite.test_timeout_s}",
        "-W",
        "ignore::pytest.PytestUnknownMarkWarning",
        f"--junitxml={junit}",
        *suite.paths,
    ]
    env = {**os.environ, **suite.environment(host, port, transport)}
    env["PYTHONPATH"] = str(HERE)  # the plugin only, as a top-level module
    started = time.monotonic()
    with log.open("w") as out, _LIVE_LOCK:
        if _STOPPING.is_set():
            return RunOutcome(suite.name, transport, None, 0.0, junit, log)
        process = subprocess.Popen(
            command,
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        _LIVE.add(process)
    exit_code: int | None
    try:
        exit_code = process.wait(timeout=suite.budget_s)
    except subprocess.TimeoutExpired:
        exit_code = None
    finally:
        _stop_group(process)
        with _LIVE_LOCK:
            _LIVE.discard(process)
    if _STOPPING.is_set():
        exit_code = None  # stopped from outside: its report may be cut short
    return RunOutcome(suite.name, transport, exit_code, time.monotonic() - started, junit, log)


def stop_all() -> None:
    """Stop every run under way and start no other (the runner was interrupted)."""
    with _LIVE_LOCK:
        _STOPPING.set()
        running = list(_LIVE)
    for process in running:
        _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Stop what is left of the run's process group (pytest and the worker processes it
    started; the group is the one ``process`` leads): SIGTERM, then SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(process):
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while _group_alive(process) and time.monotonic() < deadline:
            time.sleep(0.1)


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    process.poll()  # reap the leader once it exits, so a finished group reads as gone
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True
