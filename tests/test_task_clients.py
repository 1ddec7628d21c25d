"""The clients a task context hands out: which endpoint, which key, and how the key travels."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from agentfleet.config import load_settings, reset_settings
from agentfleet.errors import ConfigError
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.tasks import clients
from agentfleet.tasks.execution_state import new_context
from agentfleet.tools.audit import AuditLog

KEY = "sk-ant-canary-5d1f0c"


@pytest.fixture
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "AGENTFLEET_LLM__API_KEY", "AGENTFLEET_LLM__BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_the_endpoint_is_the_mock_by_url_or_the_real_api_by_key(
    no_llm_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        clients.llm_endpoint(load_settings())
    assert clients.llm_endpoint(load_settings(llm={"base_url": "http://127.0.0.1:8765/"})) == (
        "http://127.0.0.1:8765",
        None,
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert clients.llm_endpoint(load_settings()) == ("https://api.anthropic.com", "ANTHROPIC_API_KEY")


@pytest.fixture
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer(api_key=KEY) as server:
        yield server


def test_the_api_key_travels_as_an_audited_credential(
    no_llm_env: None,
    mock: MockMessagesServer,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    key_prefix: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("AGENTFLEET_LLM__BASE_URL", mock.url)
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    reset_settings()
    ctx = new_context(
        task_id="t-key",
        run_id="r",
        item_key="i",
        idempotency_key="k",
        attempt=0,
        workdir_path=tmp_path,
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
        anthropic_factory=clients.anthropic_client,
    )
    try:
        assert KEY not in repr(vars(ctx.anthropic)), "the SDK object holds a placeholder, not the key"
        reply = ctx.anthropic.messages.create(
            model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": "SAY in"}]
        )
    finally:
        ctx.close()
    assert reply.content[0].text == "in"
    assert [r.api_key for r in mock.requests] == [KEY], "the key was filled in at the wire"
    (entry,) = AuditLog(redis.Redis.from_url(redis_url), key_prefix).read()
    assert (entry.task_id, entry.credential, entry.domain) == ("t-key", "anthropic", "127.0.0.1")
