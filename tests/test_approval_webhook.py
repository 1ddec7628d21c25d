"""The approval webhook: a Slack-shaped message with the signed link, sent through the SSRF
guard, failures logged and never raised (the oracle is the receiving server); and a tool that
needs approval refused where a resume could not find its call again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_scripted import Reply, ScriptedServer
from task_contexts import worker_context

from agentfleet import Tool
from agentfleet.approvals import Approval
from agentfleet.approvals.links import link_for
from agentfleet.config import Settings, load_settings, reset_settings
from agentfleet.errors import ConfigError
from agentfleet.tasks.agent_approval import ask
from agentfleet.tasks.approval_webhook import approval_message, notify_webhook, post_approval

SECRET = "link-" + "0123456789abcdef" * 2
KEY = "sk-live-" + "0f1e2d3c" * 4


@pytest.fixture
def hook() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        server.script("/hook", Reply(200, {"ok": True}))
        yield server


def _settings(hook: ScriptedServer, *, allow: bool = True, **approvals: object) -> Settings:
    return load_settings(
        fetch={"allow_private_hosts": ["127.0.0.1"] if allow else []},
        service={"public_url": "https://fleet.example"},
        approvals={
            "webhook_url": hook.url("/hook"),
            "link_secret": SECRET,
            "webhook_attempts": 1,
            **approvals,
        },
    )


def _approval(**fields: object) -> Approval:
    base: dict[str, object] = {
        "id": "ap_0123456789abcdef01234567",
        "name": "deploy v2",
        "run_id": "0123456789abcdef",
        "item_key": "k",
        "index": 4,
        "task_name": "myapp.deploy",
        "details": {"plan": "v2", "api_key": KEY},
        "created_at": 1_800_000_000.0,
        "expires_at": 1_800_003_600.0,
    }
    return Approval.model_validate({**base, **fields})


def test_the_message_says_what_is_asked_and_carries_the_signed_link_but_no_secret(
    hook: ScriptedServer,
) -> None:
    settings = _settings(hook)
    approval = _approval()
    result = post_approval(settings, approval)
    assert result.ok
    (hit,) = hook.hits("/hook")
    text = hit.json()["text"]
    assert (
        "deploy v2" in text
        and "myapp.deploy" in text
        and "item 4" in text
        and "rejected by the timeout" in text
    )
    assert f"<{link_for(settings, approval)}|Approve or reject>" in text
    assert KEY not in hit.body.decode()


def test_without_a_link_secret_the_message_names_the_command(hook: ScriptedServer) -> None:
    settings = load_settings(approvals={"webhook_url": hook.url("/hook")})
    text = approval_message(settings, _approval())["text"]
    assert "agentfleet approvals approve ap_0123456789abcdef01234567" in text and "http" not in text


def test_a_private_address_is_refused_by_the_ssrf_guard_and_logged(
    hook: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="agentfleet.approvals"):
        result = post_approval(_settings(hook, allow=False), _approval())
    assert not result.ok and "127.0.0.1" in (result.error or "")
    assert hook.hits("/hook") == []
    assert any("approval webhook failed" in r.getMessage() for r in caplog.records)


def test_a_failing_webhook_never_raises_and_is_sent_off_the_callers_thread(
    hook: ScriptedServer,
) -> None:
    hook.script("/hook", Reply(500, {"no": True}), Reply(500, {"no": True}))
    settings = _settings(hook, webhook_attempts=2)
    thread = notify_webhook(settings, _approval())
    assert thread is not None
    thread.join(timeout=30)
    assert not thread.is_alive() and len(hook.hits("/hook")) == 2
    assert notify_webhook(settings, _approval(kind="event", name=None, key="ci")) is None


def test_a_tool_that_needs_approval_is_refused_without_agent_checkpoints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTFLEET_AGENT__CHECKPOINT", "false")
    reset_settings()
    tool = Tool("deploy", "Deploys.", {"type": "object"}, lambda ctx, args: None, requires_approval=True)
    with pytest.raises(ConfigError, match=r"agent\.checkpoint = true"):
        ask(worker_context("t1", tmp_path), tool, "toolu_1", {})
