"""Making real bubblewrap sandboxes in tests, and checking that none leaves a process."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentfleet.config import load_settings
from agentfleet.sandbox.bubblewrap import BubblewrapBackend, BubblewrapSandbox
from agentfleet.sandbox.procs import processes_of
from agentfleet.sandbox.spec import task_sandbox
from agentfleet.sandbox.uids import UID_BASE, UID_COUNT


def sandbox_pids() -> list[int]:
    """Every live process of any sandbox user on this host."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        uid = int(fields["Uid"].split()[0])
        if UID_BASE <= uid < UID_BASE + UID_COUNT and not fields["State"].strip().startswith("Z"):
            found.append(int(entry))
    return found


@contextmanager
def bwrap_sandbox(workspace: Path, **spec: Any) -> Iterator[BubblewrapSandbox]:
    """A bubblewrap sandbox over ``workspace`` for a spec of ``spec``'s fields; on the way out
    it is closed, and no process of its user may be left."""
    settings = load_settings()
    resolved = task_sandbox(spec, settings, "test")
    assert resolved is not None
    sandbox = BubblewrapBackend(max_output_bytes=64_000).prepare(workspace, resolved)
    try:
        yield sandbox
    finally:
        uid = sandbox.uid
        sandbox.close()
        assert processes_of(uid) == [], "a process of the sandbox outlived it"


def wait_gone(uid: int, timeout_s: float = 10.0) -> bool:
    """Whether every process of ``uid`` is gone within ``timeout_s`` seconds."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if not processes_of(uid):
            return True
        time.sleep(0.05)
    return False
