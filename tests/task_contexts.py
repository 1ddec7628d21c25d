"""Task contexts built as a worker builds them: the real clients, limiter, guard and vault."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from agentfleet.config import reset_settings
from agentfleet.tasks import clients
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.execution_state import new_context


def use_worker_settings(
    monkeypatch: pytest.MonkeyPatch, *, redis_url: str, key_prefix: str, llm_url: str
) -> None:
    """Point this process's settings at the session's Redis and a mock Messages API (no real key)."""
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    monkeypatch.setenv("AGENTFLEET_LLM__BASE_URL", llm_url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("AGENTFLEET_LLM__API_KEY", raising=False)
    reset_settings()


def worker_context(task_id: str, workdir: Path, **state: Any) -> TaskContext:
    """A ``TaskContext`` with the factories a worker uses; ``state`` adds budgets and the like."""
    return new_context(
        task_id=task_id,
        run_id="run",
        item_key="item",
        idempotency_key="key",
        attempt=0,
        workdir_path=workdir,
        log=logging.LoggerAdapter(logging.getLogger("test.agent"), {}),
        http_factory=clients.http_client,
        anthropic_factory=clients.anthropic_client,
        **state,
    )
