"""Helpers for the durable-execution suites: a cluster of the durable test tasks, and what the
far ends saw (the mock Messages API's requests, the scripted server's effects)."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from typing import Any

from fault_support import FAST_DELIVERY, delivery_env
from http_scripted import ScriptedServer

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Run

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
FAR_HOST = "127.0.0.2"  # a downstream of its own: a 429 there pauses it, not the mock on 127.0.0.1


def durable_cluster(
    redis_url: str,
    mock: MockMessagesServer,
    far: ScriptedServer,
    *,
    workers: int = 1,
    concurrency: int = 4,
    **env: str,
) -> LocalCluster:
    """Workers that import the durable test tasks, with fast recovery, on queues and a key
    prefix of their own; ``env`` adds settings for the workers."""
    tag = uuid.uuid4().hex[:8]
    queues = {"agents": f"d{tag}.agents", "fanin": f"d{tag}.fanin", "maintenance": f"d{tag}.maint"}
    worker_env = {
        "PYTHONPATH": TESTS_DIR,
        "AGENTFLEET_TASK_MODULES": "durable_test_tasks,fleet_test_tasks",
        "AGENTFLEET_LLM__BASE_URL": mock.url,
        "DURABLE_FAR_END": far.url(""),
        "AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS": json.dumps(["127.0.0.1", FAR_HOST]),
        "AGENTFLEET_RETRY__BACKOFF_BASE_S": "0.1",
        "AGENTFLEET_RETRY__BACKOFF_CAP_S": "0.5",
        **delivery_env(FAST_DELIVERY),
        **env,
    }
    return LocalCluster(
        workers=workers,
        concurrency=concurrency,
        pool="threads",
        broker_url=redis_url,
        env=worker_env,
        settings=load_settings(queues=queues, key_prefix=f"d{tag}", delivery=FAST_DELIVERY),
        startup_timeout_s=120,
    )


def answered(mock: MockMessagesServer, marker: str) -> Counter[str]:
    """How many times the mock answered (200) each conversation whose prompt has ``marker``."""
    return Counter(
        r.conversation or ""
        for r in mock.requests
        if r.path == "/v1/messages" and r.status == 200 and marker in (r.prompt or "")
    )


def requests_for(mock: MockMessagesServer, marker: str) -> list[Any]:
    return [r for r in mock.requests if r.path == "/v1/messages" and marker in (r.prompt or "")]


def effects(far: ScriptedServer, path: str, run: Run) -> Counter[str]:
    """Requests to ``path`` per idempotency key, for the keys of ``run``'s items."""
    return Counter(
        key for hit in far.hits(path) if (key := hit.headers.get("idempotency-key", "")).startswith(run.id)
    )
