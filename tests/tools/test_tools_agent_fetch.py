"""What the model may make a task's clients do: the built-in fetch tool and ``ctx.http``,
built as a worker builds them (real limiter, guard and vault on the session's Redis), with
the model's tool calls coming from the mock Messages API over HTTP.

Counted at the far end: the servers record every request that reached them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from task_contexts import use_worker_settings, worker_context
from tool_servers import Server, open_redirect, start_server

from agentfleet.config import reset_settings
from agentfleet.errors import ForbiddenDestination, InvalidInput
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.tasks.agent import run_agent
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.llm_tasks import BUILTIN_TOOLS

SECRET = "sk-vendor-7f3a9c2e51d04b86"
MODEL = "claude-haiku-4-5"


@pytest.fixture
def servers() -> Iterator[dict[str, Server]]:
    """The credential's own host (127.0.0.2, with an open redirect) and another (127.0.0.1)."""
    running = []
    found = {}
    for name, host in (("allowed", "127.0.0.2"), ("other", "127.0.0.1")):
        info, httpd = start_server(host)
        running.append(httpd)
        found[name] = info
    found["allowed"].routes["/open"] = open_redirect
    yield found
    for httpd in running:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture
def ctx(
    mock: MockMessagesServer,
    redis_url: str,
    key_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[TaskContext]:
    use_worker_settings(monkeypatch, redis_url=redis_url, key_prefix=key_prefix, llm_url=mock.url)
    monkeypatch.setenv("AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS", '["127.0.0.1", "127.0.0.2"]')
    monkeypatch.setenv("VENDOR_A_KEY", SECRET)
    monkeypatch.setenv(
        "AGENTFLEET_CREDENTIALS", json.dumps({"vendor_a": {"env": "VENDOR_A_KEY", "domains": ["127.0.0.2"]}})
    )
    reset_settings()
    context = worker_context("task-sec", tmp_path)
    yield context
    context.close()


def _reflecting(servers: dict[str, Server]) -> str:
    away = servers["other"].url("/collect?k=$CRED{vendor_a}")
    return servers["allowed"].url("/open?next=" + quote(away, safe=""))


def _fetch_tool() -> Callable[[TaskContext, dict[str, object]], object]:
    return BUILTIN_TOOLS["http_fetch"].fn


def test_the_fetch_tool_sends_only_the_methods_its_schema_declares(
    ctx: TaskContext, servers: dict[str, Server]
) -> None:
    declared = BUILTIN_TOOLS["http_fetch"].input_schema["properties"]["method"]["enum"]
    assert declared == ["GET", "HEAD"]
    for method in ("DELETE", "POST", "PUT", "PATCH", "delete"):
        with pytest.raises(InvalidInput, match="not enabled"):
            _fetch_tool()(ctx, {"url": servers["other"].url("/item/1"), "method": method})
    assert servers["other"].hits == []
    _fetch_tool()(ctx, {"url": servers["other"].url("/item/1"), "method": "HEAD"})
    assert [hit.method for hit in servers["other"].hits] == ["HEAD"]


def test_a_model_that_names_delete_reaches_nothing(
    ctx: TaskContext, servers: dict[str, Server], mock: MockMessagesServer
) -> None:
    call = json.dumps({"url": servers["other"].url("/item/1"), "method": "DELETE"})
    tools = [BUILTIN_TOOLS["http_fetch"]]
    result = run_agent(ctx, prompt=f"CALL http_fetch {call}", tools=tools, model=MODEL)
    assert servers["other"].hits == []
    (tool_call,) = result.tool_calls
    assert tool_call.is_error, "the model is told the call failed"


def test_the_fetch_tool_does_not_follow_an_open_redirect_away_with_the_value(
    ctx: TaskContext, servers: dict[str, Server]
) -> None:
    with pytest.raises(ForbiddenDestination, match="vendor_a"):
        _fetch_tool()(ctx, {"url": _reflecting(servers)})
    assert servers["other"].hits == []
    assert len(servers["allowed"].hits) == 1


def test_ctx_http_following_redirects_does_not_carry_the_value_away(
    ctx: TaskContext, servers: dict[str, Server]
) -> None:
    with pytest.raises(ForbiddenDestination, match="vendor_a"):
        ctx.http.get(_reflecting(servers), follow_redirects=True)
    assert servers["other"].hits == []
    assert len(servers["allowed"].hits) == 1


def test_the_llm_key_itself_goes_nowhere_but_the_llm_host(
    ctx: TaskContext, servers: dict[str, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task that copied the key (an echo, a debug dump) cannot send it on through ctx.http.
    # The mock Messages API listens on 127.0.0.1: 127.0.0.2 stands for any other host.
    key = "sk-ant-canary-" + "4" * 24
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    with pytest.raises(ForbiddenDestination, match="credential 'anthropic'"):
        ctx.http.get(servers["allowed"].url("/collect"), headers={"X-Debug": key})
    assert servers["allowed"].hits == []
