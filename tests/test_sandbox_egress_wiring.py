"""A sandbox's egress proxy wired as a worker wires it: the execution's limiter, accounting,
limiter, accounting, audit log (under its task id) and claim check apply to what the sandbox sends."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
import redis
from egress_support import SECRET, echo_server, loopback_forwarder

from agentfleet.config import reset_settings
from agentfleet.errors import ClaimLost
from agentfleet.sandbox import SandboxSpec
from agentfleet.tasks.egress import egress_proxy
from agentfleet.tasks.execution_state import execution_of, new_context
from agentfleet.tools.audit import AuditLog


def test_a_sandbox_request_is_limited_accounted_and_audited_like_the_tasks_own(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    monkeypatch.setenv("AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS", '["127.0.0.1"]')
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS__TOK__ENV", "EGRESS_TEST_TOKEN")
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS__TOK__DOMAINS", '["127.0.0.1"]')
    monkeypatch.setenv("AGENTFLEET_LIMITS", '{"127.0.0.1": {"rate_per_s": 0.01, "burst": 1}}')
    monkeypatch.setenv("AGENTFLEET_LIMITER__SHORT_WAIT_S", "0.2")
    monkeypatch.setenv("EGRESS_TEST_TOKEN", SECRET)
    reset_settings()
    ctx = new_context(
        task_id="t-egress",
        run_id="r-egress",
        item_key="i",
        idempotency_key="k",
        attempt=0,
        workdir_path=tmp_path,
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
    )
    state = execution_of(ctx)
    lost = False

    def gate() -> None:
        if lost:
            raise ClaimLost("the claim lapsed")

    state.gate = gate  # type: ignore[method-assign]
    with echo_server() as server:
        spec = SandboxSpec(network=[f"127.0.0.1:{server.port}"], credentials=["tok"])
        proxy = egress_proxy(state, spec, tmp_path / "egress.sock", task_name="review")
        with proxy, loopback_forwarder(tmp_path / "egress.sock") as port:
            client = httpx.Client(proxy=f"http://127.0.0.1:{port}", trust_env=False)
            url = f"http://127.0.0.1:{server.port}/echo"
            assert client.get(url, headers={"Authorization": "$CRED{tok}"}).status_code == 200
            limited = client.get(url)
            lost = True
            refused = client.get(url)
            client.close()
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert refused.status_code == 403 and "claim" in refused.text
    assert server.seen == [("/echo", SECRET)]
    assert state.downstreams_called == ["127.0.0.1"]
    (entry,) = AuditLog(redis.Redis.from_url(redis_url), key_prefix).read()
    assert (entry.task_id, entry.credential, entry.domain) == ("t-egress", "tok", "127.0.0.1")
