"""Importing the client (``from agentfleet import Fleet``) leaves the process as it was for a
worker: no Celery signal handler connected, no module of the worker runtime loaded, no thread
started. Checked in a fresh interpreter, so nothing an earlier test imported hides it."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, os, sys, threading
from celery import signals

forks = []
_register = os.register_at_fork

def register_at_fork(**hooks):
    forks.extend(getattr(hook, "__module__", None) or "" for hook in hooks.values())
    _register(**hooks)

os.register_at_fork = register_at_fork

def receivers():
    found = {}
    for name in dir(signals):
        signal = getattr(signals, name)
        if hasattr(signal, "receivers"):
            found[name] = len(signal.receivers or [])
    return found

before, threads = receivers(), threading.active_count()
from agentfleet import Fleet, Run
assert Fleet.map and Run.wait
print(json.dumps({
    "before": before,
    "after": receivers(),
    "threads": [threads, threading.active_count()],
    "fork_hooks": [m for m in forks if m.startswith("agentfleet")],
    "modules": sorted(m for m in sys.modules if m.startswith("agentfleet")),
}))
"""


def _import_the_client() -> dict[str, object]:
    command = [sys.executable, "-c", _PROBE]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_importing_the_client_connects_no_celery_signal_handler() -> None:
    found = _import_the_client()
    assert found["after"] == found["before"]


def test_importing_the_client_registers_no_fork_hook() -> None:
    # Per-process state (leases, claims, counters, stores) is the worker runtime's, which
    # holds the one fork hook; the client keeps none.
    assert _import_the_client()["fork_hooks"] == []


def test_importing_the_client_loads_nothing_of_the_worker_runtime_and_starts_no_thread() -> None:
    found = _import_the_client()
    modules = found["modules"]
    assert isinstance(modules, list) and "agentfleet.orchestration.fleet" in modules
    worker_runtime = ("agentfleet.tasks.", "agentfleet.celery_app")
    worker = [m for m in modules if m == "agentfleet.tasks" or m.startswith(worker_runtime)]
    assert worker == []
    before, after = found["threads"]  # type: ignore[misc]
    assert after == before
