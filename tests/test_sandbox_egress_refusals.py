"""Refusals of a sandbox's egress proxy go to the credential audit stream beside the uses (a
real Redis, the proxy wired as a worker wires it): an undeclared destination (plain and
tunnelled) and a credential the sandbox may not name, each with its task, run, destination and
reason. An audit that cannot be written changes no answer, and an allowed request never
writes to it; ``agentfleet creds audit`` shows the refusals."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from egress_support import SECRET, echo_server, loopback_forwarder
from typer.testing import CliRunner

from agentfleet.cli.app import app
from agentfleet.config import Settings, get_settings, reset_settings
from agentfleet.embedded_redis import free_port
from agentfleet.sandbox import SandboxSpec
from agentfleet.sandbox.egress import EgressProxy, EgressWiring
from agentfleet.sandbox.egress.refusals import RefusalTally
from agentfleet.tasks.egress import egress_proxy
from agentfleet.tasks.execution_state import ExecutionState, execution_of, new_context
from agentfleet.tools.audit import AuditLog


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, redis_url: str, key_prefix: str) -> Iterator[Settings]:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    monkeypatch.setenv("AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS", '["127.0.0.1"]')
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS__TOK__ENV", "EGRESS_TEST_TOKEN")
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS__TOK__DOMAINS", '["127.0.0.1"]')
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS__OTHER__ENV", "EGRESS_TEST_TOKEN")
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS__OTHER__DOMAINS", '["127.0.0.1"]')
    monkeypatch.setenv("EGRESS_TEST_TOKEN", SECRET)
    reset_settings()
    yield get_settings()
    reset_settings()


def _state(tmp_path: Path) -> ExecutionState:
    ctx = new_context(
        task_id="t-refused",
        run_id="r-refused",
        item_key="i",
        idempotency_key="k",
        attempt=0,
        workdir_path=tmp_path,
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
    )
    return execution_of(ctx)


def test_each_refusal_is_audited_with_task_run_destination_and_reason(
    settings: Settings, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    state = _state(tmp_path)
    undeclared = free_port()
    with echo_server() as server:
        spec = SandboxSpec(network=[f"127.0.0.1:{server.port}"], credentials=["tok"])
        proxy = egress_proxy(state, spec, tmp_path / "egress.sock", task_name="review")
        with (
            proxy,
            loopback_forwarder(tmp_path / "egress.sock") as port,
            httpx.Client(proxy=f"http://127.0.0.1:{port}", trust_env=False) as client,
        ):
            url = f"http://127.0.0.1:{server.port}/echo"
            assert client.get(url, headers={"Authorization": "$CRED{tok}"}).status_code == 200
            plain = client.get(f"http://127.0.0.1:{undeclared}/x")
            again = client.get(f"http://127.0.0.1:{undeclared}/y")
            unnamed = client.get(url, headers={"Authorization": "$CRED{other}"})
            with pytest.raises(httpx.ProxyError):
                client.get(f"https://127.0.0.1:{undeclared}/z")
    assert plain.status_code == again.status_code == unnamed.status_code == 403
    assert server.seen == [("/echo", SECRET)], "nothing refused reached the destination"

    entries = AuditLog(redis.Redis.from_url(redis_url), key_prefix).read()
    assert [e.event for e in entries] == ["use", "refused", "refused", "refused", "refused"]
    use, first, second, credential, tunnel = entries
    assert (use.credential, use.domain, use.task_id) == ("tok", "127.0.0.1", "t-refused")
    for refused in (first, second, credential, tunnel):
        assert (refused.task_id, refused.run_id, refused.task) == ("t-refused", "r-refused", "review")
        assert refused.domain == "127.0.0.1"
    assert first.destination == second.destination == f"http://127.0.0.1:{undeclared}"
    assert first.reason == "not declared by the task" and first.credential == ""
    assert tunnel.destination == f"https://127.0.0.1:{undeclared}"
    assert credential.destination == f"http://127.0.0.1:{server.port}"
    assert credential.credential == "other" and "not named" in credential.reason
    raw = json.dumps([e.model_dump() for e in entries])
    assert SECRET not in raw, "no entry holds a credential's value"

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")},
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": key_prefix,
    }
    shown = CliRunner().invoke(app, ["creds", "audit", "--refused", "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert [e["destination"] for e in json.loads(shown.stdout)] == [
        first.destination,
        second.destination,
        credential.destination,
        tunnel.destination,
    ]
    table = CliRunner().invoke(app, ["creds", "audit"], env=env, terminal_width=200)
    assert table.exit_code == 0 and "refused" in table.stdout and "r-refused" in table.stdout


def test_a_refusal_stands_when_the_audit_cannot_be_written(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    audit = AuditLog(nowhere, settings.key_prefix)  # type: ignore[arg-type]
    undeclared = free_port()
    with echo_server() as server:
        spec = SandboxSpec(network=[f"127.0.0.1:{server.port}"])
        proxy = EgressProxy(
            settings,
            spec,
            tmp_path / "e.sock",
            run_id="r",
            task_name="review",
            wiring=EgressWiring(audit=audit),
        )
        with (
            proxy,
            loopback_forwarder(tmp_path / "e.sock") as port,
            httpx.Client(proxy=f"http://127.0.0.1:{port}", trust_env=False) as client,
        ):
            allowed = client.get(f"http://127.0.0.1:{server.port}/echo")
            with caplog.at_level(logging.WARNING, logger="agentfleet.egress"):
                refused = client.get(f"http://127.0.0.1:{undeclared}/x")
    assert allowed.status_code == 200, "an allowed request without a credential never writes the audit"
    assert refused.status_code == 403 and refused.headers["x-agentfleet-egress"] == "refused"
    assert "could not be audited" in caplog.text


def test_refusals_keep_the_stream_capped(redis_client: redis.Redis, key_prefix: str) -> None:
    audit = AuditLog(redis_client, key_prefix, maxlen=10)  # type: ignore[arg-type]
    for n in range(600):
        audit.record_refusal(
            task_id="t",
            run_id="r",
            task="loop",
            destination=f"http://h:{n}",
            domain="h",
            reason="not declared",
        )
    kept = redis_client.xlen(audit.key)
    assert 10 <= kept < 300, kept  # MAXLEN ~ trims whole stream nodes (100 entries by default)


def test_a_refusal_loop_is_audited_as_counts_not_one_entry_each(
    settings: Settings, redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    state = _state(tmp_path)
    undeclared, tries = free_port(), 300
    proxy = egress_proxy(state, SandboxSpec(network=[]), tmp_path / "egress.sock", task_name="loop")
    with (
        loopback_forwarder(tmp_path / "egress.sock") as port,
        httpx.Client(proxy=f"http://127.0.0.1:{port}", trust_env=False) as client,
    ):
        with proxy:
            started = time.monotonic()
            codes = {client.get(f"http://127.0.0.1:{undeclared}/{n}").status_code for n in range(tries)}
            took_s = time.monotonic() - started
        entries = AuditLog(redis.Redis.from_url(redis_url), key_prefix).read(count=1000)
    assert codes == {403}, "every one refused"
    assert sum(e.repeats for e in entries) == tries, "each counted, the last ones as the proxy closed"
    most = 5 + int(took_s) + 2
    assert len(entries) <= most, f"{len(entries)} entries for {tries} refusals in {took_s:.1f} s"
    assert [e.repeats for e in entries[:5]] == [1] * 5, "the first few one by one"
    assert all(e.destination == f"http://127.0.0.1:{undeclared}" and e.task == "loop" for e in entries)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")},
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": key_prefix,
    }
    table = CliRunner().invoke(app, ["creds", "audit", "--refused"], env={**env, "COLUMNS": "200"})
    assert table.exit_code == 0 and f"refused x{entries[-1].repeats}" in table.stdout
    shown = json.loads(CliRunner().invoke(app, ["creds", "audit", "--refused", "--json"], env=env).stdout)
    assert [e["repeats"] for e in shown] == [e.repeats for e in entries]


def test_the_tally_audits_the_first_few_then_once_a_second_per_kind() -> None:
    tally = RefusalTally(at_once=2, every_s=1.0)
    seen = [tally.note("http://a:80", "not declared", now=0.1 * n) for n in range(25)]
    assert [d.repeats for d in seen[:3]] == [1, 1, 0]
    audited = [(n, d.repeats) for n, d in enumerate(seen) if d.repeats]
    assert audited == [(0, 1), (1, 1), (11, 10), (21, 10)], "then every second, with what it stands for"
    other = tally.note("http://b:80", "not declared", now=2.45)
    assert other.repeats == 1, "each kind is counted apart"
    left = tally.drain()
    assert [(p.destination, p.repeats) for p in left] == [("http://a:80", 3)]
    assert tally.drain() == []
    assert [d.log for d in seen[:3]] == [True, True, False] and seen[-1].count == 25
