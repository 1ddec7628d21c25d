"""``agentfleet mock-llm`` and ``agentfleet creds audit``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import anthropic
import pytest
import redis
from typer.testing import CliRunner, Result

from agentfleet.cli import main
from agentfleet.cli.app import app
from agentfleet.errors import ConfigError
from agentfleet.tools.audit import AuditLog


def test_mock_llm_serves_the_sdk_until_ctrl_c() -> None:
    command = [sys.executable, "-m", "agentfleet", "mock-llm", "--port", "0", "--api-key", "k1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.startswith("mock Messages API on http://127.0.0.1:"), banner
        url = banner.split(" on ", 1)[1].split()[0]
        assert f"AGENTFLEET_LLM__BASE_URL={url}" in process.stdout.readline()
        with anthropic.Anthropic(base_url=url, api_key="k1", max_retries=0) as client:
            reply = client.messages.create(
                model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": "SAY up"}]
            )
            assert reply.content[0].text == "up"
        with (
            anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0) as client,
            pytest.raises(anthropic.AuthenticationError),
        ):
            client.messages.create(
                model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert process.stderr is not None and "Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_mock_llm_refuses_a_bad_option_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["agentfleet", "mock-llm", "--port", "0", "--error-rate", "529=2"])
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.strip().count("\n") == 0, err
    assert "529" in err


def _audit(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["creds", "audit", *args], env=env)


@pytest.fixture
def env(redis_url: str, key_prefix: str) -> dict[str, str]:
    return {"AGENTFLEET_BROKER_URL": redis_url, "AGENTFLEET_KEY_PREFIX": key_prefix}


@pytest.fixture
def uses(redis_client: redis.Redis, key_prefix: str) -> list[str]:
    log = AuditLog(redis_client, key_prefix)
    return [log.record(f"run-{n}", "vendor_a" if n % 2 else "anthropic", "api.example") for n in range(5)]


def test_creds_audit_as_json(env: dict[str, str], uses: list[str]) -> None:
    result = _audit(env, "--json")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.output)
    assert [e["id"] for e in entries] == uses
    assert entries[1] == {
        "id": uses[1],
        "task_id": "run-1",
        "credential": "vendor_a",
        "domain": "api.example",
        "time": pytest.approx(time.time(), abs=60),
        "event": "use",
        "run_id": "",
        "task": "",
        "destination": "",
        "reason": "",
        "repeats": 1,
    }
    assert [e["id"] for e in json.loads(_audit(env, "--json", "--limit", "2").output)] == uses[-2:]
    assert json.loads(_audit(env, "--json", "--since", "2h", "--limit", "1").output)[0]["id"] == uses[0]
    assert json.loads(_audit(env, "--json", "--since", "2999-01-01").output) == []


def test_creds_audit_as_a_table(env: dict[str, str], uses: list[str]) -> None:
    result = _audit(env)
    assert result.exit_code == 0, result.output
    assert "vendor_a" in result.output and "run-4" in result.output
    assert "no credential has been used" in _audit(env, "--since", "2999-01-01").output


def test_creds_audit_refuses_a_bad_since(env: dict[str, str]) -> None:
    result = _audit(env, "--since", "yesterday")
    assert isinstance(result.exception, ConfigError)
    assert "--since 'yesterday'" in str(result.exception)
