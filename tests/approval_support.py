"""Helpers for the approval-surface suites: pending approvals made straight in the store (as a
parked item makes them), and a real ``agentfleet serve`` on loopback."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops_support import BIN, ServiceProcess, http_status, wait_for

from agentfleet.approvals import Approval, ApprovalStore
from agentfleet.config import Settings
from agentfleet.embedded_redis import free_port

TOKEN = "appr-" + "0123456789abcdef" * 2
LINK_SECRET = "link-" + "fedcba9876543210" * 2


def nowhere_message(settings: Settings) -> dict[str, Any]:
    """A Celery signature (as a dict) on a queue no worker reads: what a decision re-sends."""
    return {
        "task": "agentfleet.tests.nowhere",
        "args": [],
        "kwargs": {},
        "options": {"queue": f"{settings.key_prefix}.nowhere"},
        "subtask_type": None,
        "immutable": False,
    }


def pending(
    store: ApprovalStore,
    settings: Settings,
    *,
    name: str = "deploy",
    run_id: str | None = None,
    details: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    kind: str = "approval",
    task_name: str = "tests.deploy",
) -> Approval:
    """Record a pending approval (or event wait, ``kind="event"`` with ``name`` its key)."""
    run_id = run_id or uuid.uuid4().hex[:16]
    approval = Approval(
        id=f"ap_{uuid.uuid4().hex[:24]}",
        kind=kind,  # type: ignore[arg-type]
        name=name if kind == "approval" else None,
        key=name if kind == "event" else None,
        run_id=run_id,
        item_key=f"{run_id}:0:abc",
        index=0,
        task_name=task_name,
        task_id=uuid.uuid4().hex,
        details=details or {"target": "production"},
    )
    assert store.create(approval, nowhere_message(settings), timeout_s=timeout_s)
    return store.get(approval.id)


@dataclass(frozen=True)
class Served:
    process: ServiceProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def service_env(redis_url: str, prefix: str, port: int, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": prefix,
        "AGENTFLEET_SERVICE__TOKEN": TOKEN,
        "AGENTFLEET_SERVICE__PUBLIC_URL": f"http://127.0.0.1:{port}",
        "AGENTFLEET_APPROVALS__LINK_SECRET": LINK_SECRET,
        **extra,
    }


@contextmanager
def served(redis_url: str, prefix: str) -> Iterator[Served]:
    """``agentfleet serve`` on a free loopback port, stopped by its pid afterwards."""
    port = free_port()
    log_dir = Path(tempfile.mkdtemp(prefix="agentfleet-appr-serve-"))
    argv = [str(BIN / "agentfleet"), "serve", "--port", str(port)]
    proc = ServiceProcess("serve", argv, service_env(redis_url, prefix, port), log_dir)
    try:
        wait_for(
            lambda: http_status(f"http://127.0.0.1:{port}/health") == 200,
            timeout_s=60,
            what="the service",
            processes=[proc],
        )
        yield Served(proc, port)
    finally:
        proc.stop()
        shutil.rmtree(log_dir, ignore_errors=True)
