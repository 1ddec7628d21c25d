"""Helpers for the fault suites: private Redis servers, clusters with fast recovery, far-end counts."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.orchestration.run import Run

# Recovery timings for tests: claims lapse in 4 s, the reconciler looks every second and sends
# an item again once it has been missing for 2 s.
FAST_DELIVERY = {"claim_ttl_s": 4.0, "reconcile_interval_s": 1.0, "reconcile_grace_s": 2.0}


class Effects:
    """What the ``effect`` test task did, read at the far end (files, not Redis)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def executions(self) -> Counter[str]:
        """Body executions per token."""
        path = self.root / "executions"
        lines = path.read_text().split() if path.exists() else []
        return Counter(lines)

    def applied(self) -> Counter[str]:
        """Effects applied per token (one file per idempotency key)."""
        return Counter(p.read_text() for p in self.root.glob("effect-*"))


def delivery_env(delivery: Mapping[str, float]) -> dict[str, str]:
    return {f"AGENTFLEET_DELIVERY__{name.upper()}": str(value) for name, value in delivery.items()}


def fault_cluster(
    broker_url: str,
    effects: Effects,
    *,
    workers: int = 2,
    concurrency: int = 4,
    pool: str = "threads",
    delivery: Mapping[str, float] | None = FAST_DELIVERY,
    **settings: Any,
) -> LocalCluster:
    """A cluster with queues and a key prefix of its own, and the given recovery timings
    (``None``: the defaults)."""
    tag = uuid.uuid4().hex[:8]
    queues = {"agents": f"f{tag}.agents", "fanin": f"f{tag}.fanin", "maintenance": f"f{tag}.maint"}
    extra = dict(delivery or {})
    env = cluster_env(AGENTFLEET_TEST_EFFECTS=str(effects.root), **delivery_env(extra))
    return LocalCluster(
        workers=workers,
        concurrency=concurrency,
        pool=pool,
        broker_url=broker_url,
        env=env,
        settings=load_settings(queues=queues, key_prefix=f"f{tag}", delivery=extra, **settings),
        startup_timeout_s=120,
    )


def tokens(prefix: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"token": f"{prefix}-{i}", **extra} for i in range(n)]


def outcome_events(run: Run) -> Counter[int]:
    """How many outcomes the run's event stream holds per item index."""
    store = run._store
    counts: Counter[int] = Counter()
    last = "0-0"
    while True:
        batch = store.events(run.id, last, count=2000)
        if not batch:
            return counts
        for entry_id, fields in batch:
            last = entry_id
            if fields.get("kind") == "outcome":
                counts[int(fields["idx"])] += 1


def freeze_in_brpop(pid: int, client: redis.Redis, timeout_s: float = 20.0) -> None:
    """SIGSTOP ``pid`` at a moment its consumer has a BRPOP pending on the server (the only
    blocked client of this private Redis), so the next message pushed is taken and never read."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        os.kill(pid, signal.SIGSTOP)
        blocked = [c for c in client.client_list() if c.get("cmd") == "brpop" and "b" in c.get("flags", "")]
        if blocked:
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the worker never had a BRPOP pending")


def wait_until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
